"""Load levels bounded like --requests (issue 41 item 4): ``--users`` and ``--qps`` refused outside their bounds (one
line, exit 2, before any simulation), and the serving simulator itself caps an absurd closed-loop population (a user
beyond the run's requests never sends one: 10^8 users give the figures, and take the time, of ``requests`` users)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

import specsim_cli.main as cli
from simulator.errors import InputError
from simulator.option_values import MAX_USERS, QPS_RANGE, check_requests, rate_list, user_list
from simulator.inputs.scenario import MAX_REQUESTS, load_scenario
from simulator.engines.serving import ClosedLoopUsers, simulate_serving
from simulator.inputs.systems import SystemConfig


@pytest.mark.parametrize("args, field", [
    (["--users", "100000000"], "--users"), (["--users", "0"], "--users"), (["--users", "2.5"], "--users"),
    (["--qps", "1e300"], "--qps"), (["--qps", "0"], "--qps"), (["--qps", "nan"], "--qps"), (["--qps", "inf"], "--qps"),
    (["--requests", "5"], "--requests"), (["--requests", str(MAX_REQUESTS + 1)], "--requests")])
def test_capacity_refuses_load_levels_out_of_bounds(capsys, args, field):
    rc = cli.main(["simulate", "capacity", "cpu-smollm2", "--system", "vanilla-base", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {field}:"), err


@settings(max_examples=examples(50), deadline=None)
@given(st.integers(-10, 10 * MAX_USERS))
def test_user_counts_within_bounds_or_refused(u):
    if 1 <= u <= MAX_USERS:
        assert user_list(str(u)) == [u]
    else:
        with pytest.raises(InputError, match="--users"):
            user_list(str(u))


@settings(max_examples=examples(50), deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_rates_within_bounds_or_refused(q):
    if np.isfinite(q) and QPS_RANGE[0] <= q <= QPS_RANGE[1]:
        assert rate_list(repr(q)) == [q]
    else:
        with pytest.raises(InputError, match="--qps"):
            rate_list(repr(q))


def test_requests_bound_names_the_option():
    with pytest.raises(InputError, match=r"--requests: must lie in 20\.\.10,000,000 \(got 5; why"):
        check_requests(5, 20, "; why")
    check_requests(None, 20)
    check_requests(MAX_REQUESTS, 20)


def test_simulation_caps_an_absurd_population():
    """10^8 users (a hang before: one simulation process per user) serve the same requests, with the same figures,
    as one user per request."""
    rs = load_scenario("cpu-smollm2")
    deps = rs.deployments(rs.hardware_names[0], rs.tps[0])
    mf = (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)
    cfg = SystemConfig(system="vanilla-base")
    n = 12
    many = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(10**8), n, 3, mf)
    exact = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(n), n, 3, mf)
    assert len(many.requests) == n
    assert np.array_equal(many.requests.latency_s.to_numpy(), exact.requests.latency_s.to_numpy())
    with pytest.raises(ValueError, match="closed-loop users"):
        simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(0), n, 3, mf)
