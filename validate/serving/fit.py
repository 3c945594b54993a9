"""The step fit: per-step batch aggregates and the re-fit of the step-time parameters on measured engine
steps (fit levels only; the runs of those levels are in-sample)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd


FIT_PARAMS = ("mem_efficiency", "compute_efficiency", "step_overhead_s", "seq_overhead_s")
SEQ_OVERHEAD_START = 1e-3  # start for a profile fitted before seq_overhead_s existed (value 0)


def step_aggregates(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per step: N = sum n, KV = sum (c+n), A = sum n (c+(n+1)/2), L = requests (one logit row each)."""
    n = [np.asarray(x, float) for x in steps.new_tokens]
    c = [np.asarray(x, float) for x in steps.context_tokens]
    eng = steps["engine"].to_numpy() if "engine" in steps else np.full(len(steps), "base")
    return {"N": np.array([a.sum() for a in n]), "KV": np.array([(a + b).sum() for a, b in zip(n, c)]),
            "A": np.array([(a * (b + (a + 1.0) / 2.0)).sum() for a, b in zip(n, c)]),
            "L": steps.running.to_numpy(float), "t": steps.duration_s.to_numpy(float), "engine": eng}


def step_times(params, setup, agg) -> np.ndarray:
    """Each step's pass time on its own engine's deployment (base or small model)."""
    from simulator.engines.serving.pass_cost import PassCost

    deps = setup.deployments(params)
    out = np.empty(len(agg["N"]))
    for role in np.unique(agg["engine"]):
        m = agg["engine"] == role
        out[m] = PassCost(deps[role]).times(agg["N"][m], agg["KV"][m], agg["A"][m], agg["L"][m])
    return out


def one_shape(agg: dict) -> bool:
    """The steps all have one shape in what sets the batch scaling -- the same tokens and sequences per step -- e.g. a
    one-user run's decode steps, whatever their context (prompts and outputs of varied lengths). They then pin how fast
    this machine runs the profile's engine, not how the step time grows with the batch: re-fitting single terms would
    put the whole difference into one (the memory term, constant in the batch) and flatten the batch scaling the profile
    was fitted for (docs/serve-bench.md: a one-user ladder with the terms re-fitted)."""
    return np.unique(agg["N"]).size == 1 and np.unique(agg["L"]).size == 1


def fit_candidates(agg: dict) -> tuple[str, ...]:
    """The step-time parameters these steps can tell apart: with one running sequence count in every step (a one-user
    run) the per-sequence cost is the per-step cost's exact twin (their sum is all the steps pin), so it stays at the
    profile's value, which carries the profile's batch scaling to larger batches."""
    if np.unique(agg["L"]).size == 1:
        return tuple(k for k in FIT_PARAMS if k != "seq_overhead_s")
    return FIT_PARAMS


ONE_COUNT = ("one running sequence count in every step: the per-step cost's twin (their sum is all the steps pin); "
             "the profile's value carries its batch scaling")


def fit_speed_factor(steps: pd.DataFrame, params, setup) -> tuple[object, dict]:
    """One-shape steps (:func:`one_shape`): the machine's speed factor s = median(measured / predicted step time),
    applied to every term (``CostParams.slowed``), so the profile's batch scaling carries over to larger batches."""
    agg = step_aggregates(steps)
    r = np.log(agg["t"]) - np.log(step_times(params, setup, agg))
    s = float(np.exp(np.median(r)))
    se = 1.2533 * float(np.std(r, ddof=1)) / np.sqrt(len(r)) if len(r) > 1 else float("inf")  # of the median, in log
    new = params.slowed(s)
    return new, {"steps": len(r), "values": {"speed_factor": float(f"{s:.4g}")}, "rel_stderr": {"speed_factor": float(f"{se:.3g}")},
                 "kept_at_prior": {}, "zeroed": {}, "prior_dominated": {},
                 "notes": {"speed_factor": f"every term of the profile x s (one step shape: {int(agg['N'][0])} token(s), "
                                           f"{int(agg['L'][0])} sequence(s); relative stderr {se:.3g})"},
                 "median_abs_log_residual": float(np.median(np.abs(r - np.log(s))))}


def fit_step_params(steps: pd.DataFrame, params, setup) -> tuple[object, dict]:
    """Re-fit ``FIT_PARAMS`` on measured engine-step times with the cost model's one fitter
    (``calibrate.fit.fit_cost.fit_log_times``: soft-L1 on log time, bounds, identifiability; a parameter the
    steps cannot pin stays at the profile's value, with the reason: the per-sequence cost over steps of one running
    sequence count, :func:`fit_candidates`). Steps of one shape pin a speed factor only (:func:`fit_speed_factor`).

    Returns (new CostParams, fit facts: values, relative stderrs, kept-at-prior reasons, residual figures)."""
    from calibrate.fit.log_time_fit import PARAM_NAMES, fit_log_times

    agg = step_aggregates(steps)
    if one_shape(agg):
        return fit_speed_factor(steps, params, setup)
    y = np.log(agg["t"])
    start = {n: float(getattr(params, n)) for n in PARAM_NAMES}
    free = fit_candidates(agg)
    start["seq_overhead_s"] = start["seq_overhead_s"] or SEQ_OVERHEAD_START
    f = fit_log_times(lambda p: step_times(p, setup, agg), y, start, free)
    f.fixed.update({k: ONE_COUNT for k in FIT_PARAMS if k not in free})
    kept = {k for k in f.fixed if k not in f.zeroed}  # at the profile's own value (a zero prior: its start above)
    new = replace(params, **{k: float(getattr(params, k) if k in kept else f.values[k]) for k in FIT_PARAMS})
    facts = {"steps": len(y), "values": {k: float(f"{getattr(new, k):.4g}") for k in FIT_PARAMS},
             "rel_stderr": {k: float(f"{f.stderr[k] / f.values[k]:.3g}") if k in f.stderr else float("inf") for k in FIT_PARAMS},
             "kept_at_prior": {k: f.fixed[k] for k in FIT_PARAMS if k in f.fixed and k not in f.zeroed},
             "zeroed": {k: f.fixed[k] for k in f.zeroed},
             "prior_dominated": {k: round(v, 3) for k, v in f.prior_dominated.items()},
             "median_abs_log_residual": float(np.median(np.abs(f.log_residual)))}
    return new, facts

