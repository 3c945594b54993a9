"""Fit a :class:`~simulator.cost.cost_profile.CostProfile` to measured engine calls.

Input contract: a *call table* (``calibrate.contracts.call_table.CALL_COLUMNS``, one row per measured engine
call) and its measured set (``calibrate.fit.measured``: loaders, run keys, hold-out rules).

Model of one call (the cost model's own equations, ``simulator.cost.cost_model``; only its
parameters are fitted)::

    T_call = t_call + T_fwd(n, c) + sum_{j=0}^{k-2} T_dec(c + n + j)           (generate / score)
    T_call = t_call + T_fwd^base(n, c) + T_fwd^draft(n, c)
             + sum_iterations [sum_{i<gamma} T_dec^draft(x + i) + T_ver(gamma, x)]   (speculative generate)

n new (uncached) prompt tokens, c cached tokens, k output tokens (a score is k = 1).

Fit: :func:`calibrate.fit.log_time_fit.fit_log_times` (the one fitter: posterior mode of the log parameters around
their priors, robust loss on log call times; identifiability and standard errors there). :func:`build_profile`
writes the fitted :class:`CostProfile` with its goodness of fit per op (prediction intervals) and provenance.
"""

from __future__ import annotations

from simulator.paths import REPO

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import HardwareSpec, get_hardware
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams, CostProfile, Param, beyond_physical_max, implausible, prior_profile
from calibrate.contracts.call_table import check_call_table
from calibrate.fit.log_time_fit import F_SCALE, MAX_REL_STDERR, PARAM_NAMES, PRIOR_LOG_SD, SHAPE_NAMES, fit_log_times
from calibrate.fit.measured import MeasuredSet
from simulator.errors import InputError
from simulator.cost.setup import Setup
from simulator.provenance import Provenance

RESIDUAL_QUANTILES = 101  # stored per op in the profile, for prediction intervals


# ---- the predictor -------------------------------------------------------------------------------
class CallPredictor:
    """T_call of a fixed table of measured calls through the one call-time function
    (:func:`simulator.cost.call_time.call_costs`); ``predict(params)`` rebuilds the cost tables (cheap) and
    looks every call up. Measured calls carry no per-iteration acceptances: a speculative call's
    ``spec_iterations`` are spread evenly over its output."""

    def __init__(self, calls: pd.DataFrame, setup: Setup):
        from simulator.cost.call_time import BASE, GEN, SCORE, SMALL, CallArrays

        check_call_table(calls)
        self.setup = setup
        self.n_calls = len(calls)
        new = calls["new_tokens"].to_numpy(np.int64)
        cached = calls["cached_tokens"].to_numpy(np.int64)
        out = np.maximum(calls["output_tokens"].to_numpy(np.int64), 1)
        spec = (calls["op"] == "spec_generate").to_numpy()
        it = np.where(spec, calls["spec_iterations"].to_numpy(np.int64), 0)
        it_call = np.repeat(np.arange(self.n_calls), it)
        k = np.arange(it.sum()) - np.repeat(np.cumsum(it) - it, it)
        offset = np.floor(k / np.maximum(np.repeat(it, it), 1) * np.repeat(out, it)).astype(np.int64)
        gamma = np.repeat(calls["spec_gamma"].to_numpy(np.int64), it)
        self.calls = CallArrays(
            engine=np.where(calls["role"].to_numpy() == "small", SMALL, BASE),
            kind=np.where((calls["op"] == "score").to_numpy(), SCORE, GEN),
            new=new, cached=cached, out=out, ctx=np.maximum(cached + new - 1, 0), spec=spec, draft_prefill=spec,
            it_call=it_call, it_offset=offset, it_gamma=gamma)
        self.gammas = sorted({int(g) for g in np.unique(gamma)})
        self.max_context = int((cached + new + out).max(initial=1)) + 8

    def deployments(self, params: CostParams) -> dict[str, Deployment]:
        return self.setup.deployments(params)

    def components(self, params: CostParams) -> dict[str, np.ndarray]:
        """Seconds of every call by component (``simulator.cost.cost_tables.COMPONENTS``)."""
        from simulator.cost.call_time import call_costs
        from simulator.cost.cost_tables import CostTables

        d = self.deployments(params)
        tables = {g: CostTables(d["base"], d["small"], d["draft"], None, g or None, max_context=self.max_context + g)
                  for g in [0, *self.gammas]}
        return call_costs(self.calls, tables[0], tables.__getitem__)

    def predict(self, params: CostParams) -> np.ndarray:
        return sum(self.components(params).values())


