"""The one fitter of the cost model's named parameters on log times (:func:`fit_log_times`).

Used for engine calls (:mod:`calibrate.fit.fit_cost`), microbenchmark records (:mod:`calibrate.fit.bench_fit`), engine
steps (``validate.serving``) and the GPU step, MoE and MLA models (``calibrate.gpu_priors``). ``predict(values) ->
seconds`` is the caller's; this module owns the estimate.

Fit: residual r = log T_pred - log T_meas (multiplicative noise; a 12 s base call and a 0.15 s scoring call weigh
the same), ``scipy.optimize.least_squares`` with a soft-L1 loss (f_scale ``F_SCALE`` = 5 %) over the logs of the
parameters, bounded (``BOUNDS``), from a few starting points (the roofline max() makes the cost non-smooth; the best
optimum is kept), plus a log-normal prior around each parameter's prior value (``PRIOR_LOG_SD``): the estimate is
the posterior mode. Standard errors: the posterior covariance s^2 (J^T J + (F_SCALE / PRIOR_LOG_SD)^2 I)^-1, J the
Jacobian of the raw residuals (central differences in log-parameter space), s = 1.4826 MAD(r); the stderr of p is
p * sqrt(cov_pp) (delta method).

Identifiability: the data pin combinations of parameters (per-token decode = weights / bandwidth + layers x layer
overhead + step overhead); the prior resolves what they leave open. A parameter with no signal
(``compute_efficiency`` in decode-only data; ``allreduce_latency_s`` at TP=1) stays exactly at its prior; an
overhead the data drive to its lower bound is zero; a parameter whose posterior relative sd exceeds
``MAX_REL_STDERR`` is reported as *prior-dominated*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.cost.cost_profile import CostParams

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

F_SCALE = 0.05  # soft-L1 scale of the log residuals
# Width of the log-normal prior around each parameter's prior value (1.0: a factor e either way, in
# units of F_SCALE-scaled residuals); chosen on the CPU campaigns' held-out error (docs/results.md).
PRIOR_LOG_SD = 1.0
NO_SIGNAL = 1e-8  # mean |d log T / d log p| below which a parameter has no signal in the data
MAX_REL_STDERR = 0.5
START_SCALES = (1.0, 0.5, 1.6)  # efficiency starts: prior x scale


def base_name(name: str) -> str:
    """A parameter's kind: ``h100-sxm.mem_efficiency`` -> ``mem_efficiency`` (grouped fits name one per group)."""
    return name.rsplit(".", 1)[-1]


def _params(values: dict[str, float]) -> CostParams:
    return CostParams(**values)


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


def _fix_rank(name: str) -> int:
    """Where ``name`` comes in ``FIX_ORDER`` (of several parameters the data cannot keep, the lowest goes first)."""
    return FIX_ORDER.index(base_name(name)) if base_name(name) in FIX_ORDER else len(FIX_ORDER)


def _unfit(free: list[str], J: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           bnd: dict) -> dict[str, tuple[str, bool]]:
    """The parameters the solution at ``x`` cannot keep: name -> (why, set to zero rather than to its prior). No
    signal (Jacobian column ~0) -> its prior; an overhead at its lower bound -> zero; any other bound -> prior. Two
    parameters the data move in the same proportion (twins: a per-sequence and a per-step cost over calls of one
    running sequence) both stay: the data pin their combination and the two priors split it (the posterior mode), not
    one held at its prior while the other takes what is left (see :func:`fit_log_times`)."""
    col = np.linalg.norm(J, axis=0) / np.sqrt(len(J))
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
    cov = sc**2 * np.linalg.inv(J.T @ J + prior_w**2 * np.eye(len(free)))
    vals = dict(base_vals)
    vals.update({n: float(np.exp(lx)) for n, lx in zip(free, res.x)})
    return _Solution(vals, cov, np.sqrt(np.abs(np.diag(cov))), _unfit(free, J, res.x, lo, hi, bnd))


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

    Used for engine calls (:func:`calibrate.fit.fit_cost.fit_cost`), engine steps
    (``validate.serving.fit_step_params``) and the engine-level GPU step model (``calibrate.gpu_priors.engine_fit``).
    ``names``: the parameters (default the cost profile's seven); a grouped fit names one per group (``GROUP.kind``:
    bounds, zeroing and the fix order go by the kind, :func:`base_name`) and passes ``build`` (values -> what
    ``predict`` takes; default a :class:`CostParams`)."""
    build = build or _params
    bnd = {**BOUNDS, **(bounds or {})}  # by kind; ``bounds`` narrows them for one fit (e.g. eta <= 1)
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
        worst = min(sol.bad, key=_fix_rank)  # one at a time; the least physical first
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
