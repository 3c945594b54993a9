"""Fit a :class:`~simulator.cost.cost_profile.CostProfile` to measured engine calls.

Input contract: a *call table* (``calibrate.contracts.call_table.CALL_COLUMNS``, one row per measured engine
call) and its measured set (``calibrate.fit.measured``: loaders, run keys, hold-out rules).

Model of one call (the cost model's own equations, ``simulator.cost.cost_model``; only its
parameters are fitted)::

    T_call = t_call + T_fwd(n, c) + sum_{j=0}^{k-2} T_dec(c + n + j)           (generate / score)
    T_call = t_call + T_fwd^base(n, c) + T_fwd^draft(n, c)
             + sum_iterations [sum_{i<gamma} T_dec^draft(x + i) + T_ver(gamma, x)]   (speculative generate)

n new (uncached) prompt tokens, c cached tokens, k output tokens (a score is k = 1).

Fit (:func:`fit_log_times`, the one fitter): residual r = log T_pred - log T_meas (multiplicative
noise; a 12 s base call and a 0.15 s scoring call weigh the same), ``scipy.optimize.least_squares``
with a soft-L1 loss (f_scale ``F_SCALE`` = 5 %) over the logs of the parameters, bounded, from a few
starting points (the roofline max() makes the cost non-smooth; the best optimum is kept), plus a
log-normal prior around each parameter's prior value (``PRIOR_LOG_SD``): the estimate is the posterior
mode. Standard errors: the posterior covariance s^2 (J^T J + (F_SCALE / PRIOR_LOG_SD)^2 I)^-1, J the
Jacobian of the raw residuals (central differences in log-parameter space), s = 1.4826 MAD(r); the
stderr of p is p * sqrt(cov_pp) (delta method).

Identifiability: the data pin combinations of parameters (per-token decode = weights / bandwidth +
layers x layer overhead + step overhead); the prior resolves what they leave open. A parameter with no
signal (``compute_efficiency`` in decode-only data; ``allreduce_latency_s`` at TP=1) stays exactly at
its prior (``kind: prior``); an overhead the data drive to its lower bound is zero; a parameter whose
posterior relative sd exceeds ``MAX_REL_STDERR`` is reported as *prior-dominated*.
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
from calibrate.fit.measured import MeasuredSet
from simulator.errors import InputError
from simulator.cost.setup import Setup
from simulator.provenance import Provenance

PARAM_NAMES = ("mem_efficiency", "compute_efficiency", "step_overhead_s", "layer_overhead_s",
               "call_overhead_s", "allreduce_latency_s", "seq_overhead_s")
# When several parameters hit a bound or have no signal, the first of these among them is handled first.
FIX_ORDER = ("allreduce_latency_s", "seq_overhead_s", "layer_overhead_s", "compute_efficiency", "step_overhead_s",
             "call_overhead_s", "mem_efficiency")
# Overheads whose lower bound stands for "none": one the data drive there is set to zero, not to its prior.
ZEROABLE = ("step_overhead_s", "layer_overhead_s", "call_overhead_s", "allreduce_latency_s", "seq_overhead_s")
BOUNDS = {"mem_efficiency": (1e-3, 10.0), "compute_efficiency": (1e-3, 10.0), "step_overhead_s": (1e-7, 1.0),
          "layer_overhead_s": (1e-9, 1e-2), "call_overhead_s": (1e-6, 10.0), "allreduce_latency_s": (1e-9, 1e-2),
          "seq_overhead_s": (1e-9, 0.1),
          # the step's shape (engine-level fits only): p of the soft roofline, the GEMV->GEMM jump, eta_kv
          "roofline_p": (1.0, 64.0), "multi_token_penalty": (1e-6, 1.0), "kv_mem_efficiency": (1e-3, 10.0),
          "draft_step_overhead_s": (1e-7, 1.0),
          "eager_mem_efficiency": (1e-3, 10.0)}  # a nuisance of eager layer profiles (engine_fit): not a fraction
# Carried from the prior as they are by call fits (the engine-level fit, calibrate.gpu_priors.engine_fit, sets them)
SHAPE_NAMES = ("roofline_p", "multi_token_penalty", "kv_mem_efficiency", "draft_step_overhead_s")
ZEROABLE = ZEROABLE + ("multi_token_penalty", "draft_step_overhead_s")
FIX_ORDER = FIX_ORDER + ("multi_token_penalty", "draft_step_overhead_s", "kv_mem_efficiency", "roofline_p")


def base_name(name: str) -> str:
    """A parameter's kind: ``h100-sxm.mem_efficiency`` -> ``mem_efficiency`` (grouped fits name one per group)."""
    return name.rsplit(".", 1)[-1]
F_SCALE = 0.05
# Width of the log-normal prior around each parameter's prior value (1.0: a factor e either way, in
# units of F_SCALE-scaled residuals); chosen on the CPU campaigns' held-out error (docs/results.md).
PRIOR_LOG_SD = 1.0
NO_SIGNAL = 1e-8  # mean |d log T / d log p| below which a parameter has no signal in the data
MAX_REL_STDERR = 0.5
START_SCALES = (1.0, 0.5, 1.6)  # efficiency starts: prior x scale
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


