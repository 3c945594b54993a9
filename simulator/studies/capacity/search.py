"""The capacity search of one configuration: the highest request rate one replica sustains under an SLO, with a
confidence interval over replications.

Replication k of every configuration uses the seed SeedSequence([base seed, k]): the *same* requests (request i is
the same problem, the same uniforms) and the same standard arrival gaps in every configuration and at every rate
(common random numbers across rates and across configurations). Per replication, the search
(:func:`search_capacity`) starts at r0 = 1 / (single-request latency) -- or, from the second replication on, at the
mean of the replications so far (factor 1.25 steps) -- expands until one rate meets the SLO and one does not, then
bisects until hi/lo - 1 <= ``rel_tol``. A rate "meets" the SLO when the steady-state requests (after the warm-up
fraction) do *and* the replica sustains it (``serving.metrics.stationarity``: no significant latency growth over the
run, no drift, and while requests arrive the completed throughput keeps up with the offered rate, the number in the
system does not grow, and the judged window spans ``HORIZON_LATENCIES`` of the run's own mean latencies). A run too
short in time for that last check is rerun longer (the span its latencies ask for, ``serving.metrics.needed_span``;
at most ``MAX_REQUEST_FACTOR`` x the requested requests, beyond which the rate is not claimed). A simulation whose SLO is certainly missed before its last request finishes stops there
(``simulator.engines.serving.early_stop``): the verdict is the full run's, so the capacities are too.

Replications are added (at least ``min_reps``) until the t-interval of the mean capacity has a half-width <=
``target`` x the mean; if ``max_reps`` replications do not get there the row says so (``converged`` False, the
interval as it is). The run length (requests per simulation) is the same for every configuration and seed of a
comparison (``max_request_doublings`` = 0 by default): a shorter run admits a higher rate before the backlog shows,
so capacities measured at different run lengths are not comparable. Raise ``--requests`` for tighter runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from simulator.inputs.scenario import ResolvedScenario, load_scenario
from simulator.engines.serving.arrivals import BurstyArrivals, ClosedLoopUsers, PoissonArrivals
from simulator.engines.serving.early_stop import SloStop
from simulator.engines.serving.metrics import (HORIZON_LATENCIES, MIN_WINDOW_ARRIVALS, SUSTAIN_Z, WARMUP_FRACTION, needed_span,
                                       saturated_throughput, summarize_serving)
from simulator.engines.serving.replica import simulate_serving
from simulator.engines.serving.slo import parse_slo
from simulator.inputs.systems import SystemConfig

DEFAULT_REQUESTS = 300
DEFAULT_REL_TOL = 0.04
DEFAULT_CI_TARGET = 0.10  # half-width of the capacity interval, relative to the mean capacity
DEFAULT_MIN_REPS = 3
DEFAULT_MAX_REPS = 8
DEFAULT_REQUEST_DOUBLINGS = 0  # one run length for every configuration: a shorter run admits a higher rate
CONFIDENCE = 0.95
WARM_STEP = 1.25  # bracket factor of a warm-started search
MAX_DOUBLINGS = 14
MAX_REQUEST_FACTOR = 20  # a run may use at most this many times the requested number of requests
RERUNS = 2  # a run too short in time for the sustain check is rerun longer at most this many times
SPAN_MARGIN = 1.25  # ... with this margin on the span its latencies ask for (latency grows with the run)
DEFAULT_SLO_FACTOR = 3.0  # report default: p99 latency <= 3x vanilla-base's single-request latency


@dataclass(frozen=True)
class LoadSpec:
    """How load is offered: open loop (poisson | bursty with cv) or closed loop (users)."""

    kind: str = "poisson"  # poisson | bursty
    cv: float = 1.0
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    # sequences per engine at once: the scenario's execution.max_num_seqs (one place: simulator.cost.execution.Execution)

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
    single_latency_s: float | None = None  # the configuration's single-request latency, once known (else computed)
    serving: str | None = None  # a serving benchmark's workload (ServingWorkload JSON) instead of the reasoning one
    grid: tuple = ()  # the scenario's grid overrides (--hardware / --tp: ResolvedScenario.overrides), for the workers
    pp: int = 1  # the scenario's pipeline stages (base.pp)
    dp: int = 1  # its data-parallel attention ranks (base.dp)

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp x pp x dp."""
        return self.tp * self.pp * self.dp

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
def cached_scenario(path: str, grid: tuple = ()) -> ResolvedScenario:
    """The scenario a point names, with its grid overrides (``Point.grid``), loaded once per process."""
    return load_scenario(path, {k: list(v) for k, v in grid} or None)


