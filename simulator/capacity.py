"""Capacity planning: the highest request rate one replica sustains under an SLO, per
configuration (system, gamma, threshold, TP, hardware), and what a target rate costs.

Capacity with a confidence interval (:func:`capacity_interval`). Replication k of every
configuration uses the seed SeedSequence([base seed, k]): the *same* requests (request i is the
same problem, the same uniforms) and the same standard arrival gaps in every configuration and at
every rate (common random numbers across rates and across configurations). Per replication, the
search (:func:`search_capacity`) starts at r0 = 1 / (single-request latency) -- or, from the second
replication on, at the mean of the replications so far (factor 1.25 steps) -- expands until one
rate meets the SLO and one does not, then bisects until hi/lo - 1 <= ``rel_tol``. A rate "meets"
the SLO when the steady-state requests (after the warm-up fraction) do *and* the run is stationary
(``serving.metrics.stationarity``: no significant latency growth over the run, no drift).

Replications are added (at least ``min_reps``) until the t-interval of the mean capacity has a
half-width <= ``target`` x the mean; if ``max_reps`` replications do not get there the row says so
(``converged`` False, the interval as it is). The run length (requests per simulation) is the same for
every configuration and seed of a comparison (``max_request_doublings`` = 0 by default): a shorter run
admits a higher rate before the backlog shows, so capacities measured at different run lengths are not
comparable (seen in the issue-18 seed table before this default). Raise ``--requests`` for tighter runs.

Ranking (:func:`capacity_table`): configuration A is *better* than B when the paired t-interval
(95%) of their per-GPU capacity differences over common replications lies above ``EQUIVALENCE`` (5%)
of B's capacity (pairs share the seed: CRN makes the pairing tight, so differences of a few percent
can separate for one seed's requests and flip for another's: below the margin they are ties).
``rank`` = 1 + the number of configurations better than it; configurations that nothing beats share
rank 1 (ties, reported as ties).

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
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.scenario import ResolvedScenario, load_scenario
from simulator.serving.arrivals import BurstyArrivals, ClosedLoopUsers, PoissonArrivals
from simulator.serving.early_stop import SloStop
from simulator.serving.metrics import WARMUP_FRACTION, summarize_serving
from simulator.serving.replica import simulate_serving
from simulator.serving.slo import Slo, parse_slo
from simulator.systems import SystemConfig

DEFAULT_REQUESTS = 300
DEFAULT_REL_TOL = 0.04
DEFAULT_CI_TARGET = 0.10  # half-width of the capacity interval, relative to the mean capacity
DEFAULT_MIN_REPS = 3
DEFAULT_MAX_REPS = 8
DEFAULT_REQUEST_DOUBLINGS = 0  # one run length for every configuration: a shorter run admits a higher rate
CONFIDENCE = 0.95
WARM_STEP = 1.25  # bracket factor of a warm-started search
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
    replication: int = 0
    interval: "IntervalSpec | None" = None  # with rate None: replicate the search to a confidence interval

    @property
    def key(self) -> str:
        return f"{self.hardware}|{self.tp}|{self.cfg.label}"

    @property
    def seed(self) -> int:
        """Replication k's stream: the same for every rate *and every configuration* (common random
        numbers); never derived from the configuration or from Python's ``hash``."""
        return int(np.random.SeedSequence([self.load.seed, self.replication]).generate_state(1)[0])


@dataclass(frozen=True)
class IntervalSpec:
    """How far to replicate a capacity search (see the module docstring)."""

    target: float = DEFAULT_CI_TARGET
    min_reps: int = DEFAULT_MIN_REPS
    max_reps: int = DEFAULT_MAX_REPS
    max_request_doublings: int = DEFAULT_REQUEST_DOUBLINGS
    rel_tol: float = DEFAULT_REL_TOL


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


_PLANS: dict = {}


