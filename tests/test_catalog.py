import pytest
from hypothesis import given, strategies as st

from simulator.catalog import get_hardware, get_model, hardware_catalog, model_catalog
from simulator.catalog.models import ModelSpec
from simulator.cost_model import Deployment, prior_profile
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
