"""MXFP4 experts as vLLM stores them (simulator/catalog/moe_layout.py): the padded shape by backend, vLLM's own load
reports for gpt-oss-120b on one H100, and the laws the padding keeps."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.moe_layout import MXFP4_ALIGN, stored_expert_factor
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.memory_plan import GIB
from tests.conftest import examples

GPUS = ["a100-80gb", "h100-sxm", "h200", "l40s", "b200", "rtx-a6000"]


def dep(model: str, hw: str, tp: int = 1, ep: int = 1):
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h), ep=ep)


def test_gpt_oss_120b_on_one_h100_holds_what_vllm_reports():
    """vLLM logs "Model loading took 64.38 GiB" for gpt-oss-120b on one H100 under its Triton MXFP4 backend
    (vllm-project/vllm#33155) and 65.97 GiB under Marlin (vllm-project/vllm#23278, an H100 without triton_kernels:
    Marlin's layout is the Ampere one here); the checkpoint's own bytes are ~60.7 GiB."""
    h100 = dep("gpt-oss-120b", "h100-sxm").resident_bytes_per_gpu / GIB
    marlin = dep("gpt-oss-120b", "a100-80gb").resident_bytes_per_gpu / GIB
    assert h100 == pytest.approx(64.38, rel=0.01)
    assert marlin == pytest.approx(65.97, rel=0.01)
    m = get_model("gpt-oss-120b")
    assert m.weight_bytes_resident / GIB == pytest.approx(60.7, rel=0.01)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(["gpt-oss-20b", "gpt-oss-120b"]), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]))
def test_padding_only_adds_memory_and_never_more_than_the_alignment(model, hw, tp):
    """Stored >= checkpoint bytes, by at most what rounding both dimensions up to their alignment can add; the
    per-GPU total still falls as tp grows; the pass's weight reads do not change."""
    m, h = get_model(model), get_hardware(hw)
    f = stored_expert_factor(m, h, tp)
    ah, ai = MXFP4_ALIGN[h.compute_capability[0]]
    i = m.expert_intermediate // tp
    assert 1.0 <= f <= (m.hidden + ah - 1) / m.hidden * (i + ai - 1) / i
    d = dep(model, hw, tp)
    assert d.resident_bytes_per_gpu >= m.weight_bytes_resident / tp
    if tp > 1:
        assert d.resident_bytes_per_gpu < dep(model, hw, tp // 2).resident_bytes_per_gpu
    assert d.weight_bytes_per_gpu == pytest.approx(m.weight_bytes_read / tp)


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-r1", "qwen3-32b"])
def test_other_experts_and_dense_models_are_stored_as_checkpointed(model):
    m = get_model(model)
    for hw in GPUS:
        assert stored_expert_factor(m, get_hardware(hw), 1) == 1.0
    assert stored_expert_factor(get_model("gpt-oss-120b"), get_hardware("cpu"), 1) == 1.0


def test_whole_experts_per_gpu_pad_the_unsplit_intermediate():
    """With expert parallelism each GPU holds whole experts: the intermediate size is padded unsplit (gpt-oss's 2880
    is a multiple of 64, so on Hopper only the hidden size pads), where TP 4 pads its 720-wide shard to 768."""
    m, h = get_model("gpt-oss-120b"), get_hardware("h100-sxm")
    assert stored_expert_factor(m, h, 1) == pytest.approx(3072 / 2880)
    assert stored_expert_factor(m, h, 4) == pytest.approx(3072 / 2880 * 768 / 720)
    experts = m.routed_expert_bytes
    ep = dep("gpt-oss-120b", "h100-sxm", tp=4, ep=4)
    assert ep.resident_bytes_per_gpu == pytest.approx((m.weight_bytes_resident + experts * (3072 / 2880 - 1)) / 4)
