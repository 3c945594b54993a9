"""Trace replay: each measured request's own calls (token counts, contexts) through the cost model.

Tests the cost model alone: the workload (how many steps, how long, which were accepted) is
taken from the measurement, only the times are predicted. A request's prediction is the sum of
its calls' predictions; the measured value is the sum of the same calls' times
(``measured_s``) and, for the end-to-end figure, the recorded request time
(``measured_e2e_s``, which also holds what the model does not know about).

Prediction interval (level ``LEVEL``) for a request of a *new* run. Call i of kind o takes

    T_i = T̂_i · exp(u_o + ε_i)

u_o: the run's log offset for kind o (how much slower/faster than the fitted model the whole run
is), ε_i: the call's within-run residual. The fit stores, per kind, the fit runs' offsets
o_1..o_n (per-run median of log measured/predicted) and the quantiles of the within-run
residuals (``fit.per_op`` of the profile).

- u_o is drawn from the *predictive* distribution of a new run's offset, not from the n observed
  ones (which, with 4-8 fit runs, rarely include a run as slow as the next one):

      u_o ~ m + s·sqrt(1 + 1/n)·t_{n-1},   m = mean(o_1..o_n),  s = sd(o_1..o_n) (ddof 1)

  (the normal model's predictive for a new draw with unknown mean and variance). When a kind has
  fewer than 3 fit runs (t with 1 dof has no mean; with 0 there is no spread at all) its scale is
  borrowed from the other kinds, pooled: s_p² = Σ_o (n_o-1) s_o² / Σ_o (n_o-1) with
  Σ_o (n_o-1) dof, location its own mean (0 without any offset); when that pool has fewer than 2
  dof either, the observed offsets are resampled (too narrow, and the report's notes say so).
- Kinds are drawn independently (a run slow in one kind need not be slow in another: on the
  SpecReason traces runs 6-7 are +28-51 % on base calls and -2..-12 % on the others).
- ε_i: iid draws from the within-run residual quantiles of kind o (inverse-CDF sampling).

One u_o per request and draw, so call-level noise averages out over a request's calls while the
run offset does not. With a ``validate.batch.BatchSpread`` (``--batch-spread``) u_o also holds a new
batch's log factor relative to the fit batch (between-batch term; the old interval when its spread is
0). The request total's central ``LEVEL`` interval over ``n_boot`` draws.
Requests with a call kind the profile holds no residuals for get no interval (noted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from calibrate.fit.fit_cost import CallPredictor
from simulator.cost.setup import Setup
from calibrate.fit.measured import MeasuredSet
from simulator.cost.cost_profile import CostProfile
from simulator.errors import InputError

LEVEL = 0.90
COVERAGE_LEVELS = (0.50, 0.80, 0.90, 0.95)  # every report shows the coverage of these central intervals too


def level_columns(level: float, prefix: str = "") -> tuple[str, str]:
    """Columns of the central ``level`` interval besides the main one: ``pi50_low_s``, ``pi50_high_s``
    (``prefix`` ``e2e_``: of the end-to-end prediction, ``pi50_e2e_low_s``)."""
    k = f"{100 * level:g}".replace(".", "_")
    return f"pi{k}_{prefix}low_s", f"pi{k}_{prefix}high_s"
MIN_RUNS_T = 3   # fewer fit runs than this for a kind: its scale is pooled over kinds
MIN_POOLED_DOF = 2


def setup_from_profile(profile: CostProfile) -> Setup:
    """The (hardware, TP, models) the profile was fitted for, as recorded in ``fit.setup``."""
    s = (profile.fit or {}).get("setup")
    if s is None:
        raise InputError(None, "--profile", "profile has no fit.setup (not produced by calibrate fit); "
                                            "give --hardware/--tp/--base-model/--small-model")
    return _runs_setup(dict(s), {})[0]


def setup_for_runs(profile: CostProfile, hint: dict) -> tuple[Setup, list[str]]:
    """What the measured runs are replayed on: the profile's hardware and TP (its parameters belong to them) and
    the models the runs themselves name (``MeasuredSet.hint``), else the profile's. A profile fitted on one model
    pair (or on microbenchmark records) thus predicts runs of another model on the same hardware; (setup, notes)."""
    return _runs_setup(dict((profile.fit or {}).get("setup") or {}), hint)


def _runs_setup(s: dict, hint: dict) -> tuple[Setup, list[str]]:
    """``setup_for_runs`` given the profile's ``fit.setup`` (``{}``: none)."""
    hw, tp = s.get("hardware") or hint.get("hardware"), s.get("tp") or hint.get("tp")
    pick = {r: hint.get(f"{r}_model") or s.get(f"{r}_model") for r in ("base", "small", "draft")}
    pick["small"] = pick["small"] or pick["draft"] or pick["base"]  # runs without a small model (vanilla-base)
    if not hw or not tp or not pick["base"]:
        raise InputError(None, "--profile", "cannot tell the hardware, TP or base model: the profile has no fit.setup "
                                            "(not produced by calibrate fit) and the inputs do not name them")
    notes = []
    if hint.get("hardware") and hint["hardware"] != hw:
        notes.append(f"the runs were recorded on {hint['hardware']} but the profile is for {hw}: replayed on {hw} "
                     "(the drift check says whether their speed fits)")
    moved = [f"{r} {s.get(f'{r}_model')} -> {pick[r]}" for r in ("base", "small", "draft")
             if s.get(f"{r}_model") and pick[r] and s.get(f"{r}_model") != pick[r]]
    if moved:
        notes.append("models from the runs, not the profile's fit: " + ", ".join(moved))
    return Setup.from_names(hw, int(tp), pick["base"], pick["small"], pick["draft"]), notes


