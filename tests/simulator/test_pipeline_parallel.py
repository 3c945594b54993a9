"""Pipeline parallelism (``Deployment.pp``): its laws against pp = 1 on the same tp, and the memory per GPU."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.memory_plan import memory_plan
from simulator.engines.serving.pass_cost import PassCost
from tests.conftest import examples

SEQS = 256  # max_num_seqs of the memory plans below (any value: the checks do not depend on it)

# dense GQA, a mixture of experts, latent attention + MoE (DeepSeek), sliding windows (gpt-oss)
MODELS = ["qwen3-32b", "llama-3.1-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-r1", "gpt-oss-120b"]
GPUS = ["h100-sxm", "h200", "a100-80gb", "l40s"]


def dep(model: str, hw: str, tp: int = 1, pp: int = 1, ep: int = 1) -> Deployment:
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h), ep=ep, pp=pp)


def breakdown(d: Deployment, B: int, T: int, C: int) -> dict:
    n, c = np.full(B, float(T)), np.full(B, float(C))
    return d.pass_breakdown(n.sum(), (c + n).sum(), (n * (c + (n + 1.0) / 2.0)).sum(), float(B), float(B))


cases = st.tuples(st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]),
                  st.integers(2, 8), st.integers(1, 2048), st.integers(0, 32768))


@settings(max_examples=examples(80), deadline=None)
@given(cases)
def test_batch_one_latency_with_stages_is_no_less_than_pp1(case):
    """One sequence is one micro-batch: it crosses every stage in turn, so pp > 1 adds pp - 1 send/recv hops to the
    pp = 1 pass at the same tp (whose weights, KV, FLOPs and all-reduces the stages share out)."""
    model, hw, tp, pp, T, C = case
    one, many = breakdown(dep(model, hw, tp), 1, T, C), breakdown(dep(model, hw, tp, pp), 1, T, C)
    assert many["total"] >= one["total"]
    hop = many["sendrecv"] / (pp - 1)
    assert hop > 0 and many["total"] == pytest.approx(one["total"] + (pp - 1) * hop, rel=1e-12)
    assert many["total"] == pytest.approx(sum(v for k, v in many.items() if k != "total"), rel=1e-12)


@settings(max_examples=examples(60), deadline=None)
@given(cases, st.integers(1, 16))
def test_a_full_pipeline_costs_a_micro_batch_per_cycle(case, per_stage):
    """With S >= pp sequences the pp micro-batches fill the stages: a cycle (every sequence advances once) costs the
    pp = 1 pass of S/pp sequences plus the hops of one micro-batch; throughput per cycle is S tokens."""
    model, hw, tp, pp, T, C = case
    S = pp * per_stage
    full = breakdown(dep(model, hw, tp, pp), S, T, C)
    micro = breakdown(dep(model, hw, tp), per_stage, T, C)
    assert full["total"] == pytest.approx(micro["total"] + full["sendrecv"], rel=1e-9)
    assert full["total"] <= breakdown(dep(model, hw, tp), S, T, C)["total"] + full["sendrecv"] * (1 + 1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]), st.integers(1, 64),
       st.integers(1, 2048))
def test_pp1_is_the_pass_without_stages(model, hw, tp, B, T):
    """pp = 1 takes the one-stage path: no send/recv, the serving loop's fast path agrees with it exactly."""
    d = dep(model, hw, tp)
    bd = breakdown(d, B, T, 100)
    assert float(bd["sendrecv"]) == 0.0
    n, c = np.full(B, float(T)), np.full(B, 100.0)
    assert PassCost(d).batch(n, c) == pytest.approx(d.batch_forward_time(n, c), rel=1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(["h100-sxm", "h200"]), st.sampled_from([2, 4, 8]), st.integers(1, 7))
def test_memory_per_gpu_falls_with_stages(model, hw, tp, k):
    """Weights and KV per token per GPU are the model's over tp * pp GPUs; the KV cache holds more tokens."""
    lo, hi = dep(model, hw, tp, k), dep(model, hw, tp, k + 1)
    assert hi.gpus == tp * (k + 1)
    assert hi.resident_bytes_per_gpu < lo.resident_bytes_per_gpu
    assert hi.resident_bytes_per_gpu == pytest.approx(dep(model, hw, tp).resident_bytes_per_gpu / (k + 1))
    assert hi.kv_bytes_per_token_per_gpu < lo.kv_bytes_per_token_per_gpu
    a, b = memory_plan([lo], 0.9, 8192, SEQS), memory_plan([hi], 0.9, 8192, SEQS)
    assert b.weights_bytes < a.weights_bytes and b.kv_tokens >= a.kv_tokens


def test_a_stage_holds_at_least_one_layer():
    m = get_model("qwen3-8b")
    with pytest.raises(ValueError, match="pp="):
        dep("qwen3-8b", "h100-sxm", 1, m.layers + 1)
    assert dep("qwen3-8b", "h100-sxm", 1, m.layers).gpus == m.layers


def test_serving_loop_prices_stages_with_the_formula():
    """The serving loop's pass cost goes through Deployment.pass_time when pp > 1 (not its affine fast path)."""
    d = dep("qwen3-32b", "h100-sxm", 2, 4)
    pc = PassCost(d)
    assert pc.dep is d
    assert pc.time(8.0, 8.0 * 1000, 8.0 * 1000, 8.0, 8.0) == float(d.pass_time(8.0, 8000.0, 8000.0, 8.0, 8.0))
