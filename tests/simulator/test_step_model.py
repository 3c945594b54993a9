"""Laws of the engine-level step model (issue 24): the soft roofline, the breakdown, monotonicity, verification
vs decodes, the draft role's fixed cost, and the hot-path copy (PassCost) agreeing with the one formula."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.roofline import gpu_split, soft_roofline
from simulator.cost.cost_profile import prior_profile
from simulator.engines.serving.pass_cost import PassCost
from tests.conftest import examples

MODELS = ("r1-distill-qwen-1.5b", "qwen3-8b", "qwq-32b", "llama-3.1-70b")
GPUS = ("h100-sxm", "a100-80gb", "rtx-a6000", "l40s", "b200", "h200")


def _dep(model, gpu, tp, p=None, j=None):
    hw = get_hardware(gpu)
    c = prior_profile(hw).params(hw)
    if p is not None:
        c = replace(c, roofline_p=p)
    if j is not None:
        c = replace(c, multi_token_penalty=j)
    return Deployment(get_model(model), hw, tp, c)


deps = st.builds(_dep, st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from([1, 2, 4]),
                 st.one_of(st.none(), st.floats(1.0, 64.0), st.just(float("inf"))), st.one_of(st.none(), st.floats(0.0, 0.5)))


def _step(d, B, T, C):
    n, c = np.full(B, float(T)), np.full(B, float(C))
    return d.batch_forward_time(n, c, np.ones(B))


@settings(max_examples=examples(60), deadline=None)
@given(a=st.floats(0, 1.0), b=st.floats(0, 1.0), p=st.floats(1.0, 80.0))
def test_soft_roofline_lies_between_max_and_sum(a, b, p):
    t = float(soft_roofline(a, b, p))
    assert max(a, b) * (1 - 1e-12) <= t <= (a + b) * (1 + 1e-12) + 1e-300
    assert float(soft_roofline(a, b, float("inf"))) == max(a, b)


@settings(max_examples=examples(60), deadline=None)
@given(t=st.lists(st.floats(0, 1.0), min_size=4, max_size=4), p=st.one_of(st.floats(1.0, 80.0), st.just(float("inf"))))
def test_kernel_kinds_on_their_own_rooflines_never_hide_one_under_the_other(t, p):
    """GEMMs (weights vs their FLOPs) and attention (KV vs its FLOPs) are separate kernels: the pass is at least one
    roofline over the summed roofs (Minkowski), at most every roof summed; with no attention it is the GEMMs' roofline;
    its memory part lies within it and the KV share in [0, 1]."""
    w, kv, gemm, attn = t
    gpu, mem, share = (float(x) for x in gpu_split(w, kv, gemm, attn, p))
    assert float(soft_roofline(w + kv, gemm + attn, p)) * (1 - 1e-12) <= gpu <= (w + kv + gemm + attn) * (1 + 1e-12)
    assert 0.0 <= mem <= gpu * (1 + 1e-12) and 0.0 <= share <= 1.0
    assert float(gpu_split(w, 0.0, gemm, 0.0, p)[0]) == float(soft_roofline(w, gemm, p))
    if kv > 0 and attn == 0:  # memory-bound attention adds its whole KV time
        assert gpu == pytest.approx(float(soft_roofline(w, gemm, p)) + kv, rel=1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(d=deps, B=st.integers(1, 128), T=st.integers(1, 600), C=st.integers(0, 20000))
def test_pass_time_is_monotone_in_batch_tokens_and_context(d, B, T, C):
    t = _step(d, B, T, C)
    assert _step(d, B + 1, T, C) >= t
    assert _step(d, B, T + 1, C) >= t
    assert _step(d, B, T, C + 64) >= t


@settings(max_examples=examples(40), deadline=None)
@given(d=deps, k=st.integers(1, 15), C=st.integers(0, 20000))
def test_verifying_k_plus_1_costs_no_more_than_k_plus_1_decodes(d, k, C):
    assert d.verify_time(k, C) <= (k + 1) * d.decode_time(C) * (1 + 1e-12)
    assert d.verify_time(k, C) >= d.decode_time(C) * (1 - 1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(d=deps, B=st.integers(1, 64), T=st.integers(1, 600), C=st.integers(0, 20000))
def test_breakdown_sums_to_the_total_and_each_part_is_nonnegative(d, B, T, C):
    n, c = np.full(B, float(T)), np.full(B, float(C))
    bd = d.pass_breakdown(n.sum(), (c + n).sum(), (n * (c + (n + 1) / 2)).sum(), float(B), float(B))
    parts = [float(bd[k]) for k in ("weights", "kv", "compute", "allreduce", "step", "layers", "sequences")]
    assert min(parts) >= 0
    assert sum(parts) == pytest.approx(float(bd["total"]), rel=1e-12)
    assert float(bd["total"]) == pytest.approx(_step(d, B, T, C), rel=1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(d=deps, n=st.lists(st.integers(1, 40), min_size=1, max_size=12), c=st.integers(0, 8000))
def test_pass_cost_hot_path_equals_the_one_formula(d, n, c):
    n = np.asarray(n, dtype=float)
    cc = np.full(len(n), float(c)) + np.arange(len(n))
    assert PassCost(d).batch(n, cc) == pytest.approx(d.batch_forward_time(n, cc), rel=1e-12)


def test_catalog_gpu_steps_have_the_engine_shape():
    """Every catalog GPU carries the engine-level shape (gpu_priors.yaml): a multi-token pass costs more than a
    one-token decode below the ridge, and a 5-token verification stays within a few tens of percent of a decode."""
    for gpu in GPUS:
        d = _dep("qwen3-8b", gpu, 1)
        assert np.isfinite(d.cost.roofline_p) and d.cost.multi_token_penalty > 0, gpu
        r = d.verify_time(4, 512) / d.decode_time(512)
        assert 1.0 < r < 1.3, (gpu, r)


def test_draft_role_pays_the_draft_pass_cost_only():
    hw = get_hardware("h100-sxm")
    c = prior_profile(hw).params(hw)
    assert c.draft_step_overhead_s is not None and c.draft_step_overhead_s < c.step_overhead_s
    assert c.for_role("draft").step_overhead_s == c.draft_step_overhead_s
    assert c.for_role("base") is c and c.for_role("small") is c
    # a profile without the term (CPU): every role pays the full step
    cpu = get_hardware("cpu")
    cc = prior_profile(cpu).params(cpu)
    assert cc.for_role("draft") is cc and cc.draft_step_overhead_s is None and not np.isfinite(cc.roofline_p)


# (model, GPU) pairs whose plain decode step becomes compute-bound within 64-4096 sequences
COMPUTE_BOUND_PAIRS = [("qwen3-32b", g) for g in ("h100-sxm", "a100-80gb", "rtx-a6000", "h200")] + [
    ("qwen3-8b", "rtx-a6000")]


@settings(max_examples=examples(30), deadline=None)
@given(pair=st.sampled_from(COMPUTE_BOUND_PAIRS), a1=st.floats(0.5, 0.95), decay=st.floats(0.85, 1.0),
       context=st.integers(0, 256))
def test_speculation_benefit_does_not_grow_towards_compute_bound(pair, a1, decay, context):
    """Issue 25's law on the engine-level step: past a moderate batch, adding sequences moves the verification
    towards the compute roof, so the goodput gain of the best gamma over plain decoding never grows, and the best
    gamma is found on the same rule (simulator.engines.gamma_choice.goodput_gamma)."""
    from simulator.cost.cost_model import Drafting
    from simulator.engines.gamma_choice import goodput_gamma

    from dataclasses import replace

    model, gpu = pair
    hw = get_hardware(gpu)
    # the law is the GPU roofline's: the per-sequence host cost (an engine version's, engine_hosts.yaml; vLLM 0.11's
    # 156 us x thousands of sequences outweighs the compute roof) is left out
    c = replace(prior_profile(hw).params(hw), seq_overhead_s=0.0)
    m = get_model(model)
    t = Deployment(m, hw, 1, c)
    d = Deployment(m.draft_head(1), hw, 1, c.for_role("draft"), Drafting(kind="head"))
    acc = np.cumprod([min(a1 * decay**i, 1.0) for i in range(8)])
    gain, best = [], []
    for B in (64, 128, 256, 512, 1024, 2048, 4096):
        bd = t.pass_breakdown(B, B * (context + 1.0), B * (context + 1.0), B, B)
        if bd["compute"] < 0.5 * bd["total"]:
            # plain decoding not compute-bound at this batch: memory-bound, or bound by per-sequence host costs
            # (a small model at thousands of sequences), which speculation amortises over gamma+1 tokens
            continue
        g = goodput_gamma(t, d, acc, B, context, 8)
        gain.append(g.tokens_per_s / g.per_gamma[0])
        best.append(g.gamma)
    assert len(gain) >= 2, "no compute-bound batches: the law is not exercised"
    # (1e-3: a flat stretch may move by parts per million)
    assert all(b <= a * (1 + 1e-3) for a, b in zip(gain, gain[1:])), gain


@settings(max_examples=examples(30), deadline=None)
@given(model=st.sampled_from(("qwen3-30b-a3b", "deepseek-r1", "gpt-oss-120b")), gpu=st.sampled_from(("h100-sxm", "h200", "b200")),
       tp=st.sampled_from([1, 2, 8]), n=st.lists(st.integers(1, 40), min_size=1, max_size=12), c=st.integers(0, 8000))
def test_pass_cost_equals_the_formula_for_moe_mla_and_windowed_models(model, gpu, tp, n, c):
    """The serving loop's PassCost prices mixtures of experts, latent attention and sliding windows by the one formula
    (experts hit grow with the batch's tokens: not affine in the aggregates)."""
    d = _dep(model, gpu, tp)
    n = np.asarray(n, dtype=float)
    cc = np.full(len(n), float(c)) + np.arange(len(n))
    assert PassCost(d).batch(n, cc) == pytest.approx(d.batch_forward_time(n, cc), rel=1e-12)
    k = np.arange(1.0, 4.0)
    assert np.allclose(PassCost(d).times(n.sum(), k * 100, k * 100, float(len(n))),
                       [PassCost(d).time(n.sum(), x * 100, x * 100, float(len(n))) for x in k], rtol=1e-12)