PRIOR_PROFILES = {"prior": "the hardware's prior (simulator/catalog/gpu_priors.yaml where the GPU has derived "
                             "priors, else datasheet-era figures): simulator.cost.cost_profile.prior_profile",
                  "datasheet": "the datasheet-era prior (HardwareSpec.datasheet_era(): no derived GPU priors)"}


def prior_for_runs(kind: str, hint: dict) -> tuple[CostProfile, Setup, list[str]]:
    """``--profile prior|datasheet``: predict the runs before any calibration, on the hardware and TP they
    recorded, with the models they name. Every run is held out (the profile was fitted on none)."""
    import dataclasses

    from simulator.cost.cost_profile import prior_profile

    if not hint.get("hardware"):
        raise InputError(None, "--profile", f"{kind}: the inputs do not say which hardware they ran on")
    engine = str(hint.get("engine") or "vllm").split("-")[0]
    setup, notes = _runs_setup({}, hint)
    hw = setup.hardware.datasheet_era() if kind == "datasheet" else setup.hardware
    profile = prior_profile(hw, engine)
    notes.append(f"--profile {kind}: {PRIOR_PROFILES[kind]}, for {hw.name} ({engine})")
    return profile, dataclasses.replace(setup, hardware=hw), notes


# ---- the predictive distribution of a new run's offset ----------------------------------------------
@dataclass
class OffsetPredictive:
    """Predictive distribution of a new run's log offset for one call kind (see the module docstring)."""

    n: int                    # fit runs with this kind
    loc: float
    scale: float
    dof: float | None         # None: resample ``offsets`` (no spread estimable)
    offsets: np.ndarray
    method: str

    def draw(self, rng: np.random.Generator, size) -> np.ndarray:
        if self.dof is None:
            return rng.choice(self.offsets if len(self.offsets) else np.zeros(1), size=size)
        return self.loc + self.scale * rng.standard_t(self.dof, size=size)

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """Central ``level`` interval of the offset."""
        a = (1.0 - level) / 2.0
        if self.dof is None:
            o = self.offsets if len(self.offsets) else np.zeros(1)
            return float(np.quantile(o, a)), float(np.quantile(o, 1 - a))
        h = self.scale * stats.t.ppf(1 - a, self.dof)
        return self.loc - h, self.loc + h


