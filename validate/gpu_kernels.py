"""Held-out figures of the GPU kernel model against (a) today's catalog priors and (b) a
constant-efficiency roofline fitted on the same training rows.

    .venv/bin/specsim validate kernels --out out/gpu-validation

(the Vidur and AIConfigurator folders default to the shared data's).

Splits (train -> test; every model refitted on the train rows only):
- ``lomo``: leave one model out, per GPU (Vidur per-layer ops: A100, A40);
- ``gpu``: fit two of A100 / A40 / L40S (pooled, each row on its own datasheet), predict the third;
- ``tp``: Vidur TP 1, 2 -> TP 4, 8 (both GPUs);
- ``kv``: decode attention, KV <= 4096 -> KV >= 8192 (A100, L40S);
- ``source``: A100 Vidur -> A100 AIConfigurator GEMMs and the reverse;
- ``allreduce``: latency + bandwidth fitted per (GPU, link), error per TP degree (in sample: the
  table the fit summarises).
Per-op APE is over op records; per-pass APE over Vidur rows (one layer's ops summed, the
embedding excluded: Vidur times the whole pass's lookup once), the linear part of a forward pass.
Writes ``report.md`` and ``figures.csv`` into ``--out``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from calibrate.gpu_priors.fit import (AR_PARAMS, COMPUTE_PARAMS, Predictor, allreduce_rows, datasheet, fit_params,
                                        fit_rows, subsample)
from calibrate.gpu_priors.kernel_model import KERNELS_PER_LAYER, KernelParams, OpArrays, constant_roofline_time
from simulator.catalog import get_hardware
from simulator.cost.cost_profile import prior_profile
from simulator.inputs.loading import write_atomic



def catalog_prior(gpu: str) -> KernelParams:
    """Today's catalog prior in kernel form: eta_mem 0.8, eta_comp 0.6 for every op, no tiles, t_layer
    spread over the layer's kernels, NCCL latency + datasheet link bandwidth."""
    h = get_hardware(gpu).datasheet_era()  # the datasheet-era priors, before the derived ones (gpu_priors.yaml)
    c = prior_profile(h).params(h)
    return KernelParams(mem_efficiency=c.mem_efficiency, compute_efficiency=c.compute_efficiency, gemm_tile_tokens=1.0,
                        attn_compute_efficiency=c.compute_efficiency, row_mem_efficiency=c.mem_efficiency,
                        kernel_overhead_s=c.layer_overhead_s / KERNELS_PER_LAYER,
                        allreduce_latency_s=h.allreduce_latency_s, allreduce_bandwidth_bytes_per_s=h.link_bandwidth_bytes_per_s)


def _prior_predict(df: pd.DataFrame) -> np.ndarray:
    out = np.empty(len(df))
    for g in df["gpu"].unique():
        idx = np.flatnonzero((df["gpu"] == g).to_numpy())
        out[idx] = OpArrays(df.iloc[idx]).time(catalog_prior(g), datasheet(g))
    return out


