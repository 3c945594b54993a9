"""Which attention kernel a model runs on a GPU (simulator/catalog/attention_kernels.py): gpt-oss's sinks put it on
vLLM's Triton kernel before Hopper, the catalog's ratio prices only the attention FLOPs, and the laws that follow."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.attention_kernels import (attention_backend, attention_catalog, prefill_attention_ratio,
                                                 read_attention_catalog)
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.engines.serving.pass_cost import PassCost
from simulator.errors import InputError
from tests.conftest import examples

GPUS = ["a100-80gb", "rtx-a6000", "l40s", "h100-sxm", "h200", "b200"]


def dep(model: str, hw: str, tp: int = 1):
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h))


@pytest.mark.parametrize("hw", GPUS)
def test_only_sinks_before_hopper_run_triton(hw):
    """gpt-oss (sinks) runs Triton on Ampere / Ada, FlashAttention-class kernels from Hopper on; models without sinks
    never run Triton."""
    h = get_hardware(hw)
    before_hopper = tuple(h.compute_capability) < (9, 0)
    assert get_model("gpt-oss-20b").attention_sinks
    assert attention_backend(get_model("gpt-oss-20b"), h) == ("triton" if before_hopper else "flash")
    for name in ("qwen3-32b", "llama-3.1-8b", "deepseek-r1", "qwen3-30b-a3b"):
        assert not get_model(name).attention_sinks
        assert attention_backend(get_model(name), h) == "flash"
        assert dep(name, hw).attention_ratio == 1.0


def test_the_catalog_ratio_is_fitted_and_slower():
    """The shipped ratio comes from a fit (provenance kept) and says Triton's prefill is slower than FlashAttention's,
    within the spread such kernels show (not above 5x)."""
    r = attention_catalog().triton_prefill_ratio
    assert r.kind == "calibrated" and "AIConfigurator" in r.source
    assert 1.0 < r.value < 5.0
    assert prefill_attention_ratio(get_model("gpt-oss-120b"), get_hardware("a100-80gb")) == r


def test_a_long_prefill_costs_more_and_decode_does_not():
    """On an A100, a 2048-token chunk at 30k tokens of context costs more with the Triton kernel's attention than the
    same pass priced as FlashAttention, and the extra grows with the context; a decode step (memory-bound) moves < 2%."""
    d = dep("gpt-oss-20b", "a100-80gb")
    flash = Deployment(d.model, d.hardware, 1, d.cost)
    flash.__dict__["attention_ratio"] = 1.0  # the same pass priced as FlashAttention (a cached property)

    def t(x, n, c):
        return float(x.pass_time(n, n + c, n * (c + (n + 1) / 2), 1, 1))

    extra = [t(d, 2048, c) - t(flash, 2048, c) for c in (4096, 16384, 30000)]
    assert all(e > 0 for e in extra) and extra == sorted(extra)
    assert t(d, 1, 30000) == pytest.approx(t(flash, 1, 30000), rel=0.02)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(GPUS), st.integers(1, 4096), st.integers(0, 60000), st.sampled_from([1, 2, 4]))
def test_ratio_bounds_the_pass(hw, n, c, tp):
    """Any pass: priced with the Triton ratio it is at least the FlashAttention pass and at most ratio x it (only the
    attention roof scales); the serving simulator's PassCost gives the deployment's own time."""
    d = dep("gpt-oss-120b", hw, tp)
    flash = Deployment(d.model, d.hardware, tp, d.cost)
    flash.__dict__["attention_ratio"] = 1.0
    args = (n, n + c, n * (c + (n + 1) / 2), 1, 1)
    a, b = float(d.pass_time(*args)), float(flash.pass_time(*args))
    r = d.attention_ratio
    assert b * (1 - 1e-12) <= a <= r * b * (1 + 1e-12)
    assert PassCost(d).time(*args) == pytest.approx(a, rel=1e-9)


def test_absent_catalog_prices_as_flash(tmp_path):
    assert read_attention_catalog(tmp_path / "none.yaml").triton_prefill_ratio.value == 1.0


def test_bad_catalog_is_a_clear_error(tmp_path):
    p = tmp_path / "attention_kernels.yaml"
    p.write_text("triton_prefill_ratio:\n  value: -2\n  kind: calibrated\n  source: x\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_attention_catalog(p)
    assert str(p) in str(e.value) and "triton_prefill_ratio" in str(e.value)
    np.testing.assert_equal(p.read_text(encoding="utf-8").count("-2"), 1)  # the file is left as it was
