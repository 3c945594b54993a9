"""Capacity planning: the highest request rate one replica sustains under an SLO, per
configuration (system, gamma, threshold, TP, hardware), and what a target rate costs.

Search (per configuration, fixed seed = common random numbers across rates): start at
r0 = 1 / (single-request latency), double while the SLO holds, then bisect between the
last rate that met it and the first that did not until hi/lo - 1 <= ``rel_tol``. A rate
"meets" the SLO when the steady-state requests (after the warm-up fraction) do.

Finite runs: at rate r a run uses max(requests, r * 4 * single-request latency) requests (at most
20x ``requests``), so the arrival window always spans several request lifetimes; a rate that
would need more is reported as not sustained (the capacity is then a lower bound).

Costs: a replica occupies TP GPUs (both models are colocated on them), so at its capacity
R_max (requests/s)

    cost per 1000 requests = 1000 * TP * gpu_hour_cost / (3600 * R_max)
    replicas for a target R = ceil(R / R_max),   GPUs = replicas * TP

Parallelism: points (configuration x rate-curve point) run on local processes
(``ProcessPoolExecutor``) or on Ray (``ray_address``). Each point's seed is derived from the
base seed and a CRC-32 of the point's key, never from Python's ``hash``, so serial,
process-pool and Ray runs give identical numbers.
"""

from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.scenario import ResolvedScenario, load_scenario
from simulator.serving.arrivals import BurstyArrivals, ClosedLoopUsers, PoissonArrivals
from simulator.serving.metrics import summarize_serving
from simulator.serving.replica import simulate_serving
from simulator.serving.slo import Slo, parse_slo
from simulator.systems import SystemConfig

DEFAULT_REQUESTS = 300
DEFAULT_REL_TOL = 0.05
MAX_DOUBLINGS = 14
HORIZON_LATENCIES = 4.0  # the arrival window must span >= this many single-request latencies
MAX_REQUEST_FACTOR = 20  # ... using at most this many times the requested number of requests
DEFAULT_SLO_FACTOR = 3.0  # report default: p99 latency <= 3x vanilla-base's single-request latency


@dataclass(frozen=True)
class LoadSpec:
    """How load is offered: open loop (poisson | bursty with cv) or closed loop (users)."""

    kind: str = "poisson"  # poisson | bursty
    cv: float = 1.0
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    max_batch: int = 256

    def arrivals(self, rate: float):
        return BurstyArrivals(rate, self.cv) if self.kind == "bursty" else PoissonArrivals(rate)


@dataclass(frozen=True)
class Point:
    """One unit of parallel work: a configuration, and either a search or one load level."""

    scenario: str
    hardware: str
    tp: int
    cfg: SystemConfig
    load: LoadSpec
    slo_text: str
    rate: float | None = None  # None: search the capacity
    users: int | None = None  # closed loop instead of a rate
    replay: str | None = None  # arrival-times file instead of a rate

    @property
    def key(self) -> str:
        return f"{self.hardware}|{self.tp}|{self.cfg.label}"

    @property
    def seed(self) -> int:
        """Per-configuration stream (the same for every rate: common random numbers)."""
        return int(np.random.SeedSequence([self.load.seed, zlib.crc32(self.key.encode())]).generate_state(1)[0])


@lru_cache(maxsize=8)
def _scenario(path: str) -> ResolvedScenario:
    return load_scenario(path)


@lru_cache(maxsize=256)
def _single_latency_cached(path: str, hw: str, tp: int, cfg: SystemConfig) -> float:
    return single_request_latency(_scenario(path), hw, tp, cfg, cached=False)


def single_request_latency(rs: ResolvedScenario, hw: str, tp: int, cfg: SystemConfig, cached: bool = True) -> float:
    """Analytic mean latency of one request on an idle replica."""
    if cached and rs.path is not None and _scenario(str(rs.path)) is rs:
        return _single_latency_cached(str(rs.path), hw, tp, cfg)
    from simulator.analytic import predict
    from simulator.cost_tables import CostTables

    d = rs.deployments(hw, tp)
    tb = CostTables(d["base"], d["small"], d["draft"], rs.workload, cfg.gamma, execution=rs.scenario.execution)
    return float(predict(cfg, tb)["latency_s"])


def requests_for(point: Point, rate: float) -> tuple[int, bool]:
    """Requests of an open-loop run at ``rate``: long enough for a queue to build
    (n >= rate * HORIZON_LATENCIES * single latency), capped; and whether the cap bit."""
    rs = _scenario(point.scenario)
    n = point.load.requests
    need = math.ceil(rate * HORIZON_LATENCIES * single_request_latency(rs, point.hardware, point.tp, point.cfg))
    n = max(n, min(need, MAX_REQUEST_FACTOR * n))
    return n, need > n


