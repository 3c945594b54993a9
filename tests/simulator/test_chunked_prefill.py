"""vLLM V1's engine step in the serving simulator (issue 25): one token budget (max_num_batched_tokens) shared by the
decoding sequences' tokens and prefill chunks, in admission order; laws: no step exceeds its budget, chunks never
exceed what is pending, tokens are conserved whatever the budget, and a smaller budget never lowers a long
prompt's time to first token at one user."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.execution import Execution
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import ClosedLoopUsers, PoissonArrivals, simulate_serving
from simulator.engines.serving.engine import Engine
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples

VANILLA = SystemConfig(system="vanilla-base")
SPECDECODE = SystemConfig(system="specdecode", gamma=2)


@pytest.fixture(scope="module")
def cpu():
    rs = load_scenario("cpu-smollm2")
    return rs, rs.deployments("cpu", 1), (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)


@settings(max_examples=examples(200), deadline=None)
@given(pending=st.lists(st.integers(0, 5000), min_size=1, max_size=20), dec=st.integers(0, 600),
       budget=st.one_of(st.none(), st.integers(1, 9000)))
def test_chunks_fill_the_budget_in_admission_order(cpu, pending, dec, budget):
    rs, deps, _ = cpu
    e = Engine("t", deps["base"], 10**9, max_batch=64, token_budget=budget)
    e.act = list(range(len(pending)))
    e.pending = list(pending) + [0] * 64
    e.order = list(np.random.default_rng(len(pending)).permutation(len(pending))) + [0] * 64
    ch = e._chunks(dec)
    assert all(0 < c <= pending[s] for s, c in ch.items())
    if budget is None:
        assert ch == {s: p for s, p in enumerate(pending) if p > 0}
        return
    if dec < budget:
        assert dec + sum(ch.values()) <= budget  # no step exceeds its token budget
    else:
        assert len(ch) <= 1  # decodes alone fill it: at most one chunk so a prompt is never starved
    # admission order: a later prefill gets tokens only once every earlier one got all it has pending
    got = sorted(ch, key=e.order.__getitem__)
    by_order = sorted((s for s, p in enumerate(pending) if p > 0), key=e.order.__getitem__)
    assert got == by_order[: len(got)]
    assert all(ch[s] == pending[s] for s in got[:-1])


@pytest.mark.parametrize("cfg", [VANILLA, SPECDECODE], ids=["vanilla", "specdecode"])
@pytest.mark.parametrize("budget", [None, 8192, 64, 16])
def test_tokens_are_conserved_whatever_the_budget(cpu, cfg, budget):
    rs, deps, mf = cpu
    ex = Execution(max_num_batched_tokens=budget)
    res = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(6), 40, 3, mf, execution=ex)
    ref = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(6), 40, 3, mf, execution=Execution(max_num_batched_tokens=None))
    r, q = res.requests.sort_values("request"), ref.requests.sort_values("request")
    # the same requests, the same output tokens (the budget moves when they come, never how many)
    assert list(r.request) == list(q.request) and (r.output_tokens.to_numpy() == q.output_tokens.to_numpy()).all()
    assert (r.ttft_s > 0).all() and (r.latency_s >= r.ttft_s).all()


def test_a_smaller_budget_delays_a_long_prompt_at_one_user(cpu):
    rs, deps, mf = cpu
    ttft = {b: simulate_serving(VANILLA, deps, rs.workload, PoissonArrivals(1e-4), 30, 5, mf,
                                execution=Execution(max_num_batched_tokens=b)).requests.ttft_s.mean()
            for b in (None, 64, 16)}
    assert ttft[None] <= ttft[64] * (1 + 1e-12) <= ttft[16] * (1 + 1e-12)


@pytest.mark.parametrize("cfg", [VANILLA, SPECDECODE])
def test_max_num_seqs_caps_every_engine_step(cpu, cfg):
    """execution.max_num_seqs (vLLM's max_num_seqs): no engine step runs more sequences; the rest wait, so at 8 users
    a cap of 2 never finishes sooner than no cap; None keeps the caller's default (256)."""
    rs, deps, mf = cpu
    runs = {}
    for cap in (None, 2):
        ex = Execution(max_num_seqs=cap)
        res = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(8), 24, 3, memory_fraction=mf, execution=ex)
        runs[cap] = res
    assert runs[2].timeline["batch"].max() <= 2 < runs[None].timeline["batch"].max()
    assert runs[2].requests["latency_s"].mean() >= runs[None].requests["latency_s"].mean()
    same = simulate_serving(cfg, deps, rs.workload, ClosedLoopUsers(8), 24, 3, memory_fraction=mf, execution=Execution())
    assert same.requests["latency_s"].equals(runs[None].requests["latency_s"])
