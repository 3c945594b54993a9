"""The executor's per-step cost per tensor-parallel worker (t_tp, ``tp_step_overhead_s``): host side of a step,
(TP - 1) t_tp on top of t_step, nothing at TP 1, nothing in a draft pass, overlapped by async scheduling like the
rest of the host side; the serving loop's pre-multiplied passes agree with the deployment's."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit.host_fit import catalog_terms, transfer_unmeasured
from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.roofline import step_time
from simulator.cost.cost_profile import prior_profile
from simulator.engines.serving.pass_cost import PassCost
from tests.conftest import examples

H100 = get_hardware("h100-sxm")


def _params(t_tp: float, overlap: float = 0.0):
    return replace(prior_profile(H100).params(H100), tp_step_overhead_s=t_tp, async_overlap=overlap)


@pytest.mark.parametrize("model", ["qwq-32b", "gpt-oss-120b"])
def test_tp1_pays_nothing_and_tp_k_pays_k_minus_1_workers(model):
    m = get_model(model)
    args = (64.0, 64.0 * 2000, 64.0 * 2000, 64.0, 64.0)  # a decode step of 64 sequences at 2000 tokens of context
    assert Deployment(m, H100, 1, _params(2e-3)).pass_time(*args) == Deployment(m, H100, 1, _params(0.0)).pass_time(*args)
    for tp in (2, 4, 8):
        with_, without = Deployment(m, H100, tp, _params(2e-3)), Deployment(m, H100, tp, _params(0.0))
        assert with_.host_step_time - without.host_step_time == pytest.approx((tp - 1) * 2e-3, rel=1e-12)
        # async off: every host second is paid
        assert float(with_.pass_time(*args)) - float(without.pass_time(*args)) == pytest.approx((tp - 1) * 2e-3, rel=1e-9)
        b = with_.pass_breakdown(*args)
        assert float(b["step"]) == pytest.approx(with_.host_step_time, rel=1e-12)


def test_a_draft_pass_pays_no_worker_cost():
    p = replace(_params(2e-3), draft_step_overhead_s=3e-4)
    assert p.for_role("draft").tp_step_overhead_s == 0.0 and p.for_role("base").tp_step_overhead_s == 2e-3


@settings(max_examples=examples(40), deadline=None)
@given(t_tp=st.floats(0.0, 5e-3), overlap=st.floats(0.0, 0.95), tp=st.sampled_from([2, 4, 8]),
       batch=st.integers(1, 512), ctx=st.integers(0, 16000))
def test_host_side_law_and_serving_loop_agree(t_tp, overlap, tp, batch, ctx):
    """The step is :func:`step_time` of the GPU side and H = t_step + (TP - 1) t_tp + S t_seq; more workers never
    make it faster; the serving loop's pre-multiplied pass (:class:`PassCost`) gives the deployment's time."""
    m = get_model("qwq-32b")
    d = Deployment(m, H100, tp, _params(t_tp, overlap))
    n, kv, attn = float(batch), float(batch * (ctx + 1)), float(batch * (ctx + 1))
    b = d.pass_breakdown(n, kv, attn, n, n)
    gpu = float(b["total"] - b["step"] - b["sequences"])
    host = d.host_step_time + batch * d.cost.seq_overhead_s
    assert float(b["total"]) == pytest.approx(step_time(gpu, host, overlap), rel=1e-9)
    assert float(b["total"]) >= float(Deployment(m, H100, tp, _params(0.0, overlap)).pass_time(n, kv, attn, n, n)) - 1e-12
    assert PassCost(d).time(n, kv, attn, n, n) == pytest.approx(float(d.pass_time(n, kv, attn, n, n)), rel=1e-9)


def test_unmeasured_terms_are_transferred_from_the_nearest_measuring_version():
    """A version none of whose runs ran at TP > 1 (or with async scheduling) held the term at 0 in its fit; the
    catalog entry takes the nearest measuring version's value and says where it came from."""
    fitted = {"0.10": {"seq_overhead_s": 1e-4, "tp_step_overhead_s": 0.0, "call_latency_s": 1e-2,
                       "front_end_serial_s": 4e-3, "async_overlap": 0.0},
              "0.11": {"seq_overhead_s": 7e-5, "tp_step_overhead_s": 5e-4, "tp_step_overhead_s_stderr": 1e-4,
                       "call_latency_s": 1e-2, "front_end_serial_s": 4e-3, "async_overlap": 0.7,
                       "async_overlap_stderr": 0.1}}
    out = transfer_unmeasured(fitted)
    assert out["0.10"]["tp_step_overhead_s"] == 5e-4 and out["0.10"]["tp_step_overhead_s_from"] == "0.11"
    assert out["0.10"]["async_overlap"] == 0.7 and out["0.10"]["async_overlap_from"] == "0.11"
    assert "tp_step_overhead_s_from" not in out["0.11"]
    assert catalog_terms(out["0.10"])["tp_step_overhead_s"] == 5e-4
    assert np.isclose(catalog_terms(out["0.11"])["call_overhead_s"], 1.4e-2)
