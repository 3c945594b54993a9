"""SpecDecode / SpecReason on real engines (vLLM CPU build and torch), SmolLM2-135M + a 6-layer cut.

Tiny budgets, greedy sampling, float32 (so verification in chunks and one-token decoding agree).
"""

from __future__ import annotations

import pytest

from calibrate.measure.datasets import Problem
from calibrate.measure.orchestrator import RunConfig, run_request

pytestmark = pytest.mark.real_engine

PROBLEM = Problem("t0", "Tom has 3 boxes with 4 apples each. He eats 2 apples. How many apples are left?", "10")
BUDGET, STEP_MAX = 24, 8


def _run(system, base, small, threshold=7.0):
    cfg = RunConfig(system=system, threshold=threshold, budget_tokens=BUDGET, step_max_tokens=STEP_MAX)
    return run_request(cfg, PROBLEM, 0, base, small, seed=0)


@pytest.fixture(params=["vllm", "torch"])
def engines(request):
    return request.getfixturevalue(f"{request.param}_pair")


def test_specdecode_greedy_equals_target_greedy(engines):
    base, base_sd, _ = engines
    v_steps, _ = _run("vanilla-base", base, None)
    s_steps, s_req = _run("specdecode", base_sd, None)
    assert [s["text"] for s in s_steps] == [s["text"] for s in v_steps]
    assert s_req["spec_drafted_tokens"] > 0
    for s in s_steps:
        acc, dr = s["spec_accepted_per_pos"], s["spec_drafted_per_pos"]
        assert len(acc) == 3 and all(a <= d for a, d in zip(acc, dr))
        assert all(acc[i] >= acc[i + 1] for i in range(2))  # accepting position i+1 needs position i


def test_vllm_per_position_counts_match_engine_metrics(vllm_pair):
    _, base_sd, _ = vllm_pair
    before = base_sd.spec_metrics()
    steps, _ = _run("specdecode", base_sd, None)
    after = base_sd.spec_metrics()
    key = "vllm:spec_decode_num_accepted_tokens_per_pos"
    delta = [a - b for a, b in zip(after[key], before[key])]
    assert [sum(s["spec_accepted_per_pos"][i] for s in steps) for i in range(3)] == delta
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    assert sum(s["spec_drafted_per_pos"][0] for s in steps) == drafts


def test_threshold_zero_keeps_every_small_step(engines):
    base, _, small = engines
    steps, req = _run("specreason", base, small, threshold=0)
    assert steps and all(s["proposer"] == "small" and s["accepted"] for s in steps)
    assert all(s["score_time_s"] > 0 and s["digit_logprobs"] for s in steps)
    assert req["base_tokens"] == 0


def test_threshold_ten_equals_vanilla_base_step_by_step(engines):
    base, _, small = engines
    v_steps, _ = _run("vanilla-base", base, None)
    r_steps, req = _run("specreason", base, small, threshold=10)
    assert all(s["proposer"] == "base" and not s["accepted"] for s in r_steps)
    assert [s["text"] for s in r_steps] == [s["text"] for s in v_steps]
    assert req["small_tokens"] > 0


def test_specreason_decode_uses_spec_decoding_for_base_steps(engines):
    _, base_sd, small = engines
    steps, req = _run("specreason-decode", base_sd, small, threshold=10)
    assert all(s["spec_gamma"] == 3 for s in steps) and req["spec_drafted_tokens"] > 0


def test_scoring_reuses_the_cached_cot_prefix_torch(torch_pair):
    base, _, small = torch_pair
    steps, _ = _run("specreason", base, small, threshold=10)
    assert all(s["score_cached_tokens"] >= s["context_tokens"] - 1 for s in steps)


def test_microbench_torch_writes_valid_records(model_cache, tmp_path):
    from calibrate.measure.microbench import MicrobenchPlan, run_microbench
    from calibrate.contracts.trace_schema import check_run_dir

    plan = MicrobenchPlan(contexts=[32], batches=[1, 2], new_tokens=[8], cached_tokens=[0, 32], gammas=[2],
                          decode_tokens=2, repeats=1)
    n = run_microbench("torch", str(model_cache["base"]), None, str(model_cache["draft"]), plan, "float32", "cpu",
                       tmp_path, log=lambda *a: None)
    recs = check_run_dir(tmp_path)["microbench"]
    assert n == len(recs) == 7
    assert {r["op"] for r in recs} == {"decode", "prefill", "score", "verify", "draft"}
    assert all(r["wall_time_s"] > 0 for r in recs)
    assert [r["cached_tokens"] for r in recs if r["op"] == "prefill"] == [0, 32]


def test_live_exposition_of_the_in_process_engine(vllm_pair, tmp_path):
    """prometheus_client's text of the in-process speculative engine (what /metrics serves) -> the drafts and
    per-position counts ``LLM.get_metrics()`` gives for the same engine (calibrate.contracts.spec_metrics reads /metrics)."""
    import numpy as np
    import prometheus_client

    from calibrate.contracts.spec_metrics import from_prometheus

    _, base_sd, _ = vllm_pair
    _run("specdecode", base_sd, None)
    m = base_sd.spec_metrics()
    p = tmp_path / "metrics.txt"
    p.write_bytes(prometheus_client.generate_latest())
    a, n = from_prometheus([p])[3]
    assert n == m["vllm:spec_decode_num_drafts"] >= 1
    assert a == pytest.approx(np.array(m["vllm:spec_decode_num_accepted_tokens_per_pos"]) / n)
