"""Capacity search, SLO parsing, serial == parallel, costs, CLI errors, the report."""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from simulator.studies.capacity import LoadSpec, Point, capacity_table, evaluate, run_points, search_capacity
from simulator.errors import InputError
from simulator.engines.serving.slo import parse_slo
from simulator.inputs.systems import SystemConfig
from specsim_cli.main import main

SC = "scenarios/cpu-smollm2.yaml"
LOAD = LoadSpec(requests=80, seed=3)


def point(cfg=SystemConfig(system="vanilla-base"), slo="p99_latency<=40s", **kw) -> Point:
    return Point(SC, "cpu", 1, cfg, LOAD, slo, **kw)


# ---- SLO strings ------------------------------------------------------------------------------
@pytest.mark.parametrize("text,stat,metric,limit", [
    ("p99_latency<=300s", "p99", "latency_s", 300.0), ("P90_TTFT <= 500ms", "p90", "ttft_s", 0.5),
    ("mean_latency<2min", "mean", "latency_s", 120.0), ("median_queue_delay<=1.5", "p50", "queue_delay_s", 1.5),
    ("p50_latency<=1e2s", "p50", "latency_s", 100.0),
])
def test_parse_slo(text, stat, metric, limit):
    (t,) = parse_slo(text).terms
    assert (t.stat, t.metric) == (stat, metric) and t.limit_s == pytest.approx(limit)


def test_parse_slo_several_terms():
    s = parse_slo("p99_latency<=300s, mean_ttft<=2 and p90_queue_delay<=1")
    assert [t.name for t in s.terms] == ["p99_latency_s", "mean_ttft_s", "p90_queue_delay_s"]


@pytest.mark.parametrize("bad", ["", "p99latency<=3", "p98_latency<=3", "p99_tbt<=3", "p99_latency>=3",
                                 "p99_latency<=0", "p99_latency<=3h", "p99_latency<=", "latency<=3"])
def test_parse_slo_errors(bad):
    with pytest.raises(InputError, match="--slo"):
        parse_slo(bad)


@given(st.sampled_from(["mean", "p50", "p90", "p95", "p99"]), st.sampled_from(["latency", "ttft", "tpot", "itl"]),
       st.floats(1e-3, 1e5), st.sampled_from(["", "s", "ms", " s"]))
def test_parse_slo_roundtrip(stat, metric, value, unit):
    (t,) = parse_slo(f"{stat}_{metric} <= {value!r}{unit}").terms
    assert t.limit_s == pytest.approx(value * (1e-3 if unit == "ms" else 1.0), rel=1e-9)


# ---- the search ---------------------------------------------------------------------------------
def test_search_brackets_the_capacity():
    p = point()
    row = search_capacity(p, rel_tol=0.1)
    q = row["max_qps"]
    assert q > 0 and row["slo_met"]
    assert evaluate(p, q)["slo_met"]
    assert not evaluate(p, q * 1.1 * 1.001)["slo_met"] or row["evaluations"] >= 14


def test_looser_slo_more_capacity():
    tight = search_capacity(point(slo="p99_latency<=25s"), rel_tol=0.1)["max_qps"]
    loose = search_capacity(point(slo="p99_latency<=60s"), rel_tol=0.1)["max_qps"]
    assert loose >= tight


def test_impossible_slo_gives_zero():
    row = search_capacity(point(slo="p99_latency<=0.01s"))
    assert row["max_qps"] == 0.0 and not row["slo_met"]


def test_serial_and_parallel_give_identical_numbers():
    pts = [point(rate=0.5), point(SystemConfig(system="specdecode", gamma=2), rate=0.5),
           point(SystemConfig(system="specreason", threshold=5), rate=0.3), point(users=3)]
    serial = pd.DataFrame(run_points(pts, workers=1))
    parallel = pd.DataFrame(run_points(pts, workers=2))
    pd.testing.assert_frame_equal(serial, parallel)


def test_point_seed_is_common_across_rates_and_configurations():
    # common random numbers: replication k has one seed for every rate and every configuration
    assert point().seed == point(rate=2.0).seed == replace(point(), slo_text="mean_latency<=1").seed
    assert point().seed == point(SystemConfig(system="specdecode", gamma=2)).seed
    assert point().seed != replace(point(), replication=1).seed


def test_capacity_table_costs():
    rows = [{"hardware": "h", "tp": 2, "system": "vanilla-base", "gamma": None, "threshold": None, "first_n": 0,
             "label": "vanilla-base", "max_qps": 0.5},
            {"hardware": "h", "tp": 2, "system": "specdecode", "gamma": 4, "threshold": None, "first_n": 0,
             "label": "specdecode g=4", "max_qps": 0.8}]
    df = capacity_table(rows, gpu_hour_cost=2.0, target_qps=3.0)
    best = df.iloc[0]
    assert best.label == "specdecode g=4"
    assert best.cost_per_1000_requests == pytest.approx(1000 * 2 * 2.0 / (3600 * 0.8))
    assert best.replicas == math.ceil(3.0 / 0.8) and best.gpus == 2 * 4
    assert df.iloc[1].replicas == 6


