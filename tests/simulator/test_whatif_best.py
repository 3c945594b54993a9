"""whatif's Best line: the fastest configuration shown to meet the accuracy floor (the rule of capacity and report,
simulator.inputs.accuracy.floor_status); faster ones with unknown or failing accuracy are named, never picked."""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.inputs.accuracy import parse_floor
from simulator.studies.whatif import best_line, whatif_from_cli


def test_small_model_alone_does_not_win_silently():
    df, _, meta = whatif_from_cli("reference-a6000-qwq32b", systems=["vanilla-base", "vanilla-small"])
    fast = df.set_index("system").latency_s
    assert fast["vanilla-small"] < fast["vanilla-base"]  # the small model alone is faster ...
    line = meta["best"]
    assert line.startswith("Best: vanilla-base:")  # ... but its accuracy is unknown: not picked
    assert "Faster, not picked" in line and "vanilla-small" in line and "no graded answers" in line


def test_threshold_zero_is_not_picked_without_accuracy():
    df, _, meta = whatif_from_cli("cpu-smollm2", systems=["vanilla-base", "specreason"], thresholds=[0])
    t0 = df[df.system == "specreason"].iloc[0]
    assert t0.accuracy_floor == "unknown"
    assert not meta["best"].startswith("Best: specreason")


def test_no_floor_picks_the_fastest():
    df, _, meta = whatif_from_cli("reference-a6000-qwq32b", systems=["vanilla-base", "vanilla-small"],
                                  accuracy_floor="none")
    assert meta["best"].startswith("Best: vanilla-small:") and "no accuracy floor" in meta["best"]
    assert "not picked" not in meta["best"]


def _rows(statuses, latencies):
    n = len(statuses)
    return pd.DataFrame({"hardware": ["h"] * n, "tp": [1] * n, "system": ["specreason"] * n,
                         "gamma": pd.array([None] * n, dtype="Int64"), "threshold": pd.array(range(n), dtype="Int64"),
                         "first_n": [0] * n, "latency_s": latencies, "speedup": [1.0] * n,
                         "accuracy": [0.5] * n, "accuracy_floor": statuses, "accuracy_why": ["why"] * n})


def test_fastest_meeting_row_wins_and_faster_failing_rows_are_named():
    line = best_line(_rows(["fails", "meets", "meets"], [1.0, 3.0, 2.0]), parse_floor("0.4"))
    assert line.startswith("Best: specreason t=2: 2 s")
    assert "specreason t=0 1 s (fails: why)" in line


def test_no_row_meets():
    line = best_line(_rows(["unknown", "fails"], [1.0, 2.0]), parse_floor(None))
    assert line.startswith("Best: none") and "specreason t=0" in line and "specreason t=1" in line


def test_json_meta_carries_the_best_line(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "whatif", "cpu-smollm2", "--system", "vanilla-base",
                        "--format", "json"], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["meta"]["best"].startswith("Best: vanilla-base")
    assert np.isfinite(json.loads(r.stdout)["results"][0]["latency_s"])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.conftest import examples

rows_st = st.lists(st.tuples(st.sampled_from(["meets", "fails", "unknown"]), st.floats(0.1, 1000)), min_size=1,
                   max_size=8, unique_by=lambda r: r[1])


@settings(max_examples=examples(60), deadline=None)
@given(rows_st)
def test_best_is_the_fastest_meeting_row_and_every_faster_one_is_named(rows):
    df = _rows([s for s, _ in rows], [lat for _, lat in rows])
    line = best_line(df, parse_floor(None))
    meets = df[df.accuracy_floor == "meets"]
    if len(meets):
        b = meets.loc[meets.latency_s.idxmin()]
        assert line.startswith(f"Best: specreason t={b.threshold}: ")
        faster = df[(df.latency_s < b.latency_s)]
    else:
        assert line.startswith("Best: none")
        faster = df
    assert (faster.accuracy_floor != "meets").all()
    for r in faster.sort_values("latency_s").head(3).itertuples():  # the fastest left out are named
        assert f"specreason t={r.threshold} " in line
    if len(faster) > 3:
        assert f"and {len(faster) - 3} more" in line
