import pytest
from hypothesis import given, strategies as st

from simulator.catalog import get_hardware, get_model, hardware_catalog, model_catalog
from simulator.catalog.models import ModelSpec
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError

REQUIRED_MODELS = ["qwq-32b", "skywork-or1-32b-preview", "r1-distill-qwen-1.5b", "zr1-1.5b", "r1-distill-llama-70b",
                   "qwen2.5-7b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b", "qwen3-32b", "smollm2-135m", "gemma-3-270m"]
REQUIRED_HW = ["rtx-a6000", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s", "cpu"]


def test_catalogs_have_required_entries():
    assert set(REQUIRED_MODELS) <= set(model_catalog())
    assert set(REQUIRED_HW) <= set(hardware_catalog())


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_param_count_matches_published(name):
    m = get_model(name)
    assert m.published_params is not None
    assert abs(m.params / m.published_params - 1) < 0.03


def test_qwq_param_count_by_hand():
    # 64 x (q 5120*5120 + k,v 2*5120*1024 + o 5120*5120 + bias 5120+2048 + mlp 3*5120*27648 + norms 2*5120)
    # + embedding and LM head 2*152064*5120 + final norm 5120
    per_layer = 5120 * 5120 * 2 + 2 * 5120 * 1024 + 5120 + 2048 + 3 * 5120 * 27648 + 2 * 5120
    assert get_model("qwq-32b").params == 64 * per_layer + 2 * 152064 * 5120 + 5120


def test_kv_bytes_per_token_by_hand():
    # 2 (K,V) x 64 layers x 8 kv heads x 128 x 2 bytes = 262144 B; TP=2 halves the heads
    m = get_model("qwq-32b")
    assert m.kv_bytes_per_token(1) == 262144
    assert m.kv_bytes_per_token(2) == 131072
    # more TP than KV heads replicates them: never below one head per GPU
    assert m.kv_bytes_per_token(16) == 2 * 64 * 1 * 128 * 2


def test_unknown_names_raise_input_error():
    with pytest.raises(InputError, match="unknown hardware"):
        get_hardware("tpu-v9")
    with pytest.raises(InputError, match="unknown model"):
        get_model("gpt-17")


@given(st.sampled_from(REQUIRED_MODELS), st.sampled_from(REQUIRED_HW), st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 4, 8]))
def test_more_tp_never_increases_per_gpu_bytes(model, hw, tp, factor):
    h = get_hardware(hw)
    p = prior_profile(h).params(h)
    a = Deployment(get_model(model), h, tp, p)
    b = Deployment(get_model(model), h, tp * factor, p)
    assert b.weight_bytes_per_gpu <= a.weight_bytes_per_gpu
    assert b.kv_bytes_per_token_per_gpu <= a.kv_bytes_per_token_per_gpu


def test_shape_mismatch_is_detected():
    bad = ModelSpec(name="x", arch="llama", layers=2, hidden=64, heads=4, kv_heads=4, head_dim=16, intermediate=128,
                    vocab=100, tie_embeddings=True, published_params=1e9)
    assert abs(bad.params / bad.published_params - 1) > 0.03  # the loader would reject it


def test_derived_gpu_priors_have_provenance_and_datasheet_era_reproduces_old_priors():
    """Issue 13: gpu_priors.yaml gives every GPU's cost priors a kind and source; the CPU keeps its own;
    datasheet_era() is the catalog as it was (0.8 / 0.6 / 15 us / NCCL latency / datasheet link)."""
    for name in ("rtx-a6000", "h100-sxm", "h200", "a100-80gb", "a40", "l40s"):
        h = get_hardware(name)
        prof = prior_profile(h)
        assert h.cost_prior and {"mem_efficiency", "compute_efficiency", "layer_overhead_s",
                                 "allreduce_latency_s", "allreduce_bandwidth_bytes_per_s"} <= set(h.cost_prior)
        assert prof.mem_efficiency.kind in ("calibrated", "transferred") and prof.mem_efficiency.source
        assert h.link_bandwidth_bytes_per_s == h.cost_prior["allreduce_bandwidth_bytes_per_s"].value
        assert h.allreduce_latency_s == h.cost_prior["allreduce_latency_s"].value
    # the weight stream is measured (AIConfigurator GEMM tables) on A100, H100, L40S, B200; H200 takes the H100's
    # (same chip), the A6000 a median: each says which
    for name in ("h100-sxm", "a100-80gb", "l40s", "b200"):
        assert get_hardware(name).cost_prior["mem_efficiency"].kind == "calibrated", name
    for name in ("h200", "rtx-a6000", "a40", "a100-40gb"):
        assert get_hardware(name).cost_prior["mem_efficiency"].kind == "transferred", name
    # PCIe all-reduce of the A6000 is the L40S's; NVLink of H100 scaled from the A100's
    assert get_hardware("rtx-a6000").allreduce_latency_s == get_hardware("l40s").allreduce_latency_s
    assert get_hardware("h100-sxm").link_bandwidth_bytes_per_s == pytest.approx(
        get_hardware("a100-80gb").link_bandwidth_bytes_per_s * 450 / 300, rel=1e-3)
    old = get_hardware("rtx-a6000").datasheet_era()
    p = prior_profile(old).params(old)
    assert (p.mem_efficiency, p.compute_efficiency, p.layer_overhead_s, p.allreduce_latency_s) == (0.8, 0.6, 15e-6, 25e-6)
    assert old.link_bandwidth_bytes_per_s == 25e9 and old.cost_prior is None
    cpu = get_hardware("cpu")
    assert cpu.cost_prior is None and prior_profile(cpu).params(cpu).mem_efficiency == 0.5


def test_a_cut_keeps_the_shape_with_fewer_layers():
    from simulator.catalog import get_model

    m = get_model("qwen2.5-7b")
    c = m.cut(4)
    assert (c.layers, c.hidden, c.vocab, c.kv_heads) == (4, m.hidden, m.vocab, m.kv_heads) and c.name == "qwen2.5-7b-cut4"
    assert c.params < m.params and c.kv_bytes_per_token() == m.kv_bytes_per_token() * 4 / m.layers
    assert m.cut(m.layers) is m
    # the catalog's cut entries are this rule
    assert get_model("qwen2.5-7b-cut4").params == c.params