def _params(values: dict[str, float]) -> CostParams:
    return CostParams(**values)


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


def central_jacobian(fun, x: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Central differences of the raw residuals ``fun`` at ``x`` (the solver's own Jacobian is of the
    robust loss, not of the residuals the standard errors need)."""
    cols = []
    for k in range(len(x)):
        e = np.zeros_like(x)
        e[k] = h
        cols.append((fun(x + e) - fun(x - e)) / (2 * h))
    return np.stack(cols, axis=1)


def _robust_scale(r: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(r - np.median(r)))) or float(np.std(r)) or 1e-12


@dataclass
class LogFit:
    """What :func:`fit_log_times` returns: all parameter values (fitted, zeroed or prior), the fitted ones with
    their stderrs, why the others were not fitted, and the log residuals at the solution."""

    values: dict[str, float]
    stderr: dict[str, float]
    fitted: list[str]
    fixed: dict[str, str]
    correlation: dict
    log_residual: np.ndarray
    zeroed: tuple[str, ...] = ()
    prior_dominated: dict[str, float] = field(default_factory=dict)  # estimated, posterior relative sd > MAX_REL_STDERR


def _best_start(objective, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, free: list[str], prior_vals: dict,
                start: dict[str, float] | None):
    """The lowest-cost ``least_squares`` solution over the efficiency starts (prior x ``START_SCALES``), or from one
    start at ``start`` (a refit near a known solution: leave-one-run-out)."""
    from scipy.optimize import least_squares

    res = None
    for scale in (START_SCALES if start is None else (None,)):
        if scale is None:
            xs = np.log(np.maximum([start.get(n, prior_vals[n]) or prior_vals[n] for n in free], 1e-300))
        else:
            xs = x0 + np.array([np.log(scale) if base_name(n) in ("mem_efficiency", "compute_efficiency") else 0.0
                                for n in free])
        xs = np.clip(xs, lo + 1e-9, hi - 1e-9)
        cand = least_squares(objective, xs, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE, x_scale=1.0)
        if res is None or cand.cost < res.cost - 1e-12:
            res = cand
    return res


def _unfit(free: list[str], col: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           bnd: dict) -> dict[str, tuple[str, bool]]:
    """The parameters the solution at ``x`` cannot keep: name -> (why, set to zero rather than to its prior). No
    signal (Jacobian column ``col`` ~0) -> its prior; an overhead at its lower bound -> zero; any other bound -> prior."""
    bad: dict[str, tuple[str, bool]] = {}
    for k, n in enumerate(free):
        if col[k] <= NO_SIGNAL:
            bad[n] = (f"no signal in the data (Jacobian column ~0, mean |d log T / d log p| = {col[k]:.1e})", False)
        elif base_name(n) in ZEROABLE and x[k] - lo[k] < 1e-3:
            bad[n] = (f"set to zero: ran to its lower bound {bnd[base_name(n)][0]:g} (negligible beside the other terms)", True)
        elif min(x[k] - lo[k], hi[k] - x[k]) < 1e-3:
            bad[n] = (f"ran to its bound {bnd[base_name(n)]} (the data pushes it outside the physical range)", False)
    return bad


def _correlation(cov: np.ndarray, free: list[str]) -> dict[str, float]:
    """Posterior correlations of the fitted parameters, ``a~b`` -> r (none with fewer than two)."""
    if len(free) < 2:
        return {}
    d = np.sqrt(np.diag(cov))
    c = cov / np.outer(d, d)
    return {f"{free[i]}~{free[j]}": round(float(c[i, j]), 4) for i in range(len(free)) for j in range(i + 1, len(free))}


@dataclass
class _Solution:
    """One pass of the fit over the free parameters: all values, the posterior covariance and relative sds, and the
    parameters it could not keep (:func:`_unfit`)."""

    vals: dict[str, float]
    cov: np.ndarray
    rel: np.ndarray
    bad: dict[str, tuple[str, bool]]


def _solve(predict, build, y: np.ndarray, prior_vals: dict, base_vals: dict, free: list[str], bnd: dict,
           start: dict[str, float] | None) -> _Solution:
    """The posterior mode of the log parameters ``free`` (the rest at ``base_vals``), its covariance
    s^2 (J^T J + (F_SCALE / PRIOR_LOG_SD)^2 I)^-1 and what it cannot keep."""
    def resid(logx):
        v = dict(base_vals)
        v.update({n: float(np.exp(lx)) for n, lx in zip(free, logx)})
        return np.log(predict(build(v))) - y

    lo = np.log([bnd[base_name(n)][0] for n in free])
    hi = np.log([bnd[base_name(n)][1] for n in free])
    x0 = np.clip(np.log(np.maximum([prior_vals[n] for n in free], 1e-300)), lo + 1e-9, hi - 1e-9)
    prior_w = F_SCALE / PRIOR_LOG_SD

    def objective(lx):
        return np.concatenate([resid(lx), prior_w * (lx - x0)])

    res = _best_start(objective, x0, lo, hi, free, prior_vals, start)
    r = resid(res.x)
    J = central_jacobian(resid, res.x)
    sc = _robust_scale(r)
    col = np.linalg.norm(J, axis=0) / np.sqrt(len(r))
    cov = sc**2 * np.linalg.inv(J.T @ J + prior_w**2 * np.eye(len(free)))
    vals = dict(base_vals)
    vals.update({n: float(np.exp(lx)) for n, lx in zip(free, res.x)})
    return _Solution(vals, cov, np.sqrt(np.abs(np.diag(cov))), _unfit(free, col, res.x, lo, hi, bnd))


def fit_log_times(predict, y: np.ndarray, prior_vals: dict[str, float], candidates: tuple[str, ...] = PARAM_NAMES,
                  *, names: tuple[str, ...] = PARAM_NAMES, build=None, bounds: dict | None = None,
                  start: dict[str, float] | None = None) -> LogFit:
    """The one fitter of the cost model's named parameters: the posterior mode (MAP) of the log parameters
    given robust (soft-L1) log-time residuals of ``predict(CostParams) -> seconds`` against ``y`` (log
    seconds) and a log-normal prior around each parameter's prior value (``PRIOR_LOG_SD``), within
    ``BOUNDS``, from a few efficiency starts (the roofline max() is non-smooth).

    Why a prior and not "fit what is identifiable, put the rest back at its prior": the call data pin
    *combinations* (e.g. per-token decode = weights / bandwidth + layers x layer overhead + step overhead).
    Putting one member of a combination back at its prior forces a cost the data may reject, and the
    others then run to their bounds one after another (docs/cpu-campaign.md). The prior resolves the
    directions the data do not pin towards the prior and leaves the pinned combinations to the data.

    Per parameter, after the fit: no signal (Jacobian column ~0) -> its prior, exactly; an overhead
    (``ZEROABLE``) run to its lower bound -> **zero** (the data say it is negligible); any other bound ->
    its prior (the data push it outside the physical range); each of these removes the parameter and
    refits the rest. The others are estimated; those whose posterior relative sd exceeds
    ``MAX_REL_STDERR`` are *prior-dominated* (listed with their sd: the value is mostly the prior's).
    Posterior covariance: s^2 (J^T J + (F_SCALE / PRIOR_LOG_SD)^2 I)^-1, J the central-difference Jacobian
    of the raw log residuals in log-parameter space, s = 1.4826 MAD of the residuals.

    Used for engine calls (:func:`fit_cost`), engine steps (``validate.serving.fit_step_params``) and the
    engine-level GPU step model (``calibrate.gpu_priors.engine_fit``). ``names``: the parameters (default
    the cost profile's seven); a grouped fit names one per group (``GROUP.kind``: bounds, zeroing and the fix
    order go by the kind, :func:`base_name`) and passes ``build`` (values -> what ``predict`` takes;
    default a :class:`CostParams`)."""
    build = build or _params
    bnd = {**BOUNDS, **(bounds or {})}  # by kind; ``bounds`` narrows them for one fit (e.g. eta <= 1)
    order = lambda n: FIX_ORDER.index(base_name(n)) if base_name(n) in FIX_ORDER else len(FIX_ORDER)  # noqa: E731
    free = [n for n in names if n in candidates]
    fixed: dict[str, str] = {n: "not a fit candidate" for n in names if n not in candidates}
    zeroed: list[str] = []
    sol = _Solution(dict(prior_vals), np.zeros((0, 0)), np.zeros(0), {})
    for _ in range(len(names) + 1):
        base_vals = {**prior_vals, **dict.fromkeys(zeroed, 0.0)}
        if not free:
            sol = _Solution(dict(base_vals), np.zeros((0, 0)), np.zeros(0), {})
            break
        sol = _solve(predict, build, y, prior_vals, base_vals, free, bnd, start)
        if not sol.bad:
            break
        worst = min(sol.bad, key=order)  # one at a time; the least physical first
        fixed[worst], to_zero = sol.bad[worst]
        if to_zero:
            zeroed.append(worst)
        free = [n for n in free if n != worst]
    vals, rel = sol.vals, sol.rel
    stderr = {n: float(vals[n] * rel[k]) for k, n in enumerate(free)}
    weak = {n: float(rel[k]) for k, n in enumerate(free) if rel[k] > MAX_REL_STDERR}
    for n in names:
        if n not in free and n not in fixed:
            fixed[n] = "not a fit candidate"
    return LogFit(vals, stderr, free, fixed, _correlation(sol.cov, free), np.log(predict(build(vals))) - y,
                  tuple(zeroed), weak)


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
        pred = CallPredictor(mine, setup).predict(_params(f.values))
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
