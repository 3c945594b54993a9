"""The serial front end's streaming cost ``front_end_token_s`` t_tok (docs/serving-model.md "Host costs by engine
version"): `vllm serve`'s one API-server process detokenises and streams every output token, with the same CPU that
takes new requests in. Laws: free streaming changes nothing; a lone request only waits for its own last token's
streaming (t_tok); the front end delivers at most 1 / t_tok tokens per second; a burst's throughput falls as t_tok
grows; the engine's own steps (ITL samples) do not depend on it when nothing waits for a turn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.execution import Execution
from simulator.engines.request_model import BASE, Call, RequestPlan
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.arrivals import ReplayArrivals
from simulator.engines.serving.replica import simulate_serving
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples


SHARES = [0.0, 0.5]  # the front end in one stage, and in two (``front_end_first_share``): the laws hold in both


def _run(n: int, t_tok: float, out: int = 24, t_fe: float = 0.002, front_end: str = "serial", t_call: float = 0.004,
         share: float = 0.0):
    rs = load_scenario("cpu-smollm2")
    deps = rs.deployments("cpu", 1)
    deps = {r: replace(d, cost=replace(d.cost, call_overhead_s=t_call, front_end_serial_s=t_fe,
                                       front_end_token_s=t_tok, front_end_first_share=share)) for r, d in deps.items()}
    plans = [RequestPlan([Call(BASE, 48, 0, out, None)], out, out, 1, 0, "length") for _ in range(n)]
    return simulate_serving(SystemConfig(system="vanilla-base"), deps, rs.workload, ReplayArrivals((0.0,) * n, "burst"),
                            n, seed=0, plans=plans, execution=Execution(front_end=front_end))


def _throughput(res) -> float:
    r = res.requests
    return float(r.output_tokens.sum() / (r.done_at.max() - r.arrival_at.min()))


def test_free_streaming_changes_nothing():
    a = _run(12, 0.0).requests
    b = _run(12, 0.0, front_end="concurrent").requests
    assert not a.equals(b)  # the serial front end is on (calls staggered by t_fe) ...
    rs = load_scenario("cpu-smollm2")
    assert rs.deployments("cpu", 1)["base"].cost.front_end_token_s == 0.0  # ... and a profile without the term pays 0


def test_concurrent_front_end_ignores_the_streaming_cost():
    assert _run(8, 0.01, front_end="concurrent").requests.equals(_run(8, 0.0, front_end="concurrent").requests)


@pytest.mark.parametrize("share", SHARES)
def test_free_streaming_keeps_either_front_end_as_it_was(share):
    """t_tok = 0 under a two-stage front end is that front end unchanged (the same as before streaming was modelled
    with it)."""
    a = _run(12, 0.0, share=share).requests
    assert a.equals(_run(12, 0.0, share=share).requests) and not a.equals(_run(12, 0.0, share=0.5 - share).requests)


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("t_tok", [1e-4, 3e-3])
def test_a_lone_request_waits_only_for_its_own_tokens_streaming(t_tok, share):
    """Batch 1: each step's one token is streamed while the next step runs; the client has the answer t_tok after
    the engine's last step (the first token likewise), and the engine's steps are unchanged."""
    a, b = _run(1, 0.0, share=share), _run(1, t_tok, share=share)
    ra, rb = a.requests.iloc[0], b.requests.iloc[0]
    assert rb.done_at - ra.done_at == pytest.approx(t_tok, abs=1e-9)
    assert rb.first_token_at - ra.first_token_at == pytest.approx(t_tok, abs=1e-9)
    assert np.array_equal(a.info["itl"][1], b.info["itl"][1])


@settings(max_examples=examples(8), deadline=None)
@given(st.floats(1e-4, 2e-2), st.sampled_from(SHARES))
def test_the_front_end_delivers_at_most_one_token_per_t_tok(t_tok, share):
    res = _run(16, t_tok, share=share)
    assert _throughput(res) <= 1.0 / t_tok * (1 + 1e-9)


@settings(max_examples=examples(6), deadline=None)
@given(st.floats(1e-4, 5e-3), st.floats(1.2, 4.0), st.sampled_from(SHARES))
def test_a_bursts_throughput_falls_as_streaming_costs_more(t_tok, k, share):
    lo, hi = _throughput(_run(16, t_tok, share=share)), _throughput(_run(16, t_tok * k, share=share))
    assert hi <= lo * (1 + 1e-9)


@pytest.mark.parametrize("share", SHARES)
def test_streaming_delays_the_admission_of_a_burst(share):
    """Tokens streamed before a call's turn push the turn back: with streaming costing more than the engine's step,
    a burst's calls reach the engine later on average than with free streaming (in one stage the last one too; in two,
    each round's share of waiting jobs is one call's t_fe, split between first and second stages)."""
    free = _run(16, 0.0, t_fe=0.05, t_call=0.05, share=share).requests
    costly = _run(16, 0.05, t_fe=0.05, t_call=0.05, share=share).requests
    assert costly.first_admit_at.mean() > free.first_admit_at.mean() + 0.02
    if share == 0.0:
        assert costly.first_admit_at.max() > free.first_admit_at.max() + 0.05


@pytest.mark.parametrize("share", SHARES)
def test_streaming_never_starves_the_queue(share):
    """asyncio serves the output handler and the waiting requests in turn: however much the streaming costs, each
    engine round lets one more waiting call take its turn, so a burst's calls all reach the engine before the first
    request has streamed its answer."""
    req = _run(12, 1.0, out=24, t_fe=0.05, t_call=0.05, share=share).requests
    assert req.first_admit_at.max() < req.done_at.min()
