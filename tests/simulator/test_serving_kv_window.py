"""The serving engine's KV memory for sliding-window models: full-attention tokens plus a window per sequence."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.engines.serving.kv_cache import engine_plan, kv_layout
from tests.conftest import examples


def dep(model: str, hw: str = "h100-sxm", tp: int = 1, weights: str = "bf16") -> Deployment:
    h = get_hardware(hw)
    return Deployment(get_model(model).with_dtypes(weights), h, tp, prior_profile(h).params(h))


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-r1"])
def test_models_without_windows_keep_the_per_token_count(name):
    d = dep(name, "h200", *((8, "fp8") if name == "deepseek-r1" else (1, "bf16")))  # R1 in bf16 outgrows 8 H200s
    cap, res = kv_layout(0.9, [d])
    p = engine_plan(0.9, [d])
    assert res == 7 and p.token_bytes == d.kv_bytes_per_token_per_gpu  # only the half-filled last block of 16
    free = 0.9 * d.hardware.reported_memory_bytes - d.resident_bytes_per_gpu - p.activation_bytes - p.non_torch_bytes \
        - p.cudagraph_bytes
    assert cap == 16 * (int(free // (16 * d.kv_bytes_per_token_per_gpu)) - 1) > 0  # less vLLM's null block


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 64), st.integers(128, 200_000))
def test_a_window_model_charges_its_tokens_bytes_exactly_past_the_window(seqs, length):
    """seqs sequences of ``length`` >= window tokens: (tokens + reservations) x full-layer bytes = the model's own
    KV bytes of those sequences (ModelSpec.kv_bytes, the rule the step time uses), up to the reservation's rounding."""
    d = dep("gpt-oss-120b")
    m = d.model
    cap, res = kv_layout(0.9, [d])
    res -= engine_plan(0.9, [d]).partial_block_tokens  # the windows' share (the rest: the last block's expected slack)
    full = d.kv_bytes_per_token_per_gpu * (m.layers - m.sliding_layers) / m.layers
    charged = (seqs * length + seqs * res) * full
    want = float(m.kv_bytes(seqs * length, d.tp, seqs=seqs))
    assert want <= charged <= want + seqs * full * (1 + 1e-9)
    assert res == math.ceil(m.sliding_window * m.sliding_layers / (m.layers - m.sliding_layers) - 1e-12)


def test_a_window_model_holds_more_tokens_than_counting_every_layer():
    d = dep("gpt-oss-120b")
    cap, res = kv_layout(0.9, [d])
    every = int(engine_plan(0.9, [d]).kv_bytes // d.kv_bytes_per_token_per_gpu)
    assert res > 0 and cap > 1.9 * every  # half its layers slide: about twice the full-attention tokens


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 40_000))
def test_a_running_sequence_holds_at_most_its_window_in_sliding_layers(length):
    """held_bytes(L) (what the pass-time batch check counts) is the model's own KV of L tokens up to block rounding:
    min(L, window) in the chunked / sliding layers; request_bytes (vLLM's start-up accounting) is the whole window."""
    d = dep("llama-4-scout-17b-16e", "h100-sxm", 4)
    p = engine_plan(0.9, [d])
    m = d.model
    tokens = -(-length // p.block_size) * p.block_size
    own = float(m.kv_bytes(tokens, 4))  # the step model's KV of one sequence of ``tokens``
    assert p.held_bytes(length) == pytest.approx(own, rel=1e-9)
    assert p.held_bytes(length) <= p.request_bytes(length) * (1 + 1e-12)
    if tokens >= m.sliding_window:
        assert p.held_bytes(length) == pytest.approx(p.request_bytes(length), rel=1e-12)
    plain = engine_plan(0.9, [dep("llama-3.1-8b")])
    assert plain.held_bytes(length) == plain.request_bytes(length)
