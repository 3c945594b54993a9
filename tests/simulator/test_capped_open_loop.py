"""`vllm bench serve --request-rate R --max-concurrency N`: an open loop with at most N requests in flight
(``CappedArrivals``). Laws: never more than N unanswered; a cap no run reaches changes nothing; with every request
arriving at once it is a closed loop of N users; requests are sent in arrival order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.engines.serving import ClosedLoopUsers, PoissonArrivals, simulate_serving
from simulator.engines.serving.arrivals import CappedArrivals
from simulator.engines.serving.bench_workload import ServingWorkload
from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples

VANILLA = SystemConfig(system="vanilla-base")


@pytest.fixture(scope="module")
def cpu():
    rs = load_scenario("cpu-smollm2")
    return rs, rs.deployments("cpu", 1), (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)


def _run(cpu, arrivals, n=30, seed=3):
    rs, deps, mf = cpu
    return simulate_serving(VANILLA, deps, rs.workload, arrivals, n, seed, mf).requests.sort_values("request")


@settings(max_examples=examples(12), deadline=None)
@given(cap=st.integers(1, 6), rate=st.floats(0.05, 5.0))
def test_never_more_than_the_cap_in_flight_and_sent_in_arrival_order(cpu, cap, rate):
    r = _run(cpu, CappedArrivals(PoissonArrivals(rate), cap))
    sent, done = r.arrival_at.to_numpy(), r.done_at.to_numpy()
    assert (np.diff(sent) >= -1e-12).all()  # first come, first served
    for t in sent:  # requests unanswered just after each send (an answer and the send it frees share an instant)
        assert ((sent <= t) & (done > t + 1e-9)).sum() <= cap
    arrived = PoissonArrivals(rate).times(len(r), np.random.default_rng(np.random.SeedSequence(3).spawn(2)[1]))
    assert (sent >= arrived - 1e-9).all()  # none is sent before it arrives


def test_a_cap_no_run_reaches_changes_nothing(cpu):
    free, capped = _run(cpu, PoissonArrivals(0.5)), _run(cpu, CappedArrivals(PoissonArrivals(0.5), 10**6))
    assert np.allclose(free.latency_s.to_numpy(), capped.latency_s.to_numpy(), rtol=1e-9, atol=1e-9)


def test_all_at_once_is_a_closed_loop_of_cap_users(cpu):
    closed, capped = _run(cpu, ClosedLoopUsers(4, 0.0)), _run(cpu, CappedArrivals(PoissonArrivals(math.inf), 4))
    assert np.allclose(closed.latency_s.to_numpy(), capped.latency_s.to_numpy())
    assert np.allclose(closed.arrival_at.to_numpy(), capped.arrival_at.to_numpy())


def test_a_capped_loop_with_sessions_is_refused():
    with pytest.raises(ValidationError, match="sessions"):
        ServingWorkload.model_validate({"input_tokens": {"tokens": 64}, "output_tokens": {"tokens": 16},
                                        "request_rate": 2.0, "max_concurrency": 4,
                                        "sessions": {"turns": {"kind": "fixed", "tokens": 2}}})