def _plans(point: Point, n: int) -> list:
    """Requests 0..n-1 of the point's replication, sampled once per (configuration, seed) and reused at every
    rate of its search (request i is the same for every n and every rate: common random numbers), so a search
    samples its requests once instead of once per simulation. The serving simulator only reads them."""
    from simulator.request_model import RequestSampler

    key = (point.scenario, point.cfg, point.seed)
    have = _PLANS.get(key)
    if have is None or len(have) < n:
        rs = _scenario(point.scenario)
        have = RequestSampler(point.cfg, rs.workload, step_calls=rs.scenario.execution.step_calls).plans(n, point.seed)
        if len(_PLANS) >= 4:  # a worker searches one configuration at a time: keep a few
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = have
    return have[:n]


def evaluate(point: Point, rate: float | None = None, users: int | None = None, replay: str | None = None,
             stop_early: bool = False) -> dict:
    """Serve the point's configuration at one load level; the summary row. ``stop_early`` (open loop): end the
    simulation once the SLO is certainly missed (``simulator.serving.early_stop``; the verdict is the full run's,
    the row's figures are lower bounds and say ``stopped_early``)."""
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
    slo = parse_slo(point.slo_text)
    stop = SloStop(slo, WARMUP_FRACTION) if stop_early and not (replay or users) else None
    res = simulate_serving(point.cfg, rs.deployments(point.hardware, point.tp), rs.workload, arrivals,
                           n, point.seed, (mf.small, mf.base), point.load.max_batch,
                           plans=None if replay else _plans(point, n), execution=rs.scenario.execution, stop=stop)
    out = summarize_serving(res, slo)
    out.setdefault("stopped_early", False)
    if too_short:  # beyond what the request cap can judge: not claimed as sustainable
        out["slo_met"] = False
    out["horizon_capped"] = too_short
    return out


def search_capacity(point: Point, rel_tol: float = DEFAULT_REL_TOL, start: float | None = None) -> dict:
    """Highest rate meeting the SLO for the point's replication: expand (x2 from r0, or x/÷1.25
    from ``start``) until a met and a failed rate bracket it, then bisect; its summary row."""
    rs = _scenario(point.scenario)
    r0 = 1.0 / single_request_latency(rs, point.hardware, point.tp, point.cfg)
    floor_rate = r0 * 0.05
    evals = 0

    def ev(rate: float) -> dict:
        nonlocal evals
        evals += 1
        return evaluate(point, rate, stop_early=True)

    def zero(row: dict) -> dict:
        return {**row, "max_qps": 0.0, "evaluations": evals, "single_request_latency_s": 1.0 / r0, "bracketed": True}

    lo = hi = best = None
    cold = start is None or not start > floor_rate
    # cold: expand x2 from r0; the floor rate is simulated only when r0 fails (the same bracket, hence the same
    # capacity, as simulating the floor first, one simulation fewer whenever r0 is sustained)
    rate, step = (r0, 2.0) if cold else (start, WARM_STEP)
    for _ in range(MAX_DOUBLINGS):
        row = ev(rate)
        if row["slo_met"]:
            lo, best = rate, row
            if hi is not None:
                break
            rate *= step
        else:
            hi = rate
            if lo is not None:
                break
            if cold:
                row = ev(floor_rate)
                if not row["slo_met"]:
                    return zero(row)
                lo, best = floor_rate, row
                break
            rate /= step
            if rate <= floor_rate:
                row = ev(floor_rate)
                if not row["slo_met"]:
                    return zero(row)
                lo, best = floor_rate, row
                break
    if lo is None:  # warm start never met the SLO within the steps: fall back to the floor
        row = ev(floor_rate)
        if not row["slo_met"]:
            return zero(row)
        lo, best = floor_rate, row
    if hi is not None:
        while hi / lo - 1.0 > rel_tol:
            mid = math.sqrt(lo * hi)
            row = ev(mid)
            if row["slo_met"]:
                lo, best = mid, row
            else:
                hi = mid
    return {**best, "max_qps": lo, "evaluations": evals, "single_request_latency_s": 1.0 / r0,
            "bracketed": hi is not None}


