"""The fused-MoE kernel kinds and the routed pairs' intermediate passes (simulator.catalog.moe_kernels,
Deployment._moe_breakdown): which kind a model's experts run as, the catalog's ratios, and the laws of the pass."""

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog import moe_kernels as mk
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.roofline import ACTIVATION_BYTES
from simulator.errors import InputError
from tests.conftest import examples

MOE = ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-r1", "gpt-oss-120b"]


def dep(model: str, hw: str, tp: int, **cost):
    from dataclasses import replace

    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, replace(prior_profile(h).params(h), **cost))


def test_bf16_experts_keep_the_gpus_efficiencies_and_fp8_take_the_block_kind():
    h200, a100 = get_hardware("h200"), get_hardware("a100-80gb")
    assert mk.moe_kind_ratios("bf16", h200) == (1.0, 1.0)
    kinds = mk.moe_catalog_kinds()
    assert "w8a8-fp8-block" in kinds, "moe_kernels.yaml's kinds are written by specsim fit moe"
    block = kinds["w8a8-fp8-block"]
    assert mk.moe_kind_ratios("fp8", h200) == mk.moe_kind_ratios("fp8_block", h200) == (
        block["mem_ratio"].value, block["compute_ratio"].value)
    assert mk.moe_kind("fp8", a100) == "w8a16-fp8" and mk.moe_kind_ratios("fp8", a100) == (1.0, 1.0)  # no FP8 cores
    assert mk.moe_kind("mxfp4", h200) == mk.moe_kind("int4", a100) == "w4a16"
    assert all(0 < p.value < 5 and "moe_fit" in p.source for rs in kinds.values() for p in rs.values())
    assert dep("deepseek-r1", "h200", 8).expert_kind_ratios == mk.moe_kind_ratios("fp8", h200)
    assert dep("qwen3-32b", "h200", 1).expert_kind_ratios == (1.0, 1.0)  # dense: bf16, and no experts to price


def test_a_ratio_that_is_not_positive_is_an_input_error_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "moe_kernels.yaml"
    path.write_text(yaml.safe_dump({"provenance": {}, "gpus": {}, "kinds": {"w4a16": {
        "compute_ratio": {"value": 0.0, "kind": "calibrated", "source": "s"}}}}))
    monkeypatch.setattr(mk, "MOE_KERNELS_PATH", path)
    mk.catalog_file.cache_clear()
    try:
        with pytest.raises(InputError, match=r"kinds\.w4a16\.compute_ratio.*> 0") as e:
            mk.moe_kind_ratios("mxfp4", get_hardware("h100-sxm"))
        assert "moe_kernels.yaml" in str(e.value)
    finally:
        mk.catalog_file.cache_clear()


@settings(max_examples=examples(40), deadline=None)
@given(model=st.sampled_from(MOE), hw=st.sampled_from(["h100-sxm", "b200", "a100-80gb"]),
       tp=st.sampled_from([1, 2, 8]), n=st.integers(1, 16384), psi=st.floats(0.0, 20.0), extra=st.floats(0.1, 20.0))
def test_intermediate_passes_add_exactly_their_bytes(model, hw, tp, n, psi, extra):
    """Raising psi adds, per MoE layer, N k (extra) I/TP b / BW to the pass's fixed layer costs, nothing else."""
    a, b = dep(model, hw, tp, moe_inter_passes=psi), dep(model, hw, tp, moe_inter_passes=psi + extra)
    args = (np.array([float(n)]), np.array([float(n)]), np.array([n * (n + 1) / 2.0]), np.array([1.0]))
    x, y = a.pass_breakdown(*args), b.pass_breakdown(*args)
    m = a.model
    want = m.moe_layers * n * m.experts_per_token * extra * (m.expert_intermediate / tp) * ACTIVATION_BYTES \
        / a.hardware.memory_bandwidth_bytes_per_s
    assert y["layers"][0] - x["layers"][0] == pytest.approx(want, rel=1e-9)
    for k in ("weights", "kv", "compute", "allreduce"):
        assert y[k][0] == pytest.approx(x[k][0], rel=1e-12)
    assert y["total"][0] >= x["total"][0]


@settings(max_examples=examples(40), deadline=None)
@given(n=st.integers(1, 16384), rc=st.floats(0.2, 2.0), rm=st.floats(0.2, 2.0), more=st.floats(1.01, 3.0))
def test_a_faster_kind_never_costs_more(n, rc, rm, more):
    """A kind with higher ratios (streaming or compute) never makes a pass slower."""
    d, fast_c, fast_m = (dep("deepseek-r1", "h200", 8) for _ in range(3))
    d.__dict__["expert_kind_ratios"] = (rm, rc)  # the cached property's slot: a kind the catalog does not hold
    fast_c.__dict__["expert_kind_ratios"] = (rm, rc * more)
    fast_m.__dict__["expert_kind_ratios"] = (rm * more, rc)
    args = (np.array([float(n)]), np.array([float(n)]), np.array([n * (n + 1) / 2.0]), np.array([1.0]))
    t = d.pass_breakdown(*args)["total"][0]
    assert fast_c.pass_breakdown(*args)["total"][0] <= t + 1e-15
    assert fast_m.pass_breakdown(*args)["total"][0] <= t + 1e-15


def test_a_dense_model_on_the_moe_path_has_no_expert_terms():
    """A dense sliding-window model goes through the MoE path (no experts: no intermediate passes, ratios 1)."""
    d = dep("gemma-3-270m", "h100-sxm", 1, moe_inter_passes=7.0)
    lean = dep("gemma-3-270m", "h100-sxm", 1, moe_inter_passes=0.0)
    assert d.expert_kind_ratios == (1.0, 1.0)
    assert d.prefill_time(4096) == pytest.approx(lean.prefill_time(4096), rel=1e-12)
