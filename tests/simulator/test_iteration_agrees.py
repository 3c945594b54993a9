"""One speculative iteration, one rule (issue 29): the what-if engines' batch-1 cost tables
(``simulator.cost_tables``: draft_iter + verify_iter), the γ rule (``simulator.gamma_choice.iteration_parts``) and the
serving engine (``Engine._spec_time``, tested against the γ rule in test_gamma_policy.py, and its fused stretch path in
test_serving_fast_paths.py) price a speculative iteration the same: γ draft passes at context x + i, then one
verification of w γ + 1 tokens at context x."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost_tables import CostTables
from simulator.gamma_choice import iteration_parts
from simulator.scenario import load_scenario


@settings(max_examples=40, deadline=None)
@given(scenario=st.sampled_from(["reference-a6000-qwq32b", "cpu-smollm2", "fp8-qwq32b-head-h100-h200"]),
       gamma=st.integers(0, 8), x=st.integers(1, 6000))
def test_cost_tables_price_an_iteration_as_the_gamma_rule_at_batch_1(scenario, gamma, x):
    rs = load_scenario(scenario)
    dep = rs.deployments(rs.hardware_names[0], rs.tps[0])
    tb = CostTables(dep["base"], dep["small"], dep["draft"], rs.workload, gamma, execution=rs.scenario.execution)
    x = min(x, tb.max_context)
    d, v = iteration_parts(dep["base"], dep["draft"], 1, x, gamma)
    assert tb.draft_iter[x] == pytest.approx(d, rel=1e-9, abs=1e-15)
    assert tb.verify_iter[x] == pytest.approx(v, rel=1e-9)