def t_interval(x, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(mean, half-width) of the Student-t interval of the mean of ``x`` (half-width inf if n < 2)."""
    from scipy import stats

    x = np.asarray(x, float)
    n = len(x)
    m = float(x.mean()) if n else float("nan")
    if n < 2:
        return m, float("inf")
    s = float(x.std(ddof=1))
    return m, float(stats.t.ppf(0.5 + confidence / 2, n - 1) * s / math.sqrt(n))


def capacity_interval(point: Point, spec: IntervalSpec | None = None) -> dict:
    """Replicate the capacity search (common random numbers: replication k = seed k everywhere) until
    the interval's half-width <= spec.target x mean, doubling the requests per simulation when
    ``max_reps`` replications do not suffice; the row of the replication nearest the mean, with
    ``max_qps`` = the mean, ``max_qps_lo/hi``, ``capacities`` (per replication), ``converged``."""
    spec = spec or IntervalSpec()
    load = point.load
    evals = 0
    caps: list[float] = []
    rows: list[dict] = []
    for doubling in range(spec.max_request_doublings + 1):
        p_load = replace(load, requests=load.requests * 2 ** doubling)
        caps, rows = [], []
        start = None
        for k in range(spec.max_reps):
            row = search_capacity(replace(point, load=p_load, replication=k), spec.rel_tol, start)
            evals += row["evaluations"]
            caps.append(row["max_qps"])
            rows.append(row)
            m = float(np.mean(caps))
            start = m if m > 0 else None
            if k + 1 >= spec.min_reps:
                m, half = t_interval(caps)
                if m == 0.0 or half <= spec.target * m:
                    break
        m, half = t_interval(caps)
        if m == 0.0 or half <= spec.target * m:
            break
    m, half = t_interval(caps)
    rep = rows[int(np.argmin([abs(c - m) for c in caps]))]
    return {**rep, "max_qps": m, "max_qps_lo": max(m - half, 0.0), "max_qps_hi": m + half,
            "half_width_rel": half / m if m > 0 else 0.0, "replications": len(caps),
            "requests_per_run": p_load.requests, "converged": bool(m == 0.0 or half <= spec.target * m),
            "capacities": tuple(float(c) for c in caps), "evaluations": evals,
            "bracketed": all(r.get("bracketed", True) for r in rows)}


def _reps_task(point: Point, ks: list[int], prior: list[float], rel_tol: float) -> list[dict]:
    """Worker: replications ``ks`` of the point's search, each warm-started from the mean of the capacities
    so far (``prior`` then these), exactly as :func:`capacity_interval` does."""
    caps, rows = list(prior), []
    for k in ks:
        m = float(np.mean(caps)) if caps else 0.0
        row = search_capacity(replace(point, replication=k), rel_tol, m if m > 0 else None)
        caps.append(row["max_qps"])
        rows.append(row)
    return rows


def interval_rounds(points: list[Point], spec: "IntervalSpec", workers: int | None = None,
                    ray_address: str | None = None, progress=None, stop_below_best: bool = True) -> list[dict]:
    """Capacity intervals of many configurations in rounds (issue 30: the report in a minute): every
    configuration gets ``spec.min_reps`` replications, then one more per round while its interval is wider
    than ``spec.target`` -- unless a configuration whose per-GPU capacity is significantly higher (paired,
    :func:`paired_better`, the ranking's own test) already exists: its rank cannot become 1 and more
    replications would not change the recommendation, so it stops (``stopped_below_best``; ``converged``
    False, its interval as it is). Replication k of a configuration is the same search as in
    :func:`capacity_interval` (seed k, warm start from the mean so far), so a configuration that is not
    stopped early gets the same figures; results do not depend on worker scheduling (the decisions use
    whole rounds). Rows as :func:`run_point`'s."""
    n = len(points)
    caps: list[list[float]] = [[] for _ in range(n)]
    rows: list[list[dict]] = [[] for _ in range(n)]
    stopped = [False] * n
    done = [False] * n
    total = n * spec.max_reps
    finished = 0
    tasks = [(i, list(range(spec.min_reps))) for i in range(n)]
    pool = None
    remote = None
    if ray_address:
        try:
            import ray  # noqa: PLC0415
        except ImportError:
            raise InputError(None, "--ray-address", "ray is not installed (pip install 'ray[default]')") from None
        ray.init(address=ray_address, ignore_reinit_error=True)
        remote = ray.remote(_reps_task)
    elif (workers or os.cpu_count() or 1) > 1 and n > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=min(workers or os.cpu_count() or 1, n))
    try:
        while tasks:
            args = [(points[i], ks, caps[i], spec.rel_tol) for i, ks in tasks]
            if remote is not None:
                import ray  # noqa: PLC0415

                results = ray.get([remote.remote(*a) for a in args])
            elif pool is not None:
                from concurrent.futures import as_completed

                futs = {pool.submit(_reps_task, *a): j for j, a in enumerate(args)}
                results = [None] * len(args)
                for f in as_completed(futs):
                    results[futs[f]] = f.result()
                    finished += len(results[futs[f]])
                    if progress:
                        progress(finished, total, {"label": points[tasks[futs[f]][0]].cfg.label})
            else:
                results = []
                for j, a in enumerate(args):
                    results.append(_reps_task(*a))
                    finished += len(results[-1])
                    if progress:
                        progress(finished, total, {"label": a[0].cfg.label})
            if remote is not None:
                finished += sum(len(r) for r in results)
            for (i, _), res in zip(tasks, results):
                rows[i] += res
                caps[i] += [r["max_qps"] for r in res]
            for i in range(n):
                if done[i]:
                    continue
                m, half = t_interval(caps[i])
                if m == 0.0 or half <= spec.target * m or len(caps[i]) >= spec.max_reps:
                    done[i] = True
            live = [i for i in range(n) if caps[i] and np.mean(caps[i]) > 0]
            if live and stop_below_best:
                lead = max(live, key=lambda i: (np.mean(caps[i]) / points[i].tp, -i))
                for i in range(n):
                    if not done[i] and i != lead and paired_better(tuple(caps[lead]), tuple(caps[i]), points[lead].tp,
                                                                   points[i].tp):
                        done[i] = stopped[i] = True
            # the ETA's total: what is done, plus at most max_reps of those still running
            total = finished + sum(spec.max_reps - len(caps[i]) for i in range(n) if not done[i])
            tasks = [(i, [len(caps[i])]) for i in range(n) if not done[i]]
    finally:
        if pool is not None:
            pool.shutdown()
    out = []
    for i, p in enumerate(points):
        m, half = t_interval(caps[i])
        rep = rows[i][int(np.argmin([abs(c - m) for c in caps[i]]))]
        out.append({"hardware": p.hardware, "tp": p.tp, "system": p.cfg.system, "gamma": p.cfg.gamma,
                    "gamma_policy": p.cfg.gamma_policy, "threshold": p.cfg.threshold, "first_n": p.cfg.first_n,
                    "label": p.cfg.label, **rep, "max_qps": m, "max_qps_lo": max(m - half, 0.0), "max_qps_hi": m + half,
                    "half_width_rel": half / m if m > 0 else 0.0, "replications": len(caps[i]),
                    "requests_per_run": p.load.requests, "converged": bool(m == 0.0 or half <= spec.target * m),
                    "stopped_below_best": stopped[i], "capacities": tuple(float(c) for c in caps[i]),
                    "evaluations": sum(r["evaluations"] for r in rows[i]),
                    "bracketed": all(r.get("bracketed", True) for r in rows[i])})
    return out


def run_point(point: Point) -> dict:
    """Worker entry point (top level so processes and Ray can import it)."""
    if point.rate is None and point.users is None and point.replay is None:
        out = capacity_interval(point, point.interval) if point.interval is not None else search_capacity(point)
    else:
        out = evaluate(point, point.rate, point.users, point.replay)
        out["rate_qps"] = point.rate
        out["users"] = point.users
        out["replay"] = point.replay
    return {"hardware": point.hardware, "tp": point.tp, "system": point.cfg.system, "gamma": point.cfg.gamma,
            "gamma_policy": point.cfg.gamma_policy, "threshold": point.cfg.threshold, "first_n": point.cfg.first_n, "label": point.cfg.label, **out}


def run_points(points: list[Point], workers: int | None = None, ray_address: str | None = None,
               progress=None) -> list[dict]:
    """Map ``run_point`` over points: serially (workers=1), on local processes, or on Ray; results in the
    points' order. ``progress(done, total, row)`` is called as each point finishes (for an ETA)."""
    if ray_address:
        try:
            import ray  # noqa: PLC0415
        except ImportError:
            raise InputError(None, "--ray-address", "ray is not installed (pip install 'ray[default]')") from None
        ray.init(address=ray_address, ignore_reinit_error=True)
        remote = ray.remote(run_point)
        return ray.get([remote.remote(p) for p in points])
    workers = workers or os.cpu_count() or 1
    out: list = [None] * len(points)
    if workers <= 1 or len(points) <= 1:
        for i, p in enumerate(points):
            out[i] = run_point(p)
            if progress:
                progress(i + 1, len(points), out[i])
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # the costliest first (longest single-request latency: slowest simulations), so no straggler starts last
    order = sorted(range(len(points)), key=lambda i: -_cost_hint(points[i]))
    with ProcessPoolExecutor(max_workers=min(workers, len(points))) as ex:
        futs = {ex.submit(run_point, points[i]): i for i in order}
        for k, f in enumerate(as_completed(futs)):
            out[futs[f]] = f.result()
            if progress:
                progress(k + 1, len(points), out[futs[f]])
    return out


def _cost_hint(point: Point) -> float:
    """Relative cost of a point's simulations: calls per request grow with the system's steps (a guess
    used only to order work; never changes a result)."""
    return {"specreason": 3.0, "specreason-decode": 3.0}.get(point.cfg.system, 1.0)


def search_table(rs: ResolvedScenario, slo: Slo, load: LoadSpec, configs: list[SystemConfig], spec: "IntervalSpec",
                 acc_model, floor, gpu_hour_cost: float | None = None, target_qps: float | None = None,
                 workers: int | None = None, ray_address: str | None = None, only_eligible: bool = False,
                 progress=None, stop_below_best: bool = True) -> tuple[pd.DataFrame, dict, list[SystemConfig]]:
    """The one capacity search behind ``specsim capacity`` and ``specsim report`` (issue 30): every searched
    configuration gets :func:`capacity_interval` with ``spec`` on the same seeds and run length, so both
    commands print the same capacities, intervals and ranks. ``only_eligible``: configurations that do not
    meet the accuracy floor are not searched (returned as the third value, never ranked nor printed with
    a capacity). Returns (table best first with accuracy, ``standing`` and ``recommended``; the
    recommendation; the configurations left out)."""
    from simulator.accuracy import floor_status

    skipped = [c for c in configs if only_eligible and floor_status(acc_model, c, floor)[0] != "meets"]
    keep = [c for c in configs if c not in skipped]
    points = [replace(p, interval=spec) for p in capacity_points(rs, slo, load, keep)]
    rows = (interval_rounds(points, spec, workers, ray_address, progress, stop_below_best)
            if spec.max_request_doublings == 0 and points
            else run_points(points, workers, ray_address, progress))
    df = add_accuracy(capacity_table(rows, gpu_hour_cost, target_qps), acc_model, floor)
    rec = recommend(df)
    best = rec["best"]
    picks = {best.label, *rec["ties"]} if best is not None else set()
    df["recommended"] = [l in picks and f == "meets" and q > 0 for l, f, q in zip(df.label, df.accuracy_floor, df.max_qps)]
    st = []
    for r in df.itertuples():
        if not r.max_qps > 0:
            st.append("sustains no load")
        elif r.accuracy_floor != "meets":
            st.append(f"excluded: accuracy {r.accuracy_floor}")
        elif best is not None and r.label == best.label and r.hardware == best.hardware and r.tp == best.tp:
            st.append("best")
        elif r.recommended:
            st.append("within the interval of the best")
        else:
            st.append("below the best")
    df["standing"] = st
    return df, rec, skipped


# ---- the planning table ----------------------------------------------------------------------
EQUIVALENCE = 0.05  # differences below 5% of the capacity are ties (seed-to-seed spread of a few percent)


def paired_better(a: tuple, b: tuple, tp_a: int = 1, tp_b: int = 1, confidence: float = CONFIDENCE,
                  margin: float = EQUIVALENCE) -> bool:
    """A's per-GPU capacity exceeds B's by more than ``margin`` x B's: the paired t-interval of the
    differences over their common replications (same seeds: common random numbers) lies above that."""
    k = min(len(a), len(b))
    if k < 2:
        return False
    b_gpu = np.asarray(b[:k], float) / tp_b
    d = np.asarray(a[:k], float) / tp_a - b_gpu
    m, half = t_interval(d, confidence)
    return m - half > margin * float(b_gpu.mean())


def rank_configurations(df: pd.DataFrame) -> pd.DataFrame:
    """``rank`` = 1 + configurations significantly better (paired, :func:`paired_better`), and ``ties``:
    the configurations neither better nor worse than it (intervals that do not separate). A configuration
    that sustains no load (capacity 0) is never ranked: ``rank`` NA, no ties (issue 30)."""
    caps = [tuple(c) if isinstance(c, (tuple, list)) else (float(q),) for c, q in zip(df.get("capacities", df.max_qps), df.max_qps)]
    tps = df.tp.tolist()
    n = len(df)
    live = [bool(q > 0) for q in df.max_qps]
    better = np.zeros((n, n), bool)  # better[i, j]: i beats j
    for i in range(n):
        for j in range(n):
            if i != j and live[i] and live[j]:
                better[i, j] = paired_better(caps[i], caps[j], tps[i], tps[j])
    df = df.copy()
    df["rank"] = pd.array([1 + int(better[:, j].sum()) if live[j] else None for j in range(n)], dtype="Int64")
    labels = [f"{l} [{h} tp={t}]" if df.hardware.nunique() > 1 or df.tp.nunique() > 1 else l
              for l, h, t in zip(df.label, df.hardware, df.tp)]
    df["ties"] = ["; ".join(labels[j] for j in range(n) if j != i and live[i] and live[j] and not better[i, j]
                            and not better[j, i] and df["rank"].iloc[j] == df["rank"].iloc[i]) for i in range(n)]
    return df


def standing(df: pd.DataFrame) -> list[str]:
    """Per row of a ranked table (best first): ``best``, ``within the interval of the best`` (rank 1 beside
    it: the paired interval does not separate them), ``below the best`` or ``sustains no load``."""
    out, seen = [], False
    for r in df.itertuples():
        if pd.isna(r.rank) or not r.max_qps > 0:
            out.append("sustains no load")
        elif r.rank == 1 and not seen:
            out.append("best")
            seen = True
        elif r.rank == 1:
            out.append("within the interval of the best")
        else:
            out.append("below the best")
    return out


def capacity_table(rows: list[dict], gpu_hour_cost: float | None, target_qps: float | None) -> pd.DataFrame:
    """Rows of ``capacity_interval`` (or ``search_capacity``) -> one line per configuration with costs,
    ranks and ties; best (rank, then mean capacity per GPU) first."""
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
    df = rank_configurations(df)
    df = df.sort_values(["rank", "qps_per_gpu", "max_qps"], ascending=[True, False, False], kind="stable",
                        na_position="last").reset_index(drop=True)
    df["standing"] = standing(df)
    for c in ("gamma", "threshold"):
        df[c] = pd.array([None if v is None or v != v else int(v) for v in df[c]], dtype="Int64")
    return df


def add_accuracy(df: pd.DataFrame, model, floor) -> pd.DataFrame:
    """Accuracy columns (``accuracy``, ``accuracy_lo``, ``accuracy_hi``: NaN = unknown) and the floor's
    verdict (``accuracy_floor``: meets | fails | unknown, ``accuracy_why``) per configuration."""
    from simulator.accuracy import floor_status

    df = df.copy()
    est, stat, why = [], [], []
    for r in df.itertuples():
        cfg = SystemConfig(system=r.system, gamma=None if pd.isna(r.gamma) else int(r.gamma),
                           threshold=None if pd.isna(r.threshold) else int(r.threshold), first_n=int(r.first_n))
        est.append(model.estimate(cfg))
        s, w = floor_status(model, cfg, floor)
        stat.append(s)
        why.append(w)
    df["accuracy"] = [e.mean if e else np.nan for e in est]
    df["accuracy_lo"] = [e.low if e else np.nan for e in est]
    df["accuracy_hi"] = [e.high if e else np.nan for e in est]
    df["accuracy_floor"] = stat
    df["accuracy_why"] = why
    return df


def recommend(df: pd.DataFrame) -> dict:
    """The recommendation among configurations that meet the accuracy floor: the best by rank (ties
    listed), or None. Configurations with capacity 0 are never recommended."""
    ok = df[(df.accuracy_floor == "meets") & (df.max_qps > 0)] if "accuracy_floor" in df else df[df.max_qps > 0]
    if not len(ok):
        return {"best": None, "ties": [], "capacity": 0.0}
    ok = rank_configurations(ok.drop(columns=["rank", "ties", "standing"], errors="ignore"))
    ok = ok.sort_values(["rank", "qps_per_gpu"], ascending=[True, False], kind="stable", na_position="last")
    b = ok.iloc[0]
    tied = [r.label for r in ok.iloc[1:].itertuples() if r.rank == 1]
    return {"best": b, "ties": tied, "capacity": float(b.max_qps), "eligible": ok}


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
                      arrivals_file: str | None = None, interval: IntervalSpec | None = None,
                      accuracy_floor: str | None = None, accuracy_margin: float | None = None,
                      adaptive_gamma: bool = False, gamma_policy: str = "fixed", progress=None,
                      stop_below_best: bool = False) -> tuple[pd.DataFrame, dict]:
    """Resolve, validate, run. With --qps/--users/--arrivals-file: the SLO check at those loads;
    else the capacity search. ``adaptive_gamma``: each drafting configuration at the grid's largest γ also
    runs with γ chosen per engine iteration (``gamma_policy="goodput"``, up to that γ); ``gamma_policy``
    other than fixed: every drafting configuration runs with that policy, up to its γ. ``stop_below_best``
    (the ``specsim capacity`` command and the report: True): configurations the leader already beats get no
    more replications (:func:`interval_rounds`); False (the default for library callers such as
    validate-capacity) gives every configuration its own interval to the target."""
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
    from simulator.scenario import MAX_REQUESTS

    if requests is not None and not 20 <= requests <= MAX_REQUESTS:
        raise InputError(None, "--requests", f"must lie in 20..{MAX_REQUESTS:,} (got {requests:,}; percentiles need a few requests)")
    from simulator.accuracy import parse_floor, scenario_accuracy

    floor = parse_floor(accuracy_floor, accuracy_margin)
    acc_model = scenario_accuracy(rs)
    configs = expand_systems(systems or sc.systems, gammas or sc.grid.gamma, thresholds or sc.grid.threshold, sc.grid.first_n)
    if gamma_policy != "fixed":
        configs = [SystemConfig(**{**c.model_dump(), "gamma_policy": gamma_policy}) if c.gamma else c for c in configs]
    if adaptive_gamma:
        gmax = max((c.gamma for c in configs if c.gamma), default=0)
        configs += [SystemConfig(**{**c.model_dump(), "gamma_policy": "goodput"}) for c in configs if c.gamma and c.gamma == gmax]
    load = LoadSpec(arrival, cv, requests or DEFAULT_REQUESTS, sc.seed if seed is None else seed)
    points = [replace(p, interval=interval or IntervalSpec()) for p in capacity_points(rs, slo, load, configs)]
    meta = {"scenario": str(rs.path), "slo": slo.text, "arrivals": arrival if arrival == "poisson" else f"bursty cv={cv}",
            "requests_per_point": load.requests, "seed": load.seed}
    if rs.workload_note():
        meta["workload_note"] = rs.workload_note()
    if arrivals_file:
        load_arrival_times(arrivals_file)  # validate once, here: errors name the file and line
    if qps or users or arrivals_file:
        levels = [dict(rate=q) for q in qps or []] + [dict(users=u) for u in users or []]
        levels += [dict(replay=str(arrivals_file))] if arrivals_file else []
        pts = [replace(p, **lv) for p in points for lv in levels]
        df = pd.DataFrame(run_points(pts, workers, ray_address, progress))
        return df, meta
    df, rec, _ = search_table(rs, slo, load, configs, interval or IntervalSpec(), acc_model, floor, gpu_hour_cost,
                              target_qps, workers, ray_address, progress=progress, stop_below_best=stop_below_best)
    meta["accuracy_floor"] = floor.describe()
    meta["recommended"] = None if rec["best"] is None else rec["best"].label
    meta["recommended_ties"] = rec["ties"]
    meta["headline"] = headline(df, rec, slo.text, gpu_hour_cost)
    return df, meta


