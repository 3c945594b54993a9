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


def _step_times(params, setup, agg) -> np.ndarray:
    """Each step's pass time on its own engine's deployment (base or small model)."""
    from simulator.serving.pass_cost import PassCost

    deps = setup.deployments(params)
    out = np.empty(len(agg["N"]))
    for role in np.unique(agg["engine"]):
        m = agg["engine"] == role
        out[m] = PassCost(deps[role]).times(agg["N"][m], agg["KV"][m], agg["A"][m], agg["L"][m])
    return out


def fit_step_params(steps: pd.DataFrame, params, setup) -> tuple[object, dict]:
    """Re-fit ``FIT_PARAMS`` on measured engine-step times with the cost model's one fitter
    (``calibrate.fit.fit_cost.fit_log_times``: soft-L1 on log time, bounds, identifiability; a parameter the
    steps cannot pin stays at the profile's value, with the reason).

    Returns (new CostParams, fit facts: values, relative stderrs, kept-at-prior reasons, residual figures)."""
    from calibrate.fit.fit_cost import PARAM_NAMES, fit_log_times

    agg = step_aggregates(steps)
    y = np.log(agg["t"])
    start = {n: float(getattr(params, n)) for n in PARAM_NAMES}
    start["seq_overhead_s"] = start["seq_overhead_s"] or SEQ_OVERHEAD_START
    f = fit_log_times(lambda p: _step_times(p, setup, agg), y, start, FIT_PARAMS)
    new = replace(params, **{k: float(f.values[k]) for k in FIT_PARAMS})
    facts = {"steps": len(y), "values": {k: float(f"{f.values[k]:.4g}") for k in FIT_PARAMS},
             "rel_stderr": {k: float(f"{f.stderr[k] / f.values[k]:.3g}") if k in f.stderr else float("inf") for k in FIT_PARAMS},
             "kept_at_prior": {k: f.fixed[k] for k in FIT_PARAMS if k in f.fixed and k not in f.zeroed},
             "zeroed": {k: f.fixed[k] for k in f.zeroed},
             "prior_dominated": {k: round(v, 3) for k, v in f.prior_dominated.items()},
             "median_abs_log_residual": float(np.median(np.abs(f.log_residual)))}
    return new, facts

