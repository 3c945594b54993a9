"""Hand-computed cost-model cases and physical laws."""

import numpy as np
import pytest

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams
from tests.conftest import flat_params


def test_decode_time_by_hand_single_gpu():
    # R1-1.5B on one H100, ideal roofline: bytes = (28 layers x 46.8M + LM head 151936x1536) x 2 B
    # + context 1000 x KV (2 x 28 x 2 x 128 x 2 B = 28672 B)
    m, h = get_model("r1-distill-qwen-1.5b"), get_hardware("h100-sxm")
    d = Deployment(m, h, 1, flat_params())
    weight_bytes = (28 * m.params_per_layer + 151936 * 1536) * 2
    kv = 1001 * 28672
    expected = (weight_bytes + kv) / 3350e9
    assert d.decode_time(1000) == pytest.approx(expected, rel=1e-12)


def test_overheads_and_allreduce_by_hand():
    # datasheet-era link figures (25 GB/s): the hand computation below (gpu_priors.yaml now sets 19.1 GB/s)
    m, h = get_model("qwq-32b"), get_hardware("rtx-a6000").datasheet_era()
    p = CostParams(mem_efficiency=1.0, compute_efficiency=1.0, step_overhead_s=1e-3, layer_overhead_s=1e-5,
                   call_overhead_s=0.0, allreduce_latency_s=20e-6)
    d1 = Deployment(m, h, 2, p)
    d0 = Deployment(m, h, 2, flat_params())
    # 2 all-reduces per layer: 2 x 64 x (20 us + 2*(1/2) * 5120*2 B / 25 GB/s)
    assert d0.allreduce_time(1) == pytest.approx(2 * 64 * (1.0 * 5120 * 2 / 25e9), rel=1e-12)
    assert d1.allreduce_time(1) == pytest.approx(2 * 64 * (20e-6 + 1.0 * 5120 * 2 / 25e9), rel=1e-12)
    assert d1.decode_time(0) - d0.decode_time(0) == pytest.approx(1e-3 + 64 * 1e-5 + 2 * 64 * 20e-6, rel=1e-9)


def test_tp1_has_no_allreduce_and_pcie_costs_more_than_nvlink():
    m = get_model("qwen2.5-7b")
    p = flat_params()
    assert Deployment(m, get_hardware("h100-sxm"), 1, p).allreduce_time(1) == 0
    pcie = Deployment(m, get_hardware("l40s"), 2, p).allreduce_time(1)
    nvl = Deployment(m, get_hardware("h100-sxm"), 2, p).allreduce_time(1)
    assert pcie > 2 * nvl


def test_prefill_becomes_compute_bound():
    m, h = get_model("qwq-32b"), get_hardware("h100-sxm")
    d = Deployment(m, h, 2, flat_params())
    n = 8192
    flops = (2 * m.matmul_params_per_token * n + 2 * m.embedding_params + 4 * m.layers * m.heads * m.head_dim * n * (n + 1) / 2) / 2
    assert d.prefill_time(n) == pytest.approx(flops / 989e12 + d.allreduce_time(n), rel=1e-9)
    # a ~70-token scoring prefill is memory bound: about one decode pass
    assert d.prefill_time(70, 2000) < 1.3 * d.decode_time(2000)


def test_verify_costs_about_one_decode_below_ridge():
    d = Deployment(get_model("qwq-32b"), get_hardware("rtx-a6000"), 2, flat_params())
    for gamma in (1, 4, 8):
        assert d.verify_time(gamma, 3000) == pytest.approx(d.decode_time(3000), rel=0.05)


def test_decode_time_grows_with_context_and_batch():
    d = Deployment(get_model("qwq-32b"), get_hardware("h100-sxm"), 2, flat_params())
    c = np.array([0, 1000, 4000, 16000])
    t = d.decode_time(c)
    assert np.all(np.diff(t) > 0)
    assert d.batch_forward_time([1] * 8, [1000] * 8) > d.batch_forward_time([1], [1000])


def test_batch_of_one_equals_single_sequence():
    d = Deployment(get_model("qwen3-8b"), get_hardware("h200"), 1, flat_params())
    assert d.batch_forward_time([70], [500]) == pytest.approx(float(d.forward_time(70, 500)))


@pytest.mark.parametrize("arch,hw", [("smollm2-135m", "cpu"), ("qwq-32b", "h100-sxm")])
def test_seq_overhead_is_paid_once_per_sequence(arch, hw):
    """Law: t_seq adds exactly t_seq x (sequences) to a pass: B for a decode batch, 1 for a verify of gamma+1."""
    import dataclasses

    m, h = get_model(arch), get_hardware(hw)
    p0 = CostParams(mem_efficiency=0.5, compute_efficiency=0.3, step_overhead_s=2e-3, layer_overhead_s=1e-5,
                    call_overhead_s=0.0, allreduce_latency_s=0.0)
    p1 = dataclasses.replace(p0, seq_overhead_s=3e-3)
    d0, d1 = Deployment(m, h, 1, p0), Deployment(m, h, 1, p1)
    for b in (1, 2, 8):
        n, c = np.ones(b), np.full(b, 300.0)
        assert d1.batch_forward_time(n, c) - d0.batch_forward_time(n, c) == pytest.approx(3e-3 * b, rel=1e-9)
    for g in (1, 4):
        assert d1.verify_time(g, 500) - d0.verify_time(g, 500) == pytest.approx(3e-3, rel=1e-9)