@lru_cache(maxsize=256)
def _single_latency_cached(path: str, grid: tuple, hw: str, tp: int, cfg: SystemConfig) -> float:
    return single_request_latency(cached_scenario(path, grid), hw, tp, cfg, cached=False, predictor=_predictor(path))


@lru_cache(maxsize=8)
def _predictor(path: str):
    """One analytic predictor per scenario and process: its step-chain DPs (the costly part, the same for every
    gamma of a system) are computed once, one configuration at a time, as ``analytic.predict`` computes them."""
    from simulator.engines.analytic import MixturePredictor

    return MixturePredictor(cached_scenario(path).workload)


@lru_cache(maxsize=64)
def _serving_latency_cached(path: str, grid: tuple, hw: str, tp: int, cfg: SystemConfig, js: str) -> float:
    from simulator.studies.capacity.bench import idle_latency

    return idle_latency(cached_scenario(path, grid), hw, tp, cfg, js)


def single_request_latency(rs: ResolvedScenario, hw: str, tp: int, cfg: SystemConfig, cached: bool = True,
                           predictor=None) -> float:
    """Analytic mean latency of one request on an idle replica (``analytic.predict``; ``predictor``: a
    ``MixturePredictor`` of ``rs.workload`` whose chains are reused)."""
    if cached and rs.path is not None and cached_scenario(str(rs.path), rs.overrides) is rs:
        return _single_latency_cached(str(rs.path), rs.overrides, hw, tp, cfg)
    from simulator.engines.analytic import predict
    from simulator.cost.cost_tables import CostTables

    d = rs.deployments(hw, tp)
    tb = CostTables(d["base"], d["small"], d["draft"], rs.workload, cfg.gamma, execution=rs.scenario.execution)
    if predictor is None:
        return float(predict(cfg, tb)["latency_s"])
    predictor.prepare([cfg])
    return float(predictor.predict(cfg, predictor.vectors(tb))["latency_s"])


def point_latency(point: Point) -> float:
    """The point's single-request latency: carried by the point, or computed (cached per process; a serving
    workload's: its requests served one at a time, ``capacity.bench.idle_latency``)."""
    if point.single_latency_s is not None:
        return point.single_latency_s
    if point.serving is not None:
        return _serving_latency_cached(point.scenario, point.grid, point.hardware, point.tp, point.cfg, point.serving)
    return single_request_latency(cached_scenario(point.scenario, point.grid), point.hardware, point.tp, point.cfg)


def requests_for(point: Point, rate: float, span_s: float | None = None) -> tuple[int, bool]:
    """Requests of an open-loop run at ``rate`` spanning ``span_s`` seconds of arrivals (default: the sustain
    window's first guess, (HORIZON_LATENCIES + 1) single-request latencies, a lower bound on the loaded ones),
    at least the requested ones, capped at MAX_REQUEST_FACTOR x them; and whether the cap bit."""
    n = point.load.requests
    span = (HORIZON_LATENCIES + 1.0) * point_latency(point) if span_s is None else span_s
    need = math.ceil(rate * span) + 1
    n = max(n, min(need, MAX_REQUEST_FACTOR * n))
    return n, need > n


_PLANS: dict = {}