def t_predictive(offsets) -> OffsetPredictive:
    """Student-t predictive of one more draw from the population the ``offsets`` came from
    (n >= 2; n - 1 dof, location the mean, scale sd·sqrt(1 + 1/n))."""
    o = np.asarray(offsets, dtype=float)
    n = len(o)
    if n < 2:
        raise ValueError("t_predictive needs at least 2 offsets")
    return OffsetPredictive(n, float(o.mean()), float(o.std(ddof=1) * np.sqrt(1 + 1 / n)), float(n - 1), o,
                            f"t, {n - 1} dof")


def offset_predictives(per_op: dict[str, np.ndarray]) -> tuple[dict[str, OffsetPredictive], list[str]]:
    """Per call kind, the predictive for a new run's offset from the fit runs' offsets; notes for the
    kinds that fall back (fewer than ``MIN_RUNS_T`` fit runs)."""
    per_op = {op: np.asarray(v, dtype=float) for op, v in per_op.items()}
    dof_pool = sum(len(v) - 1 for v in per_op.values() if len(v) >= 2)
    var_pool = (sum((len(v) - 1) * v.var(ddof=1) for v in per_op.values() if len(v) >= 2) / dof_pool
                if dof_pool else np.nan)
    out, notes = {}, []
    for op, v in per_op.items():
        n = len(v)
        if n >= MIN_RUNS_T:
            out[op] = t_predictive(v)
        elif dof_pool >= MIN_POOLED_DOF:
            loc = float(v.mean()) if n else 0.0
            out[op] = OffsetPredictive(n, loc, float(np.sqrt(var_pool * (1 + 1 / max(n, 1)))), float(dof_pool), v,
                                       f"t, scale pooled over call kinds ({dof_pool} dof)")
            notes.append(f"{op}: {n} fit run(s), fewer than {MIN_RUNS_T}: run-offset scale pooled over call kinds "
                         f"(t, {dof_pool} dof)")
        else:
            out[op] = OffsetPredictive(n, float(v.mean()) if n else 0.0, 0.0, None, v, "observed offsets resampled")
            notes.append(f"{op}: {n} fit run(s) and no other kind to pool from: between-run spread not estimable, "
                         "the observed offsets are resampled (intervals likely too narrow)")
    return out, notes


@dataclass
class CallNoise:
    """Per call kind: the run-offset predictive and the within-run residual quantiles."""

    offset: OffsetPredictive
    within_quantiles: np.ndarray

    def within(self, rng: np.random.Generator, size) -> np.ndarray:
        q = self.within_quantiles
        return np.interp(rng.random(size), np.linspace(0.0, 1.0, len(q)), q)


class NoiseModel(dict):
    """{call kind: CallNoise}, plus ``corr``: (kinds, Cholesky factor of the correlation of the fit runs' offsets
    across kinds, dof) when every kind has a Student-t predictive from the same runs, else None (kinds independent).
    A run slow in one kind is usually slow in the others (same machine, same load): drawing the kinds independently
    averages that away and the request-total interval comes out too narrow."""

    corr: tuple[list[str], np.ndarray, float] | None = None


def offset_correlation(per_run: dict[str, dict[str, float]], preds: dict[str, OffsetPredictive]):
    """(kinds, Cholesky factor, dof) of the correlation of the per-run offsets over the runs every kind has; None when
    fewer than 3 such runs or 2 kinds, a kind without a t predictive, or a singular estimate."""
    ops = [op for op in per_run if op in preds and preds[op].dof is not None and preds[op].scale > 0]
    if len(ops) < 2 or len(ops) != len(per_run):
        return None
    runs = sorted(set.intersection(*(set(per_run[op]) for op in ops)))
    if len(runs) < 3:
        return None
    m = np.array([[per_run[op][r] for op in ops] for r in runs], dtype=float)
    c = np.corrcoef(m, rowvar=False)
    if not np.all(np.isfinite(c)):
        return None
    try:
        return ops, np.linalg.cholesky(c + 1e-9 * np.eye(len(ops))), float(min(preds[op].dof for op in ops))
    except np.linalg.LinAlgError:
        return None


