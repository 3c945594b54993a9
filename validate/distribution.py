"""Distribution mode: only fitted distributions (workload profile + cost profile) through the
simulator's engines, compared with held-out measured requests. Tests the whole model.

Per configuration: the analytic engine's expected latency (``simulator.engines.analytic``) is the
point prediction for every request of that configuration. Measured: each request's modelled
call time up to the workload model's end rule (``to_answer_s``; for the SpecReason traces the
first answer step, the rule the workload profile was fitted with). Censored requests (no answer
inside the recording) are left out and counted.

Prediction interval (level ``LEVEL``) for one request. The DES (``simulator.engines.des``) samples
``n_requests`` requests from the workload distributions, timed by the fitted cost model: that is
the workload's spread alone, as if the cost model were exact. The measured calls are not: the
same cost-model uncertainty as trace replay (``validate.replay``) is put on every simulated call,

    L_j* = Σ_o exp(u_{j,o}) Σ_{c ∈ calls of kind o in request j} t_c exp(ε_c)

t_c the DES's time of call c, u_{j,o} one draw per simulated request and call kind from the
predictive of a new run's log offset (Student-t, ``replay.offset_predictives``), ε_c iid from
the kind's within-run residual quantiles. The interval is the central ``LEVEL`` range of
L_1*..L_n*; the workload-only range stays in ``des_pi_low_s`` / ``des_pi_high_s``.

Calls of a simulated request, by kind: SpecReason(-Decode) steps carry their small, scoring and
base call times (kinds small_generate, score, base_generate; spec_generate for SpecReason-Decode's
base calls, as the runner labels them); a vanilla-base / vanilla-small / specdecode request the
DES times as one call is split evenly over its chain steps (the runner calls the engine once per
step) of kind base_generate / small_generate / spec_generate. What the step records do not hold
(the answer call) counts as one more call of the base (vanilla-small: small) kind. Kinds the
fold's cost profile has no residuals for keep their DES times (noted).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from simulator.cost.setup import Setup
from calibrate.fit.measured import MeasuredSet
from simulator.engines.analytic import predict as analytic_predict
from simulator.cost.cost_profile import CostProfile
from simulator.cost.cost_tables import CostTables
from simulator.cost.execution import Execution
from simulator.engines.des import simulate
from simulator.inputs.systems import SystemConfig, spec_of
from simulator.inputs.workload import WorkloadProfile
from validate.replay import COVERAGE_LEVELS, CallNoise, level_columns, noise_model, request_totals

LEVEL = 0.90
STEP_TIME_COLUMNS = (("small_s", "small_generate"), ("scoring_s", "score"), ("base_s", None))


def config_of(row) -> SystemConfig:
    thr = row["threshold"]
    gamma = int(row["gamma"]) if row["gamma"] and row["gamma"] == row["gamma"] else None
    system = row["system"]
    spec = spec_of(system)
    return SystemConfig(system=system, gamma=gamma if spec.draft else None,
                        threshold=int(thr) if spec.scores_steps and thr == thr else None)


def main_op(cfg: SystemConfig) -> str:
    """The call kind of the configuration's base-model (vanilla-small: small-model) generation calls."""
    if cfg.spec.chain == "small":
        return "small_generate"
    return "spec_generate" if cfg.spec.draft else "base_generate"


