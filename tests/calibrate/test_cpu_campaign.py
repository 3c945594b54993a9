"""Issue 4 end to end on CPU: a small real vLLM campaign -> cost fit -> held-out validation.

SmolLM2-135M + its 6-layer cut, greedy, vanilla-base / specdecode γ ∈ {1, 2, 3, 4} / specreason
(logprob-weighted score) threshold ∈ {0, 6, 7, 10}; fitted on vanilla, γ = 1, 4, thresholds 0, 7;
γ = 2, 3 and thresholds 6, 10 held out.
Fails when the held-out median APE of end-to-end latency exceeds ``validate.campaign.DEFAULT_BAR``
(docs/cpu-campaign.md says how the bar was set). Skips without vllm or the model packages.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.real_engine


def test_cpu_campaign_fit_and_heldout_validation(model_cache, tmp_path):
    pytest.importorskip("vllm")
    pytest.importorskip("reasoning_gym")
    from validate import campaign

    out = tmp_path / "campaign"
    rc = campaign.main(["--out", str(out), "--requests", "3", "--budget", "48", "--step-max", "24",
                        "--max-median-ape", str(campaign.DEFAULT_BAR)])
    for f in ("profile_fit.yaml", "summary.json", "report/report.md", "report/replay_requests.csv"):
        assert (out / f).is_file(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["holdout_configs"] == ["specdecode-g2", "specdecode-g3", "specreason-t6", "specreason-t10"]
    assert s["heldout_e2e"]["n"] == 12
    # every campaign configuration wrote its measured requests
    for c in campaign.CONFIGS:
        assert sum(1 for _ in open(out / "runs" / c.name / "requests.jsonl")) == 3
    e2e = s["heldout_e2e"]["median_ape"]
    assert e2e <= campaign.DEFAULT_BAR, f"held-out median APE (e2e) {e2e:.3f} > bar {campaign.DEFAULT_BAR}"
    assert rc == 0