def point_plans(point: Point, n: int) -> list:
    """Requests 0..n-1 of the point's replication, sampled once per (configuration, seed) and reused at every
    rate of its search (request i is the same for every n and every rate: common random numbers), so a search
    samples its requests once instead of once per simulation. The serving simulator only reads them."""
    from simulator.engines.request_model import RequestSampler

    key = (point.scenario, point.cfg, point.seed, point.serving)
    have = _PLANS.get(key)
    if have is None or len(have) < n:
        rs = cached_scenario(point.scenario, point.grid)
        if point.serving is not None:  # request i depends on how many are drawn: draw the longest run's at once
            from simulator.studies.capacity.bench import plans

            have = plans(rs, point.cfg, point.serving, max(n, MAX_REQUEST_FACTOR * point.load.requests), point.seed)
        else:
            have = RequestSampler(point.cfg, rs.workload, step_calls=rs.scenario.execution.step_calls).plans(n, point.seed)
        if len(_PLANS) >= 4:  # a worker searches one configuration at a time: keep a few
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = have
    return have[:n]


def evaluate(point: Point, rate: float | None = None, users: int | None = None, replay: str | None = None,
             stop_early: bool = False) -> dict:
    """Serve the point's configuration at one load level; the summary row. ``stop_early`` (open loop): end the
    simulation once the SLO is certainly missed (``simulator.engines.serving.early_stop``; the verdict is the full run's,
    the row's figures are lower bounds and say ``stopped_early``)."""
    from simulator.engines.serving.arrivals import load_arrival_times

    rs = cached_scenario(point.scenario, point.grid)
    mf = rs.scenario.memory_fraction
    n = point.load.requests
    capped = False
    if replay:
        arrivals = load_arrival_times(replay)
    elif users:
        arrivals = ClosedLoopUsers(users)
    else:
        arrivals = point.load.arrivals(rate)
        n, capped = requests_for(point, rate)
    if point.serving is not None and not replay:  # the workload's own arrival shape (burstiness) at this load
        from simulator.studies.capacity.bench import arrivals as serving_arrivals

        arrivals = serving_arrivals(point.serving, rate, users)
    slo = parse_slo(point.slo_text)
    open_loop = not (replay or users)

    def run(n: int) -> tuple[dict, object]:
        stop = SloStop(slo, WARMUP_FRACTION) if stop_early and open_loop and slo.stops_early else None
        res = simulate_serving(point.cfg, rs.deployments(point.hardware, point.tp), rs.workload, arrivals,
                               n, point.seed, (mf.small, mf.base),
                               plans=None if replay and point.serving is None else point_plans(point, n),
                               execution=rs.execution_for(point.hardware, point.tp), stop=stop,
                               engine=rs.scenario.serving_engine)
        return summarize_serving(res, slo, closed_loop=bool(users)), res

    out, res = run(n)
    for _ in range(RERUNS if open_loop else 0):
        # too short in time to judge, within the SLO so far, and not above what the replica completes while
        # requests wait (its full rate): rerun over the span its latencies ask for
        if not (out["too_short"] and not out.get("stopped_early") and not _overloaded(res.requests, rate)
                and all(out[t.name] <= t.limit_s for t in slo.terms)):
            break
        more, capped = requests_for(point, rate, SPAN_MARGIN * needed_span(res.requests, rate))
        if more <= n:
            break
        n = more
        out, res = run(n)
    out.setdefault("stopped_early", False)
    out["horizon_capped"] = bool(capped and out["too_short"])  # the cap kept the run too short to be judged
    return out


def _overloaded(requests, rate: float) -> bool:
    """The offered rate lies above the run's completion rate while requests wait (``saturated_throughput``, with
    ``SUSTAIN_Z`` sds of its count): a longer run cannot sustain it."""
    mu, count = saturated_throughput(requests)
    return bool(count >= MIN_WINDOW_ARRIVALS and rate > mu * (1.0 + SUSTAIN_Z / math.sqrt(count)))


