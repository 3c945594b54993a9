"""The serial front end in two stages (``front_end_first_share`` s; docs/serving-model.md "Host costs by engine
version"): `vllm serve`'s one asyncio API server runs a request's second stage behind the first stage of every
request already in its loop, so a burst reaches the engine late and together. Laws: s = 0 is the one-stage front end
exactly; a burst's requests leave the front end at n s c + (k + 1)(1 - s) c (the closed form below, the oracle); the
last leaves at n c whatever s; a lone request pays t_call as before; mean TTFT of a burst grows with s; bad shares
are refused."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.execution import Execution
from simulator.engines.request_model import BASE, Call, RequestPlan
from simulator.engines.serving.arrivals import PoissonArrivals, ReplayArrivals
from simulator.engines.serving.replica import simulate_serving
from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples


def two_stage_leave(n: int, c: float, s: float) -> np.ndarray:
    """When request k (0-based) of a burst leaves a first-in first-out two-stage front end of c per request."""
    return n * s * c + np.arange(1, n + 1) * (1.0 - s) * c


@lru_cache(maxsize=1)
def _scenario():
    rs = load_scenario("cpu-smollm2")
    return rs, rs.deployments("cpu", 1)


def _run(n: int, s: float, t_fe: float = 0.5, t_call: float = 0.6, arrivals=None, out: int = 4):
    rs, deps = _scenario()
    deps = {r: replace(d, cost=replace(d.cost, call_overhead_s=t_call, front_end_serial_s=t_fe,
                                       front_end_first_share=s)) for r, d in deps.items()}
    plans = [RequestPlan([Call(BASE, 16, 0, out, None)], out, out, 1, 0, "length") for _ in range(n)]
    arr = arrivals or ReplayArrivals((0.0,) * n, "burst")
    return simulate_serving(SystemConfig(system="vanilla-base"), deps, rs.workload, arr, n, seed=0, plans=plans,
                            execution=Execution(front_end="serial"))


def test_share_zero_is_the_one_stage_front_end():
    a = _run(10, 0.0).requests
    assert a.first_admit_at.to_numpy() == pytest.approx(two_stage_leave(10, 0.5, 0.0) - 0.5 + 0.6, abs=1e-9)


@pytest.mark.parametrize("s", [0.3, 0.75, 1.0])
def test_a_burst_leaves_the_front_end_as_the_closed_form_says(s):
    """t_fe 0.5 s per request dwarfs the engine's steps: each request is admitted when it leaves the front end plus
    the concurrent latency t_call - t_fe (to within one engine step)."""
    n = 8
    r = _run(n, s).requests.sort_values("arrival_at", kind="stable")
    want = two_stage_leave(n, 0.5, s) + 0.1
    got = np.sort(r.first_admit_at.to_numpy())
    assert got == pytest.approx(want, abs=0.05)
    assert got[-1] == pytest.approx(n * 0.5 + 0.1, abs=0.05)  # the last leaves at n c whatever s


def test_a_lone_request_pays_t_call_as_before():
    a, b = _run(1, 0.0).requests.iloc[0], _run(1, 0.8).requests.iloc[0]
    assert b.first_admit_at == pytest.approx(a.first_admit_at, abs=1e-12) == pytest.approx(0.6, abs=1e-12)
    assert b.done_at == pytest.approx(a.done_at, abs=1e-12)


@settings(max_examples=examples(8), deadline=None)
@given(s=st.floats(0.0, 0.9), ds=st.floats(0.05, 0.1))
def test_mean_ttft_of_a_burst_grows_with_the_first_share(s, ds):
    """Where the front end dominates (0.5 s per request against the engine's steps of milliseconds); with a front end
    as fast as the engine, holding a burst back can also batch its prefills better and shorten the mean."""
    lo, hi = _run(6, s).requests, _run(6, s + ds).requests
    assert hi.ttft_s.mean() >= lo.ttft_s.mean() - 1e-9


def test_poisson_arrivals_far_apart_pay_t_call_each():
    """Arrivals 100 s apart never meet in the loop: each is admitted t_call after it arrives, whatever s."""
    r = _run(5, 0.6, t_fe=0.01, t_call=0.02, arrivals=PoissonArrivals(0.01)).requests
    assert (r.first_admit_at - r.arrival_at).to_numpy() == pytest.approx(np.full(5, 0.02), abs=1e-9)


@pytest.mark.parametrize("s", [-0.1, 1.5])
def test_a_share_outside_0_1_is_refused(s):
    with pytest.raises(ValueError, match="share"):
        _run(2, s)


def test_an_engine_catalog_share_outside_0_1_is_refused():
    from simulator.catalog.engine_hosts import EngineVersion
    from pydantic import ValidationError

    def prm(v):
        return {"value": v, "kind": "prior", "source": "test"}

    base = {"version": "9.9", "seq_overhead_s": prm(1e-5), "call_overhead_s": prm(0.01), "async_overlap": prm(0.5)}
    EngineVersion.model_validate({**base, "front_end_first_share": prm(0.7)})
    with pytest.raises(ValidationError, match="front_end_first_share is a share"):
        EngineVersion.model_validate({**base, "front_end_first_share": prm(1.7)})
