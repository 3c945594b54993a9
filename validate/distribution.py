"""Distribution mode: only fitted distributions (workload profile + cost profile) through the
simulator's engines, compared with held-out measured requests. Tests the whole model.

Per configuration: the analytic engine's expected latency (``simulator.analytic``) is the
point prediction for every request of that configuration; the DES (``simulator.des``) gives
the request-latency distribution, whose central ``LEVEL`` interval is the prediction
interval for one request. Measured: each request's modelled call time up to the workload
model's end rule (``to_answer_s``; for the SpecReason traces the first answer step, the rule
the workload profile was fitted with). Censored requests (no answer inside the recording)
are left out and counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fit_cost import MeasuredSet, Setup
from simulator.analytic import CostVectors, chain_for, predict_point
from simulator.cost_model import CostProfile, Deployment
from simulator.cost_tables import CostTables
from simulator.des import simulate
from simulator.systems import SystemConfig
from simulator.workload import WorkloadProfile

LEVEL = 0.90


def config_of(row) -> SystemConfig:
    thr = row["threshold"]
    gamma = int(row["gamma"]) if row["gamma"] and row["gamma"] == row["gamma"] else None
    system = row["system"]
    return SystemConfig(system=system, gamma=gamma if system in ("specdecode", "specreason-decode") else None,
                        threshold=int(thr) if system.startswith("specreason") and thr == thr else None)


def predict_config(cfg: SystemConfig, workload: WorkloadProfile, profile: CostProfile, setup: Setup,
                   n_requests: int = 1000, seed: int = 0, level: float = LEVEL) -> dict:
    """Analytic mean and DES interval of one configuration's request latency."""
    params = profile.params(setup.hardware)
    dep = {r: Deployment(m, setup.hardware, setup.tp, params) for r, m in setup.models.items()}
    tables = CostTables(dep["base"], dep["small"], dep["draft"], workload, cfg.gamma)
    point = predict_point(cfg, chain_for(cfg, workload, {}), CostVectors(tables))
    req, _ = simulate(cfg, tables, n_requests, seed)
    lat = req["latency_s"].to_numpy()
    a = (1.0 - level) / 2.0
    return {"predicted_s": point["latency_s"], "des_mean_s": float(lat.mean()),
            "pi_low_s": float(np.quantile(lat, a)), "pi_high_s": float(np.quantile(lat, 1.0 - a)),
            "pred_small_step_fraction": point["small_step_fraction"], "pred_steps": point["steps"],
            "pred_acceptance_length": point["acceptance_length"], "des_requests": n_requests}


def predict_distribution(ms: MeasuredSet, workload: WorkloadProfile, profile: CostProfile, setup: Setup,
                         n_requests: int = 1000, seed: int = 0, level: float = LEVEL) -> pd.DataFrame:
    """One row per measured request with the configuration's predictions."""
    rows = []
    cache: dict = {}
    for _, r in ms.requests.iterrows():
        cfg = config_of(r)
        if cfg not in cache:
            cache[cfg] = predict_config(cfg, workload, profile, setup, n_requests, seed, level)
        rows.append({**r.to_dict(), **cache[cfg], "pi_level": level})
    return pd.DataFrame(rows)
