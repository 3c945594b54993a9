"""One capacity answer (issue 30): `specsim report` prints the capacities, intervals and ranks of `specsim capacity`;
a configuration that sustains no load is never ranked; every report opens with the best configuration and why."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.studies.capacity import capacity_table, recommend
from specsim_cli.main import main
from tests.conftest import examples

SC = "scenarios/cpu-smollm2.yaml"
SMALL = ["--requests", "40", "--workers", "1", "--max-replications", "3", "--seed", "2", "--slo", "p99_latency<=40s"]


def _tiny(tmp_path):
    sc = yaml.safe_load(open(SC))
    sc.update(systems=["vanilla-base", "specdecode", "specreason"], grid={"gamma": [2], "threshold": [5]}, name="tiny")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def test_report_and_capacity_agree_within_the_interval(tmp_path, capsys):
    path = _tiny(tmp_path)
    assert main(["simulate", "capacity", str(path), *SMALL, "--format", "csv"]) == 0
    cap = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("label")
    out = tmp_path / "rep"
    assert main(["simulate", "report", str(path), "--out", str(out), *SMALL]) == 0
    cap_io = capsys.readouterr()
    printed = cap_io.out.strip().splitlines()
    assert "ETA ~" in cap_io.err and "search replications" in cap_io.err  # progress with an ETA
    rep = pd.read_csv(out / "capacity.csv").set_index("label")
    # the report searches what can be recommended (vanilla-base and specdecode meet the accuracy floor)
    assert set(rep.index) == {"vanilla-base", "specdecode g=2"}
    for label, r in rep.iterrows():
        c = cap.loc[label]
        assert c.max_qps_lo - 1e-12 <= r.max_qps <= c.max_qps_hi + 1e-12
        assert r.max_qps_lo - 1e-12 <= c.max_qps <= r.max_qps_hi + 1e-12
        assert r.converged == c.converged and r.replications == c.replications
    # the same order: the report ranks what it searched among themselves, capacity ranks every configuration
    searched = cap.loc[rep.index, "rank"].dropna()
    assert list(rep["rank"].dropna().sort_values(kind="stable").index) == list(searched.sort_values(kind="stable").index)
    md = (out / "report.md").read_text().splitlines()
    best = rep.index[0]
    assert md[2].startswith(f"**Best: {best} ") and "req/s per replica" in md[2] and "accuracy" in md[2]
    assert printed[0].startswith(f"Best: {best} ")
    assert "| converged |" in "\n".join(md)
    text = "\n".join(md)
    assert "specreason t=5: accuracy" in text and "not searched" in text  # below the floor: listed, no figure
    assert "screening" not in text
    assert "per CPU host" in text and "GPU" not in text.split("## Assumptions")[0]  # a CPU scenario's report


rows = st.lists(st.tuples(st.sampled_from([0.0, 0.0, 0.3, 0.5, 1.0]), st.floats(0.8, 1.2)), min_size=1, max_size=6)


@settings(max_examples=examples(40), deadline=None)
@given(rows)
def test_a_configuration_that_sustains_no_load_is_never_ranked(spec):
    data = []
    for i, (q, jitter) in enumerate(spec):
        caps = tuple(q * jitter ** k for k in range(3))
        data.append({"hardware": "h", "tp": 1, "system": "specdecode", "gamma": i + 1, "threshold": None, "first_n": 0,
                     "label": f"specdecode g={i + 1}", "max_qps": float(np.mean(caps)), "capacities": caps})
    df = capacity_table(data, None, None)
    zero = df.max_qps <= 0
    assert df["rank"][zero].isna().all() and (df.ties[zero] == "").all()
    assert df["rank"][~zero].notna().all()
    assert (df.standing[zero] == "sustains no load").all()
    if (~zero).any():  # the first row is a configuration that sustains load, and it is the best
        assert df.max_qps.iloc[0] > 0 and df.standing.iloc[0] == "best"
        assert all(l not in df.ties.iloc[0] for l in df.label[zero])
    df["accuracy_floor"] = "meets"
    rec = recommend(df)
    assert (rec["best"] is None) == bool(zero.all())
    assert all(t not in set(df.label[zero]) for t in rec["ties"])


def test_capacity_table_prints_converged_and_standing(tmp_path, capsys):
    path = _tiny(tmp_path)
    assert main(["simulate", "capacity", str(path), *SMALL, "--system", "vanilla-base", "--columns",
                 "label,max_qps,max_qps_lo,max_qps_hi,converged,standing"]) == 0
    out = capsys.readouterr().out
    assert "converged" in out and "standing" in out and "best" in out
    assert out.strip().splitlines()[-1].startswith("Best: vanilla-base")


def test_rounds_stop_only_configurations_below_the_best_and_match_the_single_search():
    """interval_rounds (the search both commands run): a configuration not stopped early has exactly
    capacity_interval's figures; one stopped is significantly below the leader (the ranking's paired test);
    serial and two workers give the same rows."""
    from simulator.studies.capacity import (IntervalSpec, LoadSpec, capacity_interval, capacity_points, interval_rounds,
                                    paired_better)
    from simulator.inputs.scenario import load_scenario
    from simulator.engines.serving.slo import parse_slo

    rs = load_scenario(SC)
    pts = capacity_points(rs, parse_slo("p99_latency<=40s"), LoadSpec(requests=40, seed=1))[::8][:3]
    spec = IntervalSpec(max_reps=4)
    rows = interval_rounds(pts, spec, workers=1)
    assert [(r["label"], r["max_qps"], r["replications"]) for r in rows] == \
        [(r["label"], r["max_qps"], r["replications"]) for r in interval_rounds(pts, spec, workers=2)]
    for p, r in zip(pts, rows):
        if r["stopped"]:  # the round that stopped it had a leader significantly above it over their common seeds
            k = len(r["capacities"])
            assert not r["converged"] and any(
                paired_better(tuple(o["capacities"][:k]), r["capacities"], o["tp"], r["tp"]) for o in rows if o is not r)
        else:
            c = capacity_interval(p, spec)
            assert (c["max_qps"], c["max_qps_lo"], c["replications"]) == (r["max_qps"], r["max_qps_lo"], r["replications"])


def test_a_configuration_that_cannot_be_recommended_gets_one_round_and_never_leads():
    """The leader that stops others is the best configuration that can be recommended: the highest-capacity
    configuration, marked ineligible (its accuracy fails the floor), stops no one; in the report it gets the first
    round only."""
    from simulator.studies.capacity import IntervalSpec, LoadSpec, capacity_points, interval_rounds, paired_better
    from simulator.inputs.scenario import load_scenario
    from simulator.engines.serving.slo import parse_slo

    rs = load_scenario(SC)
    pts = capacity_points(rs, parse_slo("p99_latency<=40s"), LoadSpec(requests=40, seed=1))[::8][:3]
    spec = IntervalSpec(max_reps=5, target=0.01)  # nothing converges: only the stopping rules end a configuration
    free = interval_rounds(pts, spec, workers=1)
    top = max(range(len(free)), key=lambda i: free[i]["max_qps"] / free[i]["tp"])
    eligible = [i != top for i in range(len(pts))]
    # capacity: the ineligible one is replicated like any other (its capacity is the table's), but leads no one
    cap_rows = interval_rounds(pts, spec, workers=1, eligible=eligible)
    assert cap_rows[top]["stopped"] == "" and cap_rows[top]["replications"] == spec.max_reps
    # the report, which searches it only to plot it: the first round only
    rows = interval_rounds(pts, spec, workers=1, eligible=eligible, shown_only=True)
    assert rows[top]["stopped"] == "cannot be recommended" and rows[top]["replications"] == spec.min_reps
    assert [r["capacities"] for i, r in enumerate(rows) if i != top] == \
        [r["capacities"] for i, r in enumerate(cap_rows) if i != top]
    assert rows[top]["capacities"] == free[top]["capacities"][:spec.min_reps]  # the same first round
    ok = [r for r, e in zip(rows, eligible) if e]
    lead = max(ok, key=lambda r: r["max_qps"] / r["tp"])
    for r in ok:
        if r["stopped"]:
            assert r["stopped"] == "below the best"
            assert paired_better(lead["capacities"], r["capacities"], lead["tp"], r["tp"])
        else:
            assert r["replications"] == spec.max_reps
    everyone = interval_rounds(pts, spec, workers=1, eligible=[True] * len(pts), stop_below_best=False)
    assert all(r["replications"] == spec.max_reps and not r["stopped"] for r in everyone)