def headline(df: pd.DataFrame, rec: dict, slo_text: str, gpu_hour_cost: float | None = None) -> str:
    """One line: the best configuration and why (capacity with its interval, accuracy, cost) -- the first
    line of every report and the line ``specsim capacity`` prints under its table."""
    b = rec["best"]
    if b is None:
        return (f"No configuration to recommend: none meets the accuracy floor with a capacity above 0 under {slo_text}.")
    dev = "CPU host" if str(b.hardware) == "cpu" else "GPU"
    ci = (f" [{b.max_qps_lo:.3g}, {b.max_qps_hi:.3g}]" if "max_qps_hi" in b and np.isfinite(b.max_qps_hi) else "")
    conv = "" if bool(b.get("converged", True)) else ", interval not converged"
    acc = (f"accuracy {b.accuracy:.3f}" if np.isfinite(b.get("accuracy", np.nan)) else "accuracy unknown") + \
        f" ({b.accuracy_why})"
    cost = (f"; {b.cost_per_1000_requests:.3g} per 1000 requests at {gpu_hour_cost:g} per {dev}-hour"
            if gpu_hour_cost and np.isfinite(b.get("cost_per_1000_requests", np.nan)) else "")
    ties = (f"; within the interval of the best: {', '.join(rec['ties'])}" if rec["ties"] else "; no other configuration "
            "within its interval")
    return (f"Best: {b.label} on {b.hardware} TP={b.tp}: {b.max_qps:.3g} req/s per replica{ci} (95% interval{conv}) "
            f"under {slo_text}, {b.qps_per_gpu:.3g} req/s per {dev}; {acc}{cost}{ties}.")