# ---- the fit -------------------------------------------------------------------------------------
def _values(profile: CostProfile, hardware: HardwareSpec) -> dict[str, float]:
    """The seven fitted parameters, plus the step's shape where the profile states it (kept, never refitted here:
    a call fit on one setup does not pin the GEMM shape; the engine-level fit does)."""
    p = profile.params(hardware)
    out = {n: float(getattr(p, n)) for n in PARAM_NAMES}
    out.update({n: float(getattr(profile, n).value) for n in SHAPE_NAMES if getattr(profile, n) is not None})
    return out


@dataclass
class CostFit:
    """Result of :func:`fit_cost`: values, stderrs, which parameters were fitted, residuals."""

    values: dict[str, float]
    stderr: dict[str, float]
    fitted: list[str]
    fixed: dict[str, str]  # name -> why it stayed at its prior (or was set to zero: ``zeroed``)
    prior: dict[str, float]
    residuals: pd.DataFrame  # calls + predicted_s + log_residual
    correlation: dict = field(default_factory=dict)
    zeroed: tuple[str, ...] = ()  # overheads the data put at zero (ran to their lower bound)
    prior_dominated: dict[str, float] = field(default_factory=dict)  # fitted, but posterior relative sd > MAX_REL_STDERR


def fit_cost(calls: pd.DataFrame, setup: Setup, prior: CostProfile | None = None,
             candidates: tuple[str, ...] = PARAM_NAMES, start: dict[str, float] | None = None) -> CostFit:
    """Robust least squares of log call times over the identifiable subset of ``candidates`` (:func:`fit_log_times`)."""
    calls = calls[calls["wall_s"] > 0].reset_index(drop=True)
    if len(calls) < 3:
        raise InputError(None, "calls", f"need at least 3 measured calls with a positive time (got {len(calls)})")
    prior = prior or prior_profile(setup.hardware)
    prior_vals = _values(prior, setup.hardware)
    pred = CallPredictor(calls, setup)
    y = np.log(calls["wall_s"].to_numpy(float))
    f = fit_log_times(pred.predict, y, prior_vals, candidates, start=start)
    out = calls.copy()
    out["predicted_s"] = np.exp(f.log_residual + y)
    out["log_residual"] = f.log_residual
    return CostFit(values=f.values, stderr=f.stderr, fitted=f.fitted, fixed=f.fixed, prior=prior_vals, residuals=out,
                   correlation=f.correlation, zeroed=f.zeroed, prior_dominated=f.prior_dominated)


def loro_run_offsets(calls: pd.DataFrame, setup: Setup, prior: CostProfile | None = None,
                     candidates: tuple[str, ...] = PARAM_NAMES, start: dict[str, float] | None = None
                     ) -> dict[str, dict[str, float]]:
    """Per call kind, each fit run's log offset *out of sample*: refit without the run (same prior, one start at
    ``start``), the run's median log(measured / predicted) over its calls of that kind. The in-sample offsets of
    ``goodness_of_fit`` are shrunk towards zero (each run pulled the fit its way), so their spread understates how
    far a new run lands from the fit: the intervals' run-to-run variance is estimated from these. {} with fewer
    than 3 runs (a refit on one run says nothing about the spread between runs)."""
    calls = calls[calls["wall_s"] > 0].reset_index(drop=True)
    runs = list(dict.fromkeys(calls["run_id"].astype(str)))
    if len(runs) < 3:
        return {}
    out: dict[str, dict[str, float]] = {}
    rid = calls["run_id"].astype(str)
    for r in runs:
        rest, mine = calls[rid != r].reset_index(drop=True), calls[rid == r].reset_index(drop=True)
        if len(rest) < 3:
            continue
        f = fit_cost(rest, setup, prior, candidates, start=start)
        pred = CallPredictor(mine, setup).predict(CostParams(**f.values))
        lr = pd.Series(np.log(mine["wall_s"].to_numpy(float) / pred))
        for op, v in lr.groupby(mine["op"].to_numpy()):
            out.setdefault(str(op), {})[r] = round(float(v.median()), 5)
    return out


# ---- goodness of fit and the profile ---------------------------------------------------------------
def ape(predicted, measured) -> np.ndarray:
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return np.abs(p - m) / m


