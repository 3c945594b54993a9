"""``specsim pass-time``: the predicted time of one engine step, and of one speculative iteration, with its terms.

One row per (batch, new tokens, context) point: B sequences with T new tokens each on C cached tokens each, one
pass of the deployment (``Deployment.pass_breakdown``: weights, KV, compute, all-reduce, step, layers, sequences,
pipeline send/recv;
they sum to ``pass_ms``). With a draft and gamma K, also one speculative decoding iteration of the same B
sequences at context C: K draft passes + one verification of K+1 tokens per sequence
(``simulator.engines.gamma_choice.iteration_parts``: the serving simulator's and the gamma rule's own iteration), in
``draft_ms``, ``verify_ms`` and ``iteration_ms``. Parameters: the hardware catalog's priors (engine-level step
model, ``simulator/catalog/gpu_priors.yaml``) or a cost profile YAML. The deployment is checked as a scenario's is: TP
shards the model and its draft, and vLLM's engine holds them and the step's largest batch of sequences at its default
``gpu_memory_utilization`` (``simulator/cost/memory_check.check_step``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.catalog import get_hardware, get_model
from simulator.catalog.engine_hosts import ServingEngine, async_on, engine_version, running_version
from simulator.catalog.versions import version_key
from simulator.catalog.draft_heads import draft_weight_dtype, eagle3_head
from simulator.catalog.model_shape import draft_vocabulary_error
from simulator.cost.cost_model import Deployment, Drafting
from simulator.cost.cost_profile import CostProfile, Param, prior_profile
from simulator.errors import InputError
from simulator.cost.memory_check import check_step

PARTS = ("weights", "kv", "compute", "allreduce", "step", "layers", "sequences", "sendrecv")


def draft_deployment(target: Deployment, draft: str, params) -> Deployment:
    """``head`` / ``head:N``: an N-layer (default 1) EAGLE-style head of the target; ``eagle3`` / ``eagle3:N``: an
    EAGLE-3 head (fused features, 32k draft vocabulary); ``block`` / ``block:N``: a block drafter of N head layers
    (gamma drafts in one pass); ``mtp`` / ``mtp:N``: the target's own MTP module, one module per drafted token as
    vLLM runs it (its MoE layers under the target's expert parallelism); else a catalog model."""
    kind = draft.partition(":")[0]
    if kind in ("head", "eagle3", "block", "mtp"):
        n = draft.partition(":")[2] or "1"
        if not n.isdigit() or int(n) < 1:
            raise InputError(None, "--draft", f"expected {kind} or {kind}:LAYERS with LAYERS >= 1 (got {draft!r})")
        if kind != "mtp":
            m = eagle3_head(target.model, int(n)) if kind == "eagle3" else target.model.draft_head(int(n))
            m = m.with_dtypes(draft_weight_dtype(kind, m, target.model), target.model.kv_dtype)
            return Deployment(m, target.hardware, target.tp, params.for_role("draft"), Drafting(kind=kind))
        if not target.model.mtp_layers:
            raise InputError(None, "--draft", f"{target.model.name} has no MTP module (mtp_layers 0): use head or eagle3")
        return Deployment(target.model.mtp_head(int(n)), target.hardware, target.tp, params.for_role("draft"),
                          Drafting(kind="mtp"), ep=target.ep)
    model = get_model(draft, None, "--draft")
    model = model.with_dtypes(draft_weight_dtype("model", model, target.model), target.model.kv_dtype)
    err = draft_vocabulary_error(target.model, model)
    if err:
        raise InputError(None, "--draft", f"{err}; use head, eagle3, block or mtp)")
    return Deployment(model, target.hardware, target.tp, params.for_role("draft"))


def _dtype_label(m) -> str:
    """The weights' dtype as the table names it: ``fp8``, or ``bf16, mxfp4 experts`` where the experts differ."""
    e = m.expert_weight_dtype
    return m.weight_dtype + (f", {e} experts" if e and e != m.weight_dtype else "")


def pass_time_table(model: str, hardware: str, tp: int = 1, batches=(1,), new_tokens=(1,), contexts=(0,),
                    dtype: str | None = None, draft: str | None = None, gamma: int | None = None,
                    profile: CostProfile | None = None, ep: int = 1, pp: int = 1,
                    dp: int = 1, serving_engine: ServingEngine | None = None) -> tuple[pd.DataFrame, dict]:
    """The rows (one per batch x new tokens x context) and what priced them; ``serving_engine``: the vLLM version whose
    host terms and start-up memory accounting apply (None: the newest fitted; not with ``profile``, which carries
    its own host terms)."""
    hw = get_hardware(hardware, None, "--hardware")
    m = get_model(model, None, "--model")
    try:  # None: the model's own (a config.json's quantization_config, else bf16)
        m = m if dtype is None else m.with_dtypes(weight_dtype=dtype, kv_dtype=m.kv_dtype)
    except ValueError as e:
        raise InputError(None, "--dtype", str(e)) from None
    _check_options(m, tp, pp, dp, draft, gamma)
    engine = _engine(serving_engine, profile)
    prof = profile or prior_profile(hw, serving_engine=engine)
    if profile is not None and profile.hardware != hw.name:
        raise InputError(None, "--profile", f"the profile is for {profile.hardware}, not --hardware {hw.name}")
    params = prof.params(hw)
    from simulator.cost.cost_model import data_parallel_error, expert_parallel_error

    for opt, err in (("--dp", data_parallel_error(m, dp)), ("--ep", expert_parallel_error(m, tp, ep, dp))):
        if err:
            raise InputError(None, opt, err)
    target = Deployment(m, hw, tp, params, ep=ep, pp=pp, dp=dp)
    dd = draft_deployment(target, draft, params) if draft is not None else None
    check_step(target, dd, max(batches), max(*new_tokens, (gamma or 0) + 1), max(contexts), engine)
    rows = []
    for B in batches:
        for T in new_tokens:
            for C in contexts:
                n = np.full(B, float(T))
                c = np.full(B, float(C))
                bd = target.pass_breakdown(n.sum(), (c + n).sum(), (n * (c + (n + 1.0) / 2.0)).sum(), float(B), float(B))
                r = {"model": m.name, "hardware": hw.name, "tp": tp, "pp": pp, "dp": dp, "ep": ep, "dtype": _dtype_label(m), "batch": B, "new_tokens": T,
                     "context": C, "pass_ms": float(bd["total"]) * 1e3}
                r.update({f"{k}_ms": float(bd[k]) * 1e3 for k in PARTS})
                if dd is not None:
                    from simulator.engines.gamma_choice import iteration_parts

                    dr, ver = iteration_parts(target, dd, B, C, gamma)
                    r.update({"draft": draft, "gamma": gamma, "draft_ms": dr * 1e3, "verify_ms": ver * 1e3,
                              "iteration_ms": (dr + ver) * 1e3})
                rows.append(r)
    meta = {"profile": prof.name, "parameters": {k: {"value": v.value, "kind": v.kind}
                                                  for k, v in prof if isinstance(v, Param)},
            "source": prof.provenance.source,
            "serving_engine": "host terms of --profile" if profile is not None
            else engine_label(engine, params, dd.drafting if dd is not None else None)}
    return pd.DataFrame(rows), meta


def _check_options(m, tp: int, pp: int, dp: int, draft: str | None, gamma: int | None) -> None:
    if tp < 1 or tp > 64:
        raise InputError(None, "--tp", f"must lie in 1..64 (got {tp})")
    if not 1 <= pp <= m.layers:
        raise InputError(None, "--pp", f"must lie in 1..{m.layers} ({m.name}'s layers; got {pp})")
    if not 1 <= dp <= 64 or (dp > 1 and pp > 1):
        raise InputError(None, "--dp", f"must lie in 1..64, with --pp 1 (got dp={dp}, pp={pp})")
    if (pp > 1 or dp > 1) and draft is not None:
        raise InputError(None, "--draft", "--pp / --dp > 1 are modelled for plain decoding: no --draft")
    if (draft is None) != (gamma is None):
        raise InputError(None, "--draft" if draft is None else "--gamma", "--draft and --gamma go together")
    if gamma is not None and not 1 <= gamma <= 16:
        raise InputError(None, "--gamma", f"must lie in 1..16 (got {gamma})")


def _engine(serving_engine: ServingEngine | None, profile: CostProfile | None) -> ServingEngine:
    """The serving engine the step is priced as (None: the newest fitted vLLM), checked against the engine catalog
    (errors name ``--engine-version``)."""
    if profile is not None and serving_engine is not None:
        raise InputError(None, "--engine-version", "a --profile carries its own host terms: give one or the other")
    engine = serving_engine or ServingEngine()
    try:
        engine_version(engine)
    except InputError as e:
        raise InputError(None, "--engine-version", e.message) from None
    return engine


def engine_label(engine: ServingEngine, params=None, drafting=None) -> str:
    """The serving engine as the output names it, e.g. ``vllm 0.12 (async scheduling off, host terms of 0.11)``;
    with the step's ``params`` and a draft's ``drafting``, also where the speculative iteration runs without async
    scheduling though the plain step has it (vLLM's default with a separate draft model or prompt lookup: read from
    the parameters that price the iteration, ``CostParams.speculating_with``)."""
    version = running_version(engine)
    entry = engine_version(engine).version
    on = async_on(engine, entry)
    taken = "" if version_key(entry) == version_key(version) else f", host terms of {entry}"
    off_when_drafting = (on and drafting is not None and params is not None and params.async_overlap > 0
                         and params.speculating_with(drafting).async_overlap == 0)
    spec = ("; off for the speculative iteration: vLLM's default with a separate draft model or prompt lookup"
            if off_when_drafting else "")
    return f"{engine.name} {version} (async scheduling {'on' if on else 'off'}{spec}{taken})"


def render(df: pd.DataFrame, meta: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    show = ["batch", "new_tokens", "context", "pass_ms", *[f"{k}_ms" for k in PARTS]]
    if "iteration_ms" in df:
        show += ["gamma", "draft_ms", "verify_ms", "iteration_ms"]
    r0 = df.iloc[0]
    par = f"TP={r0['tp']}" + (f", PP={r0['pp']}" if r0["pp"] > 1 else "") + (f", DP={r0['dp']}" if r0["dp"] > 1 else "")
    gpus = r0["tp"] * r0["pp"] * r0["dp"]
    t = Table(title=f"one engine step: {r0['model']} ({r0['dtype']}) on {r0['hardware']} x{gpus} ({par})")
    for c in show:
        t.add_column(c, justify="right")
    for _, r in df.iterrows():
        t.add_row(*[(f"{r[c]:.3f}" if c.endswith("_ms") else str(r[c])) for c in show])
    from simulator.report.report_table import print_rich_table

    con = Console()
    print_rich_table(t, console=con)
    kinds = ", ".join(f"{k} {v['kind']}" for k, v in meta["parameters"].items())
    con.print(f"parameters: {meta['profile']} ({kinds})", soft_wrap=True)
    con.print(f"serving engine: {meta['serving_engine']}", soft_wrap=True)
