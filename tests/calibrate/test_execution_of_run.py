"""calibrate.measure.run_directory.execution_of_run: the simulator's execution semantics of a runner run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from calibrate.measure.run_directory import execution_of_run

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "reports" / "cpu-campaign" / "runs" / "specreason-t10"


def test_committed_vllm_cpu_runs_cache_in_128_token_blocks():
    e = execution_of_run(RUN)  # recorded before options.prefix_cache_block existed: inferred from the counts
    assert e["prefix_cache_block"] == 128 and e["step_calls"] and e["source"].startswith("inferred")


def test_manifest_field_wins_and_zero_means_no_caching(tmp_path):
    d = tmp_path / "r"
    shutil.copytree(RUN, d)
    meta = json.loads((d / "run.json").read_text())
    for block, want in ((16, 16), (0, 65536)):
        meta["options"]["prefix_cache_block"] = block
        (d / "run.json").write_text(json.dumps(meta))
        assert execution_of_run(d)["prefix_cache_block"] == want
    meta["options"].pop("prefix_cache_block")
    (d / "run.json").write_text(json.dumps(meta))
    (d / "steps.jsonl").write_text("")
    assert execution_of_run(d)["prefix_cache_block"] == 1  # nothing cached: token-exact is all we can say