def goodness_of_fit(res: pd.DataFrame, loro: dict[str, dict[str, float]] | None = None) -> dict:
    """Per op: calls, median APE, mean APE, p90 APE, bias (median signed relative error), residual quantiles."""
    out = {}
    q = np.linspace(0, 1, RESIDUAL_QUANTILES)
    for op, d in [("all", res), *res.groupby("op", sort=True)]:
        rel = d["predicted_s"] / d["wall_s"] - 1.0
        a = np.abs(rel)
        entry = {"calls": int(len(d)), "median_ape": round(float(np.median(a)), 5), "mean_ape": round(float(a.mean()), 5),
                 "p90_ape": round(float(np.quantile(a, 0.9)), 5), "bias": round(float(np.median(rel)), 5),
                 "mean_measured_s": round(float(d["wall_s"].mean()), 5)}
        if op != "all":
            # log residual measured/predicted quantiles (prediction intervals) and per-run offsets
            # log(measured/predicted): per-run offsets (median per run) and the within-run spread around them
            lr = -d["log_residual"]
            offsets = lr.groupby(d["run_id"]).median()
            within = (lr - d["run_id"].map(offsets)).to_numpy()
            entry["log_ratio_quantiles"] = [round(float(v), 5) for v in np.quantile(lr.to_numpy(), q)]
            entry["within_run_log_ratio_quantiles"] = [round(float(v), 5) for v in np.quantile(within, q)]
            entry["run_offsets"] = {str(k): round(float(v), 5) for k, v in offsets.items()}
            if loro and str(op) in loro:  # out of sample: what the intervals' run-to-run spread is estimated from
                entry["loro_run_offsets"] = loro[str(op)]
        out[str(op)] = entry
    return out


def _profile_param(n: str, fit: CostFit, setup: Setup, prior: CostProfile, rejected: dict[str, str], src: str) -> Param:
    """Parameter ``n`` of the fitted profile: rejected (outside its physical range), calibrated, prior-dominated
    (marked a prior, with the posterior mode as its value), zeroed, or kept at its prior, each with its source."""
    if n in rejected:
        se = f" (+- {fit.stderr[n]:.3g})" if n in fit.stderr else ""
        return Param(value=float(f"{fit.values[n]:.6g}"), kind="rejected", stderr=float(f"{fit.stderr[n]:.3g}"),
                     source=f"rejected: fitted {rejected[n]}{se}, outside the physical "
                            f"range (the assumed hardware, models or token accounting do not fit these calls); "
                            f"{src}")
    if n in fit.fitted:
        weak = fit.prior_dominated.get(n)
        if weak is None:
            return Param(value=float(f"{fit.values[n]:.6g}"), kind="calibrated", source=src,
                         stderr=float(f"{fit.stderr[n]:.3g}"))
        return Param(value=float(f"{fit.values[n]:.6g}"), kind="prior", stderr=float(f"{fit.stderr[n]:.3g}"),
                     source=f"prior-dominated: posterior mode of prior {fit.prior[n]:.4g} and {src}; posterior "
                            f"relative sd {weak:.2g} > {MAX_REL_STDERR} (the data do not pin it apart from the "
                            f"other parameters)")
    if n in fit.zeroed:
        return Param(value=0.0, kind="calibrated", source=f"{src}; {fit.fixed[n]}")
    if n == "allreduce_latency_s":
        return Param(value=fit.values[n], kind="prior",
                     source=f"hardware catalog prior ({setup.hardware.name}); {fit.fixed.get(n, '')}")
    old = getattr(prior, n)
    return Param(value=old.value, kind="prior", source=f"{old.source}; kept: {fit.fixed.get(n, '')}")


def _fit_block(fit: CostFit, setup: Setup, *, inputs: list[str], runs: list[str], hardware_note: str, date: str,
               command: str, rejected: dict[str, str], loro, run_hashes) -> dict:
    """The profile's ``fit:`` block: method, inputs, what was fitted / zeroed / kept, and goodness of fit per op."""
    return {
        "method": f"scipy least_squares on log call time, loss soft_l1 (f_scale {F_SCALE}), log-parameter space; "
                  f"posterior mode with a log-normal prior (sd {PRIOR_LOG_SD} in F_SCALE units) around each prior "
                  f"value; stderr = p * sqrt(diag(s^2 (J^T J + (F_SCALE/PRIOR_LOG_SD)^2 I)^-1)), s = 1.4826 MAD of "
                  f"residuals; no signal -> prior; overheads run to their lower bound -> zero; relative stderr > "
                  f"{MAX_REL_STDERR} -> listed as prior_dominated",
        "inputs": inputs, "runs": sorted(runs), "calls": int(len(fit.residuals)), "date": date,
        **({"run_hashes": dict(sorted(run_hashes.items()))} if run_hashes else {}),  # content identity of each run
        "setup": setup.describe(), "hardware_note": hardware_note, "command": command,
        "fitted": fit.fitted, "zeroed": list(fit.zeroed),
        "prior_dominated": {k: round(v, 3) for k, v in fit.prior_dominated.items()},
        "kept_at_prior": {k: v for k, v in fit.fixed.items() if k not in fit.zeroed}, "prior_values": fit.prior,
        "physically_plausible": not rejected,
        "rejected": rejected,
        "correlation": fit.correlation,
        "per_op": goodness_of_fit(fit.residuals, loro),
    }