# ---- CLI --------------------------------------------------------------------------------------
def test_cli_errors_are_one_line(capsys):
    assert main(["simulate", "capacity", SC, "--slo", "p99_lat<=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --slo") and "\n" not in err
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=3", "--qps", "1,x"]) == 2
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=3", "--arrival", "weibull"]) == 2
    capsys.readouterr()
    # --cv shapes bursty gaps only: with Poisson arrivals it would be ignored, so it is refused
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=3", "--qps", "0.1", "--cv", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --cv") and "--arrival bursty" in err and "\n" not in err
    assert main(["simulate", "capacity", SC, "--arrival", "bursty", "--cv", "0", "--qps", "0.1"]) == 2
    assert "positive" in capsys.readouterr().err
    try:
        import ray  # noqa: F401
    except ImportError:
        assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=3", "--ray-address", "auto", "--system", "vanilla-base",
                     "--requests", "20"]) == 2
        assert "ray is not installed" in capsys.readouterr().err


def test_cli_capacity_at_given_loads(capsys):
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=40s", "--qps", "0.5", "--users", "2", "--system", "vanilla-base",
                 "--requests", "40", "--format", "csv", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    df = pd.read_csv(__import__("io").StringIO(out))
    assert len(df) == 2 and set(df.slo_met) <= {True, False}


def test_report_writes_complete_files(tmp_path):
    sc = yaml.safe_load(open(SC))
    sc.update(systems=["vanilla-base", "specdecode"], grid={"gamma": [2]}, name="tiny")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = tmp_path / "rep"
    assert main(["simulate", "report", str(path), "--out", str(out), "--requests", "40", "--gpu-hour-cost", "1",
                 "--target-qps", "2", "--workers", "1", "--slo", "p99_latency<=40s"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["capacity.csv", "engine_load.png", "latency_vs_load.csv", "latency_vs_load.png", "pareto.png",
                     "report.md", "resolved.json", "slo_frontier.png"]
    md = (out / "report.md").read_text()
    for s in ("## Answer", "Recommended: ", "Accuracy floor", "## Excluded configurations and why", "pareto.png",
              "## Assumptions", "## Provenance", "cpu_gsm_smollm2", "per 1000 requests"):
        assert s in md
    assert (out / "latency_vs_load.png").read_bytes()[:4] == b"\x89PNG"
    assert np.isfinite(pd.read_csv(out / "capacity.csv").max_qps).all()


def test_report_names_the_serving_engine_and_its_async_scheduling(tmp_path):
    from simulator.inputs.scenario import load_scenario
    from simulator.report.capacity_markdown import engine_line

    line = engine_line(load_scenario("reference-a6000-qwq32b"))  # GPU priors, no serving_engine: the newest, defaults
    assert line.startswith("Serving engine (GPU priors' host terms): vllm ") and "async scheduling on" in line
    assert "off for an engine speculating with a separate draft model" in line
    sc = yaml.safe_load((Path(__file__).resolve().parents[2] / "scenarios" / "reference-a6000-qwq32b.yaml").read_text())
    for stated, want in ((False, "async scheduling off (stated)"), (True, "async scheduling on (stated)")):
        sc["serving_engine"] = {"version": "0.11", "async_scheduling": stated}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
        assert want in engine_line(load_scenario(str(tmp_path / "s.yaml")))


def test_cli_replayed_arrivals(tmp_path, capsys):
    f = tmp_path / "arrivals.jsonl"
    f.write_text("\n".join(f'{{"arrival_s": {0.7 * i}}}' for i in range(30)))
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=60s", "--arrivals-file", str(f), "--system", "vanilla-base",
                 "--format", "json", "--workers", "1"]) == 0
    import json

    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["requests"] == 30 and row["replay"] == str(f)
    f.write_text("0\n1\n-3\n")
    assert main(["simulate", "capacity", SC, "--slo", "p99_latency<=60s", "--arrivals-file", str(f)]) == 2
    assert "line 3" in capsys.readouterr().err


def test_overload_is_caught_by_the_drift_check(tmp_path):
    from simulator.engines.serving.metrics import DRIFT_LIMIT

    # at most 4 sequences per engine (the scenario's execution.max_num_seqs, the one place that sets it): ~0.6
    # requests/s of capacity, offered 5/s
    sc = tmp_path / "four-seqs.yaml"
    sc.write_text(Path(SC).read_text(encoding="utf-8") + "execution: {max_num_seqs: 4}\n", encoding="utf-8")
    p = Point(str(sc), "cpu", 1, SystemConfig(system="vanilla-base"), LoadSpec(requests=200, seed=3), "p99_latency<=100000s")
    row = evaluate(p, rate=5.0)
    assert row["latency_drift"] > DRIFT_LIMIT and not row["slo_met"]
    calm = evaluate(p, rate=0.1)
    assert calm["latency_drift"] < DRIFT_LIMIT and calm["slo_met"]


def test_stationarity_rejects_a_growing_backlog_and_keeps_a_stable_one():
    from simulator.engines.serving.metrics import latency_drift, stationarity

    rng = np.random.default_rng(0)
    n = 300
    t = np.sort(rng.uniform(0, 1000, n))
    # the case: latency drift 1.44 (last quarter vs second quarter) -- a growing queue
    grow = pd.DataFrame({"arrival_at": t, "latency_s": 100 * (1 + 0.9 * t / 1000) * rng.lognormal(0, 0.3, n)})
    grow["done_at"] = grow.arrival_at + grow.latency_s  # the sustain check counts completions and requests in system
    assert 1.25 < latency_drift(grow) < 1.6
    assert not stationarity(grow)["stationary"]
    calm = pd.DataFrame({"arrival_at": t, "latency_s": 100 * rng.lognormal(0, 0.3, n)})
    calm["done_at"] = calm.arrival_at + calm.latency_s
    assert stationarity(calm)["stationary"]
