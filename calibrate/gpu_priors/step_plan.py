"""The GPU step campaign's plan and its before-the-run predictions.

``step-plan``: the points ``calibrate/measure/gpu_step_bench.py`` times on a lent GPU, per catalog model (shapes from the
catalog, so the bench needs no project import there): decode steps at batch 1-256 and contexts 1k-16k, verification
passes of k+1 = 2..9 tokens, a 1-layer draft head's step, prefill passes, and two eager decode points.

``step-predict``: the cost model's prediction of every point as it stands (catalog priors of the named GPU,
``simulator/catalog/gpu_priors.yaml``), written *before* the records exist, so the comparison with them is held
out. The bench times the GPU part of an engine step (CUDA events around graph replays, no scheduler), so the
prediction compared is ``device_ms`` = the pass without its host terms (``step``: t_step or a draft's t_draft;
``sequences``: S t_seq); ``pass_ms`` (what an engine step would take) is written beside it.

    specsim measure step-plan --out PLAN.json
    specsim measure step-predict PLAN.json --hardware h200 --out PREDICTED.csv

The comparison with the records (``step-summary``) is a validation: ``validate.gpu_step_summary``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

SPEC_FIELDS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
               "tie_embeddings", "qkv_bias")


def _points(decode_b, decode_c, verify_n, verify_b, verify_c, head_b, head_c, prefill_n, eager_b):
    pts = []
    for C in decode_c:
        for B in decode_b:
            pts.append({"op": "decode", "batch": B, "new": 1, "context": C})
    for B in verify_b:
        for n in verify_n:
            pts.append({"op": "verify", "batch": B, "new": n, "context": verify_c})
    for C in head_c:
        for B in head_b:
            pts.append({"op": "head", "batch": B, "new": 1, "context": C})
    for n in prefill_n:
        pts.append({"op": "prefill", "batch": 1, "new": n, "context": 0})
    for B in eager_b:
        pts.append({"op": "decode_eager", "batch": B, "new": 1, "context": 1024})
    return pts


# the campaign's models and points: the engine fit's model family (Llama-3.1-8B) in full, the reference system's
# base (QwQ-32B) and small model (R1-Distill-Qwen-1.5B) on lighter grids; seconds per model bound the call
CAMPAIGN = {
    "llama-3.1-8b": dict(points=_points([1, 2, 4, 8, 16, 32, 64, 128, 256], [1024, 4096, 16384], range(2, 10),
                                        [1, 8, 32], 4096, [1, 4, 16, 64], [1024, 4096], [64, 256, 1024, 4096],
                                        [1, 32]), max_seconds=130),
    "r1-distill-qwen-1.5b": dict(points=_points([1, 4, 16, 64, 256], [1024, 4096, 16384], [2, 5, 9], [1, 16], 4096,
                                                [1, 16], [1024], [256, 2048], [1]), max_seconds=50),
    "qwq-32b": dict(points=_points([1, 4, 16, 64, 128], [1024, 4096, 16384], [2, 4, 6, 9], [1, 16], 4096,
                                   [1, 16], [1024], [256, 2048], [1]), max_seconds=140),
}


def _packed(points):
    """Verification points timed with the engine-like attention (each KV head's query rows packed: the KV read once)."""
    return [{**p, "attention": "packed"} if p["op"] == "verify" else p for p in points]


# a second campaign, held out of every fit: what decides γ under load (verification passes of k+1 = 2..9 tokens at
# batch 16-256, engine-like attention), on models no fit has seen (Qwen3-8B, Qwen3-32B, whose 64 query heads x 128
# exceed its width) and on the fitted Llama-3.1-8B beyond the batches it was measured at (1/8/32)
HELDOUT = {
    "qwen3-8b": dict(points=_packed(
        _points([1, 4, 16, 64, 128, 256], [1024], [2, 4, 6, 9], [1, 16, 64, 128, 256], 1024, [1, 64], [1024],
                [512, 2048], [])
        + _points([1, 16, 64], [4096], [2, 5, 9], [16, 64], 4096, [], [], [], [])
        + _points([1, 16], [16384], [], [], 0, [], [], [], [])), max_seconds=120),
    "llama-3.1-8b": dict(points=_packed(_points([64, 256], [1024], [2, 4, 6, 9], [64, 128, 256], 1024, [], [], [], [])),
                         max_seconds=60),
    "qwen3-32b": dict(points=_packed(_points([1, 8, 16], [1024], [2, 5, 9], [1, 8], 1024, [], [], [512], [])),
                      max_seconds=80),
}
# why the held-out verifications at batch 256 run slower than the model says: the same batch x tokens at three
# contexts (the attention's share grows with the context, the per-token elementwise share does not), decodes beside
PROBE = {
    "llama-3.1-8b": dict(points=_packed(
        _points([64, 256], [128, 1024], [2, 9], [64, 256], 128, [], [], [], [])
        + _points([64], [4096], [2, 9], [64], 4096, [], [], [], [])
        + _points([], [], [2, 9], [64, 256], 1024, [], [], [], [])), max_seconds=150),
}


def _prefills(whole, chunk, chunk_ctx):
    """Causal prefill passes (batch 1): whole prompts of ``whole`` tokens, and chunks of ``chunk`` new tokens on
    ``chunk_ctx`` cached ones (chunked prefill over a growing context)."""
    return ([{"op": "prefill", "batch": 1, "new": n, "context": 0, "attention": "causal"} for n in whole]
            + [{"op": "prefill", "batch": 1, "new": chunk, "context": c, "attention": "causal"} for c in chunk_ctx])


# prefill and chunked prefill at the 8B and 32B shapes of the released models, causal as engines run it: where the
# step model's compute term is priced
PREFILL = {
    "qwen3-8b": dict(points=_prefills([512, 1024, 2048, 4096, 8192, 16384], 2048, [2048, 4096, 8192, 14336])
                     + _prefills([], 512, [4096, 16384]), max_seconds=60),
    "qwen3-32b": dict(points=_prefills([512, 1024, 2048, 4096, 8192, 16384], 2048, [2048, 4096, 8192, 14336]),
                      max_seconds=110),
}
# does a long run slow down? one 8192-token Qwen3-32B prefill replayed back to back for 75 s, with the SM clock and
# power sampled beside it (the released serving runs last minutes; every bench point above lasts well under a second)
SUSTAINED = {
    "qwen3-32b": dict(points=[{"op": "sustained", "base": "prefill", "batch": 1, "new": 8192, "context": 0,
                               "attention": "causal", "seconds": 75, "window_s": 1.0}], max_seconds=110),
}
GRIDS = {"campaign": CAMPAIGN, "heldout": HELDOUT, "probe": PROBE, "prefill": PREFILL, "sustained": SUSTAINED}


def make_plan(models=None, max_seconds: float = 330.0, repeats: int = 5, grid: str = "campaign") -> dict:
    from simulator.catalog import get_model

    g = GRIDS[grid]
    out = {"dtype": "bfloat16", "repeats": repeats, "max_seconds": max_seconds, "reserve_bytes": 8e9, "grid": grid,
           "models": []}
    for name in models or g:
        m = get_model(name, None, "--model")
        spec = {k: getattr(m, k) for k in SPEC_FIELDS}
        out["models"].append({"spec": spec, **g[name]})
    return out


def predict(plan: dict, hardware: str, profile=None, fitted: dict | None = None) -> pd.DataFrame:
    """One row per planned point: the model's prediction, its terms, and ``device_ms`` (no host terms). With
    ``fitted`` (the engine fit's parameter values, ``reports/gpu-step-model/params.yaml``), also ``fitted_ms``: the
    bench step as the engine fit prices it, with the bench's own fixed costs fitted on the earlier campaign's
    records (``engine_data.predict_ours``)."""
    from simulator.catalog import get_hardware, get_model
    from simulator.cost.cost_model import Deployment
    from simulator.cost.cost_profile import prior_profile
    from simulator.cost.pass_time import PARTS, draft_deployment

    hw = get_hardware(hardware, None, "--hardware")
    prof = profile or prior_profile(hw)
    params = prof.params(hw)
    rows = []
    for m in plan["models"]:
        model = get_model(m["spec"]["name"], None, "--model")
        target = Deployment(model, hw, 1, params)
        head = draft_deployment(target, "head", params)
        for p in m["points"]:
            B, T, C = p["batch"], p["new"], p["context"]
            dep = head if p["op"] == "head" else target
            logit_rows = B * T if p["op"] == "verify" else B
            bd = dep.pass_breakdown(float(B * T), float(B * (C + T)), float(B * T * (C + (T + 1) / 2)),
                                    float(logit_rows), float(B))
            r = {"model": model.name, "hardware": hw.name, **p, "pass_ms": float(bd["total"]) * 1e3}
            r.update({f"{k}_ms": float(bd[k]) * 1e3 for k in PARTS})
            r["device_ms"] = r["pass_ms"] - r["step_ms"] - r["sequences_ms"]
            rows.append(r)
    df = pd.DataFrame(rows)
    if fitted is not None:
        from calibrate.gpu_priors.engine_data import predict_ours

        df["fitted_ms"] = predict_ours(df.assign(gpu=hw.name), fitted) * 1e3
    df.attrs["profile"] = prof.name
    return df


def load_fitted_values(path: Path) -> dict:
    """The parameter values of an engine fit's ``params.yaml`` (``{name: value}``); one clear error otherwise."""
    from simulator.errors import InputError
    from simulator.inputs.loading import read_yaml

    doc = read_yaml(path)
    try:
        return {str(k): float(v["value"]) for k, v in doc["params"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputError(str(path), "params", "an engine fit's params.yaml (params: NAME: {value: X})") from None
