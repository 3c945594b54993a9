"""The GPU step campaign's plan and its before-the-run predictions (issue 31).

``step-plan``: the points ``calibrate/measure/gpu_step_bench.py`` times on a lent GPU, per catalog model (shapes from the
catalog, so the bench needs no project import there): decode steps at batch 1-256 and contexts 1k-16k, verification
passes of k+1 = 2..9 tokens, a 1-layer draft head's step, prefill passes, and two eager decode points.

``step-predict``: the cost model's prediction of every point as it stands (catalog priors of the named GPU,
``simulator/catalog/gpu_priors.yaml``), written *before* the records exist, so the comparison with them is held
out. The bench times the GPU part of an engine step (CUDA events around graph replays, no scheduler), so the
prediction compared is ``device_ms`` = the pass without its host terms (``step``: t_step or a draft's t_draft;
``sequences``: S t_seq); ``pass_ms`` (what an engine step would take) is written beside it.

    specsim calibrate gpu step-plan --out PLAN.json
    specsim calibrate gpu step-predict PLAN.json --hardware h200 --out PREDICTED.csv
    specsim calibrate gpu step-summary reports/gpu-campaign-h200 [--heldout reports/gpu-step-model/heldout.csv]

``step-summary``: per campaign folder (``run-*/`` records, ``predicted-before-fit.csv``, optional ``verify-attention/``),
``summary.md`` and ``before-fit.csv``: provenance, the chip's achieved GEMM rate and copy bandwidth, the
before-the-fit prediction errors by model and op (the held-out figure), CUDA graph vs eager, the attention study,
and the engine fit's held-out rows for this GPU (after the fit, ``calibrate.gpu_priors.engine_fit``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
GRIDS = {"campaign": CAMPAIGN, "heldout": HELDOUT, "probe": PROBE}


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


def _records(folder: Path, sub: str = "run-*") -> tuple[pd.DataFrame, list[dict]]:
    rows, provs = [], []
    for f in sorted(folder.glob(f"{sub}/records.jsonl")):
        run = json.loads((f.parent / "run.json").read_text(encoding="utf-8"))
        provs.append({"run": f.parent.name, **run["provenance"]})
        for line in f.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            rows.append({"run": f.parent.name, **r})
    return pd.DataFrame(rows), provs


def _ape_row(d: pd.DataFrame, err: str = "error") -> str:
    a = d[err].abs()
    return f"{len(d)} | {a.median():.1%} | {a.quantile(0.9):.1%} | {d[err].median():+.1%}"


def _error_rows(b: pd.DataFrame, err: str) -> list[str]:
    """Table rows of ``err`` per (model, op), then over every graph step."""
    rows = [f"| {m} | {op} | {_ape_row(d, err)} |" for (m, op), d in b.groupby(["model", "op"])]
    return rows + [f"| all | graph steps | {_ape_row(b[b['op'].isin(['decode', 'verify', 'head', 'prefill'])], err)} |"]


def summarize(folder: Path, heldout: Path | None = None) -> str:
    """summary.md and before-fit.csv of one campaign folder (module docstring); returns the summary's text."""
    from simulator.catalog import get_hardware
    from simulator.inputs.loading import write_atomic

    folder = Path(folder)
    rec, provs = _records(folder)
    if rec.empty:
        from simulator.errors import InputError

        raise InputError(str(folder), "run-*/records.jsonl", "the campaign's records (none found)")
    pred_file = folder / "predicted-before-fit.csv"
    if not pred_file.is_file():  # a plan predicted for several GPUs before knowing which one is lent
        from simulator.catalog.hardware import catalog_hardware

        gpu = catalog_hardware(provs[0].get("gpu_name"), provs[0].get("device"))
        pred_file = folder / f"predicted-before-fit-{gpu}.csv"
    pred = pd.read_csv(pred_file)
    hw = get_hardware(pred["hardware"].iloc[0])
    steps = rec[rec["op"].isin(["decode", "verify", "head", "prefill", "decode_eager"])]
    keys = ["model", "op", "batch", "new", "context"]
    med = steps.groupby(keys, as_index=False).agg(measured_ms=("time_s", lambda x: 1e3 * x.median()),
                                                  runs=("time_s", "size"),
                                                  spread=("time_s", lambda x: x.max() / x.min() - 1))
    b = med.merge(pred, on=keys, how="inner")
    b["error"] = b["device_ms"] / b["measured_ms"] - 1
    if "fitted_ms" in b:
        b["fitted_error"] = b["fitted_ms"] / b["measured_ms"] - 1
    write_atomic(folder / "before-fit.csv", b.to_csv(index=False, float_format="%.6g"))
    p0 = provs[0]
    chip = rec[rec["op"].isin(["gemm", "copy"])]
    gemm = chip[chip["op"] == "gemm"]["tflops"].median()
    copy = chip[chip["op"] == "copy"]["read_write_gb_s"].median()
    plan = json.loads((folder / "plan.json").read_text(encoding="utf-8")) if (folder / "plan.json").is_file() else {}
    heldout_grid = plan.get("grid") in ("heldout", "probe")
    title = (f"a held-out check, never fitted (grid `{plan['grid']}`)" if heldout_grid
             else "engine steps under CUDA graphs (issue 31)")
    L = [f"# GPU campaign on {p0.get('gpu_name')}: {title}", "",
         "Records: `calibrate/measure/gpu_step_bench.py` (torch-only decoder steps, CUDA graph replayed, CUDA-event timed: the GPU "
         "part of an engine step, no scheduler), plan `plan.json` (`specsim calibrate gpu step-plan`), "
         f"random bf16 weights, TP 1. Runs: {', '.join(p['run'] for p in provs)} (median per point over runs; median "
         f"run-to-run spread {med['spread'].median():.2%}).", "",
         "| | |", "|---|---|",
         f"| GPU | {p0.get('gpu_name')} ({p0.get('gpu_memory_bytes', 0) / 2**30:.0f} GiB, {p0.get('sm_count')} SMs) |",
         f"| driver, CUDA, torch | {p0.get('driver')}, {p0.get('cuda')}, {p0.get('torch')} |",
         f"| clocks (max SM, mem MHz), power limit | {p0.get('clocks_max')}, {p0.get('power_limit')} |",
         f"| dates (UTC) | {', '.join(p['date_utc'] for p in provs)} |",
         f"| bf16 GEMM 8192^3 | {gemm:.0f} TFLOP/s = {gemm * 1e12 / hw.dense_bf16_flops_per_s:.0%} of the datasheet's dense "
         f"{hw.dense_bf16_flops_per_s / 1e12:.0f} |",
         f"| device-to-device copy (read + write) | {copy:.0f} GB/s = {copy * 1e9 / hw.memory_bandwidth_bytes_per_s:.0%} of "
         f"the datasheet's {hw.memory_bandwidth_bytes_per_s / 1e9:.0f} |", "",
         "## Before the fit: the step model as committed, predicting every point (held out)", "",
         f"`{pred_file.name}` was written and committed before the run (`specsim calibrate gpu step-predict "
         f"plan.json --hardware {hw.name}`; catalog priors of {hw.name}). Compared: `device_ms`, the pass without its "
         "host terms (t_step, S t_seq), with the prior's per-layer cost (vLLM's, 17 us) -- the bench has no scheduler "
         "but its own, less fused kernels. Error = predicted / measured - 1; `before-fit.csv` has every point.", "",
         "| model | op | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|"]
    L += _error_rows(b, "error")
    if "fitted_ms" in b:
        L += ["", "## Before the run, with the engine fit's values (the bench's fixed costs from the earlier campaign)", "",
              f"`fitted_ms` in `{pred_file.name}`: the engine fit's parameters (`step-predict --engine-fit "
              "reports/gpu-step-model/params.yaml`), the bench's own per-step and per-layer costs included, fitted on "
              "the earlier campaign's records, none of these points. Error = fitted_ms / measured - 1.", "",
              "| model | op | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|"]
        L += _error_rows(b, "fitted_error")
        vb = b[b["op"] == "verify"].astype({"batch": int, "new": int, "context": int})
        if len(vb):
            L += ["", "Verification passes by batch (fitted_ms), the cost that decides γ under load: measured ms, "
                  "predicted ms, error per k+1 = n.", "", "| model | batch | context | " + " | ".join(
                      f"n={n}" for n in sorted(set(vb["new"]))) + " |", "|---|---|---|" + "---|" * len(set(vb["new"]))]
            for (m, B, C), d in vb.groupby(["model", "batch", "context"]):
                cells = {r.new: f"{r.measured_ms:.2f} / {r.fitted_ms:.2f} ({r.fitted_error:+.0%})" for r in d.itertuples()}
                L.append(f"| {m} | {B} | {C} | " + " | ".join(cells.get(n, "") for n in sorted(set(vb["new"]))) + " |")
    med = med.astype({"batch": int, "new": int, "context": int})
    eager = med[med["op"] == "decode_eager"].merge(med[med["op"] == "decode"], on=["model", "batch", "new", "context"],
                                                     suffixes=("_eager", "_graph"))
    if len(eager):
        L += ["", "## CUDA graph vs eager (the same decode step)", "", "| model | batch | context | eager ms | graph ms | eager / graph |",
              "|---|---|---|---|---|---|"]
        for r in eager.itertuples():
            L.append(f"| {r.model} | {r.batch} | {r.context} | {r.measured_ms_eager:.2f} | {r.measured_ms_graph:.2f} | "
                     f"{r.measured_ms_eager / r.measured_ms_graph:.2f} |")
    att, _ = _records(folder, "verify-attention")
    if len(att):
        att = att[att["op"] == "verify"].astype({"batch": int, "new": int, "context": int})
        att["ms"] = att["time_s"] * 1e3
        t = att.pivot_table(index=["batch", "context"], columns=["attention", "new"], values="ms")
        L += ["", "## Verification passes: which attention kernel (Llama-3.1-8B)", "",
              "ms per pass of k+1 = n tokens per sequence; `sdpa` n = 1 is the decode step. `sdpa`: torch's own choice "
              "(for n > 1 with grouped KV heads it reads the KV once per query head); `flash`: FlashAttention-2 forced "
              "(split-KV, but unpacked GQA); `packed`: each KV head's query heads packed into one query block (FA3's "
              "pack-GQA, FlashInfer): the KV read once, as in a decode.", "",
              "| batch | context | " + " | ".join(f"{a} n={n}" for a, n in t.columns) + " |",
              "|---|---|" + "---|" * len(t.columns)]
        for idx, r in t.iterrows():
            L.append(f"| {idx[0]} | {idx[1]} | " + " | ".join(f"{v:.2f}" for v in r.to_numpy()) + " |")
    if heldout is not None and Path(heldout).is_file():
        h = pd.read_csv(heldout)
        h = h[(h["source"] == "ours") & (h["gpu"] == hw.name)]
        if len(h):
            L += ["", "## After the fit: the engine fit's held-out folds on these records", "",
                  f"From `{heldout}` (`specsim calibrate gpu fit-engine`; this GPU's rows): `gpu-out` fit "
                  "without this GPU; `model-out` without that model; `source-out` every shared parameter from the other "
                  "sources; `never-fitted:verify` verification passes, never in any fit.", "",
                  "| fold | points | median APE | p90 APE | bias |", "|---|---|---|---|---|"]
            for fold, d in h.groupby("fold"):
                L.append(f"| {fold} | {_ape_row(d)} |")
    if heldout_grid:  # never fitted: no profile of its own (the GPU's profile is its fitted campaign's)
        text = "\n".join(L) + "\n"
        write_atomic(folder / "summary.md", text)
        return text
    # the fitted profile: this GPU's catalog priors (the engine fit with these records; kinds and sources per
    # parameter) as a cost profile file any command takes with --profile
    from simulator.cost.cost_profile import profile_to_yaml
    from simulator.cost.cost_profile import prior_profile

    prof = prior_profile(hw)
    write_atomic(folder / f"profile-{hw.name}.yaml", profile_to_yaml(
        prof, f"specsim calibrate gpu step-summary {folder}",
        what=f"{hw.name}'s catalog priors (simulator/catalog/gpu_priors.yaml: the engine-level fit with our GPU campaign) "
             "as a cost profile; each parameter's kind and source say where it comes from."))
    kinds = {}
    for n, v in prof:
        if hasattr(v, "kind"):
            kinds.setdefault(v.kind, []).append(n)
    L += ["", f"## The profile: `profile-{hw.name}.yaml`", "",
          f"This GPU's catalog priors (`simulator/catalog/gpu_priors.yaml`, written by the engine fit) as a cost profile: "
          + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(kinds.items()))
          + ". The bench's own fixed costs are not in it: an engine's per-step, per-layer and per-sequence host costs "
          "come from vLLM's measurements (each parameter's `source`)."]
    text = "\n".join(L) + "\n"
    write_atomic(folder / "summary.md", text)
    return text

