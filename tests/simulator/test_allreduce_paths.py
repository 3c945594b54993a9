"""The all-reduce's two paths (simulator/catalog/allreduce.py, Deployment.allreduce_lines): the faster of vLLM's
custom all-reduce and NCCL's large-message path, and the laws that follow."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.allreduce import allreduce_catalog, large_allreduce
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.engines.serving.pass_cost import PassCost
from tests.conftest import examples

NVLINK = ["a100-80gb", "h100-sxm", "h200", "b200"]


def dep(model: str, hw: str, tp: int):
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h))


def small_only(d: Deployment, n):
    """The custom all-reduce's line alone (what the model charged before the large path)."""
    a, b = d.allreduce_lines[0]
    return a + b * np.asarray(n, dtype=float)


@settings(max_examples=examples(60), deadline=None)
@given(hw=st.sampled_from(NVLINK), tp=st.sampled_from([2, 4, 8]),
       n=st.lists(st.integers(1, 32768), min_size=2, max_size=6))
def test_never_above_the_small_pair_and_monotone(hw, tp, n):
    """One all-reduce costs at most the small pair's line, never less than either path's fixed cost, and grows with
    the tokens; the serving loop's PassCost charges the pass exactly what the Deployment does."""
    d = dep("qwen3-32b", hw, tp)
    n = np.array(sorted(n), dtype=float)
    t = d.one_allreduce(n)
    assert np.all(t <= small_only(d, n) + 1e-15)
    assert np.all(t >= min(a for a, _ in d.allreduce_lines) - 1e-15)
    assert np.all(np.diff(t) >= -1e-15)
    pc = PassCost(d)
    for x in n:
        assert pc.allreduce(float(x)) == pytest.approx(float(d.allreduce_time(x)), rel=1e-12)
    assert np.allclose(pc.allreduce(n), d.allreduce_time(n), rtol=1e-12)


@pytest.mark.parametrize("hw", NVLINK)
def test_decode_keeps_the_custom_kernel_and_prefill_takes_nccl(hw):
    """A decode step's message (<= 256 tokens) stays on the custom all-reduce's line; an 8192-token chunk at TP 8
    costs less than the small pair extrapolated (the tables' NCCL bandwidth is higher)."""
    d = dep("qwen3-32b", hw, 8)
    assert float(d.one_allreduce(256)) == pytest.approx(float(small_only(d, 256)))
    assert float(d.one_allreduce(8192)) < 0.9 * float(small_only(d, 8192))


def test_pcie_and_tp1_have_one_path():
    """PCIe GPUs keep their small pair (no large path in the catalog); TP 1 has no all-reduce."""
    for hw in ("l40s", "h100-pcie", "rtx-a6000"):
        assert large_allreduce(get_hardware(hw), 4) is None
        assert len(dep("qwen3-32b", hw, 4).allreduce_lines) == 1
    assert dep("qwen3-32b", "h100-sxm", 1).allreduce_lines == ()
    assert float(dep("qwen3-32b", "h100-sxm", 1).allreduce_time(4096)) == 0.0


def test_the_catalog_is_fitted():
    """The shipped large paths come from a fit with provenance, bandwidths within the physical link."""
    cat = allreduce_catalog()
    assert cat.provenance and cat.provenance["kind"] == "fitted"
    for table in [*cat.gpus.values(), cat.nvlink_transfer]:
        for p in table.values():
            assert 0.2 < p.link_fraction <= 1.0 and 0 <= p.latency_s < 1e-3
