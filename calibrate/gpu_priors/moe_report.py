"""The MoE layer fit's report (``specsim fit moe``): ``report.md``, ``heldout.csv``, ``summary.csv`` and
``params.yaml`` from the fit and held-out folds of :mod:`calibrate.gpu_priors.moe_fit`."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import ENGINE, SHARED, data_commit
from calibrate.gpu_priors import moe_catalog, moe_fit
from calibrate.gpu_priors.moe_fit import DESIGNS, FIT_DTYPES, summarize, units_of
from simulator.catalog import hardware_catalog


def _heldout_lines(h: pd.DataFrame, fitted: pd.DataFrame) -> list[str]:
    """The report's held-out tables: by GPU (both designs), by dtype, by routing and EP."""
    by_gpu = summarize(fitted, ("design", "fold", "source"))
    by_dtype = summarize(h, ("design", "fold", "dtype"))
    by_dist = summarize(fitted[fitted["source"] == "aic"], ("design", "distribution", "ep_band"))
    sources = h.groupby(["design", "fold"])["transferred_from"].first()
    lines: list[str] = []
    lines += ["", "## Held-out errors, leaving one GPU out", "",
              "Each GPU's parameters transferred as the median of the other GPUs' fit (an LLMServingSim GPU's eager "
              "launch cost fitted on its own rows), scored on its newest table. Two designs:", ""]
    lines += [f"- **{d}**: {t}." for d, t in DESIGNS.items()]
    lines += ["", "APE = |predicted / measured - 1|; bias = median signed error. "
              f"Fitted dtypes ({', '.join(FIT_DTYPES)}) and the LLMServingSim rows:", "",
              "| design | fold | transferred from | source | points | median APE | p90 APE | bias |",
              "|---|---|---|---|---|---|---|---|"]
    for r in by_gpu.itertuples():
        lines.append(f"| {r.design} | {r.fold} | {sources[(r.design, r.fold)]} | {r.source} | {r.points} | "
                     f"{r.median_ape:.1%} | {r.p90_ape:.1%} | {r.bias:+.1%} |")
    lines += ["", "By dtype, every table (dtypes outside the fit scored with the same parameters: one efficiency per "
              "GPU across its kernels):", "", "| design | fold | dtype | points | median APE | p90 APE | bias |",
              "|---|---|---|---|---|---|---|"]
    for r in by_dtype.itertuples():
        lines.append(f"| {r.design} | {r.fold} | {r.dtype} | {r.points} | {r.median_ape:.1%} | {r.p90_ape:.1%} | "
                     f"{r.bias:+.1%} |")
    lines += ["", "By routing and expert parallelism (fitted dtypes, every fold): skewed routing at high EP runs longer "
              "than the expected per-GPU load predicts (the busiest GPU sets the time):", "",
              "| design | routing | EP | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|---|"]
    for r in by_dist.itertuples():
        lines.append(f"| {r.design} | {r.distribution} | {r.ep_band} | {r.points} | {r.median_ape:.1%} | "
                     f"{r.p90_ape:.1%} | {r.bias:+.1%} |")
    return lines


def _pair_lines(pairs: pd.DataFrame | None) -> list[str]:
    """The report's same-version GPU pairs (:func:`pair_ratios`)."""
    lines: list[str] = []
    if pairs is None or not len(pairs):
        return lines
    lines += ["", "## What a GPU changes when the kernels do not", "",
              "Tables of one vLLM version on two GPUs, every row they share (same shape, dtype, TP / EP, routing): "
              "median log(time on a / time on b) by tokens and EP band (`pair_ratios`), beside log of b's "
              "bandwidth over a's (the ratio a memory-bound kernel would show):", "",
              "| version | a | b | tokens | EP | rows | log time ratio | log bandwidth ratio |",
              "|---|---|---|---|---|---|---|---|"]
    for r in pairs.itertuples():
        lines.append(f"| {r.version} | {r.a} | {r.b} | {r.tokens_band} | {r.ep_band} | {r.size} | {r.median:+.2f} | "
                     f"{r.bandwidth:+.2f} |")
    return lines