def evaluate(point: Point, rate: float | None = None, users: int | None = None, replay: str | None = None) -> dict:
    """Serve the point's configuration at one load level; the summary row."""
    from simulator.serving.arrivals import load_arrival_times

    rs = _scenario(point.scenario)
    mf = rs.scenario.memory_fraction
    n = point.load.requests
    too_short = False
    if replay:
        arrivals = load_arrival_times(replay)
    elif users:
        arrivals = ClosedLoopUsers(users)
    else:
        arrivals = point.load.arrivals(rate)
        n, too_short = requests_for(point, rate)
    res = simulate_serving(point.cfg, rs.deployments(point.hardware, point.tp), rs.workload, arrivals,
                           n, point.seed, (mf.small, mf.base), point.load.max_batch,
                           execution=rs.scenario.execution)
    out = summarize_serving(res, parse_slo(point.slo_text))
    if too_short:  # beyond what the request cap can judge: not claimed as sustainable
        out["slo_met"] = False
    out["horizon_capped"] = too_short
    return out


def search_capacity(point: Point, rel_tol: float = DEFAULT_REL_TOL) -> dict:
    """Highest rate meeting the SLO (doubling, then bisection); its summary row."""
    rs = _scenario(point.scenario)
    r0 = 1.0 / single_request_latency(rs, point.hardware, point.tp, point.cfg)
    lo, hi, best, evals = 0.0, None, None, 0
    rate = r0
    floor = evaluate(point, r0 * 0.05)
    evals += 1
    if not floor["slo_met"]:
        return {**floor, "max_qps": 0.0, "evaluations": evals, "single_request_latency_s": 1.0 / r0}
    lo, best = r0 * 0.05, floor
    for _ in range(MAX_DOUBLINGS):
        row = evaluate(point, rate)
        evals += 1
        if row["slo_met"]:
            lo, best, rate = rate, row, rate * 2.0
        else:
            hi = rate
            break
    if hi is not None:
        if lo == r0 * 0.05:  # r0 itself failed: bracket from below
            lo_b = lo
        else:
            lo_b = lo
        while hi / lo_b - 1.0 > rel_tol:
            mid = math.sqrt(lo_b * hi)
            row = evaluate(point, mid)
            evals += 1
            if row["slo_met"]:
                lo_b, best = mid, row
            else:
                hi = mid
        lo = lo_b
    return {**best, "max_qps": lo, "evaluations": evals, "single_request_latency_s": 1.0 / r0}


def run_point(point: Point) -> dict:
    """Worker entry point (top level so processes and Ray can import it)."""
    if point.rate is None and point.users is None and point.replay is None:
        out = search_capacity(point)
    else:
        out = evaluate(point, point.rate, point.users, point.replay)
        out["rate_qps"] = point.rate
        out["users"] = point.users
        out["replay"] = point.replay
    return {"hardware": point.hardware, "tp": point.tp, "system": point.cfg.system, "gamma": point.cfg.gamma,
            "threshold": point.cfg.threshold, "first_n": point.cfg.first_n, "label": point.cfg.label, **out}


def run_points(points: list[Point], workers: int | None = None, ray_address: str | None = None) -> list[dict]:
    """Map ``run_point`` over points: serially (workers=1), on local processes, or on Ray."""
    if ray_address:
        try:
            import ray  # noqa: PLC0415
        except ImportError:
            raise InputError(None, "--ray-address", "ray is not installed (pip install 'ray[default]')") from None
        ray.init(address=ray_address, ignore_reinit_error=True)
        remote = ray.remote(run_point)
        return ray.get([remote.remote(p) for p in points])
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(points) <= 1:
        return [run_point(p) for p in points]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(points))) as ex:
        return list(ex.map(run_point, points))


# ---- the planning table ----------------------------------------------------------------------
def capacity_table(rows: list[dict], gpu_hour_cost: float | None, target_qps: float | None) -> pd.DataFrame:
    """Rows of ``search_capacity`` -> one line per configuration with costs; best first."""
    df = pd.DataFrame(rows)
    df["gpus_per_replica"] = df.tp
    df["qps_per_gpu"] = df.max_qps / df.tp
    with np.errstate(divide="ignore"):
        df["cost_per_1000_requests"] = (1000.0 * df.tp * gpu_hour_cost / (3600.0 * df.max_qps)
                                        if gpu_hour_cost else np.nan)
    if target_qps:
        df["replicas"] = [math.ceil(target_qps / q) if q > 0 else np.nan for q in df.max_qps]
        df["gpus"] = df.replicas * df.tp
        if gpu_hour_cost:
            df["fleet_cost_per_hour"] = df.gpus * gpu_hour_cost
    df = df.sort_values(["qps_per_gpu", "max_qps"], ascending=False, kind="stable").reset_index(drop=True)
    for c in ("gamma", "threshold"):
        df[c] = pd.array([None if v is None or v != v else int(v) for v in df[c]], dtype="Int64")
    return df