def test_profiles_without_seq_overhead_load_with_zero(tmp_path):
    """A profile written before the per-sequence cost existed (no ``seq_overhead_s``) loads with none."""
    import yaml

    from simulator.cost.cost_profile import prior_profile
    from simulator.inputs.loading import load_yaml_model
    from simulator.cost.cost_profile import CostProfile
    from tests.conftest import REPO

    data = yaml.safe_load((REPO / "simulator/profiles/cost_a100-80gb-vllm082-specreason-traces.yaml").read_text())
    assert data.pop("seq_overhead_s") is not None
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    old = load_yaml_model(tmp_path / "old.yaml", CostProfile)
    assert old.seq_overhead_s is None and old.params(get_hardware("a100-80gb")).seq_overhead_s == 0.0
    assert prior_profile(get_hardware("cpu")).seq_overhead_s.value > 0


# ---- prefix caching in whole blocks (simulator.cost.execution) ---------------------------------------
@pytest.mark.parametrize("new, cached, block, want_new, want_cached", [
    (1, 100, 16, 5, 96),  # the tail of the last partial block (4 tokens) is prefilled again
    (1, 128, 128, 1, 128),  # a full block is reused; the new token is computed
    (70, 130, 128, 72, 128),  # scoring: step + template on a chain ending 2 tokens into a block
    (5, 0, 16, 5, 0),  # nothing cached
    (1, 127, 128, 128, 0),  # under one block: everything is prefilled
    (16, 16, 16, 16, 16),
    (3, 100, 1, 3, 100),  # block 1: token-exact caching
])
def test_cache_split_by_hand(new, cached, block, want_new, want_cached):
    from simulator.cost.execution import cache_split

    n, c = cache_split(new, cached, block)
    assert (int(n), int(c)) == (want_new, want_cached)


def test_cost_tables_prefill_applies_block_caching_vectorised(workload):
    from simulator.cost.cost_tables import CostTables
    from simulator.cost.execution import Execution, cache_split
    from tests.conftest import deployments

    b, s = deployments()
    c = np.arange(0, 700)
    from simulator.cost.spec_iteration import speculating_target

    exact = CostTables(b, s, s, workload, 3)
    bt = speculating_target(b, s)  # gamma 3: the base engine speculates with s (a draft model: no async by default)
    assert np.array_equal(exact.prefill("base", 7, c), bt.prefill_time(7, c))  # default: today's caching, exactly
    for block in (16, 128):
        tb = CostTables(b, s, s, workload, 3, execution=Execution(prefix_cache_block=block))
        vec = tb.prefill("small", 7, c)
        n_eff, c_eff = cache_split(7, c, block)
        assert np.array_equal(vec, s.prefill_time(n_eff, c_eff))
        # scalar = vectorised to the last ulp or so (the soft roofline's power is evaluated by numpy's SIMD loops for
        # arrays and its scalar loop for one value)
        assert [float(tb.prefill("small", 7, int(x))) for x in c[:50]] == pytest.approx(list(vec[:50]), rel=1e-13)
        assert np.all(vec >= exact.prefill("small", 7, c) * (1 - 1e-12))  # never cheaper than exact caching
        assert np.array_equal(c_eff % block, np.zeros_like(c)) and np.all(n_eff + c_eff == c + 7)


# ---- async scheduling: the step's host side beside its GPU side ------------------------------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from simulator.cost.roofline import step_time  # noqa: E402
from tests.conftest import examples  # noqa: E402

_t = st.floats(1e-6, 1.0)


@settings(max_examples=examples(200), deadline=None)
@given(g=_t, h=_t, o=st.floats(0.0, 1.0))
def test_async_overlap_bounds(g, h, o):
    """Async scheduling hides at most the host side and at most half the step: max(G, H) <= T <= G + H, T
    falls as the overlap grows, and o = 0 pays both sides."""
    t = step_time(g, h, o)
    assert max(g, h) * (1 - 1e-12) <= t <= (g + h) * (1 + 1e-12)
    assert t >= (g + h) / 2 * (1 - 1e-12)
    assert step_time(g, h, min(o + 0.1, 1.0)) <= t * (1 + 1e-12)
    assert step_time(g, h, 0.0) == g + h


def test_async_overlap_paces_a_host_bound_step():
    """A step whose host work outweighs its GPU work is the host's (t_step + S t_seq at S = 1000), not the GPU's
    plus the unhidden share: the gain of async scheduling is small on either side of the balance, largest at it."""
    assert step_time(0.020, 0.100, 1.0) == pytest.approx(0.100)
    assert step_time(0.100, 0.020, 1.0) == pytest.approx(0.100)
    assert step_time(0.050, 0.050, 1.0) == pytest.approx(0.050)  # G + H = 0.1: async halves it
    assert step_time(0.020, 0.100, 0.5) == pytest.approx(0.050 + 0.050)


@pytest.mark.parametrize("arch,hw,tp", [("qwen3-32b", "h100-sxm", 1), ("qwen3-30b-a3b", "h200", 2)])
def test_breakdown_parts_sum_to_total_with_async(arch, hw, tp):
    """The breakdown's exposed step and sequence shares keep the parts summing to the pass, async or not."""
    from dataclasses import replace

    from tests.conftest import flat_params as fp

    base = replace(fp(), step_overhead_s=2e-3, seq_overhead_s=5e-5, layer_overhead_s=1e-5)
    for o in (0.0, 0.7, 1.0):
        d = Deployment(get_model(arch), get_hardware(hw), tp, replace(base, async_overlap=o))
        b = d.pass_breakdown(np.array([1.0, 64.0, 512.0]), np.array([2000.0, 64 * 2000.0, 512 * 300.0]),
                             np.array([2000.0, 64 * 2000.0, 512 * 300.0]), np.array([1.0, 64.0, 512.0]),
                             np.array([1.0, 64.0, 512.0]))
        parts = sum(b[k] for k in ("weights", "kv", "compute", "allreduce", "step", "layers", "sequences", "sendrecv"))
        assert np.allclose(parts, b["total"], rtol=1e-12)