def search_capacity(point: Point, rel_tol: float = DEFAULT_REL_TOL, start: float | None = None) -> dict:
    """Highest rate meeting the SLO for the point's replication: expand (x2 from r0, or x/÷1.25
    from ``start``) until a met and a failed rate bracket it, then bisect; its summary row."""
    latency = point_latency(point)
    r0 = 1.0 / latency
    floor_rate = r0 * 0.05
    evals = 0

    def ev(rate: float) -> dict:
        nonlocal evals
        evals += 1
        return evaluate(point, rate, stop_early=True)

    def zero(row: dict) -> dict:
        return {**row, "max_qps": 0.0, "evaluations": evals, "single_request_latency_s": latency, "bracketed": True}

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
    return {**best, "max_qps": lo, "evaluations": evals, "single_request_latency_s": latency,
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


def interval_fields(caps: list[float], spec: "IntervalSpec") -> dict:
    """The interval row of replicated capacities ``caps``: their mean, the Student-t interval widened above by the
    search's resolution (each replication's capacity is the lower end of a bracket whose upper end is at most
    ``rel_tol`` above it, so replications that bisect to the same bracket would otherwise give a zero-width
    interval), its half-width relative to the mean and whether it converged (the t half-width within the target)."""
    m, half = t_interval(caps)
    return {"max_qps": m, "max_qps_lo": max(m - half, 0.0), "max_qps_hi": m * (1.0 + spec.rel_tol) + half,
            "half_width_rel": half / m if m > 0 else 0.0, "converged": bool(m == 0.0 or half <= spec.target * m)}


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
    m = float(np.mean(caps))
    rep = rows[int(np.argmin([abs(c - m) for c in caps]))]
    return {**rep, **interval_fields(caps, spec), "replications": len(caps), "requests_per_run": p_load.requests,
            "capacities": tuple(float(c) for c in caps), "evaluations": evals,
            "bracketed": all(r.get("bracketed", True) for r in rows), **at_capacity(rows)}


def at_capacity(rows: list[dict]) -> dict:
    """The sustain figures of an interval row, over its replications' rows (each at its own max rate; a replication
    sustaining no load counts 0): the mean offered rate and throughput simulated at the max rates
    (``window_offered_qps``, ``window_throughput_qps``) and the goodput there (``goodput_qps``: within the SLO per
    second of each whole run; the mean, like the max rate, so never a replication's own above the mean max rate), the
    throughput's ratio to the mean max rate, the largest tolerance and queue growth, the fewest window arrivals. Each
    sustained replication has offered_k <= thr_k / (1 - tol_k) (``serving.metrics.sustain``), so the means obey the
    same with the largest tol."""
    live = [r for r in rows if r["max_qps"] > 0]
    if not live:
        return {}
    mean = lambda key: float(np.mean([r[key] if r["max_qps"] > 0 else 0.0 for r in rows]))  # noqa: E731
    cap = float(np.mean([r["max_qps"] for r in rows]))
    goodput = {"goodput_qps": mean("goodput_qps")} if all("goodput_qps" in r for r in live) else {}
    return {"window_offered_qps": mean("window_offered_qps"), "window_throughput_qps": mean("window_throughput_qps"),
            **goodput, "throughput_ratio": mean("window_throughput_qps") / cap, "sustain_tol": max(r["sustain_tol"] for r in live),
            "queue_growth": max(r["queue_growth"] for r in live), "window_arrivals": min(r["window_arrivals"] for r in live)}


def reps_task(point: Point, ks: list[int], prior: list[float], rel_tol: float) -> list[dict]:
    """Worker: replications ``ks`` of the point's search, each warm-started from the mean of the capacities
    so far (``prior`` then these), exactly as :func:`capacity_interval` does."""
    caps, rows = list(prior), []
    for k in ks:
        m = float(np.mean(caps)) if caps else 0.0
        row = search_capacity(replace(point, replication=k), rel_tol, m if m > 0 else None)
        caps.append(row["max_qps"])
        rows.append(row)
    return rows
