"""Trace replay: each measured request's own calls (token counts, contexts) through the cost model.

Tests the cost model alone: the workload (how many steps, how long, which were accepted) is
taken from the measurement, only the times are predicted. A request's prediction is the sum of
its calls' predictions; the measured value is the sum of the same calls' times
(``measured_s``) and, for the end-to-end figure, the recorded request time
(``measured_e2e_s``, which also holds what the model does not know about).

Prediction interval (level ``LEVEL``): the fit's residuals, resampled. For call i of kind o,
T_i = T̂_i · exp(u_{r,o} + ε_i) with u_{r,o} a run-level offset drawn from the fit runs'
per-run median log ratios for kind o, and ε_i drawn from the within-run residual quantiles of
kind o (inverse-CDF sampling); the request total's central ``LEVEL`` interval over ``n_boot``
draws. Run-level offsets matter: iid call errors average out over a few hundred calls and
would give far too narrow intervals if the runs differ systematically.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fit_cost import CallPredictor, MeasuredSet, Setup
from simulator.cost_model import CostProfile
from simulator.errors import InputError

LEVEL = 0.90


def setup_from_profile(profile: CostProfile, fallback: Setup | None = None) -> Setup:
    """The (hardware, TP, models) the profile was fitted for, as recorded in ``fit.setup``."""
    s = (profile.fit or {}).get("setup")
    if s is None:
        if fallback is None:
            raise InputError(None, "--profile", "profile has no fit.setup (not produced by calibrate fit); "
                                                "give --hardware/--tp/--base-model/--small-model")
        return fallback
    return Setup.from_names(s["hardware"], int(s["tp"]), s["base_model"], s["small_model"], s.get("draft_model"))


def _sampler(profile: CostProfile, op: str):
    per = (profile.fit or {}).get("per_op", {}).get(op)
    if not per or "within_run_log_ratio_quantiles" not in per:
        return None
    q = np.asarray(per["within_run_log_ratio_quantiles"], dtype=float)
    offsets = np.asarray(list(per.get("run_offsets", {}).values()) or [0.0], dtype=float)
    grid = np.linspace(0.0, 1.0, len(q))
    return lambda rng, size: np.interp(rng.random(size), grid, q), offsets


def replay_calls(ms: MeasuredSet, profile: CostProfile, setup: Setup) -> pd.DataFrame:
    """Calls of ``ms`` with ``predicted_s``."""
    calls = ms.calls[ms.calls["wall_s"] > 0].reset_index(drop=True)
    out = calls.copy()
    out["predicted_s"] = CallPredictor(calls, setup).predict(profile.params(setup.hardware))
    return out


def replay(ms: MeasuredSet, profile: CostProfile, setup: Setup, n_boot: int = 1000, seed: int = 0,
           level: float = LEVEL) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-request predictions with intervals, per-call predictions)."""
    calls = replay_calls(ms, profile, setup)
    rng = np.random.default_rng(seed)
    req = ms.requests.copy()
    pred = calls.groupby("request_id")["predicted_s"].sum()
    req["predicted_s"] = req["request_id"].map(pred).fillna(0.0).to_numpy()
    # the measured calls the model knows about, minus those it dropped (time 0)
    lo, hi = np.full(len(req), np.nan), np.full(len(req), np.nan)
    samplers = {op: _sampler(profile, op) for op in calls["op"].unique()}
    if all(s is not None for s in samplers.values()):
        idx = {r: i for i, r in enumerate(req["request_id"])}
        totals = np.zeros((len(req), n_boot))
        for op, d in calls.groupby("op"):
            draw, offsets = samplers[op]
            rows = d["request_id"].map(idx).to_numpy()
            p = d["predicted_s"].to_numpy()
            # one run offset per request and draw, then iid within-run draws per call
            off = rng.choice(offsets, size=(len(req), n_boot))
            for start in range(0, len(d), 256):  # bounded memory
                sl = slice(start, start + 256)
                eps = draw(rng, (len(p[sl]), n_boot))
                contrib = p[sl, None] * np.exp(off[rows[sl]] + eps)
                np.add.at(totals, rows[sl], contrib)
        a = (1.0 - level) / 2.0
        lo, hi = np.quantile(totals, a, axis=1), np.quantile(totals, 1.0 - a, axis=1)
    req["pi_low_s"], req["pi_high_s"] = lo, hi
    req["pi_level"] = level
    return req, calls
