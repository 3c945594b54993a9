"""Held-out validation of the cost model fitted to microbenchmark run directories (``specsim fit bench``).

The records and the fit are :mod:`calibrate.fit.bench_fit`'s (loading, the per-op adapter, the fit around the
hardware's prior). Here: held-out folds (each architecture left out in turn, and hold-out rules on the records'
shapes, :func:`make_folds`); each fold refits on its training records only and predicts the rest; the same points are
also scored with the transferred prior (the catalog with ``simulator/catalog/gpu_priors.yaml``) and the
datasheet-era prior (``HardwareSpec.datasheet_era()``). :func:`run_fit_bench` is the whole job; the report is
:mod:`validate.bench_report`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.fit.bench_fit import MIN_FIT_RECORDS, BenchPredictor, BenchSet, fit_profile, fit_records, load_bench
from calibrate.fit.fit_cost import ape
from simulator.cost.cost_profile import CostParams, CostProfile, prior_profile
from simulator.errors import InputError

DEFAULT_RULE = "context>2048,gamma>2"  # fit on contexts <= 2048 and gamma in {1, 2}; predict the rest
RULE_FIELDS = {"context": "cached_tokens", "cached_tokens": "cached_tokens", "new_tokens": "new_tokens",
               "batch": "batch", "gamma": "gamma", "op": "op"}
PREDICTORS = ("fitted", "transferred_prior", "datasheet_prior")


# ---- held-out folds ------------------------------------------------------------------------------------
_COND = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<|=)\s*([A-Za-z0-9_.\-]+)\s*$")


def rule_mask(rule: str, records: pd.DataFrame) -> np.ndarray:
    """Records a hold-out rule holds out: ``FIELD OP VALUE`` conditions joined by commas (any one holds a record
    out), e.g. ``context>2048,gamma>2``; fields: context (= cached_tokens), new_tokens, batch, gamma, op."""
    out = np.zeros(len(records), bool)
    for cond in rule.split(","):
        m = _COND.match(cond)
        if not m or m.group(1) not in RULE_FIELDS or (m.group(1) == "op") != (m.group(2) == "="):
            raise InputError(None, "--holdout-rule", f"expected conditions like {DEFAULT_RULE} or op=verify (fields "
                                                     f"{', '.join(RULE_FIELDS)}; >, >=, <, <=, =), got {cond.strip()!r}")
        col, op, v = records[RULE_FIELDS[m.group(1)]], m.group(2), m.group(3)
        if m.group(1) != "op":
            try:
                v = float(v)
            except ValueError:
                raise InputError(None, "--holdout-rule", f"{cond.strip()!r}: expected a number after {op}") from None
        out |= {">": col > v, ">=": col >= v, "<": col < v, "<=": col <= v, "=": col == v}[op].to_numpy()
    return out


@dataclass
class Fold:
    name: str
    held_out: np.ndarray  # bool per record


def make_folds(bs: BenchSet, holdout_archs: list[str] | None, rules: list[str] | None) -> tuple[list[Fold], list[str]]:
    """Leave-architecture-out folds (default: each architecture in turn, when there are two or more) and hold-out
    rule folds (default: ``DEFAULT_RULE``). Explicit folds that hold out nothing or leave nothing to fit are input
    errors; a default fold that cannot apply is skipped with a note."""
    folds, notes, recs = [], [], bs.records
    for a in holdout_archs or []:
        if a not in bs.archs:
            raise InputError(None, "--holdout-arch", f"{a!r} is not among the inputs' architectures ({', '.join(bs.archs)})")
    archs = holdout_archs if holdout_archs else (bs.archs if len(bs.archs) > 1 else [])
    if not holdout_archs and len(bs.archs) < 2:
        notes.append("leave-architecture-out skipped: the inputs hold one architecture")
    for a in archs:
        folds.append(Fold(f"leave out {a}", (recs["arch"] == a).to_numpy()))
    for rule in rules or [DEFAULT_RULE]:
        folds.append(Fold(f"hold out {rule}", rule_mask(rule, recs)))
    kept = []
    for f in folds:
        n_out, n_fit = int(f.held_out.sum()), int((~f.held_out).sum())
        why = ("holds out no record" if n_out == 0 else
               f"nothing left to fit ({n_fit} records, need >= {MIN_FIT_RECORDS})" if n_fit < MIN_FIT_RECORDS else None)
        by_arch = f.name.startswith("leave out")
        if why and (holdout_archs if by_arch else rules):
            raise InputError(None, "--holdout-arch" if by_arch else "--holdout-rule", f"{f.name}: {why}")
        if why:
            notes.append(f"default fold '{f.name}' skipped: {why}")
        else:
            kept.append(f)
    return kept, notes


def evaluate_folds(bs: BenchSet, folds: list[Fold]) -> tuple[pd.DataFrame, list[dict]]:
    """Every held-out point of every fold: measured, fitted (on that fold's training records only), transferred
    prior and datasheet-era prior; and each fold's fitted values."""
    hw, hw0 = bs.hardware, bs.hardware.datasheet_era()
    points, fits = [], []
    for f in folds:
        train, test = bs.records[~f.held_out], bs.records[f.held_out].reset_index(drop=True)
        lf = fit_records(bs, train)
        pred = {"fitted": BenchPredictor(test, bs.models, hw).predict(CostParams(**lf.values)),
                "transferred_prior": BenchPredictor(test, bs.models, hw).predict(prior_profile(hw).params(hw)),
                "datasheet_prior": BenchPredictor(test, bs.models, hw0).predict(prior_profile(hw0).params(hw0))}
        d = test.drop(columns=["model_key", "engine"]).rename(columns={"wall_s": "measured_s"})
        d.insert(0, "fold", f.name)
        d.insert(3, "layers", test["model_key"].map(lambda k: bs.models[k][0].layers))
        for p, v in pred.items():
            d[f"{p}_s"] = v
            d[f"{p}_err"] = v / d["measured_s"] - 1.0
        points.append(d)
        fits.append({"fold": f.name, "fit_records": int(len(train)), "held_out_records": int(len(test)),
                     "values": {k: float(f"{v:.6g}") for k, v in lf.values.items()}, "fitted": lf.fitted,
                     "zeroed": list(lf.zeroed), "prior_dominated": sorted(lf.prior_dominated)})
    return pd.concat(points, ignore_index=True), fits


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per fold and op (and ``all``): held-out points, then median APE, p90 APE and bias (median signed relative
    error) of each predictor."""
    rows = []
    for fold, d in points.groupby("fold", sort=False):
        for op, e in [*d.groupby("op", sort=True), ("all", d)]:
            row = {"fold": fold, "op": op, "n": len(e)}
            for p in PREDICTORS:
                a = ape(e[f"{p}_s"], e["measured_s"])
                row |= {f"{p}_median_ape": float(np.median(a)), f"{p}_p90_ape": float(np.quantile(a, 0.9)),
                        f"{p}_bias": float(np.median(e[f"{p}_err"]))}
            rows.append(row)
    return pd.DataFrame(rows)


# ---- the whole job ------------------------------------------------------------------------------------------
@dataclass
class BenchFitResult:
    profile: CostProfile
    bench: BenchSet
    points: pd.DataFrame
    errors: pd.DataFrame
    fold_fits: list[dict]
    notes: list[str]


def run_fit_bench(paths, *, holdout_archs=None, rules=None, hardware=None, command="", name=None,
                  date=None) -> BenchFitResult:
    """Load, fit the profile on every record, and validate on held-out folds; writes nothing (the caller does)."""
    bs = load_bench(paths, hardware)
    folds, notes = make_folds(bs, holdout_archs, rules)
    profile = fit_profile(bs, command=command, name=name, date=date)
    points, fits = evaluate_folds(bs, folds) if folds else (pd.DataFrame(), [])
    errors = error_table(points) if folds else pd.DataFrame()
    if folds:
        summary = {f"{r.fold} / {r.op}": {p: round(float(getattr(r, f"{p}_median_ape")), 4) for p in PREDICTORS}
                   for r in errors[errors["op"] == "all"].itertuples()}
        profile = profile.model_copy(update={"fit": {**profile.fit, "held_out_median_ape": summary}})
    return BenchFitResult(profile, bs, points, errors, fits, notes)
