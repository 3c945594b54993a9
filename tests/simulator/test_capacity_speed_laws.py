"""The laws issue 30's faster capacity search relies on (no timings here):

- a rate whose SLO is certainly missed stops early and is still classified unsustainable: the early-stopped verdict
  equals the full run's at every rate, its latencies are lower bounds of the full run's, and the search finds the
  same capacity with and without stopping;
- results do not depend on the workers: one process, two processes, and one pool shared by two stages give the same
  rows;
- a configuration's single-request latency is the same whether computed, cached, or carried by its point.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import simulator.studies.capacity.search as search
from simulator.studies.capacity import (IntervalSpec, LoadSpec, Point, Workers, capacity_points, evaluate, interval_rounds,
                                run_points, search_capacity, search_table, single_request_latency)
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.slo import parse_slo
from simulator.inputs.systems import SystemConfig

SC = "scenarios/cpu-smollm2.yaml"
LOAD = LoadSpec(requests=60, seed=4)
VANILLA = SystemConfig(system="vanilla-base")
SPECDECODE = SystemConfig(system="specdecode", gamma=2)
SPECREASON = SystemConfig(system="specreason", threshold=5)


def point(cfg=VANILLA, slo="p99_latency<=40s", **kw) -> Point:
    return Point(SC, "cpu", 1, cfg, LOAD, slo, **kw)


# ---- hopeless rates stop early -------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [VANILLA, SPECDECODE, SPECREASON])
def test_an_early_stopped_rate_is_still_unsustainable(cfg):
    """Far above capacity the run stops before its last request, and the verdict is the full run's: unsustainable."""
    p = point(cfg)
    r0 = 1.0 / single_request_latency(load_scenario(SC), "cpu", 1, cfg)
    stopped = evaluate(p, 32 * r0, stop_early=True)
    full = evaluate(p, 32 * r0)
    assert stopped["stopped_early"] and not full["stopped_early"]
    assert stopped["slo_met"] is False and full["slo_met"] is False
    assert stopped["requests"] <= full["requests"]
    # the stopped run's latencies are lower bounds: its p99 already exceeds the limit, and never the full run's
    assert 40.0 < stopped["latency_p99_s"] <= full["latency_p99_s"] + 1e-9


@pytest.mark.parametrize("cfg,slo", [(VANILLA, "p99_latency<=40s"), (SPECREASON, "p90_latency<=30s"),
                                     (SPECDECODE, "mean_latency<=25s"), (VANILLA, "p99_ttft<=5s"),
                                     (SPECREASON, "p90_queue_delay<=3s, p99_latency<=60s")])
def test_stopping_early_never_changes_a_verdict(cfg, slo):
    p = point(cfg, slo)
    r0 = 1.0 / single_request_latency(load_scenario(SC), "cpu", 1, cfg)
    seen = set()
    for rate in r0 * np.geomspace(0.5, 40, 9):
        fast = evaluate(p, rate, stop_early=True)
        assert fast["slo_met"] == evaluate(p, rate)["slo_met"], rate
        seen.add((fast["slo_met"], fast["stopped_early"]))
    assert {(True, False), (False, True)} <= seen  # both kinds of rate were tried


def test_the_search_finds_the_same_capacity_with_and_without_stopping(monkeypatch):
    pts = [point(VANILLA), point(SPECREASON, "p90_latency<=30s")]
    fast = [search_capacity(p) for p in pts]
    plain = search.evaluate
    monkeypatch.setattr(search, "evaluate", lambda pt, rate=None, users=None, replay=None, stop_early=False:
                        plain(pt, rate, users, replay, stop_early=False))
    slow = [search_capacity(p) for p in pts]
    assert [(r["max_qps"], r["evaluations"]) for r in fast] == [(r["max_qps"], r["evaluations"]) for r in slow]
    assert not any(r["stopped_early"] for r in slow)


# ---- workers ----------------------------------------------------------------------------------------
def test_one_or_two_workers_and_a_shared_pool_give_the_same_rows():
    rs = load_scenario(SC)
    slo = parse_slo("p99_latency<=40s")
    configs = [VANILLA, SPECDECODE, SPECREASON]
    spec = IntervalSpec(max_reps=4)
    pts = [replace(p, interval=spec) for p in capacity_points(rs, slo, LOAD, configs)]
    curve = [point(c, rate=q) for c in configs for q in (0.05, 0.2)]
    keys = ["label", "max_qps", "max_qps_lo", "max_qps_hi", "replications", "evaluations", "stopped"]
    one = interval_rounds(pts, spec, workers=1)
    one_curve = run_points(curve, workers=1)
    with Workers(2) as pool:  # both stages on the same two processes, as the report runs them
        two = interval_rounds(pts, spec, pool=pool)
        two_curve = run_points(curve, pool=pool)
    assert [[r[k] for k in keys] for r in one] == [[r[k] for k in keys] for r in two]
    assert [(r["latency_p99_s"], r["slo_met"]) for r in one_curve] == [(r["latency_p99_s"], r["slo_met"]) for r in two_curve]


def test_search_table_is_the_same_on_one_process_and_on_a_pool():
    from simulator.inputs.accuracy import parse_floor, scenario_accuracy

    rs = load_scenario(SC)
    args = (rs, parse_slo("p99_latency<=40s"), LOAD, [VANILLA, SPECDECODE], IntervalSpec(max_reps=3),
            scenario_accuracy(rs), parse_floor("none", None))
    a, _, _ = search_table(*args, workers=1)
    with Workers(2) as pool:
        b, _, _ = search_table(*args, pool=pool)
    cols = ["label", "max_qps", "max_qps_lo", "max_qps_hi", "rank", "standing"]
    assert a[cols].equals(b[cols])


# ---- single-request latency ------------------------------------------------------------------------
def test_single_request_latency_is_the_same_cached_shared_or_carried():
    rs = load_scenario(SC)
    for cfg in (VANILLA, SPECDECODE, SystemConfig(system="specdecode", gamma=4), SPECREASON):
        fresh = single_request_latency(rs, "cpu", 1, cfg, cached=False)
        assert single_request_latency(search.cached_scenario(SC), "cpu", 1, cfg) == fresh
        assert search.point_latency(point(cfg)) == fresh
        assert search.point_latency(point(cfg, single_latency_s=fresh)) == fresh
    row = search_capacity(point(SPECDECODE))
    assert row["single_request_latency_s"] == single_request_latency(rs, "cpu", 1, SPECDECODE, cached=False)
