"""The GPU step campaign's held-out summary: what the step model predicted before the run against what the GPU measured.

``step-summary``: per campaign folder (``run-*/`` records, ``predicted-before-fit.csv``, optional ``verify-attention/``),
``summary.md`` and ``before-fit.csv``: provenance, the chip's achieved GEMM rate and copy bandwidth, the
before-the-fit prediction errors by model and op (the held-out figure), CUDA graph vs eager, the attention study,
and the engine fit's held-out rows for this GPU (after the fit, ``calibrate.gpu_priors.engine_fit``). The plan and its
predictions are ``calibrate.gpu_priors.step_plan``'s.

    specsim validate step-summary reports/gpu-campaign-h200 [--heldout reports/gpu-step-model/heldout.csv]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

_STEP_OPS = ["decode", "verify", "head", "prefill", "decode_eager"]
_KEYS = ["model", "op", "batch", "new", "context"]
_TABLE_HEAD = ["| model | op | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|"]


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


@dataclass
class _Campaign:
    """One campaign folder read and joined: records, provenance per run, the before-the-run predictions (``pred``,
    from ``pred_file``), the GPU, the median per point (``med``) and the join with the predictions (``b``)."""
    folder: Path
    rec: pd.DataFrame
    provs: list[dict]
    pred_file: Path
    hw: object
    med: pd.DataFrame
    b: pd.DataFrame


def _prediction_file(folder: Path, provs: list[dict]) -> Path:
    pred_file = folder / "predicted-before-fit.csv"
    if not pred_file.is_file():  # a plan predicted for several GPUs before knowing which one is lent
        from simulator.catalog.hardware import catalog_hardware

        gpu = catalog_hardware(provs[0].get("gpu_name"), provs[0].get("device"))
        pred_file = folder / f"predicted-before-fit-{gpu}.csv"
    return pred_file


def _read_campaign(folder: Path) -> _Campaign:
    """The records against the predictions; errors are predicted / measured - 1 (``error``; ``fitted_error`` where
    the predictions hold the engine fit's values)."""
    from simulator.catalog import get_hardware

    rec, provs = _records(folder)
    if rec.empty:
        from simulator.errors import InputError

        raise InputError(str(folder), "run-*/records.jsonl", "the campaign's records (none found)")
    pred_file = _prediction_file(folder, provs)
    pred = pd.read_csv(pred_file)
    hw = get_hardware(pred["hardware"].iloc[0])
    steps = rec[rec["op"].isin(_STEP_OPS)]
    med = steps.groupby(_KEYS, as_index=False).agg(measured_ms=("time_s", lambda x: 1e3 * x.median()),
                                                   runs=("time_s", "size"),
                                                   spread=("time_s", lambda x: x.max() / x.min() - 1))
    b = med.merge(pred, on=_KEYS, how="inner")
    b["error"] = b["device_ms"] / b["measured_ms"] - 1
    if "fitted_ms" in b:
        b["fitted_error"] = b["fitted_ms"] / b["measured_ms"] - 1
    return _Campaign(folder, rec, provs, pred_file, hw, med, b)


def _header_lines(c: _Campaign, title: str) -> list[str]:
    """Title, provenance, the chip's GEMM rate and copy bandwidth, and the before-the-fit errors."""
    p0, provs, hw = c.provs[0], c.provs, c.hw
    chip = c.rec[c.rec["op"].isin(["gemm", "copy"])]
    gemm = chip[chip["op"] == "gemm"]["tflops"].median()
    copy = chip[chip["op"] == "copy"]["read_write_gb_s"].median()
    L = [f"# GPU campaign on {p0.get('gpu_name')}: {title}", "",
         "Records: `calibrate/measure/gpu_step_bench.py` (torch-only decoder steps, CUDA graph replayed, CUDA-event timed: the GPU "
         "part of an engine step, no scheduler), plan `plan.json` (`specsim measure step-plan`), "
         f"random bf16 weights, TP 1. Runs: {', '.join(p['run'] for p in provs)} (median per point over runs; median "
         f"run-to-run spread {c.med['spread'].median():.2%}).", "",
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
         f"`{c.pred_file.name}` was written and committed before the run (`specsim measure step-predict "
         f"plan.json --hardware {hw.name}`; catalog priors of {hw.name}). Compared: `device_ms`, the pass without its "
         "host terms (t_step, S t_seq), with the prior's per-layer cost (vLLM's, 17 us) -- the bench has no scheduler "
         "but its own, less fused kernels. Error = predicted / measured - 1; `before-fit.csv` has every point.", "",
         *_TABLE_HEAD]
    return L + _error_rows(c.b, "error")


def _fitted_lines(b: pd.DataFrame, pred_file: Path) -> list[str]:
    """The errors of the predictions with the engine fit's values, and the verification passes by batch."""
    L = ["", "## Before the run, with the engine fit's values (the bench's fixed costs from the earlier campaign)", "",
         f"`fitted_ms` in `{pred_file.name}`: the engine fit's parameters (`step-predict --engine-fit "
         "reports/gpu-step-model/params.yaml`), the bench's own per-step and per-layer costs included, fitted on "
         "the earlier campaign's records, none of these points. Error = fitted_ms / measured - 1.", "", *_TABLE_HEAD]
    L += _error_rows(b, "fitted_error")
    vb = b[b["op"] == "verify"].astype({"batch": int, "new": int, "context": int})
    if len(vb):
        L += ["", "Verification passes by batch (fitted_ms), the cost that decides γ under load: measured ms, "
              "predicted ms, error per k+1 = n.", "", "| model | batch | context | " + " | ".join(
                  f"n={n}" for n in sorted(set(vb["new"]))) + " |", "|---|---|---|" + "---|" * len(set(vb["new"]))]
        for (m, B, C), d in vb.groupby(["model", "batch", "context"]):
            cells = {r.new: f"{r.measured_ms:.2f} / {r.fitted_ms:.2f} ({r.fitted_error:+.0%})" for r in d.itertuples()}
            L.append(f"| {m} | {B} | {C} | " + " | ".join(cells.get(n, "") for n in sorted(set(vb["new"]))) + " |")
    return L


def _eager_lines(med: pd.DataFrame) -> list[str]:
    """The same decode step eager and under a CUDA graph, where the plan timed both."""
    med = med.astype({"batch": int, "new": int, "context": int})
    eager = med[med["op"] == "decode_eager"].merge(med[med["op"] == "decode"], on=["model", "batch", "new", "context"],
                                                     suffixes=("_eager", "_graph"))
    if not len(eager):
        return []
    L = ["", "## CUDA graph vs eager (the same decode step)", "", "| model | batch | context | eager ms | graph ms | eager / graph |",
         "|---|---|---|---|---|---|"]
    for r in eager.itertuples():
        L.append(f"| {r.model} | {r.batch} | {r.context} | {r.measured_ms_eager:.2f} | {r.measured_ms_graph:.2f} | "
                 f"{r.measured_ms_eager / r.measured_ms_graph:.2f} |")
    return L


def _attention_lines(folder: Path) -> list[str]:
    """The verification passes timed with each attention kernel (``verify-attention/``), where the folder has it."""
    att, _ = _records(folder, "verify-attention")
    if not len(att):
        return []
    att = att[att["op"] == "verify"].astype({"batch": int, "new": int, "context": int})
    att["ms"] = att["time_s"] * 1e3
    t = att.pivot_table(index=["batch", "context"], columns=["attention", "new"], values="ms")
    L = ["", "## Verification passes: which attention kernel (Llama-3.1-8B)", "",
         "ms per pass of k+1 = n tokens per sequence; `sdpa` n = 1 is the decode step. `sdpa`: torch's own choice "
         "(for n > 1 with grouped KV heads it reads the KV once per query head); `flash`: FlashAttention-2 forced "
         "(split-KV, but unpacked GQA); `packed`: each KV head's query heads packed into one query block (FA3's "
         "pack-GQA, FlashInfer): the KV read once, as in a decode.", "",
         "| batch | context | " + " | ".join(f"{a} n={n}" for a, n in t.columns) + " |",
         "|---|---|" + "---|" * len(t.columns)]
    for idx, r in t.iterrows():
        L.append(f"| {idx[0]} | {idx[1]} | " + " | ".join(f"{v:.2f}" for v in r.to_numpy()) + " |")
    return L


def _heldout_lines(heldout: Path | None, gpu: str) -> list[str]:
    """This GPU's rows of the engine fit's held-out folds (``heldout.csv``), where given."""
    if heldout is None or not Path(heldout).is_file():
        return []
    h = pd.read_csv(heldout)
    h = h[(h["source"] == "ours") & (h["gpu"] == gpu)]
    if not len(h):
        return []
    L = ["", "## After the fit: the engine fit's held-out folds on these records", "",
         f"From `{heldout}` (`specsim fit engine`; this GPU's rows): `gpu-out` fit "
         "without this GPU; `model-out` without that model; `source-out` every shared parameter from the other "
         "sources; `never-fitted:verify` verification passes, never in any fit.", "",
         "| fold | points | median APE | p90 APE | bias |", "|---|---|---|---|---|"]
    for fold, d in h.groupby("fold"):
        L.append(f"| {fold} | {_ape_row(d)} |")
    return L


def _profile_lines(folder: Path, hw) -> list[str]:
    """Writes the fitted profile, this GPU's catalog priors (the engine fit with these records; kinds and sources per
    parameter) as a cost profile file any command takes with --profile, and returns the summary's section on it."""
    from simulator.cost.cost_profile import profile_to_yaml
    from simulator.cost.cost_profile import prior_profile
    from simulator.inputs.loading import write_atomic

    prof = prior_profile(hw)
    write_atomic(folder / f"profile-{hw.name}.yaml", profile_to_yaml(
        prof, f"specsim validate step-summary {folder}",
        what=f"{hw.name}'s catalog priors (simulator/catalog/gpu_priors.yaml: the engine-level fit with our GPU campaign) "
             "as a cost profile; each parameter's kind and source say where it comes from."))
    kinds = {}
    for n, v in prof:
        if hasattr(v, "kind"):
            kinds.setdefault(v.kind, []).append(n)
    return ["", f"## The profile: `profile-{hw.name}.yaml`", "",
            f"This GPU's catalog priors (`simulator/catalog/gpu_priors.yaml`, written by the engine fit) as a cost profile: "
            + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(kinds.items()))
            + ". The bench's own fixed costs are not in it: an engine's per-step, per-layer and per-sequence host costs "
            "come from vLLM's measurements (each parameter's `source`)."]


