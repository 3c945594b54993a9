"""The serving engine's KV memory for sliding-window models: full-attention tokens plus a window per sequence."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost_model import Deployment
from simulator.cost_profile import prior_profile
from simulator.serving.kv_cache import kv_capacity_tokens, kv_layout


def dep(model: str, hw: str = "h100-sxm", tp: int = 1) -> Deployment:
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h))


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-r1"])
def test_models_without_windows_keep_the_per_token_count(name):
    d = dep(name, "h200", 8 if name == "deepseek-r1" else 1)
    cap, res = kv_layout(0.9, [d])
    assert res == 0
    assert cap == max(int((0.9 * d.hardware.memory_bytes - d.resident_bytes_per_gpu) // d.kv_bytes_per_token_per_gpu), 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.integers(128, 200_000))
def test_a_window_model_charges_its_tokens_bytes_exactly_past_the_window(seqs, length):
    """seqs sequences of ``length`` >= window tokens: (tokens + reservations) x full-layer bytes = the model's own
    KV bytes of those sequences (ModelSpec.kv_bytes, the rule the step time uses), up to the reservation's rounding."""
    d = dep("gpt-oss-120b")
    m = d.model
    cap, res = kv_layout(0.9, [d])
    full = d.kv_bytes_per_token_per_gpu * (m.layers - m.sliding_layers) / m.layers
    charged = (seqs * length + seqs * res) * full
    want = float(m.kv_bytes(seqs * length, d.tp, seqs=seqs))
    assert want <= charged <= want + seqs * full * (1 + 1e-9)
    assert res == math.ceil(m.sliding_window * m.sliding_layers / (m.layers - m.sliding_layers) - 1e-12)


def test_a_window_model_holds_more_tokens_than_counting_every_layer():
    d = dep("gpt-oss-120b")
    cap, res = kv_layout(0.9, [d])
    every = kv_capacity_tokens(0.9, [d]) if res == 0 else int(
        (0.9 * d.hardware.memory_bytes - d.resident_bytes_per_gpu) // d.kv_bytes_per_token_per_gpu)
    assert res > 0 and cap > 1.9 * every  # half its layers slide: about twice the full-attention tokens