def capacity_points(rs: ResolvedScenario, slo: Slo, load: LoadSpec, configs: list[SystemConfig] | None = None) -> list[Point]:
    configs = configs if configs is not None else rs.system_configs()
    return [Point(str(rs.path), hw, tp, cfg, load, slo.text) for hw in rs.hardware_names for tp in rs.tps for cfg in configs]


def default_slo(rs: ResolvedScenario) -> str:
    """The scenario's ``slo`` if set, else p99 latency <= DEFAULT_SLO_FACTOR x vanilla-base's
    single-request latency (first hardware/TP)."""
    if rs.scenario.slo:
        return rs.scenario.slo
    lat = single_request_latency(rs, rs.hardware_names[0], rs.tps[0], SystemConfig(system="vanilla-base"))
    return f"p99_latency<={DEFAULT_SLO_FACTOR * lat:.4g}s"


def capacity_from_cli(scenario: str, slo_text: str | None, qps: list[float] | None = None, users: list[int] | None = None,
                      systems: list[str] | None = None, gammas=None, thresholds=None, arrival: str = "poisson",
                      cv: float = 1.0, requests: int | None = None, seed: int | None = None,
                      gpu_hour_cost: float | None = None, target_qps: float | None = None,
                      workers: int | None = None, ray_address: str | None = None,
                      arrivals_file: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Resolve, validate, run. With --qps/--users/--arrivals-file: the SLO check at those loads;
    else the capacity search."""
    from simulator.serving.arrivals import load_arrival_times

    from simulator.systems import SYSTEMS, expand_systems

    rs = load_scenario(scenario)
    sc = rs.scenario
    slo = parse_slo(slo_text or default_slo(rs))
    for s in systems or []:
        if s not in SYSTEMS:
            raise InputError(None, "--system", f"unknown system {s!r}; known: {', '.join(SYSTEMS)}")
    if arrival not in ("poisson", "bursty"):
        raise InputError(None, "--arrival", f"expected poisson or bursty (got {arrival!r})")
    if not (cv > 0 and math.isfinite(cv)):
        raise InputError(None, "--cv", f"must be a positive number (got {cv})")
    for name, v in (("--gpu-hour-cost", gpu_hour_cost), ("--target-qps", target_qps)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise InputError(None, name, f"must be a positive number (got {v})")
    if requests is not None and requests < 20:
        raise InputError(None, "--requests", "must be >= 20 (percentiles need a few requests)")
    configs = expand_systems(systems or sc.systems, gammas or sc.grid.gamma, thresholds or sc.grid.threshold, sc.grid.first_n)
    load = LoadSpec(arrival, cv, requests or DEFAULT_REQUESTS, sc.seed if seed is None else seed)
    points = capacity_points(rs, slo, load, configs)
    meta = {"scenario": str(rs.path), "slo": slo.text, "arrivals": arrival if arrival == "poisson" else f"bursty cv={cv}",
            "requests_per_point": load.requests, "seed": load.seed}
    if arrivals_file:
        load_arrival_times(arrivals_file)  # validate once, here: errors name the file and line
    if qps or users or arrivals_file:
        levels = [dict(rate=q) for q in qps or []] + [dict(users=u) for u in users or []]
        levels += [dict(replay=str(arrivals_file))] if arrivals_file else []
        pts = [replace(p, **lv) for p in points for lv in levels]
        df = pd.DataFrame(run_points(pts, workers, ray_address))
        return df, meta
    df = capacity_table(run_points(points, workers, ray_address), gpu_hour_cost, target_qps)
    return df, meta


DISPLAY = {
    "label": "configuration", "hardware": "hw", "tp": "tp", "rate_qps": "offered/s", "users": "users",
    "max_qps": "max req/s", "qps_per_gpu": "req/s/GPU", "latency_mean_s": "mean s", "latency_p99_s": "p99 s",
    "ttft_mean_s": "TTFT s", "queue_delay_mean_s": "queue s", "goodput_qps": "goodput/s", "slo_met": "SLO",
    "base_batch_mean": "base batch", "small_batch_mean": "small batch", "base_utilization": "base util",
    "small_utilization": "small util", "base_kv_occupancy_max": "base KV max", "cost_per_1000_requests": "$/1000 req",
    "replicas": "replicas", "gpus": "GPUs", "evaluations": "sims", "latency_drift": "drift",
}


def render_capacity_table(df: pd.DataFrame, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = [c for c in DISPLAY if c in df.columns and not df[c].isna().all()]
    t = Table(title=title)
    for c in cols:
        t.add_column(DISPLAY[c], justify="left" if c in ("label", "hardware") else "right")
    for row in df[cols].itertuples(index=False):
        t.add_row(*("-" if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                    else f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v) for v in row))
    Console(width=max(120, 11 * len(cols))).print(t)
