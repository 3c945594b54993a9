"""The fused-MoE kernel kinds (simulator.catalog.moe_kernels, Deployment._moe_breakdown): which kind a model's experts
run as, the ratios of the kernel table a deployment runs, and the laws of the pass."""

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model, hardware_catalog
from simulator.catalog import moe_kernels as mk
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from tests.conftest import examples

MOE = ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-r1", "gpt-oss-120b"]


def dep(model: str, hw: str, tp: int, **cost):
    from dataclasses import replace

    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, replace(prior_profile(h).params(h), **cost))


def test_bf16_experts_keep_the_gpus_efficiencies_and_fp8_take_the_block_kind():
    h200, a100 = get_hardware("h200"), get_hardware("a100-80gb")
    assert mk.moe_kind_ratios("bf16", h200, {"w8a8-fp8-block.mem_ratio": 0.5}) == (1.0, 1.0)
    r = {"w8a8-fp8-block.mem_ratio": 0.7, "w8a8-fp8-block.compute_ratio": 0.4}
    assert mk.moe_kind_ratios("fp8", h200, r) == mk.moe_kind_ratios("fp8_block", h200, r) == (0.7, 0.4)
    assert mk.moe_kind("fp8", a100) == "w8a16-fp8" and mk.moe_kind_ratios("fp8", a100, r) == (1.0, 1.0)  # no FP8 cores
    assert mk.moe_kind("mxfp4", h200) == mk.moe_kind("int4", a100) == "w4a16"
    assert mk.moe_kind_ratios("nvfp4", get_hardware("b200"), {"w4a16.mem_ratio": 0.5}) == (1.0, 1.0)  # FP4 cores
    assert mk.moe_kind_ratios("mxfp4", h200, r) == (1.0, 1.0)  # a kind without ratios: bf16's efficiencies
    assert dep("qwen3-32b", "h200", 1).expert_kind_ratios == (1.0, 1.0)  # dense: bf16, and no experts to price


def test_a_deployment_takes_the_kind_ratios_of_the_kernel_table_it_runs():
    """The ratios belong to a table (a kernel generation): vLLM older than a GPU's newest table takes the older
    table's, the same chip's tables serve the H200, a kind a table does not time keeps bf16's efficiencies, and a GPU
    without tables takes the catalog's transferred medians."""
    from simulator.catalog.engine_hosts import ServingEngine

    tables, transferred = mk.catalog_file()
    assert any(t.kinds for t in tables.values()), "moe_kernels.yaml's kinds are written by specsim fit moe"
    for gpu, t in tables.items():
        newest = {f"{k}.{r}": p.value for k, rs in t.kinds.items() for r, p in rs.items()}
        assert {n: p.value for n, p in mk.moe_kind_params(gpu).items()} == newest
        assert {n: p.value for n, p in mk.moe_kind_params(gpu, "sglang", "0.11").items()} == newest
        for old in t.older:
            want = {f"{k}.{r}": p.value for k, rs in old.kinds.items() for r, p in rs.items()}
            assert {n: p.value for n, p in mk.moe_kind_params(gpu, "vllm", old.version).items()} == want
        assert all(0 < p.value < 5 and "moe_fit" in p.source for p in mk.moe_kind_params(gpu).values())
    h200 = get_hardware("h200")
    old = prior_profile(h200, serving_engine=ServingEngine(name="vllm", version="0.11")).params(h200)
    assert {n.split("|", 1)[1]: v for n, v in mk.kind_values("h100-sxm", "0.11").items()} == dict(old.moe_kind_ratios)
    d = Deployment(get_model("deepseek-r1"), h200, 8, old)
    assert d.expert_kind_ratios == mk.moe_kind_ratios("fp8", h200, dict(old.moe_kind_ratios))
    own = [g for g, hw in hardware_catalog().items() if hw.cost_prior and "moe_compute_efficiency" in hw.cost_prior
           and hw.cost_prior["moe_compute_efficiency"].kind == "calibrated"]
    assert own and set(own) <= set(tables)  # a GPU fitted on its own tables keeps bf16 for a kind they do not time
    lone = [g for g, hw in hardware_catalog().items() if hw.interconnect != "none" and g not in tables and mk.same_chip().get(g) not in tables]
    assert lone, "some catalog GPU has no MoE tables of its own"
    got = mk.moe_kind_params(lone[0])
    assert {n: p.value for n, p in got.items()} == {f"{k}.{r}": p.value for k, rs in transferred.items()
                                                    for r, p in rs.items()}
    assert all(p.kind == "transferred" for p in got.values())


def test_a_ratio_that_is_not_positive_is_an_input_error_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "moe_kernels.yaml"
    bad = {"w4a16": {"compute_ratio": {"value": 0.0, "kind": "calibrated", "source": "s"}}}
    path.write_text(yaml.safe_dump({"provenance": {}, "gpus": {"h100-sxm": {
        "newest": "0.24.0", "older": [{"version": "0.14.0", "terms": {}, "kinds": bad}]}}}))
    monkeypatch.setattr(mk, "MOE_KERNELS_PATH", path)
    mk.catalog_file.cache_clear()
    try:
        with pytest.raises(InputError, match=r"gpus\.h100-sxm\.older\[0\]\.kinds\.w4a16\.compute_ratio.*> 0") as e:
            mk.moe_kind_params("h100-sxm")
        assert "moe_kernels.yaml" in str(e.value)
    finally:
        mk.catalog_file.cache_clear()


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
    """A dense sliding-window model goes through the MoE path with kind ratios 1 (no experts to price)."""
    d = dep("gemma-3-270m", "h100-sxm", 1, moe_kind_ratios=(("w4a16.compute_ratio", 0.1),))
    assert d.expert_kind_ratios == (1.0, 1.0)