def summarize(folder: Path, heldout: Path | None = None) -> str:
    """summary.md and before-fit.csv of one campaign folder (module docstring); returns the summary's text. A held-out
    grid (``heldout``, ``probe``) is never fitted, so it writes no profile of its own (the GPU's profile is its fitted
    campaign's)."""
    from simulator.inputs.loading import write_atomic

    folder = Path(folder)
    c = _read_campaign(folder)
    write_atomic(folder / "before-fit.csv", c.b.to_csv(index=False, float_format="%.6g"))
    plan = json.loads((folder / "plan.json").read_text(encoding="utf-8")) if (folder / "plan.json").is_file() else {}
    heldout_grid = plan.get("grid") in ("heldout", "probe")
    title = (f"a held-out check, never fitted (grid `{plan['grid']}`)" if heldout_grid
             else "engine steps under CUDA graphs")
    L = _header_lines(c, title)
    if "fitted_ms" in c.b:
        L += _fitted_lines(c.b, c.pred_file)
    L += _eager_lines(c.med) + _attention_lines(folder) + _heldout_lines(heldout, c.hw.name)
    if not heldout_grid:
        L += _profile_lines(folder, c.hw)
    text = "\n".join(L) + "\n"
    write_atomic(folder / "summary.md", text)
    return text
