"""The CPU campaign's plumbing end to end on a real engine: vLLM runs -> cost fit -> held-out validation.

SmolLM2-135M + its 6-layer cut, greedy, through ``specsim validate cpu`` on a subset of its configurations (two fit,
two held out: speculative decoding and SpecReason on each side) with short requests. What is checked is the contract
(every configuration's measured requests, the fit's parameters, the held-out figures and report, load and clock
recorded per configuration, interleaved order), not the machine's speed: the held-out accuracy of the timings is a
benchmark, ``make validate-cpu`` (the whole campaign, judged against ``validate.campaign.DEFAULT_BAR`` on an idle
machine; docs/cpu-campaign.md), because wall-clock timings of real engines on a loaded 2-core machine are not a bar a
correct model can be held to in CI. Skips without vllm or the model packages.
"""

from __future__ import annotations

import json
import math

import pytest

from specsim_cli.main import main

SUBSET = "vanilla-base,specreason-t7,specdecode-g2,specreason-t10"


def test_configs_subset_must_name_known_fit_and_held_out_configurations(tmp_path, capsys):
    for bad, expect in (("vanilla-base,nope", "unknown configuration nope"),
                        ("vanilla-base,specdecode-g1", "one held-out"), ("specdecode-g2", "one held-out")):
        assert main(["validate", "cpu", "--out", str(tmp_path / "x"), "--configs", bad]) == 2
        err = capsys.readouterr().err
        assert expect in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()  # refused before anything was written


@pytest.mark.real_engine
def test_cpu_campaign_runs_fit_and_predicts_the_held_out_configurations(model_cache, tmp_path):
    pytest.importorskip("vllm")
    pytest.importorskip("reasoning_gym")
    from validate import campaign

    out = tmp_path / "campaign"
    rc = main(["validate", "cpu", "--out", str(out), "--configs", SUBSET, "--requests", "2", "--budget", "24",
               "--step-max", "12", "--max-median-ape", "1e9"])
    assert rc == 0
    for f in ("profile_fit.yaml", "summary.json", "report/report.md", "report/replay_requests.csv"):
        assert (out / f).is_file(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["fit_configs"] == ["vanilla-base", "specreason-t7"]
    assert s["holdout_configs"] == ["specdecode-g2", "specreason-t10"]
    assert s["run_order"] == ["vanilla-base", "specdecode-g2", "specreason-t7", "specreason-t10"]
    assert s["heldout_e2e"]["n"] == 4 and s["heldout_calls"]["n"] > 0
    # every configuration wrote its measured requests; nothing else was run
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(SUBSET.split(","))
    for name in SUBSET.split(","):
        assert sum(1 for _ in open(out / "runs" / name / "requests.jsonl")) == 2
        assert f"{name}:loadavg1" in s["runtime_s"]["per_config"] and f"{name}:cpu_mhz" in s["runtime_s"]["per_config"]
    # the fit gave finite positive parameters, and the held-out requests were predicted (finite errors)
    assert s["fit_params"] and all(v["value"] >= 0 and math.isfinite(v["value"]) for v in s["fit_params"].values())
    for k in ("median_ape", "p90_ape", "bias"):
        assert math.isfinite(s["heldout_e2e"][k]), k
    assert s["sanity_bar"] == campaign.sanity_bar(s["within_config_spread"]) >= campaign.SANITY_FLOOR