def simulated_calls(cfg: SystemConfig, req: pd.DataFrame, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(request row, call kind, seconds) of every call of the DES's requests (module docstring)."""
    rid = {r: i for i, r in enumerate(req["request"])}
    lat = req["latency_s"].to_numpy(float)
    rows, ops, secs = [], [], []
    accounted = np.zeros(len(req))
    base = main_op(cfg)
    timed = len(steps) and all(c in steps.columns for c, _ in STEP_TIME_COLUMNS)
    if timed:
        r = steps["request"].map(rid).to_numpy()
        for col, op in STEP_TIME_COLUMNS:
            t = steps[col].fillna(0.0).to_numpy(float)
            m = t > 0
            rows.append(r[m])
            ops.append(np.full(m.sum(), op or base, dtype=object))
            secs.append(t[m])
            accounted += np.bincount(r[m], weights=t[m], minlength=len(req))
    elif len(steps):  # one call over the whole chain: split evenly over its steps
        k = steps.groupby("request").size().reindex(req["request"]).fillna(1).to_numpy(int)
        k = np.maximum(k, 1)
        r = np.repeat(np.arange(len(req)), k)
        t = np.repeat(lat / k, k)
        rows.append(r)
        ops.append(np.full(len(r), base, dtype=object))
        secs.append(t)
        accounted = lat.copy()
    rest = lat - accounted
    m = rest > 1e-9 * np.maximum(lat, 1e-12)
    rows.append(np.flatnonzero(m))
    ops.append(np.full(m.sum(), base, dtype=object))
    secs.append(rest[m])
    return np.concatenate(rows).astype(int), np.concatenate(ops).astype(str), np.concatenate(secs)


def predict_config(cfg: SystemConfig, workload: WorkloadProfile, profile: CostProfile, setup: Setup,
                   n_requests: int = 1000, seed: int = 0, level: float = LEVEL,
                   noise: dict[str, CallNoise] | None = None, execution: Execution | None = None,
                   batch=None) -> dict:
    """Analytic mean and DES interval of one configuration's request latency; with ``noise`` (the
    fold's cost-model interval model) the interval also holds the cost model's uncertainty.
    ``execution``: how the measured runs executed (calls per step, prefix-cache block), default the
    simulator's one-call, token-exact caching. ``batch`` (``validate.batch.BatchSpread``, with ``noise``): a
    simulated request is a run of a new batch (the between-batch term on every kind's offset)."""
    params = profile.params(setup.hardware)
    dep = setup.deployments(params)
    tables = CostTables(dep["base"], dep["small"], dep["draft"], workload, cfg.gamma, execution=execution or Execution())
    # the analytic engine over the whole workload: a mixture's expectation over its problems (the DES below samples
    # the same mixture), never its first / base problem alone
    point = analytic_predict(cfg, tables)
    req, steps = simulate(cfg, tables, n_requests, seed)
    lat = req["latency_s"].to_numpy()
    a = (1.0 - level) / 2.0
    out = {"predicted_s": point["latency_s"], "des_mean_s": float(lat.mean()),
           "des_pi_low_s": float(np.quantile(lat, a)), "des_pi_high_s": float(np.quantile(lat, 1.0 - a)),
           "pred_small_step_fraction": point["small_step_fraction"], "pred_steps": point["steps"],
           "pred_acceptance_length": point["acceptance_length"], "des_requests": n_requests}
    if noise:
        rows, ops, secs = simulated_calls(cfg, req, steps)
        bd = (batch.draws(sorted(set(ops) & set(noise)), (len(req), 1), np.random.default_rng([seed, 3]))
              if batch is not None else None)
        wide = request_totals(secs, rows, ops, len(req), noise, 1, np.random.default_rng([seed, 1]), bd)[:, 0]
        out["pi_low_s"], out["pi_high_s"] = float(np.quantile(wide, a)), float(np.quantile(wide, 1.0 - a))
        out["unmodelled_ops"] = ",".join(sorted(set(ops) - set(noise)))
    else:
        wide = lat
        out["pi_low_s"], out["pi_high_s"] = out["des_pi_low_s"], out["des_pi_high_s"]
        out["unmodelled_ops"] = "all (workload spread only)"
    for lv in COVERAGE_LEVELS:
        b = (1.0 - lv) / 2.0
        cl, ch = level_columns(lv)
        out[cl], out[ch] = float(np.quantile(wide, b)), float(np.quantile(wide, 1.0 - b))
    return out


def predict_distribution(ms: MeasuredSet, workload: WorkloadProfile, profile: CostProfile, setup: Setup,
                         n_requests: int = 1000, seed: int = 0, level: float = LEVEL,
                         cost_uncertainty: bool = True, batch=None) -> pd.DataFrame:
    """One row per measured request with the configuration's predictions (``batch``: see ``predict_config``)."""
    rows = []
    cache: dict = {}
    noise = noise_model(profile)[0] if cost_uncertainty else None
    for _, r in ms.requests.iterrows():
        cfg, ex = config_of(r), execution_of(ms, r)
        if (cfg, ex) not in cache:
            cache[cfg, ex] = predict_config(cfg, workload, profile, setup, n_requests, seed, level, noise=noise,
                                            execution=ex, batch=batch)
        rows.append({**r.to_dict(), **cache[cfg, ex], "pi_level": level, "execution": _describe(ex)})
    return pd.DataFrame(rows)


def execution_of(ms: MeasuredSet, request_row) -> Execution:
    """The measured run's execution semantics: the runner's run directories record (or reveal) them
    (``calibrate.measure.run_directory.execution_of_run``: a call per step, vLLM's prefix-cache block); other
    inputs (the SpecReason reference traces) get the simulator's default."""
    src = request_row.get("source") if hasattr(request_row, "get") else None
    if ms.kind != "run_dir" or not src:
        return Execution()
    return _run_execution(str(src))


@lru_cache(maxsize=256)
def _run_execution(run_dir: str) -> Execution:
    from calibrate.measure.run_directory import execution_of_run

    e = execution_of_run(run_dir)
    return Execution(prefix_cache_block=e["prefix_cache_block"], step_calls=e["step_calls"])


def _describe(ex: Execution) -> str:
    return f"block={ex.prefix_cache_block},step_calls={ex.step_calls}"