DISPLAY = {
    "label": "configuration", "hardware": "hw", "tp": "tp", "rate_qps": "offered/s", "users": "users",
    "rank": "rank", "max_qps": "max req/s", "max_qps_lo": "lo", "max_qps_hi": "hi", "qps_per_gpu": "req/s/GPU",
    "replications": "reps", "converged": "±10%", "accuracy": "accuracy", "accuracy_lo": "acc lo", "accuracy_hi": "acc hi",
    "accuracy_floor": "acc floor", "recommended": "pick", "latency_mean_s": "mean s", "latency_p99_s": "p99 s",
    "ttft_mean_s": "TTFT s", "queue_delay_mean_s": "queue s", "goodput_qps": "goodput/s", "slo_met": "SLO",
    "base_batch_mean": "base batch", "small_batch_mean": "small batch", "base_utilization": "base util",
    "small_utilization": "small util", "base_kv_occupancy_max": "base KV max", "cost_per_1000_requests": "$/1000 req",
    "replicas": "replicas", "gpus": "GPUs", "evaluations": "sims", "latency_drift": "drift", "latency_growth": "growth",
}


def render_capacity_table(df: pd.DataFrame, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    keep = {"accuracy", "accuracy_floor"}
    cols = [c for c in DISPLAY if c in df.columns and (c in keep or not df[c].isna().all())]
    t = Table(title=title)
    for c in cols:
        t.add_column(DISPLAY[c], justify="left" if c in ("label", "hardware") else "right")
    for row in df[cols].itertuples(index=False):
        t.add_row(*(("unknown" if c.startswith("accuracy") else "-") if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                    else f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v) for c, v in zip(cols, row)))
    Console(width=max(120, 11 * len(cols))).print(t)
