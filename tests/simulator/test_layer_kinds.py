"""Issue 38 item 1: today's architectures from their published config.json -- interleaved MoE (Llama 4 Maverick),
chunked local attention (Llama 4), hybrid linear attention (Qwen3-Next, Qwen3.5), sparse attention (DeepSeek-V3.2),
GLM-4.5's shared experts and MTP layer, Mistral as llama, and the llama-like fallback with its warning."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.hf_config import UnknownArchitectureWarning, load_hf_config
from simulator.catalog.layer_kinds import PLAIN_LAYER
from simulator.catalog.models import PARAM_TOLERANCE
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.memory_plan import memory_plan
from specsim_cli.main import main
from tests.conftest import examples

SEQS = 256  # max_num_seqs of the memory plans below (any value: the checks do not depend on it)

CONFIGS = Path(__file__).resolve().parents[2] / "tests" / "data" / "hf_configs"
NEW = ("glm-4.5-air", "glm-4.5", "qwen3-next-80b-a3b", "qwen3.5-9b", "qwen3.5-35b-a3b", "deepseek-v3.2",
       "mistral-nemo-12b", "llama-4-scout-17b-16e", "llama-4-maverick-17b-128e")
CATALOG_ONLY = ("glm-4.6", "llama-3.2-1b", "llama-3.2-3b")
KIND_FIELDS = tuple(PLAIN_LAYER) + ("local_attention", "linear_conv_kernel", "sliding_window", "full_attention_every", "intermediate",
                                   "shared_expert_intermediate")


@pytest.mark.parametrize("name", NEW)
def test_config_reads_to_the_catalog_entry_with_its_layer_kinds(name):
    m = load_hf_config(CONFIGS / name / "config.json")
    cat = get_model(name)
    assert m.name == name
    assert {k: getattr(m, k) for k in KIND_FIELDS} == {k: getattr(cat, k) for k in KIND_FIELDS}
    assert m.params == cat.params and m.active_params == cat.active_params


@pytest.mark.parametrize("name", NEW + CATALOG_ONLY)
def test_published_counts_within_tolerance(name):
    m = get_model(name)
    assert abs(m.params / m.published_params - 1) <= PARAM_TOLERANCE
    if m.published_active_params:
        assert abs(m.active_params / m.published_active_params - 1) <= PARAM_TOLERANCE


@pytest.mark.parametrize("name", NEW)
def test_pass_time_runs_on_each_config(name, capsys):
    """On eight H200s, where each fits (DeepSeek-V3.2 in its published FP8)."""
    dtype = ["--dtype", "fp8"] if name == "deepseek-v3.2" else []
    code = main(["simulate", "pass-time", "--model", str(CONFIGS / name), "--hardware", "h200", "--tp", "8", *dtype,
                 "--batch", "1,64", "--context", "4096", "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = json.loads(out.out)["results"]
    assert rows[1]["pass_ms"] > rows[0]["pass_ms"] > 0


def test_hybrid_kv_counts_full_attention_layers_only():
    m = get_model("qwen3.5-9b")
    assert (m.linear_layers, m.kv_layers) == (24, 8)
    assert m.kv_bytes_per_token() == 2 * 8 * 4 * 256 * 2  # K and V, 8 full layers, 4 KV heads of 256, bf16
    # the state per sequence: 24 layers x (32 heads x 128 x 128 recurrent state in fp32, the config's
    # mamba_ssm_dtype + 3 x 8192 conv channels in bf16); an FP8 KV cache leaves both as they are
    assert m.ssm_state_dtype == "float32"
    assert m.linear_state_bytes() == 24 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2)
    assert m.with_dtypes("bf16", "fp8").linear_state_bytes() == m.linear_state_bytes()
    assert get_model("qwen3-next-80b-a3b").ssm_state_dtype == "auto"  # no mamba_ssm_dtype: the model dtype
    # reads: every cached token of the full layers + each sequence's state, read and written once
    assert m.kv_bytes(10_000, seqs=3) == pytest.approx(10_000 * m.kv_bytes_per_token() + 6 * m.linear_state_bytes())
    # the engine's plan counts full-attention tokens and reserves each running sequence's state
    h = get_hardware("h100-sxm")
    plan = memory_plan([Deployment(m, h, 1, prior_profile(h).params(h))], 0.9, 8192, SEQS)
    assert plan.full_bytes_per_token == m.kv_bytes_per_token()
    assert plan.seq_reserve_tokens == math.ceil(m.linear_state_bytes() / m.kv_bytes_per_token())


def test_hybrid_attention_work_grows_only_in_full_layers():
    m = get_model("qwen3-next-80b-a3b")
    f = lambda c: float(m.attention_flops(c, 1.0, 1.0))  # noqa: E731 -- one decode token on c cached pairs
    assert f(100_000) - f(1_000) == pytest.approx(99_000 * 4 * 16 * 256 * m.kv_layers)
    assert f(0) == pytest.approx(m.linear_layers * m.linear_flops_per_token)


def test_sparse_attention_reads_top_k_beyond_its_context():
    v32, r1 = get_model("deepseek-v3.2"), get_model("deepseek-r1")
    latent = r1.kv_bytes_per_token()
    assert v32.kv_bytes_per_token() == pytest.approx(latent + 61 * 128 * (1 + 4 / 128))
    short, long = 1_000, 100_000
    assert v32.kv_bytes(short) == pytest.approx(short * v32.kv_bytes_per_token())  # under top-k: everything
    # beyond: the latent of 2048 entries plus every indexer key
    assert v32.kv_bytes(long) == pytest.approx(2048 * latent + long * v32.indexer_bytes_per_token)
    assert v32.kv_bytes(long) < r1.kv_bytes(long) / 5  # 132 indexer bytes per token and layer vs a 1152-byte latent
    # attention pairs of one decode token: capped MLA + the indexer over every key
    pairs = float(v32.attention_flops(long, 1.0, 1.0))
    assert pairs < float(r1.attention_flops(long, 1.0, 1.0)) / 5 and pairs > 61 * 2 * 64 * 128 * long


def test_sparse_attention_runs_absorbed_on_padded_heads():
    """DSA runs in MLA's MQA (absorbed) mode for prefill too, each tensor-parallel rank on at least
    SPARSE_MLA_MIN_HEADS_PER_GPU query heads, and every rank scores every key with the replicated indexer."""
    from simulator.catalog.models import SPARSE_MLA_MIN_HEADS_PER_GPU

    v32, r1 = get_model("deepseek-v3.2"), get_model("deepseek-r1")
    prompt = 1_000.0
    pairs = prompt * (prompt + 1) / 2  # one 1000-token prefill
    per_rank = lambda m, tp: float(m.attention_flops(pairs, prompt, 1.0, tp)) / tp  # noqa: E731
    indexer = 61 * v32.indexer_flops_per_pair * pairs
    absorbed = 61 * 2 * (2 * 512 + 64) * pairs  # per head: 2 (kv_lora + kv_lora + rope) per pair
    assert per_rank(v32, 1) == pytest.approx(128 * absorbed + indexer)
    assert per_rank(v32, 1) > per_rank(r1, 1)  # R1's prefill runs expanded (MHA), 3.4x fewer attention FLOPs
    heads_per_rank = {tp: max(128 // tp, SPARSE_MLA_MIN_HEADS_PER_GPU) for tp in (1, 2, 4, 8)}
    for tp, h in heads_per_rank.items():
        assert per_rank(v32, tp) == pytest.approx(h * absorbed + indexer)
    # a rank's work stops falling once its heads are padded: TP 2, 4 and 8 run the same attention per rank
    assert per_rank(v32, 8) == pytest.approx(per_rank(v32, 2)) and per_rank(v32, 2) < per_rank(v32, 1)
    # decode (one new token) is absorbed either way: only the padding moves it
    assert float(v32.attention_flops(pairs, 1.0, 1.0, 1)) == pytest.approx(
        61 * (128 * 2 * (2 * 512 + 64) * 2048 + v32.indexer_flops_per_pair * pairs))


def test_llama4_interleaved_moe_and_chunked_attention():
    scout, mav = get_model("llama-4-scout-17b-16e"), get_model("llama-4-maverick-17b-128e")
    assert (scout.moe_layers, mav.moe_layers) == (48, 24)
    assert scout.local_attention == "chunked" and scout.sliding_layers == 36
    # KV held per sequence: 12 global layers every token, 36 chunked layers at most one chunk of 8192
    per_layer = scout.kv_bytes_per_token() / 48
    assert scout.kv_bytes(100_000) == pytest.approx(per_layer * (12 * 100_000 + 36 * 8192))
    # Maverick's dense layers are SwiGLUs of intermediate_size_mlp
    assert mav.layer_params_total - mav.moe_layers * (mav.experts * mav.expert_params) > 24 * 3 * 5120 * 16384


def test_glm_mtp_layer_and_shared_expert():
    g = get_model("glm-4.5-air")
    assert (g.mtp_layers, g.shared_experts, g.first_k_dense_layers, g.moe_layers) == (1, 1, 1, 45)
    assert g.mtp_head().layers == 1 and g.mtp_head().is_moe


def test_draft_heads_of_hybrid_targets_are_plain_layers():
    for name in ("qwen3.5-35b-a3b", "llama-4-maverick-17b-128e", "deepseek-v3.2"):
        h = get_model(name).draft_head()
        assert not h.is_linear_hybrid and h.index_topk is None and h.moe_every == 1 and h.params > 0
    mtp = get_model("qwen3.5-35b-a3b").mtp_head()
    assert not mtp.is_linear_hybrid and mtp.kv_layers == 1


def test_unknown_llama_like_model_type_is_read_as_llama_with_a_warning():
    with pytest.warns(UnknownArchitectureWarning, match=r"'falcon'.*read as llama.*num_hidden_layers.*hidden_size"):
        m = load_hf_config(CONFIGS / "bad" / "unknown-arch.json")
    assert m.arch == "llama" and m.name == "llama-3.1-8b"  # the shape is Llama-3.1-8B's


def test_unknown_non_llama_model_type_is_still_refused(tmp_path):
    raw = json.loads((CONFIGS / "qwen3-30b-a3b" / "config.json").read_text())
    raw["model_type"], raw["architectures"] = "falcon", ["FalconForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Exception, match="unknown architecture 'falcon'"):
            load_hf_config(tmp_path / "config.json")


@settings(max_examples=examples(40), deadline=None)
@given(name=st.sampled_from(NEW + CATALOG_ONLY), t1=st.integers(0, 300_000), t2=st.integers(0, 300_000),
       seqs=st.integers(1, 64))
def test_kv_reads_grow_with_tokens_and_never_exceed_the_full_cache(name, t1, t2, seqs):
    """Laws of every new model's KV reads: monotone in the cached tokens, and never more than every layer reading
    every token (plus, for a hybrid, each sequence's state read and written)."""
    m = get_model(name)
    lo, hi = sorted((t1, t2))
    assert m.kv_bytes(lo, seqs=seqs) <= m.kv_bytes(hi, seqs=seqs) + 1e-6
    bound = hi * m.kv_bytes_per_token() + 2 * seqs * m.linear_state_bytes()
    assert m.kv_bytes(hi, seqs=seqs) <= bound * (1 + 1e-12) + 1e-6
    assert np.isfinite(m.attention_flops(hi, max(seqs, 1), seqs))


def test_unknown_model_type_of_a_known_class_is_read_as_that_class(capsys):
    """Kimi-K2's model_type kimi_k2 names no architecture here, but its architectures[0] DeepseekV3ForCausalLM does
    (the class vLLM runs it with): read as DeepSeek-V3's shape with a warning, which matches the kimi-k2 entry; on the
    command line the warning is one line."""
    from specsim_cli.main import main

    with pytest.warns(UnknownArchitectureWarning, match=r"'kimi_k2'.*architectures\[0\] DeepseekV3ForCausalLM"):
        m = load_hf_config(CONFIGS / "kimi-k2" / "config.json")
    assert (m.arch, m.name, m.weight_dtype, m.experts, m.heads) == ("deepseek_v3", "kimi-k2", "fp8", 384, 64)
    rc = main(["simulate", "pass-time", "--model", str(CONFIGS / "kimi-k2" / "config.json"), "--hardware", "h200",
               "--tp", "8", "--dtype", "fp8", "--format", "csv"])
    err = capsys.readouterr().err
    assert rc == 0 and err.startswith("warning: ") and err.count("\n") == 1 and "kimi_k2" in err, err


def test_minimax_m2_reads_as_its_own_architecture():
    """MiniMax-M2: every layer MoE (256 experts top-8 of 1536, intermediate_size per expert as Mixtral writes it), an
    explicit head_dim (48 x 128 = 6144 against a hidden size of 3072), 3 one-layer MTP modules."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = load_hf_config(CONFIGS / "minimax-m2" / "config.json")
    assert (m.arch, m.name, m.experts, m.experts_per_token, m.expert_intermediate, m.head_dim, m.mtp_layers) == (
        "minimax_m2", "minimax-m2", 256, 8, 1536, 128, 3)
    assert m.router_bias and m.weight_dtype == "fp8"


def test_qwen3_vl_reads_its_text_decoder():
    """Qwen3-VL nests Qwen3's decoder under text_config (the vision tower is not modelled): the 30B-A3B is
    Qwen3-30B-A3B's decoder, so it matches that catalog entry and its published count."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = load_hf_config(CONFIGS / "variants" / "qwen3-vl-30b-a3b.json")
    assert (m.arch, m.name, m.layers, m.experts, m.experts_per_token, m.expert_intermediate) == (
        "qwen3_moe", "qwen3-30b-a3b", 48, 128, 8, 768)


@settings(max_examples=examples(40), deadline=None)
@given(seqs=st.integers(1, 256), drafts=st.integers(0, 8), tokens=st.integers(0, 200_000))
def test_linear_state_traffic_reads_once_and_writes_per_scored_position(seqs, drafts, tokens):
    """A pass reads each sequence's linear-attention state once and writes it once per scored position: a
    verification of k drafts (k + 1 logit rows per sequence) writes it k + 1 times; fewer rows than sequences (a
    prefill chunk scores none) still write each state once. Full-attention KV is the same whatever the rows."""
    m = get_model("qwen3.8-27b")
    state = m.linear_state_bytes()
    kv = tokens * m.kv_bytes_per_token()
    rows = seqs * (drafts + 1)
    assert m.kv_bytes(tokens, seqs=seqs, rows=rows) == pytest.approx(kv + (seqs + rows) * state)
    assert m.kv_bytes(tokens, seqs=seqs) == pytest.approx(kv + 2 * seqs * state)
    assert m.kv_bytes(tokens, seqs=seqs, rows=0) == m.kv_bytes(tokens, seqs=seqs)
    assert m.kv_bytes(tokens, seqs=seqs, rows=rows + seqs) > m.kv_bytes(tokens, seqs=seqs, rows=rows)


def test_a_speculating_sequence_holds_one_state_per_verified_position():
    """vLLM keeps the state after each verified position (rollback): the memory plan reserves 1 + k states per
    running sequence of a hybrid target, so fewer sequences fit; a plain target's reservation does not move."""
    h = get_hardware("b200")
    p = prior_profile(h).params(h)
    hybrid = Deployment(get_model("qwen3.8-27b"), h, 1, p)
    plans = [memory_plan([hybrid], 0.9, 8192, SEQS, spec_tokens=k) for k in (0, 3, 7)]
    state = hybrid.model.linear_state_bytes()
    assert [q.sliding_bytes_per_seq for q in plans] == pytest.approx([state, 4 * state, 8 * state])
    dense = Deployment(get_model("qwen3-8b"), h, 1, p)
    assert memory_plan([dense], 0.9, 8192, SEQS, spec_tokens=7).sliding_bytes_per_seq == \
        memory_plan([dense], 0.9, 8192, SEQS).sliding_bytes_per_seq == 0.0
