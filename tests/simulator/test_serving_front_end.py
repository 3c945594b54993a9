"""``Execution.front_end`` (issue 28): "serial" -- one front-end process (``vllm serve``'s API server) pays every
call's host overhead t_call in turn -- staggers calls that arrive together by t_call; "concurrent" gives every call its
own delay; "auto" (the default) is serial for the systems whose requests are one ``vllm serve`` call each, concurrent
for SpecReason's orchestrated calls. A closed loop of identical requests otherwise runs in lockstep: every prefill in
one step, and no decode step ever shares a step with a prefill."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.cost.execution import Execution
from simulator.engines.request_model import BASE, Call, RequestPlan
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import ClosedLoopUsers
from simulator.engines.serving.replica import simulate_serving
from simulator.inputs.systems import SystemConfig


def _run(users: int, front_end: str | None, t_call: float = 0.05, t_fe: float | None = None,
         system: str = "vanilla-base"):
    """``front_end`` None: the default Execution."""
    rs = load_scenario("cpu-smollm2")
    deps = rs.deployments("cpu", 1)
    deps = {r: replace(d, cost=replace(d.cost, call_overhead_s=t_call, front_end_serial_s=t_fe)) for r, d in deps.items()}
    plans = [RequestPlan([Call(BASE, 64, 0, 32, None)], 32, 32, 1, 0, "length") for _ in range(4 * users)]
    return simulate_serving(SystemConfig(system=system), deps, rs.workload, ClosedLoopUsers(users), len(plans),
                            seed=0, plans=plans, execution=Execution() if front_end is None else Execution(front_end=front_end))


@pytest.mark.parametrize("users", [2, 4])
def test_serial_front_end_staggers_simultaneous_arrivals_by_t_call(users):
    ser = _run(users, "serial").requests.sort_values("request")
    con = _run(users, "concurrent").requests.sort_values("request")
    first = np.sort(ser.first_admit_at.to_numpy()[:users])
    # the k-th call reaches the engine after k + 1 front-end turns, then waits for the next step boundary
    assert np.all(first >= 0.05 * np.arange(1, users + 1) - 1e-9) and np.ptp(first) >= 0.05 * (users - 1) - 1e-9
    assert np.ptp(con.first_admit_at.to_numpy()[:users]) == pytest.approx(0.0, abs=1e-12)
    # the lockstep is broken: some decode rounds now share a step with a prefill (longer ITL gaps)
    s, d, w = _run(users, "serial").info["itl"]
    c_s, c_d, c_w = _run(users, "concurrent").info["itl"]
    assert d.max() > 1.5 * np.median(d) and c_d.max() < 1.01 * np.median(c_d)


def test_front_end_without_call_overhead_changes_nothing():
    a = _run(3, "serial", t_call=0.0).requests
    b = _run(3, "concurrent", t_call=0.0).requests
    assert a.equals(b)


def test_front_end_is_a_checked_scenario_field():
    with pytest.raises(ValueError, match="front_end"):
        Execution(front_end="parallel")


@pytest.mark.parametrize("users", [4, 8])
def test_serial_part_of_t_call_staggers_by_t_fe_and_every_call_still_pays_t_call(users):
    """``front_end_serial_s`` t_fe < t_call: the front-end process passes calls t_fe apart, each reaching the engine
    t_call after its turn began; t_fe = t_call (or None) is the whole-t_call serial front end."""
    t_call, t_fe = 0.05, 0.01
    req = _run(users, "serial", t_call, t_fe).requests.sort_values("request")
    first = np.sort(req.first_admit_at.to_numpy()[:users])
    assert np.all(first >= t_call + t_fe * np.arange(users) - 1e-9)
    whole = _run(users, "serial", t_call).requests.sort_values("request")
    first_whole = np.sort(whole.first_admit_at.to_numpy()[:users])
    assert np.all(first <= first_whole + 1e-9) and first[-1] < first_whole[-1]  # not t_call apart
    assert _run(users, "serial", t_call, t_call).requests.equals(whole)
    # the concurrent front end ignores t_fe
    assert _run(users, "concurrent", t_call, t_fe).requests.equals(_run(users, "concurrent", t_call).requests)


@pytest.mark.parametrize("system, serial", [("vanilla-base", True), ("specdecode", True), ("specreason", False)])
def test_the_default_front_end_is_serial_for_one_vllm_serve_call_per_request(system, serial):
    """``auto``: a plain or speculative-decoding request is one call its server's API process takes in turn; SpecReason's
    orchestrated calls (two servers, their front ends not modelled apart) each pay t_call concurrently."""
    assert Execution().front_end == "auto"
    assert Execution().serial_front_end(one_call=True) and not Execution().serial_front_end(one_call=False)
    assert Execution(front_end="serial").serial_front_end(False) and not Execution(front_end="concurrent").serial_front_end(True)
    default = _run(4, None, system=system).requests
    assert default.equals(_run(4, "serial" if serial else "concurrent", system=system).requests)
