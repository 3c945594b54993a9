"""One rule for the table and the Best line (issue 41): the rows marked "within the interval of the best" are exactly
the ties the Best line lists (``capacity.table.mark_recommendation``), whatever the capacities and the accuracy
verdicts; replicas for a target come from the max rate and from the interval's lower bound (which may need one more);
a report on a gamma outside the scenario's grid finds its configuration's points (keys: ``config_key``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

from simulator.studies.capacity.table import capacity_table, config_key, config_names, headline, mark_recommendation


def _rows(caps: list[tuple[float, ...]], tps: list[int]) -> list[dict]:
    out = []
    for i, (c, tp) in enumerate(zip(caps, tps)):
        m = float(np.mean(c))  # the interval holds the mean (np.mean of equal values can round below them)
        out.append({"label": f"c{i}", "system": "vanilla-base", "gamma": None, "threshold": None, "first_n": 0,
                    "hardware": "h100-sxm", "tp": tp, "capacities": c, "max_qps": m, "max_qps_lo": min(min(c), m),
                    "max_qps_hi": max(max(c), m), "converged": True, "replications": len(c)})
    return out


def _with_accuracy(df: pd.DataFrame, verdicts: list[str]) -> pd.DataFrame:
    df = df.copy()
    by_label = dict(zip([f"c{i}" for i in range(len(verdicts))], verdicts))
    df["accuracy_floor"] = [by_label[lab] for lab in df.label]
    df["accuracy"] = np.nan
    df["accuracy_why"] = "test"
    return df


def _listed_ties(line: str) -> set[str]:
    if "no other configuration within its interval" in line:
        return set()
    return {t.strip() for t in line.split("within the interval of the best: ")[1].rstrip(".").split(",")}


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.tuples(st.lists(st.floats(0.0, 10.0), min_size=3, max_size=3), st.sampled_from([1, 2]),
                          st.sampled_from(["meets", "meets", "fails", "unknown"])), min_size=1, max_size=6))
def test_table_standing_and_best_line_are_one_rule(rows):
    caps = [tuple(c) for c, _, _ in rows]
    df = capacity_table(_rows(caps, [tp for _, tp, _ in rows]), None, 3.0)
    df, rec = mark_recommendation(_with_accuracy(df, [v for _, _, v in rows]))
    line = headline(df, rec, "p99_latency<=10s")
    within = set(df.label[df.standing == "within the interval of the best"])
    if rec["best"] is None:
        assert "best" not in set(df.standing) and not within
        return
    assert _listed_ties(line) == set(config_names(df[df.standing == "within the interval of the best"], df))
    assert list(df.label[df.standing == "best"]) == [rec["best"].label]
    assert set(df.label[df.recommended]) == within | {rec["best"].label}
    assert all(s.startswith("excluded") for s, v in zip(df.standing, df.accuracy_floor) if v != "meets"
               and s != "sustains no load")


def test_an_excluded_leader_does_not_hide_the_ties():
    """c0 (fails the accuracy floor) beats c2 by far; c1 and c2 tie: the table and the Best line both name c2 as
    within the interval of c1 -- although c2's rank over the whole table is 2."""
    caps = [(9.0, 9.1, 8.9), (5.0, 5.1, 4.9), (4.95, 5.05, 4.9)]
    df = capacity_table(_rows(caps, [1, 1, 1]), None, None)
    df, rec = mark_recommendation(_with_accuracy(df, ["fails", "meets", "meets"]))
    st_ = dict(zip(df.label, df.standing))
    assert st_ == {"c0": "excluded: accuracy fails", "c1": "best", "c2": "within the interval of the best"}
    assert _listed_ties(headline(df, rec, "p99_latency<=10s")) == {"c2"}


@settings(max_examples=examples(60), deadline=None)
@given(st.floats(0.01, 100.0), st.lists(st.floats(0.05, 20.0), min_size=3, max_size=3))
def test_replicas_at_the_lower_bound(target, caps):
    df = capacity_table(_rows([tuple(caps)], [2]), None, target)
    r = df.iloc[0]
    assert r.replicas == math.ceil(target / r.max_qps) and r.replicas_lo == math.ceil(target / r.max_qps_lo)
    assert r.replicas_lo >= r.replicas and r.gpus_lo == 2 * r.replicas_lo


def test_best_line_shows_both_replica_counts():
    caps = [(2.0, 2.6, 3.1)]  # mean 2.57, lower bound 2.0: 10 req/s takes 4 replicas, 5 at the lower bound
    df = capacity_table(_rows(caps, [1]), None, 10.0)
    df, rec = mark_recommendation(_with_accuracy(df, ["meets"]))
    line = headline(df, rec, "p99_latency<=10s", target_qps=10.0)
    assert "10 req/s takes 4 replica(s) = 4 GPU(s) (5 = 5 at the interval's lower bound)" in line, line
    df = capacity_table(_rows([(0.0, 2.0, 4.0)], [1]), None, 10.0)  # the interval reaches 0: no count suffices
    df, rec = mark_recommendation(_with_accuracy(df, ["meets"]))
    line = headline(df, rec, "p99_latency<=10s", target_qps=10.0)
    assert "takes 5 replica(s) = 5 GPU(s) (no count is shown to suffice: the interval's lower bound is 0)" in line, line


def test_config_key_of_a_point_is_its_rows():
    from simulator.studies.capacity import LoadSpec, capacity_points, load_scenario
    from simulator.engines.serving.slo import parse_slo
    from simulator.inputs.systems import SystemConfig

    rs = load_scenario("cpu-smollm2")
    cfg = SystemConfig(system="specdecode", gamma=3)
    (p,) = capacity_points(rs, parse_slo("p99_latency<=40s"), LoadSpec(), [cfg])
    assert config_key(p) == (cfg.label, "cpu", 1)


@pytest.mark.parametrize("gamma", [3])  # not in cpu-smollm2's grid (1, 2, 4, 6): a KeyError after the search before
def test_report_on_a_gamma_outside_the_grid(tmp_path, gamma):
    from simulator.studies.capacity import IntervalSpec
    from simulator.report.capacity_report import build_report

    path, line, _ = build_report("cpu-smollm2", tmp_path / "r", requests=20, workers=1, systems=["specdecode"],
                              gammas=[gamma], interval=IntervalSpec(max_reps=3))
    assert path.is_file() and line.startswith(f"Best: specdecode g={gamma} on cpu")


def test_report_answer_gives_replicas_at_the_lower_bound():
    from simulator.report.capacity_markdown import _at_lower_bound

    row = pd.Series(dict(replicas=4.0, replicas_lo=5.0, gpus_lo=10.0, max_qps_lo=2.0))
    assert _at_lower_bound(row, "GPU") == "; 5 = 10 GPU(s) if the capacity is at its interval's lower bound (2 requests/s)"
    assert _at_lower_bound(row.copy().replace({5.0: 4.0}), "GPU") == ""  # the same count: nothing to add
    zero = pd.Series(dict(replicas=4.0, replicas_lo=np.nan, gpus_lo=np.nan, max_qps_lo=0.0))
    assert "no count is shown to suffice" in _at_lower_bound(zero, "GPU")  # never int(nan)
