"""What ``specsim fit quant`` writes: the quantised GEMM kinds (``simulator/catalog/quant_gemm.yaml``,
read by :mod:`simulator.catalog.quant_gemm`) and a report folder (report.md, heldout.csv, kernel_ratios.csv,
bursts.csv). The fits: :mod:`calibrate.gpu_priors.quant_fit`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import yaml

from calibrate.gpu_priors import quant_fit as qf
from calibrate.gpu_priors.engine_data import data_commit
from simulator.inputs.loading import write_atomic

WEIGHT_ONLY_PRIORS = {
    "mem_ratio": (1.0, "prior: Marlin streams 4-/8-bit weights at the bf16 GEMV's efficiency (IST-DASLab/marlin README: "
                       "close to ideal 4x speedups up to batch 16-32); not identified by compute-bound bursts"),
    "gemm_overhead_s": (0.0, "prior: no extra fixed cost per GEMM (weights dequantised inside the GEMM's main loop)"),
}


def _param(value: float, kind: str, source: str) -> dict:
    return {"value": float(f"{value:.4g}"), "kind": kind, "source": source}


def kinds_yaml(ratios: pd.DataFrame, weight_only: dict[str, float], bursts: pd.DataFrame, date: str) -> tuple[dict, dict]:
    """(pooled kinds, per-GPU kinds) as the catalog stores them, each value with its kind and source."""
    aic = f"AIConfigurator vLLM GEMM tables (ai-dynamo/aiconfigurator @ {data_commit(qf.AIC)[:12]})"
    pooled, per_gpu = {}, {}
    for dtype, r in ratios.groupby("dtype"):
        kind, _b, peak = qf.AIC_KINDS[dtype]
        p = qf.pooled(r)
        gpus = ", ".join(f"{g} ({t})" for g, t in zip(r["gpu"], r["table"]))
        how = "geometric mean" if len(r) > 1 else "one GPU"
        pooled[kind] = {"peak": peak, **{k: _param(v, "calibrated" if len(r) > 1 else "transferred",
                                                     f"{aic}: {dtype} vs bf16 kernel fits, {how} over {gpus}; {date}")
                                         for k, v in p.items()}}
        for row in r.itertuples():
            per_gpu.setdefault(row.gpu, {})[kind] = {"peak": peak, **{
                k: _param(max(0.0, getattr(row, k)), "calibrated",
                          f"{aic}: {row.table}, {dtype} vs bf16 kernel fits ({row.rows} GEMMs); {date}")
                for k in ("compute_ratio", "mem_ratio", "gemm_overhead_s")}}
    src = (f"GPUStack performance lab (gpustack/gpustack @ {data_commit(qf.GPUSTACK.parent)[:12]}): vllm serve bursts of "
           f"1000 requests on one A100 (vLLM {', '.join(sorted(set(bursts['vllm'])))}), Qwen3-14B/32B, predicted by the "
           f"serving simulator; {date}")
    for kind, rc in weight_only.items():
        pooled[kind] = {"peak": "bf16", "compute_ratio": _param(rc, "calibrated", src),
                        **{k: _param(v, "prior", s) for k, (v, s) in WEIGHT_ONLY_PRIORS.items()}}
    return pooled, per_gpu


def fit_and_report(report: Path, out: Path | None, date: str | None, command: str) -> pd.DataFrame:
    """Run both fits and their held-out checks; write the report folder and (``out``) the catalog YAML."""
    date = date or dt.date.today().isoformat()
    tables = qf.load_gemm_tables()
    ratios = qf.kernel_ratios(tables)
    bursts = qf.load_bursts()
    weight_only, held_wo, preds = qf.weight_only_fit(bursts)
    held = pd.concat([qf.kernel_heldout(tables, ratios), held_wo], ignore_index=True)
    report.mkdir(parents=True, exist_ok=True)
    write_atomic(report / "heldout.csv", held.round(2).to_csv(index=False))
    write_atomic(report / "kernel_ratios.csv", ratios.round(6).to_csv(index=False))
    write_atomic(report / "bursts.csv", preds.round(4).to_csv(index=False))
    pooled, per_gpu = kinds_yaml(ratios, weight_only, bursts, date)
    cols = [c for c in held.columns if c.endswith("pct")]
    text = [f"# Quantised GEMM kinds: fit and held-out checks ({date})", "", f"Command: `{command}`", "",
            "Kinds and rule: simulator/catalog/quant_gemm.py; docs/gpu-cost-model.md \"Quantised GEMMs\".", "",
            "## Held out (before: the rule before the kinds; after: the fitted kinds)", "",
            held.assign(**{c: held[c].round(1) for c in cols}).to_markdown(index=False), "",
            "## Kernel fits per GPU (ratios to the same GPU's bf16 fit)", "",
            ratios.drop(columns=["table"]).round(4).to_markdown(index=False), "",
            "## A100 bursts (weight-only: before = bf16 GEMMs reading fewer bytes; after = rc fitted on the other model)", "",
            preds.round(3).to_markdown(index=False), ""]
    write_atomic(report / "report.md", "\n".join(text))
    if out is not None:
        doc = {"kinds": pooled, "gpu_kinds": per_gpu,
               "fit": {"command": command, "date": date, "heldout": held.round(2).to_dict(orient="records")}}
        header = ("# Quantised GEMM kinds relative to bf16 GEMMs (simulator/catalog/quant_gemm.py; docs/gpu-cost-model.md).\n"
                  f"# Regenerate (do not edit by hand):\n#   {command}\n")
        write_atomic(out, header + yaml.safe_dump(doc, sort_keys=False, width=120))
    return held