def noise_model(profile: CostProfile, offsets: str = "loro") -> tuple[dict[str, CallNoise], list[str]]:
    """Per call kind of the profile's fit, the interval model; notes on fallbacks. ``offsets``: ``loro`` (the fit
    runs' leave-one-run-out offsets where recorded, else in-sample) or ``in_sample`` (the drift check's range, as
    documented in ``validate.drift``)."""
    per = {op: e for op, e in (profile.fit or {}).get("per_op", {}).items()
           if op != "all" and "within_run_log_ratio_quantiles" in e}
    # a new run's offset: from the fit runs' leave-one-run-out offsets where the fit recorded them (each run against
    # a fit without it, as the new run will be), else the in-sample ones (shrunk: each run pulled the fit its way)
    key = ("loro_run_offsets", "run_offsets") if offsets == "loro" else ("run_offsets",)
    per_run = {op: dict(next((e[k] for k in key if e.get(k)), None) or {}) for op, e in per.items()}
    preds, notes = offset_predictives({op: list(v.values()) for op, v in per_run.items()})
    out = NoiseModel({op: CallNoise(preds[op], np.asarray(e["within_run_log_ratio_quantiles"], dtype=float))
                      for op, e in per.items()})
    out.corr = offset_correlation(per_run, preds)
    return out, notes


