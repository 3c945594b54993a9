"""A `vllm bench serve` ladder on a shared VM can change speed between levels. A decode step of more
sequences is never faster on one machine, so a held-out level whose measured TPOT p50 is below the 1-user fit level's
is flagged as speed drift (report and stdout), never silently scored as model error. Runs: reports/serve-bench-cpu."""

from __future__ import annotations

from pathlib import Path

import pytest

from validate.serving.compare import validate_serving
from validate.serving.report import SPEED_DRIFT_TOLERANCE, speed_drift

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "simulator/profiles/cost_cpu-epyc-vllm032.yaml"
LADDERS = ROOT / "reports/serve-bench-cpu"


def _levels(name: str) -> list[Path]:
    return sorted((LADDERS / name).glob("closed-*"))


def _tpot(v, run) -> float:
    pr = v.per_run
    return float(pr[(pr.model == "measured") & (pr.run == str(run))].tpot_median_s.iloc[0])


@pytest.mark.parametrize("ladder", ["varied", "varied-s1", "quiet"])
def test_a_level_faster_per_token_than_the_fit_level_is_flagged_as_drift(ladder):
    levels = _levels(ladder)
    v = validate_serving(levels, PROFILE, ["closed-1"], None)
    fit = _tpot(v, levels[0])
    faster = {str(p) for p in levels[1:] if _tpot(v, p) < (1 - SPEED_DRIFT_TOLERANCE) * fit}
    warned = speed_drift(v)
    assert len(warned) == len(faster)
    for run in faster:
        assert any(run in w and "speed drift" in w for w in warned)
    if ladder == "varied-s1":  # its 1-user level ran slow (73.8 ms per token, 70.8 ms at 2 users)
        assert faster
