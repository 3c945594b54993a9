"""Capacity planning: the highest request rate one replica sustains under an SLO, per configuration (system,
gamma, threshold, TP, hardware), with a confidence interval, and what a target rate costs. The one search behind
``specsim capacity`` and ``specsim report`` (:func:`search_table`).

The package, by concern:

- :mod:`simulator.studies.capacity.search`: one configuration's search -- load levels, a rate's simulation (stopped as soon
  as its SLO is certainly missed), the bracketing search per replication, replications to a 95% interval;
- :mod:`simulator.studies.capacity.parallel`: where the work runs (this process, local processes, Ray) and the rounds of
  replications across configurations (configurations the leader already beats stop early);
- :mod:`simulator.studies.capacity.table`: ranks and ties (paired tests over common seeds), costs, accuracy, the
  recommendation and its headline;
- here: the table of a whole grid (:func:`search_table`) and the ``specsim capacity`` entry point.

Every name of the former single module is importable from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from simulator.studies.capacity.parallel import Workers, interval_rounds, run_point, run_points
from simulator.studies.capacity.search import (CONFIDENCE, DEFAULT_CI_TARGET, DEFAULT_MAX_REPS, DEFAULT_MIN_REPS,
                                       DEFAULT_REL_TOL, DEFAULT_REQUEST_DOUBLINGS, DEFAULT_REQUESTS,
                                       DEFAULT_SLO_FACTOR, HORIZON_LATENCIES, MAX_DOUBLINGS, MAX_REQUEST_FACTOR,
                                       WARM_STEP, IntervalSpec, LoadSpec, Point, capacity_interval, evaluate,
                                       point_latency, requests_for, search_capacity, single_request_latency,
                                       t_interval)
from simulator.studies.capacity.table import (DISPLAY, EQUIVALENCE, add_accuracy, capacity_table, config_key, headline,
                                      mark_recommendation, paired_better, rank_configurations, recommend,
                                      render_capacity_table)
from simulator.errors import InputError
from simulator.option_values import int_list_text
from simulator.inputs.scenario import ResolvedScenario, load_scenario
from simulator.engines.serving.slo import Slo, parse_slo
from simulator.inputs.systems import SystemConfig
from simulator.paths import code_version

__all__ = [
    "CONFIDENCE", "DEFAULT_CI_TARGET", "DEFAULT_MAX_REPS", "DEFAULT_MIN_REPS", "DEFAULT_REL_TOL",
    "DEFAULT_REQUEST_DOUBLINGS", "DEFAULT_REQUESTS", "DEFAULT_SLO_FACTOR", "DISPLAY", "EQUIVALENCE",
    "HORIZON_LATENCIES", "MAX_DOUBLINGS", "MAX_REQUEST_FACTOR", "WARM_STEP", "IntervalSpec", "LoadSpec", "Point",
    "Workers", "add_accuracy", "CapacityRequest", "Where", "capacity_study", "capacity_from_cli", "capacity_interval", "capacity_points", "capacity_table",
    "default_slo", "search_grid", "DEFAULT_GRID_MAX", "evaluate", "serving_setup", "headline", "interval_rounds",
    "load_scenario", "paired_better", "point_latency",
    "rank_configurations", "recommend", "render_capacity_table", "requests_for", "run_point", "run_points",
    "search_capacity", "search_table", "single_request_latency", "mark_recommendation", "t_interval", "config_key",
]

def search_table(rs: ResolvedScenario, slo: Slo, load: LoadSpec, configs: list[SystemConfig], spec: "IntervalSpec",
                 acc_model, floor, gpu_hour_cost: float | None = None, target_qps: float | None = None,
                 workers: int | None = None, ray_address: str | None = None, only_eligible: bool = False,
                 progress=None, stop_below_best: bool = True, pool: Workers | None = None,
                 serving: str | None = None, currency: str = "USD") -> tuple[pd.DataFrame, dict, list[SystemConfig]]:
    """The one capacity search behind ``specsim capacity`` and ``specsim report``: every searched
    configuration gets :func:`capacity_interval` with ``spec`` on the same seeds and run length, so both
    commands print the same capacities, intervals and ranks. ``only_eligible``: configurations that cannot
    be recommended are not searched unless their own accuracy is measured and the floor's reference has none
    (``accuracy.searched``; the others are returned as the third value, never ranked nor printed with a
    capacity). Returns (table best first with accuracy, ``standing`` and ``recommended``; the
    recommendation; the configurations left out). ``pool``: the workers to run on (default: new ones from
    ``workers`` / ``ray_address``). ``serving``: a serving benchmark's workload (JSON, ``capacity.bench``);
    ``currency``: of ``gpu_hour_cost`` (a ``currency`` column beside the costs)."""
    from simulator.inputs.accuracy import floor_status, searched

    skipped = [c for c in configs if only_eligible and not searched(acc_model, c, floor)[0]]
    keep = [c for c in configs if c not in skipped]
    points = [replace(p, interval=spec) for p in capacity_points(rs, slo, load, keep, serving)]
    eligible = [floor_status(acc_model, p.cfg, floor)[0] == "meets" for p in points]  # recommend()'s own rule
    rows = (interval_rounds(points, spec, workers, ray_address, progress, stop_below_best, pool, eligible, only_eligible)
            if spec.max_request_doublings == 0 and points
            else run_points(points, workers, ray_address, progress, pool))
    df, rec = mark_recommendation(add_accuracy(capacity_table(rows, gpu_hour_cost, target_qps, currency), acc_model,
                                               floor))
    return df, rec, skipped


def capacity_points(rs: ResolvedScenario, slo: Slo, load: LoadSpec, configs: list[SystemConfig] | None = None,
                    serving: str | None = None) -> list[Point]:
    configs = configs if configs is not None else rs.system_configs()
    return [Point(str(rs.path), hw, tp, cfg, load, slo.text, serving=serving, pp=rs.scenario.base.pp,
                  dp=rs.scenario.base.dp, grid=rs.overrides)
            for hw in rs.hardware_names for tp in rs.tps for cfg in configs]


DEFAULT_GRID_MAX = 12  # configurations (x hardware x TP) a search runs when the grid's knobs are not named


def search_grid(rs: ResolvedScenario, systems: list[str] | None = None, gammas: list[int] | None = None,
                thresholds: list[int] | None = None, trim: bool = True) -> tuple[list[SystemConfig], str | None]:
    """The configurations ``specsim capacity`` searches, and the note saying what was trimmed (None: nothing);
    ``specsim report`` (``trim=False``) searches only the configurations whose accuracy allows it, a few of them.
    The scenario's grid crossed with --system / --gamma / --threshold (``rs.system_configs``); with ``trim``, a grid
    of more than DEFAULT_GRID_MAX searches (x hardware x TP) keeps only the middle value of each knob the command
    line did not name (gamma 5 of 1..8, threshold 7 of 3,5,7,9): a SpecReason capacity search is costly per
    configuration, and a full grid multiplies that cost. Naming the knobs (--gamma / --threshold) searches them all."""
    configs = rs.system_configs(systems, gammas, thresholds)
    cells = len(rs.hardware_names) * len(rs.tps)
    if not trim or len(configs) * cells <= DEFAULT_GRID_MAX:
        return configs, None
    g, t = rs.scenario.grid.gamma, rs.scenario.grid.threshold
    keep_g = gammas or [g[len(g) // 2]]
    keep_t = thresholds or [t[len(t) // 2]]
    trimmed = rs.system_configs(systems, keep_g, keep_t)
    if len(trimmed) == len(configs):
        return configs, None
    knobs = [(name, full, keep) for name, full, keep, named in (("gamma", g, keep_g, gammas),
                                                                ("threshold", t, keep_t, thresholds))
             if not named and any(getattr(c, name) is not None for c in configs)]
    what = ", ".join(f"{name} {keep[0]} of {int_list_text(full)}" for name, full, keep in knobs)
    full = " ".join(f"--{name} {int_list_text(full)}" for name, full, _ in knobs)
    return trimmed, (f"default grid trimmed to {len(trimmed) * cells} of {len(configs) * cells} searches ({what}: "
                     f"the middle values; a SpecReason search takes minutes of CPU); the full grid: {full}")


def default_slo(rs: ResolvedScenario, serving: str | None = None) -> str:
    """The scenario's ``slo`` if set, else p99 latency <= DEFAULT_SLO_FACTOR x vanilla-base's
    single-request latency (first hardware/TP; ``serving``: of that workload's requests)."""
    if rs.scenario.slo:
        return rs.scenario.slo
    hw, tp, vb = rs.hardware_names[0], rs.tps[0], SystemConfig(system="vanilla-base")
    if serving is not None:
        from simulator.studies.capacity.bench import idle_latency

        lat = idle_latency(rs, hw, tp, vb, serving)
    else:
        lat = single_request_latency(rs, hw, tp, vb)
    return f"p99_latency<={DEFAULT_SLO_FACTOR * lat:.4g}s"


def serving_setup(rs: ResolvedScenario, bench_serve: str | None, arrival: str = "poisson") -> tuple[str | None, str | None]:
    """A capacity command's serving workload (``--bench-serve`` or the scenario's ``serving_workload``) as
    (JSON or None, the note: what of its load the search ignores)."""
    from simulator.studies.capacity import bench

    sw = bench.resolve(rs, bench_serve)
    if sw is None:
        return None, None
    if arrival != "poisson":
        raise InputError(None, "--arrival", "with a serving workload its burstiness sets the arrivals (vllm bench "
                         "serve's --burstiness in the --bench-serve line, or serving_workload.burstiness)")
    shape = "Poisson" if sw.burstiness == 1.0 else f"Gamma gaps of burstiness {sw.burstiness:g}"
    note = (f"serving workload {sw.source or 'serving_workload'} ({shape} arrivals): the search sets the load; "
            f"ignored: " + ", ".join(bench.load_notes(sw)))
    return sw.model_dump_json(), note


@dataclass(frozen=True)
class CapacityRequest:
    """What a capacity run asks of a scenario. With ``qps`` / ``users`` / ``arrivals_file``: the SLO check at those
    loads; else the capacity search. ``adaptive_gamma``: each drafting configuration at the grid's largest γ also
    runs with γ chosen per engine iteration (``gamma_policy="goodput"``, up to that γ); ``gamma_policy`` other than
    fixed: every drafting configuration runs with that policy, up to its γ. ``stop_below_best`` (the ``specsim
    simulate capacity`` command and the report: True): configurations the leader already beats get no more
    replications (:func:`interval_rounds`); False (the default for library callers such as validate capacity) gives
    every configuration its own interval to the target. ``bench_serve``: a ``vllm bench serve`` line whose workload
    (its shape; the search sets the rate) replaces the scenario's (its ``serving_workload`` is used when set):
    :mod:`simulator.studies.capacity.bench`. ``trim_grid`` (the command: True): a search over a large default grid
    is trimmed (:func:`search_grid`)."""

    slo_text: str | None = None
    qps: list[float] | None = None
    users: list[int] | None = None
    arrivals_file: str | None = None
    systems: list[str] | None = None
    gammas: list[int] | None = None
    thresholds: list[int] | None = None
    arrival: str = "poisson"
    cv: float | None = None  # bursty arrivals' gap cv (None: 1)
    requests: int | None = None
    seed: int | None = None
    gpu_hour_cost: float | None = None
    target_qps: float | None = None
    currency: str = "USD"
    interval: IntervalSpec | None = None
    accuracy_floor: str | None = None
    accuracy_margin: float | None = None
    adaptive_gamma: bool = False
    gamma_policy: str = "fixed"
    stop_below_best: bool = False
    bench_serve: str | None = None
    trim_grid: bool = False

    @property
    def at_loads(self) -> bool:
        """The SLO check at given loads, not the search."""
        return bool(self.qps or self.users or self.arrivals_file)


@dataclass(frozen=True)
class Where:
    """Where a capacity run's simulations run and whom it tells: local ``workers`` or a Ray cluster, ``progress``
    (called per finished simulation), ``announce(note)`` (told of a trimmed grid before the search starts)."""

    workers: int | None = None
    ray_address: str | None = None
    progress: object = None
    announce: object = None


def _checked(rs: ResolvedScenario, req: CapacityRequest):
    """The request checked against the scenario, in the order the errors are reported: (serving workload, its note,
    SLO, accuracy floor, accuracy model)."""
    req_systems = req.systems or []
    rs.check_systems(req_systems, None, "--system")
    if req.arrival not in ("poisson", "bursty"):
        raise InputError(None, "--arrival", f"expected poisson or bursty (got {req.arrival!r})")
    serving, serving_note = serving_setup(rs, req.bench_serve, req.arrival)
    slo = parse_slo(default_slo(rs, serving) if req.slo_text is None else req.slo_text)
    if req.cv is not None and req.arrival != "bursty":
        raise InputError(None, "--cv", f"sets the gaps of --arrival bursty; {req.arrival} arrivals' gaps have cv 1 "
                         "(add --arrival bursty)")
    if req.cv is not None and not (req.cv > 0 and math.isfinite(req.cv)):
        raise InputError(None, "--cv", f"must be a positive number (got {req.cv})")
    for name, v in (("--gpu-hour-cost", req.gpu_hour_cost), ("--target-qps", req.target_qps)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise InputError(None, name, f"must be a positive number (got {v})")
    from simulator.option_values import check_capacity_requests

    check_capacity_requests(req.requests)
    from simulator.inputs.accuracy import parse_floor, scenario_accuracy

    return serving, serving_note, slo, parse_floor(req.accuracy_floor, req.accuracy_margin), scenario_accuracy(rs)


def _configs(rs: ResolvedScenario, req: CapacityRequest, serving, announce) -> tuple[list[SystemConfig], str | None]:
    """The configurations to run (the grid, trimmed for a large default search; γ policies applied)."""
    configs, grid_note = search_grid(rs, req.systems, req.gammas, req.thresholds,
                                     trim=req.trim_grid and not req.at_loads)
    if grid_note and announce:
        announce(grid_note)
    if req.gamma_policy != "fixed":
        configs = [SystemConfig(**{**c.model_dump(), "gamma_policy": req.gamma_policy}) if c.gamma else c
                   for c in configs]
    if req.adaptive_gamma:
        gmax = max((c.gamma for c in configs if c.gamma), default=0)
        configs += [SystemConfig(**{**c.model_dump(), "gamma_policy": "goodput"})
                    for c in configs if c.gamma and c.gamma == gmax]
    if serving is not None:
        from simulator.studies.capacity.bench import check_systems

        configs = check_systems(configs, bool(req.systems))
    return configs, grid_note


def _meta(rs: ResolvedScenario, req: CapacityRequest, slo: Slo, load: LoadSpec, grid_note, serving,
          serving_note) -> dict:
    meta = {"scenario": str(rs.path), "code": code_version(), "slo": slo.text,
            "arrivals": req.arrival if req.arrival == "poisson" else f"bursty cv={req.cv or 1.0}",
            "requests_per_point": load.requests, "seed": load.seed}
    if grid_note:
        meta["grid_note"] = grid_note
    if serving_note:
        meta["workload_note"] = serving_note
        meta["serving_workload"] = serving
    elif rs.workload_note():
        meta["workload_note"] = rs.workload_note()
    from simulator.catalog.serving_accuracy import scenario_error_lines

    errors = scenario_error_lines(rs)
    if errors:
        meta["model_error"] = errors
    meta["scheduler_limits"] = rs.limits_line()
    return meta


def capacity_study(rs: ResolvedScenario, req: CapacityRequest, where: Where = Where()) -> tuple[pd.DataFrame, dict]:
    """Check ``req`` against the scenario ``rs`` (loaded with any command-line overrides: ``load_scenario``), then
    run it: the SLO check at the given loads, or the capacity search with its recommendation."""
    from simulator.engines.serving.arrivals import load_arrival_times

    serving, serving_note, slo, floor, acc_model = _checked(rs, req)
    configs, grid_note = _configs(rs, req, serving, where.announce)
    load = LoadSpec(req.arrival, req.cv or 1.0, req.requests or DEFAULT_REQUESTS,
                    rs.scenario.seed if req.seed is None else req.seed)
    interval = req.interval or IntervalSpec()
    points = [replace(p, interval=interval) for p in capacity_points(rs, slo, load, configs, serving)]
    meta = _meta(rs, req, slo, load, grid_note, serving, serving_note)
    if req.arrivals_file:
        load_arrival_times(req.arrivals_file)  # validate once, here: errors name the file and line
    if req.at_loads:
        levels = [dict(rate=q) for q in req.qps or []] + [dict(users=u) for u in req.users or []]
        levels += [dict(replay=str(req.arrivals_file))] if req.arrivals_file else []
        pts = [replace(p, **lv) for p in points for lv in levels]
        return pd.DataFrame(run_points(pts, where.workers, where.ray_address, where.progress)), meta
    df, rec, _ = search_table(rs, slo, load, configs, interval, acc_model, floor, req.gpu_hour_cost, req.target_qps,
                              where.workers, where.ray_address, progress=where.progress,
                              stop_below_best=req.stop_below_best, serving=serving, currency=req.currency)
    meta["accuracy_floor"] = floor.describe()
    meta["recommended"] = None if rec["best"] is None else rec["best"].label
    meta["recommended_ties"] = rec["ties"]
    meta["headline"] = headline(df, rec, slo.text, req.gpu_hour_cost, req.currency, req.target_qps,
                                exact=serving is not None)
    meta["currency"] = req.currency
    return df, meta


def capacity_from_cli(scenario: str, slo_text: str | None = None, *, grid_overrides: dict | None = None,
                      workers: int | None = None, ray_address: str | None = None, progress=None, announce=None,
                      **request) -> tuple[pd.DataFrame, dict]:
    """:func:`capacity_study` for a scenario named by path or name (library callers: validate capacity); ``request``:
    the :class:`CapacityRequest` fields."""
    rs = load_scenario(scenario, grid_overrides)
    return capacity_study(rs, CapacityRequest(slo_text=slo_text, **request), Where(workers, ray_address, progress,
                                                                                   announce))
