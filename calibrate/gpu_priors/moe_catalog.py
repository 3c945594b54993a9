"""The MoE layer fit's catalog output (``specsim fit moe --priors``): each GPU's MoE priors for
``simulator/catalog/gpu_priors.yaml``, and ``simulator/catalog/moe_kernels.yaml``'s older kernel tables and kernel
kinds per table (:mod:`calibrate.gpu_priors.moe_fit` fits them; ``simulator.catalog.moe_kernels`` reads them)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibrate.gpu_priors.engine_fit import SAME_CHIP
from calibrate.gpu_priors.moe_fit import (FIT_GPUS, KINDS, fit, fitted_kind_ratios, fused, fused_units,
                                          kind_ratio_names, transfer_ratio, transfer_value, units_of)


def catalog_priors(fr, gpus: list[str]) -> dict[str, dict]:
    """The MoE parameters for every catalog GPU: fitted where its fused-kernel (AIConfigurator) rows are, else a
    same-chip GPU's, else the median of the fitted GPUs (each with its kind and source). LLMServingSim's eager
    one-expert linears (RTX A6000) time dense GEMMs, not the fused kernel: they are scored, not written."""
    from calibrate.gpu_priors.engine_report import prior_entry

    v, se = fr.values, fr.stderr
    src = "MoE layer fit (calibrate.gpu_priors.moe_fit, docs/moe.md): AIConfigurator vLLM fused-MoE tables"
    out = {}
    for g in gpus:
        p = {}
        for k in KINDS:
            chip = SAME_CHIP.get(g)
            if fused(fr, g, k):
                p[k] = prior_entry(v[f"{g}.{k}"], "calibrated", src, se.get(f"{g}.{k}"))
            elif chip and fused(fr, chip, k):
                p[k] = prior_entry(v[f"{chip}.{k}"], "transferred", f"same chip as {chip}: {src}", se.get(f"{chip}.{k}"))
            elif (x := transfer_value(fr, k, FIT_GPUS)) is not None:
                fitted = [u for u in FIT_GPUS if fused(fr, u, k)]
                p[k] = prior_entry(x, "transferred", f"median of the fitted GPUs ({', '.join(fitted)}): {src}")
        out[g] = p
    return out


def fit_older(f: pd.DataFrame, fr):
    """Each GPU's older tables (units ``GPU@version``, each with its own kernel kinds' ratios), fitted with the
    routing skews frozen at the catalog fit ``fr``'s (a table's routing labels mean the same skew in every version);
    None without older tables."""
    older = f[(units_of(f) != f["gpu"].to_numpy(str)) & (f["source"] == "aic").to_numpy()].reset_index(drop=True)
    if older.empty:
        return None
    return fit(older, frozen={n: v for n, v in fr.values.items() if n.endswith(".routing_skew")})


def unit_kinds(fr, unit: str, src: str) -> dict:
    """``{kind: {ratio: entry}}``: the kernel kinds' ratios ``fr`` fitted for ``unit`` (a ratio held at its bound is
    left out: the kind keeps bf16's efficiency there)."""
    from calibrate.gpu_priors.engine_report import prior_entry

    out: dict = {}
    for kr in kind_ratio_names(fr, unit):
        kind, ratio = kr.rsplit(".", 1)
        out.setdefault(kind, {})[ratio] = prior_entry(fr.values[f"{unit}|{kr}"], "calibrated", src,
                                                      fr.stderr.get(f"{unit}|{kr}"))
    return out


def kind_ratios(fr, src: str) -> dict:
    """``moe_kernels.yaml``'s ``kinds``, for a GPU without tables: each kernel kind's ratio, the median over the
    fitted GPUs' newest tables (:func:`transfer_ratio`)."""
    from calibrate.gpu_priors.engine_report import prior_entry

    out: dict = {}
    for kr in fitted_kind_ratios(fr):
        units = [u for u in FIT_GPUS if f"{u}|{kr}" in fr.fitted]
        kind, ratio = kr.rsplit(".", 1)
        out.setdefault(kind, {})[ratio] = prior_entry(transfer_ratio(fr, kr, FIT_GPUS), "transferred",
                                                      f"{src}s: median of {', '.join(units)}")
    return out


def kernel_tables(fr, fr_old, newest: dict[str, str], src: str) -> dict:
    """``simulator/catalog/moe_kernels.yaml``'s ``gpus``: per GPU with a fused-kernel table, the newest table's
    version and kernel kinds' ratios (``fr``), and each older table's fitted terms (:func:`fused`; a term held at its
    bound is left out: the newest one stands) and kinds (``fr_old``, None: no older tables)."""
    from calibrate.gpu_priors.engine_report import prior_entry

    out: dict = {g: {"newest": newest[g], "kinds": unit_kinds(fr, g, f"{src} ({g} vLLM {newest[g]})"), "older": []}
                 for g in fused_units(fr, sorted(newest))}
    olds = sorted({n.split("|", 1)[0].rsplit(".", 1)[0] for n in fr_old.values if "@" in n}) if fr_old else []
    for unit in fused_units(fr_old, olds) if fr_old else []:
        gpu, version = unit.split("@", 1)
        label = f"{src} ({gpu} vLLM {version})"
        terms = {k: prior_entry(fr_old.values[f"{unit}.{k}"], "calibrated", label, fr_old.stderr.get(f"{unit}.{k}"))
                 for k in KINDS if fused(fr_old, unit, k)}
        out[gpu]["older"].append({"version": version, "terms": terms, "kinds": unit_kinds(fr_old, unit, label)})
    return out  # every GPU with a table of its own: a kind none of its tables times runs at bf16's efficiencies


def update_priors_file(path: Path, priors: dict[str, dict], command: str) -> None:
    """Merge the MoE parameters into the catalog's priors file (the other parameters stay); the header names the
    command."""
    from calibrate.gpu_priors.engine_report import merge_priors_file

    merge_priors_file(path, priors, command, evidence="moe_layer_fit",
                      says="# Then the MoE layer fit adds the moe_* terms (do not edit by hand; last: it reads the terms above):",
                      marks=("moe_fit", "fit-moe", "fit moe", "MoE layer"))
