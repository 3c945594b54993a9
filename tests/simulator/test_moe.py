"""Mixture of experts, latent attention, sliding windows, expert parallelism and MTP (issue 26): hand-computed
counts and bytes, the step model's laws on MoE models, the fits-in-memory check, and the shipped MoE scenarios."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.models import WEIGHT_DTYPE_BYTES
from simulator.cost.cost_model import Deployment, Drafting, expert_parallel_error
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from tests.conftest import examples

MOE = ("deepseek-r1", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b", "gpt-oss-20b", "mixtral-8x7b")
# (published total, published active: per token with embedding and LM head; gpt-oss's model card leaves the
# 0.58B embedding out of its 5.13B / 3.61B, added here)
PUBLISHED = {"deepseek-r1": (671e9, 37e9), "qwen3-235b-a22b": (235e9, 22e9), "qwen3-30b-a3b": (30.5e9, 3.3e9),
             "gpt-oss-120b": (116.83e9, 5.13e9 + 0.579e9), "gpt-oss-20b": (20.91e9, 3.61e9 + 0.579e9),
             "mixtral-8x7b": (46.7e9, 12.9e9)}


def _dep(model, gpu="h100-sxm", tp=1, ep=1, dtype="bf16", p=None):
    hw = get_hardware(gpu)
    c = prior_profile(hw).params(hw)
    if p is not None:
        c = replace(c, roofline_p=p)
    return Deployment(get_model(model).with_dtypes(dtype), hw, tp, c, ep=ep)


# ---- shapes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MOE)
def test_total_and_active_parameters_match_the_published_figures(name):
    m = get_model(name)
    total, active = PUBLISHED[name]
    assert abs(m.params / total - 1) < 0.03
    assert abs(m.active_params / active - 1) < 0.03
    assert m.active_params < m.params


def test_deepseek_mla_layer_by_hand():
    m = get_model("deepseek-r1")
    H, h = 7168, 128
    attn = (H * 1536 + 1536 + 1536 * h * (128 + 64)        # q_a, its norm, q_b
            + H * (512 + 64) + 512 + 512 * h * (128 + 128)  # kv_a (latent + rope key), its norm, kv_b
            + h * 128 * H)                                  # o
    assert m.attention_params_per_layer == attn
    expert = 3 * H * 2048
    moe_layer = attn + 2 * H + H * 256 + 256 + expert + 256 * expert  # router + bias, 1 shared, 256 routed
    dense_layer = attn + 3 * H * 18432 + 2 * H
    assert m.layer_params_total == 3 * dense_layer + 58 * moe_layer
    # KV: the 512-value latent + the 64-value rope key per layer, bf16, the same on every GPU of TP 8
    assert m.kv_bytes_per_token(1) == 61 * 576 * 2 == m.kv_bytes_per_token(8)
    # the MTP module: ~11.6B of its own beside the shared embedding / head (hub total 685B = 671B + ~14B with copies)
    assert 11e9 < m.mtp_params < 12e9
    assert abs((m.params + m.mtp_params + 2 * m.embedding_params) / 685e9 - 1) < 0.03


def test_gpt_oss_checkpoint_bytes_and_windowed_kv():
    m = get_model("gpt-oss-120b")
    # MXFP4 experts (0.53125 B per weight) + bf16 attention, router, embedding, LM head: the ~61 GiB checkpoint
    assert m.weight_bytes_resident / 2**30 == pytest.approx(61, rel=0.03)
    assert m.expert_bytes == 3 * 2880 * 2880 * WEIGHT_DTYPE_BYTES["mxfp4"]
    assert get_model("gpt-oss-20b").weight_bytes_resident / 2**30 == pytest.approx(13, rel=0.05)
    # 18 full layers hold every token, 18 sliding ones at most 128 per sequence
    per_layer = 2 * 8 * 64 * 2
    assert m.kv_bytes_per_token(1) == 36 * per_layer
    assert float(m.kv_bytes(100)) == 100 * 36 * per_layer  # inside the window: every layer
    assert float(m.kv_bytes(4096)) == 18 * per_layer * 4096 + 18 * per_layer * 128
    assert float(m.kv_bytes(4 * 4096, seqs=4)) == 18 * per_layer * 4 * 4096 + 18 * per_layer * 4 * 128


def test_experts_hit_under_uniform_routing():
    m = get_model("qwen3-30b-a3b")
    E, k = 128, 8
    assert float(m.experts_hit(1)) == pytest.approx(k)
    assert float(m.experts_hit(0)) == 0
    for n in (2, 16, 64, 1000):
        assert float(m.experts_hit(n)) == pytest.approx(E * (1 - (1 - k / E) ** n))
    assert float(m.experts_hit(10_000)) == pytest.approx(E)
    h = m.experts_hit(np.arange(1, 300))
    assert np.all(np.diff(h) > 0) and np.all(h <= E)
    # bytes a pass reads: one token its k experts, many tokens every expert (the static figure)
    one = float(m.weight_bytes_read_at(1))
    assert one == pytest.approx(m.nonexpert_bytes_read + 48 * k * m.expert_bytes)
    assert float(m.weight_bytes_read_at(1e6)) == pytest.approx(m.weight_bytes_read) == pytest.approx(
        m.weight_bytes_resident - m.embedding_params * 2)


def test_dense_heads_and_mtp_modules():
    r1 = get_model("deepseek-r1")
    mtp = r1.mtp_head()
    assert mtp.is_moe and mtp.layers == 1 and mtp.moe_layers == 1 and mtp.shares_target_embeddings
    assert r1.weight_dtype == "fp8" and mtp.weight_dtype == "fp8"  # the published checkpoint, MTP module included
    assert mtp.weight_bytes_resident == pytest.approx(r1.mtp_params * 1.0, rel=1e-3)
    head = get_model("gpt-oss-120b").draft_head(1)
    assert not head.is_moe and head.layers == 1 and head.intermediate == 2880
    with pytest.raises(ValueError, match="no MTP module"):
        get_model("qwen3-30b-a3b").mtp_head()
    # a dense model's head is unchanged by the MoE fields (same spec as before issue 26)
    q = get_model("qwen3-8b").draft_head(1)
    assert q.is_plain and q.experts == 0


# ---- the step model on MoE / MLA / sliding models ----------------------------------------------------------------
def test_dense_model_through_the_general_path_equals_the_dense_path():
    d = _dep("qwen3-8b")
    for B, T, C in ((1, 1, 0), (8, 5, 4096), (64, 1, 1000), (1, 2048, 0)):
        n, kv, a = B * T, B * (C + T), B * T * (C + (T + 1) / 2)
        dense = d.pass_breakdown(n, kv, a, B, B)
        gen = d._moe_breakdown(n, kv, a, B, B)
        for k in dense:
            assert float(gen[k]) == pytest.approx(float(dense[k]), rel=1e-12, abs=1e-15), k


def test_decode_reads_only_the_routed_experts():
    d = _dep("qwen3-30b-a3b")
    one, many = d.decode_time(512), float(d.batch_forward_time(np.ones(64), np.full(64, 512.0)))
    bd1 = d.pass_breakdown(1, 513, 513, 1, 1)
    # one token: 8 of 128 experts per layer, far less than all 61 GB
    assert float(bd1["weights"]) < 0.25 * d.model.weight_bytes_read / d.hardware.memory_bandwidth_bytes_per_s
    assert many > one


def test_expert_parallel_moves_the_same_bytes_and_exchanges_tokens():
    tp_only, ep = _dep("qwen3-235b-a22b", tp=8), _dep("qwen3-235b-a22b", tp=8, ep=8)
    assert tp_only.resident_bytes_per_gpu == ep.resident_bytes_per_gpu
    for n in (1, 64, 4096):
        a, b = tp_only.pass_breakdown(n, n * 100.0, n * 100.0, n, n), ep.pass_breakdown(n, n * 100.0, n * 100.0, n, n)
        assert float(a["weights"]) == pytest.approx(float(b["weights"]))
        assert float(b["allreduce"]) != float(a["allreduce"])
    with pytest.raises(ValueError, match="not divisible"):
        _dep("mixtral-8x7b", tp=16, ep=16)
    assert expert_parallel_error(get_model("qwen3-8b"), 8, 8).endswith("is dense)")
    assert expert_parallel_error(get_model("qwen3-30b-a3b"), 8, 2).startswith("ep=2 must be 1")


def test_mla_decode_reads_the_latent_once_per_gpu():
    d1, d8 = _dep("deepseek-r1", "h200", tp=1, dtype="fp8"), _dep("deepseek-r1", "h200", tp=8, dtype="fp8")
    assert d1.kv_bytes_per_token_per_gpu == d8.kv_bytes_per_token_per_gpu == 61 * 576 * 2
    a = float(d8.pass_breakdown(1, 32769, 32769, 1, 1)["kv"])
    b = float(d8.pass_breakdown(1, 1025, 1025, 1, 1)["kv"])
    assert a > 20 * b
    # absorbed decode attention costs more FLOPs per pair than the expanded prefill form, reads the latent once
    m = d1.model
    assert float(m.attention_flops(100.0, 1.0, 1.0)) > float(m.attention_flops(100.0, 100.0, 1.0))


def test_sliding_layers_stop_growing_past_the_window():
    d = _dep("gpt-oss-120b")
    kv = lambda c: float(d.pass_breakdown(1, c + 1.0, c + 1.0, 1, 1)["kv"])  # noqa: E731
    full_only = d.model.kv_bytes_per_token(1) / 2  # half the layers slide
    slope = (kv(8192) - kv(4096)) / 4096
    bw = d.cost.kv_efficiency * d.hardware.memory_bandwidth_bytes_per_s
    assert slope == pytest.approx(full_only / bw, rel=0.05)


MOE_GPUS = ("h100-sxm", "a100-80gb", "l40s", "b200", "h200")


def _mdep(model, gpu, tp, ep, p):
    hw = get_hardware(gpu)
    c = prior_profile(hw).params(hw)
    if p is not None:
        c = replace(c, roofline_p=p)
    return Deployment(get_model(model), hw, tp, c, ep=ep if tp > 1 else 1)


def _safe_mdep(*a):
    """A deployment, or None where ep cannot serve the model at that TP (ep must be 1 or tp, and divide E)."""
    try:
        return _mdep(*a)
    except ValueError:
        return None


mdeps = st.builds(_safe_mdep, st.sampled_from(MOE), st.sampled_from(MOE_GPUS), st.sampled_from([1, 2, 8]),
                  st.sampled_from([1, 2, 8]), st.one_of(st.none(), st.floats(1.0, 64.0), st.just(float("inf")))).filter(
    lambda d: d is not None)


def _step(d, B, T, C):
    n, c = np.full(B, float(T)), np.full(B, float(C))
    return d.batch_forward_time(n, c, np.ones(B))


@settings(max_examples=examples(40), deadline=None)
@given(d=mdeps, B=st.integers(1, 128), T=st.integers(1, 600), C=st.integers(0, 20000))
def test_moe_pass_time_is_monotone_in_batch_tokens_and_context(d, B, T, C):
    t = _step(d, B, T, C)
    assert _step(d, B + 1, T, C) >= t * (1 - 1e-12)
    assert _step(d, B, T + 1, C) >= t * (1 - 1e-12)
    assert _step(d, B, T, C + 64) >= t * (1 - 1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(d=mdeps, k=st.integers(1, 15), C=st.integers(0, 20000))
def test_moe_verifying_k_plus_1_costs_no_more_than_k_plus_1_decodes(d, k, C):
    assert d.verify_time(k, C) <= (k + 1) * d.decode_time(C) * (1 + 1e-12)
    assert d.verify_time(k, C) >= d.decode_time(C) * (1 - 1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(d=mdeps, B=st.integers(1, 64), T=st.integers(1, 600), C=st.integers(0, 20000))
def test_moe_breakdown_sums_to_the_total_and_each_part_is_nonnegative(d, B, T, C):
    n, c = np.full(B, float(T)), np.full(B, float(C))
    bd = d.pass_breakdown(n.sum(), (c + n).sum(), (n * (c + (n + 1) / 2)).sum(), float(B), float(B))
    parts = [float(bd[k]) for k in ("weights", "kv", "compute", "allreduce", "step", "layers", "sequences")]
    assert min(parts) >= 0
    assert sum(parts) == pytest.approx(float(bd["total"]), rel=1e-12)
    assert float(bd["total"]) == pytest.approx(_step(d, B, T, C), rel=1e-12)


def test_more_tp_never_increases_per_gpu_bytes_of_moe_models():
    for name in MOE:
        for tp, f in ((1, 2), (2, 4), (4, 8)):
            a, b = _dep(name, tp=tp), _dep(name, tp=tp * f)
            assert b.resident_bytes_per_gpu <= a.resident_bytes_per_gpu
            assert b.kv_bytes_per_token_per_gpu <= a.kv_bytes_per_token_per_gpu


def test_mtp_draft_iteration_costs_one_moe_layer_pass_per_token():
    from simulator.engines.gamma_choice import iteration_parts

    hw = get_hardware("h200")
    c = prior_profile(hw).params(hw)
    m = get_model("deepseek-r1").with_dtypes("fp8")
    t = Deployment(m, hw, 8, c)
    d = Deployment(m.mtp_head(), hw, 8, c.for_role("draft"), Drafting(kind="mtp"))
    dr1, v1 = iteration_parts(t, d, 1, 1000, 1)
    dr3, v3 = iteration_parts(t, d, 1, 1000, 3)
    assert dr3 == pytest.approx(3 * dr1, rel=1e-6) and v3 > v1
    assert dr1 < 0.2 * t.decode_time(1000)


# ---- fits in memory --------------------------------------------------------------------------------------------
SC = """name: fit
hardware: {{gpu: {gpu}, count: {count}}}
base: {{model: {model}, tp: {tp}, weight_dtype: {dtype}}}
small: {{model: qwen3-0.6b, tp: {tp}}}
workload: aime_qwq32b_r1-1.5b
memory_fraction: {{base: 0.85, small: 0.1}}
systems: [vanilla-base]
"""


@pytest.mark.parametrize("model, gpu, count, tp, dtype, fits", [
    ("gpt-oss-120b", "h100-sxm", 1, 1, "bf16", True),     # MXFP4 experts: 65 GB of 68
    ("gpt-oss-20b", "l40s", 1, 1, "bf16", True),
    ("qwen3-30b-a3b", "l40s", 1, 1, "bf16", False),      # 61 GB of bf16 weights on a 48 GB card
    ("qwen3-30b-a3b", "l40s", 1, 1, "fp8", True),
    ("deepseek-r1", "h200", 8, 8, "bf16", False),        # 1.34 TB of bf16 over 8 x 120 GB
    ("deepseek-r1", "h200", 8, 8, "fp8", True),
    ("qwen3-235b-a22b", "h100-sxm", 8, 4, "bf16", False),
    ("qwen3-235b-a22b", "h100-sxm", 8, 8, "bf16", True),
])
def test_fits_in_memory_counts_every_expert(tmp_path, model, gpu, count, tp, dtype, fits):
    from simulator.inputs.scenario import load_scenario

    p = tmp_path / "s.yaml"
    p.write_text(SC.format(model=model, gpu=gpu, count=count, tp=tp, dtype=dtype))
    if fits:
        load_scenario(p)
    else:
        with pytest.raises(InputError, match="base.tp: .* the model's weights need .* GiB per GPU, more than the GPU holds"):
            load_scenario(p)


def test_mtp_kind_needs_a_model_with_an_mtp_module(tmp_path):
    from simulator.inputs.scenario import load_scenario

    text = SC.format(model="qwen3-30b-a3b", gpu="h100-sxm", count=1, tp=1, dtype="fp8").replace(
        "systems: [vanilla-base]", "systems: [vanilla-base, specdecode]\ndraft: {kind: mtp, acceptance: {a: [0.8], "
        "source: test}}\ngrid: {gamma: [1]}")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(InputError, match="draft.kind: qwen3-30b-a3b has no MTP module"):
        load_scenario(p)


# ---- shipped scenarios: capacity runs on each MoE scenario (whatif on every shipped scenario: test_cli_whatif.py) ---
# One full rate search (the cheapest: qwen3-235b, ~10 s); the others check their serving simulation at one given rate
# (`--qps`): a search on the DeepSeek-R1 MTP scenario runs ~4 min on a loaded 2-core machine (issue 42), and the search
# itself is tested on every engine in tests/simulator/test_capacity*.py.
@pytest.mark.parametrize("scenario, system, gamma, qps", [
    ("moe-deepseek-r1-h200x8-mtp", "specreason-decode", "2", "0.05"),
    ("moe-gpt-oss-120b-h100", "specdecode", "3", "0.2"),
    ("moe-qwen3-235b-a22b-h100x8", "specdecode", "4", None),
    ("moe-qwen3-30b-a3b-h100-l40s", "specreason", None, "0.1"),
])
def test_moe_scenario_capacity_runs(capsys, scenario, system, gamma, qps):
    import json
    import math

    from specsim_cli.main import main

    args = ["capacity", scenario, "--requests", "30", "--workers", "1", "--system", system, "--threshold", "7",
            "--format", "json"] + (["--gamma", gamma] if gamma else []) + (["--qps", qps] if qps else [])
    code = main(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = json.loads(out.out)["results"]
    assert rows and all(r["system"] == system for r in rows)
    for r in rows:
        assert math.isfinite(r["latency_mean_s"]) and r["latency_mean_s"] > 0
        if qps is None:
            assert r["max_qps"] > 0