def build_profile(fit: CostFit, setup: Setup, *, name: str, engine: str, inputs: list[str], runs: list[str],
                  hardware_note: str, date: str | None = None, command: str = "",
                  loro: dict[str, dict[str, float]] | None = None, run_hashes: dict[str, str] | None = None
                  ) -> CostProfile:
    """The fitted :class:`CostProfile`: calibrated Params carry their stderr and source; the rest stay priors."""
    date = date or _dt.date.today().isoformat()
    src = f"calibrated on {len(fit.residuals)} calls of runs {', '.join(runs)} ({'; '.join(inputs)})"
    prior = prior_profile(setup.hardware, engine)
    rejected = beyond_physical_max({n: fit.values[n] for n in fit.fitted}, setup.hardware)
    fit_block = _fit_block(fit, setup, inputs=inputs, runs=runs, hardware_note=hardware_note, date=date,
                           command=command, rejected=rejected, loro=loro, run_hashes=run_hashes)
    return CostProfile(
        name=name, hardware=setup.hardware.name, engine=engine,
        provenance=Provenance(kind="fitted", source=src, method="calibrate.fit.fit_cost (see fit.method)", date=date,
                              hardware=f"{setup.hardware.display} x{setup.tp} (TP={setup.tp}); {hardware_note}",
                              engine=engine, models=[m.name for m in setup.models.values()]),
        **{n: _profile_param(n, fit, setup, prior, rejected, src) for n in PARAM_NAMES},
        **{n: getattr(prior, n) for n in SHAPE_NAMES},  # the step's shape: the hardware's prior, as it is
        fit=fit_block,
    )


def fit_measured(ms: MeasuredSet, setup: Setup, *, engine: str, hardware_note: str, command: str,
                 name: str | None = None, alternatives: list[str] = (), date: str | None = None) -> CostProfile:
    """Fit on every call of ``ms``; the profile names its runs. ``alternatives``: other catalog
    hardware the same calls are fitted on, for the record (efficiency > 1 = impossible)."""
    fit = fit_cost(ms.calls, setup, prior_profile(setup.hardware, engine))  # the named version's host terms
    runs = ms.run_keys
    prof = build_profile(fit, setup, name=name or f"{setup.hardware.name}-{engine}-fitted", engine=engine,
                         inputs=[_rel(i) for i in ms.inputs], runs=runs, hardware_note=hardware_note, date=date,
                         command=command, loro=loro_run_offsets(ms.calls, setup, start=fit.values),
                         run_hashes=run_hashes_of(ms))
    alts = {}
    for hw in alternatives:
        alt = Setup(get_hardware(hw, None, "--alternative-hardware"), setup.tp, setup.models)
        f = fit_cost(ms.calls, alt, prior_profile(alt.hardware, engine))
        alts[hw] = {"values": {k: float(f"{v:.4g}") for k, v in f.values.items()}, "fitted": f.fitted,
                    "physically_plausible": not beyond_physical_max(f.values, alt.hardware),
                    "median_ape": round(float(np.median(ape(f.residuals["predicted_s"], f.residuals["wall_s"]))), 5)}
    if alts:
        prof = prof.model_copy(update={"fit": {**prof.fit, "hardware_alternatives": alts}})
    return prof


def run_hashes_of(ms: MeasuredSet) -> dict[str, str]:
    """{run key: content hash} of the measured set's runs (``calibrate.fit.measured.run_content_hash``)."""
    if "run_hash" not in ms.requests.columns:
        return {}
    d = ms.requests.drop_duplicates("run_key")
    return {str(k): str(h) for k, h in zip(d["run_key"], d["run_hash"]) if isinstance(h, str)}


def _rel(p: str) -> str:
    repo = REPO
    try:
        return Path(os.path.relpath(Path(p).resolve(), repo)).as_posix()
    except ValueError:
        return str(p)
