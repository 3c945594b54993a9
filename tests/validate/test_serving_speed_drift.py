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


def test_a_run_record_with_limits_vllm_refuses_is_one_clear_line(tmp_path):
    """A run.json whose engine limits vLLM would refuse (0 sequences; a budget below max_num_seqs; a word) names the
    file and the field instead of a traceback."""
    import json
    import shutil

    from simulator.errors import InputError
    from validate.serving.load import load_run
    from validate.serving.predict import run_execution

    src = Path("reports/serving-systems/runs/rep2/vanilla-base/closed-1")
    if not (src / "run.json").is_file():
        pytest.skip("committed serving run absent")
    for limits, field in (({"max_num_seqs": 0}, "max_num_seqs"), ({"max_num_batched_tokens": 8, "max_num_seqs": 16},
                                                                   ""), ({"max_num_seqs": "many"}, "")):
        run = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        shutil.copytree(src, run)
        meta = json.loads((run / "run.json").read_text())
        meta["options"]["engine_limits"] = limits
        (run / "run.json").write_text(json.dumps(meta))
        with pytest.raises(InputError) as e:
            run_execution(load_run(run))
        assert e.value.file.endswith("run.json") and e.value.field.startswith("options.engine_limits")
        assert field in e.value.field