def request_totals(pred_s: np.ndarray, rows: np.ndarray, ops: np.ndarray, n_requests: int,
                   noise: dict[str, CallNoise], n_boot: int, rng: np.random.Generator,
                   batch_draws: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(n_requests, n_boot) draws of the request totals Σ_i T̂_i exp(u_{r,o} + ε_i), one u per
    request, kind and draw. Calls of a kind without a noise model count at T̂_i (callers flag them).
    ``batch_draws``: {kind: (n_requests, n_boot)} a new batch's log factor (``validate.batch``), added to u."""
    totals = np.zeros((n_requests, n_boot))
    joint = {}
    corr = getattr(noise, "corr", None)
    if corr is not None:  # correlated run offsets across kinds: a multivariate t, one chi-square per request and draw
        kinds, chol, dof = corr
        z = rng.standard_normal((n_requests, n_boot, len(kinds))) @ chol.T
        w = np.sqrt(rng.chisquare(dof, (n_requests, n_boot)) / dof)
        joint = {op: noise[op].offset.loc + noise[op].offset.scale * z[..., i] / w for i, op in enumerate(kinds)}
    for op in np.unique(ops):
        m = ops == op
        r, p = rows[m], pred_s[m]
        if op not in noise:
            np.add.at(totals, r, np.repeat(p[:, None], n_boot, axis=1))
            continue
        nm = noise[op]
        off = joint[op] if op in joint else nm.offset.draw(rng, (n_requests, n_boot))
        if batch_draws and op in batch_draws:
            off = off + batch_draws[op]
        for start in range(0, len(p), 256):  # bounded memory
            sl = slice(start, start + 256)
            eps = nm.within(rng, (len(p[sl]), n_boot))
            np.add.at(totals, r[sl], p[sl, None] * np.exp(off[r[sl]] + eps))
    return totals


def replay_calls(ms: MeasuredSet, profile: CostProfile, setup: Setup) -> pd.DataFrame:
    """Calls of ``ms`` with ``predicted_s``."""
    calls = ms.calls[ms.calls["wall_s"] > 0].reset_index(drop=True)
    out = calls.copy()
    out["predicted_s"] = CallPredictor(calls, setup).predict(profile.params(setup.hardware))
    return out


def e2e_predictive(requests: pd.DataFrame) -> OffsetPredictive | None:
    """A new run's log(end-to-end / modelled calls): what the recorded request time holds beyond the engine calls the
    model knows (SpecReason traces: the fork's answer verification; runner: orchestration), per fit run (sum over its
    requests), as a Student-t predictive like the call offsets (``offset_predictives``). None without a fit run that
    has both times."""
    d = requests[(requests["measured_s"].astype(float) > 0) & (requests["measured_e2e_s"].astype(float) > 0)]
    if d.empty:
        return None
    g = d.groupby("run_key")[["measured_e2e_s", "measured_s"]].sum()
    logs = np.log(g["measured_e2e_s"].to_numpy(float) / g["measured_s"].to_numpy(float))
    return offset_predictives({"e2e": logs})[0]["e2e"]


def replay(ms: MeasuredSet, profile: CostProfile, setup: Setup, n_boot: int = 1000, seed: int = 0,
           level: float = LEVEL, e2e: OffsetPredictive | None = None, batch=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-request predictions with intervals, per-call predictions). ``e2e``: the predictive of a new run's
    log(end-to-end / modelled calls) (``e2e_predictive`` of the fit runs): the end-to-end prediction is the calls'
    times exp(its location) and its intervals draw it with the call offsets; None: end-to-end = the calls.
    ``batch``: a ``validate.batch.BatchSpread``: the intervals are for a run of a new batch (between-batch term
    added to every kind's offset and to the end-to-end ratio, from its own random stream); None: the fit runs' batch."""
    calls = replay_calls(ms, profile, setup)
    rng = np.random.default_rng(seed)
    req = ms.requests.copy()
    pred = calls.groupby("request_id")["predicted_s"].sum()
    req["predicted_s"] = req["request_id"].map(pred).fillna(0.0).to_numpy()
    lo, hi = np.full(len(req), np.nan), np.full(len(req), np.nan)
    elo, ehi = lo.copy(), hi.copy()
    req["predicted_e2e_s"] = req["predicted_s"] * (np.exp(e2e.loc) if e2e is not None else 1.0)
    noise, _ = noise_model(profile)
    if noise and len(calls):
        idx = {r: i for i, r in enumerate(req["request_id"])}
        rows = calls["request_id"].map(idx).to_numpy()
        ops = calls["op"].to_numpy().astype(str)
        kinds = sorted(set(ops) & set(noise)) + (["e2e"] if batch is not None and "e2e" in batch.factors else [])
        bd = batch.draws(kinds, (len(req), n_boot), np.random.default_rng([seed, 2])) if batch is not None else {}
        totals = request_totals(calls["predicted_s"].to_numpy(float), rows, ops, len(req), noise, n_boot, rng, bd)
        a = (1.0 - level) / 2.0
        lo, hi = np.quantile(totals, a, axis=1), np.quantile(totals, 1.0 - a, axis=1)
        unmodelled = np.zeros(len(req), dtype=bool)
        unmodelled[np.unique(rows[~np.isin(ops, list(noise))])] = True
        lo[unmodelled], hi[unmodelled] = np.nan, np.nan
        etot = totals * np.exp(e2e.draw(rng, totals.shape)) if e2e is not None else totals
        if "e2e" in bd:
            etot = etot * np.exp(bd["e2e"])
        elo, ehi = np.quantile(etot, a, axis=1), np.quantile(etot, 1.0 - a, axis=1)
        elo[unmodelled], ehi[unmodelled] = np.nan, np.nan
        for lv in COVERAGE_LEVELS:
            b = (1.0 - lv) / 2.0
            for tot, pre in ((totals, ""), (etot, "e2e_")):
                cl, ch = level_columns(lv, pre)
                req[cl] = np.where(unmodelled, np.nan, np.quantile(tot, b, axis=1))
                req[ch] = np.where(unmodelled, np.nan, np.quantile(tot, 1.0 - b, axis=1))
    else:
        for lv in COVERAGE_LEVELS:
            for c in (*level_columns(lv), *level_columns(lv, "e2e_")):
                req[c] = np.nan
    req["pi_low_s"], req["pi_high_s"] = lo, hi
    req["pi_e2e_low_s"], req["pi_e2e_high_s"] = elo, ehi
    req["pi_level"] = level
    return req, calls


def interval_notes(profile: CostProfile, ops) -> list[str]:
    """What the report should say about this profile's intervals for calls of kinds ``ops``."""
    ops = set(map(str, ops))
    noise, notes = noise_model(profile)
    notes = [n for n in notes if n.split(":", 1)[0] in ops]
    missing = sorted(ops - set(noise))
    if missing:
        notes.append(f"no residuals for call kind(s) {', '.join(missing)} in the fit: requests with such calls "
                     "get no replay interval")
    return notes