def _roofline_predict(train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    """(b): one efficiency eta for every op (fitted on train, median log error), no fixed costs."""
    arrs = [(datasheet(g), np.flatnonzero((d["gpu"] == g).to_numpy()), OpArrays(d[d["gpu"] == g]))
            for d in (train, test) for g in sorted(d["gpu"].unique())]

    def pred(d, eta):
        out = np.empty(len(d))
        for g in d["gpu"].unique():
            idx = np.flatnonzero((d["gpu"] == g).to_numpy())
            a = OpArrays(d.iloc[idx])
            if a.is_ar.any():
                h = get_hardware(g).datasheet_era()
                out[idx] = a.ar_bytes / (eta * h.link_bandwidth_bytes_per_s)
            else:
                out[idx] = constant_roofline_time(a, eta, datasheet(g))
        return out

    del arrs
    y = train["time_s"].to_numpy()
    base = pred(train, 1.0)
    eta = float(np.exp(np.median(np.log(base / y))))  # T ~ 1/eta: the median log ratio is the fit
    return pred(test, eta)


def metrics(pred: np.ndarray, meas: np.ndarray) -> dict:
    rel = pred / meas - 1.0
    ape = np.abs(rel)
    return {"n": int(len(meas)), "median_ape": float(np.median(ape)), "p90_ape": float(np.quantile(ape, 0.9)),
            "bias": float(np.median(rel))}


def _per_pass(test: pd.DataFrame, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = test.assign(pred=pred)
    v = v[(v["source"] == "vidur") & (v["op"] != "embedding")]
    g = v.groupby(["source_file", "source_row"])[["time_s", "pred"]].sum()
    return g["pred"].to_numpy(), g["time_s"].to_numpy()


def evaluate(split: str, fold: str, train: pd.DataFrame, test: pd.DataFrame, free=COMPUTE_PARAMS) -> list[dict]:
    fit = fit_params(subsample(train), free)
    preds = {"fitted": Predictor(test)(fit.params), "prior": _prior_predict(test),
             "roofline": _roofline_predict(subsample(train), test)}
    y = test["time_s"].to_numpy()
    rows = []
    for model, p in preds.items():
        rows.append({"split": split, "fold": fold, "level": "op", "model": model, **metrics(p, y)})
        if (test["source"] == "vidur").any() and not (test["op"] == "allreduce").all():
            pp, yy = _per_pass(test, p)
            if len(yy):
                rows.append({"split": split, "fold": fold, "level": "pass", "model": model, **metrics(pp, yy)})
    return rows


def run(records: pd.DataFrame, log=print) -> pd.DataFrame:
    comp = fit_rows(records)
    rows: list[dict] = []
    vid = comp[comp["source"] == "vidur"]
    for gpu in sorted(vid["gpu"].unique()):  # leave one model out
        d = vid[vid["gpu"] == gpu]
        for m in sorted(d["model"].unique()):
            rows += evaluate("lomo", f"{gpu}: {m}", d[d["model"] != m], d[d["model"] == m])
        log(f"lomo {gpu}: {d['model'].nunique()} folds")
    gpus = sorted(comp["gpu"].unique())
    for g in gpus:  # GPU held out
        rows += evaluate("gpu", f"-> {g}", comp[comp["gpu"] != g], comp[comp["gpu"] == g])
    log("gpu held out: done")
    for gpu in sorted(vid["gpu"].unique()):  # TP held out
        d = vid[vid["gpu"] == gpu]
        rows += evaluate("tp", f"{gpu}: tp 1,2 -> 4,8", d[d["tp"] <= 2], d[d["tp"] >= 4])
    log("tp held out: done")
    att = comp[comp["op"] == "attn_decode"]
    for gpu in sorted(att["gpu"].unique()):  # short KV -> long KV
        d = att[att["gpu"] == gpu]
        rows += evaluate("kv", f"{gpu}: kv<=4096 -> kv>=8192", d[d["kv_tokens"] <= 4096], d[d["kv_tokens"] >= 8192],
                         free=("mem_efficiency", "attn_compute_efficiency", "kernel_overhead_s"))
    log("kv held out: done")
    a100 = comp[(comp["gpu"] == "a100-80gb") & (comp["op"] == "gemm")]
    for tr, te in (("vidur", "aiconfigurator"), ("aiconfigurator", "vidur")):
        if (a100["source"] == tr).any() and (a100["source"] == te).any():
            rows += evaluate("source", f"a100 gemm: {tr} -> {te}", a100[a100["source"] == tr], a100[a100["source"] == te],
                             free=("mem_efficiency", "compute_efficiency", "gemm_tile_tokens", "kernel_overhead_s"))
    ar = allreduce_rows(records)
    for (gpu, link), d in ar.groupby(["gpu", "link"]):
        fit = fit_params(d, AR_PARAMS)
        p, prior = Predictor(d)(fit.params), _prior_predict(d)
        for tp, idx in d.groupby("num_gpus").indices.items():
            y = d["time_s"].to_numpy()[idx]
            fold = f"{gpu} {link} ({'+'.join(sorted(set(d['backend'])))}), {tp} GPUs"
            rows.append({"split": "allreduce", "fold": fold, "level": "op", "model": "fitted", **metrics(p[idx], y)})
            rows.append({"split": "allreduce", "fold": fold, "level": "op", "model": "prior", **metrics(prior[idx], y)})
    log("all-reduce: done")
    return pd.DataFrame(rows)


def summary(fig: pd.DataFrame) -> pd.DataFrame:
    """Pooled over folds: the median of the folds' median / p90 APE and bias, per split x level x model."""
    g = fig.groupby(["split", "level", "model"], sort=False)
    return g.agg(folds=("fold", "size"), n=("n", "sum"), median_ape=("median_ape", "median"),
                 p90_ape=("p90_ape", "median"), bias=("bias", "median")).reset_index()


def _table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    fmt = lambda v: f"{100 * v:.1f}%" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def write_report(fig: pd.DataFrame, out: Path, command: str, inputs: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "figures.csv", fig.to_csv(index=False))
    summ = summary(fig)
    write_atomic(out / "summary.csv", summ.to_csv(index=False))
    wide = fig.pivot_table(index=["split", "fold", "level"], columns="model", values=["median_ape", "p90_ape", "bias"],
                           sort=False)
    wide.columns = [f"{m} {v}" for v, m in wide.columns]
    order = [c for m in ("fitted", "prior", "roofline") for c in (f"{m} median_ape", f"{m} p90_ape", f"{m} bias") if c in wide]
    text = ["# GPU kernel model: held-out validation", "", f"Command: `{command}`", "",
            "Inputs: " + ", ".join(f"`{i}`" for i in inputs), "",
            "APE = |predicted / measured - 1|; bias = median of (predicted / measured - 1). `fitted`: the kernel model "
            "refitted on each fold's train rows; `prior`: today's catalog priors; `roofline`: one constant efficiency "
            "fitted on the same train rows, no fixed costs. Target: median <= 5%, p90 <= 12%.", "",
            "## Summary (median over folds)", "", _table(summ), "", "## Every fold", "",
            _table(wide[order].reset_index())]
    path = out / "report.md"
    write_atomic(path, "\n".join(text) + "\n")
    return path


def load_inputs(vidur: str | None, aic: str | None) -> tuple[pd.DataFrame, list[str]]:
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator
    from calibrate.gpu_priors.import_vidur import import_vidur

    frames, inputs = [], []
    if vidur:
        frames.append(import_vidur(vidur)[0])
        inputs.append(vidur)
    if aic:
        frames.append(import_aiconfigurator(aic)[0])
        inputs.append(aic)
    return pd.concat(frames, ignore_index=True), inputs

