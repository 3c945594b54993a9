"""Accuracy model and accuracy-aware recommendations (issue 18): laws and input errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.inputs.accuracy import (AccuracyModel, AccuracyProfile, Floor, floor_status, load_accuracy_profile,
                                model_for_workload, parse_floor)
from simulator.studies.capacity import add_accuracy, rank_configurations, recommend
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig
from specsim_cli.main import main
from tests.conftest import examples

AIME = "simulator/profiles/accuracy_aime_qwq32b_r1-1.5b.yaml"


def _profile(entries) -> AccuracyProfile:
    return AccuracyProfile.model_validate({
        "name": "t", "dataset": "d", "base_model": "b", "small_model": "s", "token_budget": 100,
        "provenance": {"kind": "measured", "source": "test"},
        "entries": [{"system": s, "threshold": t, "source": "test", "groups": [{"name": "g", "correct": c, "total": n}]}
                    for s, t, c, n in entries]})


def test_aime_profile_is_the_weighted_mean_of_the_problems():
    prof = load_accuracy_profile(AIME)
    (e,) = prof.entries
    assert (e.system, e.threshold, e.first_n) == ("specreason", 7, 0)
    assert len(e.groups) == 10 and sum(g.total for g in e.groups) == 16 * 8 + 14 + 9
    est = AccuracyModel(prof).estimate(SystemConfig(system="specreason", threshold=7))
    assert est.mean == pytest.approx(np.mean([g.correct / g.total for g in e.groups]))
    assert est.low < est.mean < est.high
    assert all(c.source.startswith("../shared/REFERENCE.md") for c in prof.published)  # qualitative only


@pytest.mark.parametrize("gamma", [1, 2, 5, 8])
def test_speculative_decoding_has_its_targets_accuracy(gamma):
    m = AccuracyModel(_profile([("vanilla-base", None, 30, 50), ("specreason", 5, 20, 50), ("vanilla-small", None, 5, 50)]))
    assert m.estimate(SystemConfig(system="specdecode", gamma=gamma)) == m.estimate(SystemConfig(system="vanilla-base"))
    for t in (5,):
        assert (m.estimate(SystemConfig(system="specreason-decode", gamma=gamma, threshold=t))
                == m.estimate(SystemConfig(system="specreason", threshold=t)))
    # the difference to the reference is exactly 0: meets any relative floor, even margin 0
    assert floor_status(m, SystemConfig(system="specdecode", gamma=gamma), Floor("relative", 0.0))[0] == "meets"
    # and with no data for the reference, still meets (identical by law), while others are unknown
    m2 = AccuracyModel(_profile([("specreason", 5, 20, 50)]))
    assert floor_status(m2, SystemConfig(system="specdecode", gamma=gamma), Floor())[0] == "meets"
    assert floor_status(m2, SystemConfig(system="specreason", threshold=5), Floor())[0] == "unknown"


def test_unknown_is_unknown_never_guessed():
    m = AccuracyModel(_profile([("vanilla-base", None, 30, 50)]))
    assert m.estimate(SystemConfig(system="specreason", threshold=3)) is None
    assert floor_status(m, SystemConfig(system="vanilla-small"), Floor())[0] == "unknown"
    assert floor_status(m, SystemConfig(system="vanilla-small"), Floor("absolute", value=0.1))[0] == "unknown"


def test_floor_verdicts():
    m = AccuracyModel(_profile([("vanilla-base", None, 1600, 2000), ("vanilla-small", None, 400, 2000),
                                ("specreason", 7, 1592, 2000)]))
    assert floor_status(m, SystemConfig(system="vanilla-small"), Floor())[0] == "fails"
    assert floor_status(m, SystemConfig(system="specreason", threshold=7), Floor("relative", 0.05))[0] == "meets"
    assert floor_status(m, SystemConfig(system="vanilla-small"), Floor("none"))[0] == "meets"


def _table(n_cfg: int, seed: int) -> tuple[pd.DataFrame, AccuracyModel]:
    rng = np.random.default_rng(seed)
    systems = ["vanilla-base", "vanilla-small"] + ["specreason"] * (n_cfg - 2)
    thr = [None, None] + list(range(n_cfg - 2))
    entries = [(s, t, int(rng.integers(0, 41)), 40) for s, t in zip(systems, thr)]
    model = AccuracyModel(_profile(entries))
    rows = []
    for s, t in zip(systems, thr):
        caps = tuple(float(x) for x in rng.uniform(0.1, 2.0) * rng.uniform(0.8, 1.2, 4))
        rows.append({"hardware": "h", "tp": 1, "system": s, "gamma": None, "threshold": t, "first_n": 0,
                     "label": f"{s} {t}", "max_qps": float(np.mean(caps)), "capacities": caps, "qps_per_gpu": float(np.mean(caps))})
    return rank_configurations(pd.DataFrame(rows)), model


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(3, 7), st.integers(0, 10_000), st.floats(0, 1), st.floats(0, 1), st.booleans())
def test_a_higher_floor_never_raises_the_recommended_capacity(n_cfg, seed, f1, f2, relative):
    df, model = _table(n_cfg, seed)
    lo, hi = sorted((f1, f2))
    if relative:  # a higher floor = a smaller margin below vanilla-base
        floors = Floor("relative", margin=1 - lo), Floor("relative", margin=1 - hi)
    else:
        floors = Floor("absolute", value=lo), Floor("absolute", value=hi)
    cap_lo = recommend(add_accuracy(df, model, floors[0]))["capacity"]
    cap_hi = recommend(add_accuracy(df, model, floors[1]))["capacity"]
    assert cap_hi <= cap_lo + 1e-12


def test_more_replications_never_widen_the_interval_in_expectation():
    from simulator.studies.capacity import t_interval

    rng = np.random.default_rng(0)
    caps = rng.lognormal(np.log(0.05), 0.15, size=(4000, 12))  # per-replication capacities
    width = [np.mean([t_interval(row[:k])[1] for row in caps]) for k in range(2, 13)]
    assert all(b <= a for a, b in zip(width, width[1:]))


def test_ties_are_ties_and_separated_intervals_rank():
    rows = [{"hardware": "h", "tp": 1, "label": "a", "max_qps": 1.0, "capacities": (1.0, 1.1, 0.9, 1.0)},
            {"hardware": "h", "tp": 1, "label": "b", "max_qps": 1.02, "capacities": (1.1, 1.0, 1.0, 0.98)},
            {"hardware": "h", "tp": 1, "label": "c", "max_qps": 0.5, "capacities": (0.5, 0.52, 0.47, 0.51)}]
    df = rank_configurations(pd.DataFrame(rows)).set_index("label")
    assert df.loc["a", "rank"] == df.loc["b", "rank"] == 1 and df.loc["c", "rank"] == 3
    assert df.loc["a", "ties"] == "b"


# ---- bad inputs: exit 2, one line naming the file and the field ----------------------------------
@pytest.mark.parametrize("edit,field", [
    (lambda d: d["entries"][0]["groups"][0].update(correct=99, total=3), "entries.0.groups.0"),
    (lambda d: d["entries"][0].update(system="specdecode"), "entries.0.system"),
    (lambda d: d["entries"][0].update(kind="published"), "entries.0.kind"),
    (lambda d: d.update(base_model="other/model"), "base_model"),
    (lambda d: d["entries"].append(dict(d["entries"][0])), "entries"),
])
def test_bad_accuracy_profile_exits_2_naming_file_and_field(tmp_path, capsys, edit, field):
    d = yaml.safe_load(open(AIME))
    edit(d)
    bad = tmp_path / "acc.yaml"
    bad.write_text(yaml.safe_dump(d))
    sc = yaml.safe_load(open("scenarios/reference-a6000-qwq32b.yaml"))
    sc["accuracy"] = str(bad)
    scp = tmp_path / "sc.yaml"
    scp.write_text(yaml.safe_dump(sc))
    assert main(["simulate", "whatif", str(scp), "--system", "vanilla-base"]) == 2
    errs = [l for l in capsys.readouterr().err.strip().splitlines() if l.startswith("error:")]
    assert len(errs) == 1 and str(bad) in errs[0] and field in errs[0]  # (a progress line may precede it)


def test_bad_floor_options():
    with pytest.raises(InputError, match="--accuracy-floor"):
        parse_floor("1.5")
    with pytest.raises(InputError, match="--accuracy-floor"):
        parse_floor("specdecode")
    with pytest.raises(InputError, match="--accuracy-margin"):
        parse_floor(None, -0.1)


def test_whatif_shows_accuracy_or_unknown():
    from simulator.studies.whatif import run_grid

    rs = load_scenario("reference-a6000-qwq32b")
    df = run_grid(rs, configs=[SystemConfig(system="vanilla-base"), SystemConfig(system="specreason", threshold=7),
                               SystemConfig(system="specreason-decode", gamma=3, threshold=7)])
    acc = df.set_index("system").accuracy
    assert np.isnan(acc["vanilla-base"])  # no graded vanilla-base answers for AIME: unknown
    assert acc["specreason"] == acc["specreason-decode"] == pytest.approx(0.31875)


def test_budget_mismatch_gives_unknown():
    rs = load_scenario("reference-a6000-qwq32b")
    w = rs.workload.model_copy(update={"token_budget": 4096})
    m = model_for_workload(w)
    assert m.profile is None and "8192" in m.unknown_reason