def write_report(out: Path, f: pd.DataFrame, meta: dict, fr, h: pd.DataFrame, command: str, date: str,
                 pairs: pd.DataFrame | None = None) -> None:
    from simulator.inputs.loading import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    h = h.assign(ep_band=np.where(h["ep"] <= 1, "1", np.where(h["ep"] <= 16, "2-16", ">= 32")))
    keep = ["design", "fold", "transferred_from", "source", "gpu", "dtype", "distribution", "tokens", "hidden", "inter", "experts", "topk", "tp",
            "ep", "n_gpu", "time_s", "predicted_s", "error"]
    write_atomic(out / "heldout.csv", h[keep].to_csv(index=False, float_format="%.5g"))
    fitted = h[h["dtype"].isin(FIT_DTYPES) | (h["source"] == "lss")]
    write_atomic(out / "summary.csv", summarize(fitted, ("design", "fold", "source")).to_csv(index=False))
    lines = [f"# MoE layer (routed experts) fit and held-out errors by GPU ({date})", "",
             f"Command: `{command}`", "",
             "Model (docs/moe.md, `calibrate/gpu_priors/moe_fit.py`): T = t_moe + [EP > 1] t_ep + n_gpu t_expert "
             "+ N k pi H b / BW + softmax_p(n_gpu W_e / (r_m eta_moe BW) (1 + j [N >= 2]), "
             "2 N k W_e / (TP EP F r_c eta_moe_comp)), n_gpu = distinct experts hit / EP, (r_m, r_c) the kernel kind's "
             "ratios to bf16 (per GPU and table version), p and j the catalog's step shape. Fitted with "
             "`calibrate.fit.fit_cost.fit_log_times`.", "",
             "## Data", "", f"AIConfigurator vLLM `moe` tables, newest version per GPU (the catalog's fit): "
             + ", ".join(f"{g} {v}" for g, v in meta["versions"].items())
             + f"; {int(((f['source'] == 'aic') & (units_of(f) == f['gpu'].to_numpy(str))).sum())} rows used; older "
             "tables (the same-version held-out design only): "
             + (", ".join(f"{g} {', '.join(v)}" for g, v in meta.get("older", {}).items()) or "none")
             + f", {int((units_of(f) != f['gpu'].to_numpy(str)).sum())} rows; LLMServingSim expert linears: "
             f"{int((f['source'] == 'lss').sum())} rows (Mixtral-8x7B on H100, Phi-mini-MoE on RTX A6000).", "",
             "Left out: " + "; ".join(f"{k}: {v}" for k, v in meta["left_out"].items()) + ".", "",
             "## Parameters (fitted on every GPU)", "", "| parameter | value | stderr / why fixed |", "|---|---|---|"]
    for n, x in fr.values.items():
        lines.append(f"| {n} | {x:.4g} | {('±%.2g' % fr.stderr[n]) if n in fr.stderr else fr.fixed.get(n, '')} |")
    lines += _heldout_lines(h, fitted) + _pair_lines(pairs)
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    import yaml

    prov = {"date": date, "command": command, "data": {"aiconfigurator": data_commit(SHARED / "aiconfigurator-vllm-kernels"),
            "llmservingsim": data_commit(ENGINE / "llmservingsim-layer-profiles")}, "versions": meta["versions"],
            "older_versions": meta.get("older", {}), "left_out": meta["left_out"],
            "params": {n: {"value": float(f"{x:.5g}"), **({"stderr": float(f"{fr.stderr[n]:.3g}")} if n in fr.stderr
                                                          else {"fixed": fr.fixed.get(n, "")})} for n, x in fr.values.items()}}
    write_atomic(out / "params.yaml", yaml.safe_dump(prov, sort_keys=False, width=120))


def write_kernel_tables(path: Path, fr, fr_old, meta: dict, command: str, date: str) -> None:
    """``moe_kernels.yaml`` beside the priors file: per GPU its tables' kernel kinds and older tables' MoE terms
    (:func:`moe_catalog.kernel_tables`) and the kinds of a GPU without tables (:func:`moe_catalog.kind_ratios`; both read by
    ``simulator.catalog.moe_kernels``), with the command that wrote it."""
    import yaml

    from simulator.inputs.loading import write_atomic

    src = "MoE layer fit (calibrate.gpu_priors.moe_fit, docs/moe.md): AIConfigurator vLLM fused-MoE table"
    gpus = moe_catalog.kernel_tables(fr, fr_old, meta["versions"], src)
    doc = {"provenance": {"date": date, "command": command,
                          "data": {"aiconfigurator": data_commit(SHARED / "aiconfigurator-vllm-kernels")}},
           "gpus": gpus, "kinds": moe_catalog.kind_ratios(fr, src)}
    head = ("# Fused-MoE terms of older vLLM kernel tables per GPU (simulator/catalog/moe_kernels.py: a vLLM older than\n"
            "# a GPU's newest table takes the table at or below its version, else the oldest; the newest table's terms\n"
            "# are in gpu_priors.yaml). Regenerate (do not edit by hand; with gpu_priors.yaml, by the same command):\n"
            f"#   {command}\n")
    write_atomic(path, head + yaml.safe_dump(doc, sort_keys=False, width=120))


def fit_and_report(records: Path, report: Path, priors: Path | None, date: str | None, command: str) -> pd.DataFrame:
    """The fit on the AIConfigurator rows of ``records`` (+ LLMServingSim's, when the shared data has them), its held-out
    folds and ``REPORT/{report.md, heldout.csv, params.yaml}``; with ``priors``, the catalog priors file updated.
    Returns the held-out summary (:func:`summarize`)."""
    full, meta = moe_fit.load_aic(Path(records))  # read once: the fit draws its share, the GPU pairs read every row
    every, f, meta = moe_fit.load_rows(aic=moe_fit.subsample(full, meta))
    fr = moe_fit.fit(f[units_of(f) == f["gpu"].to_numpy(str)].reset_index(drop=True))  # the catalog: each GPU's newest table
    fr_old = moe_catalog.fit_older(f, fr) if priors else None  # older vLLM generations: simulator/catalog/moe_kernels.yaml
    h = pd.concat([moe_fit.heldout(f, every, design) for design in DESIGNS], ignore_index=True)
    pairs = moe_fit.pair_ratios(full[full["dtype"].isin(FIT_DTYPES)])
    write_report(Path(report), f, meta, fr, h, command, date or _dt.date.today().isoformat(), pairs)
    if priors:
        gpus = [g for g, hw in hardware_catalog().items() if hw.interconnect != "none"]
        moe_catalog.update_priors_file(Path(priors), moe_catalog.catalog_priors(fr, gpus), command)
        write_kernel_tables(Path(priors).with_name("moe_kernels.yaml"), fr, fr_old, meta, command,
                            date or _dt.date.today().isoformat())
    return summarize(h, ("design", "fold", "source"))
