"""The serving simulator's fast paths give the same floats as the plain evaluation (issue 30: a faster DES, the same
answers). Each shortcut is checked against the evaluation it replaces, exactly (==, not approx):

- the pass-time array path without conversions == the general path;
- a speculative iteration's γ draft passes and verification as one (γ+1)-row evaluation == the passes one by one;
- a stretch's times and growth for k rounds start with those for fewer rounds (prefixes);
- whole simulations with the stretch sizing, the stretch memo and the fused evaluation switched off == with them on
  (request table, engine timeline, ITL samples).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.engines.serving.stretch as stretch_mod
from simulator.cost.execution import Execution
from simulator.engines.request_model import Call
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import BurstyArrivals, ClosedLoopUsers, PoissonArrivals, simulate_serving
from simulator.engines.serving.engine import Engine
from simulator.engines.serving.pass_cost import PassCost, spec_iteration_times
from simulator.engines.serving.replica import Replica
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples


@pytest.fixture(scope="module", params=["cpu-smollm2", "reference-a6000-qwq32b"])
def deps(request):
    rs = load_scenario(request.param)
    return rs.deployments(rs.hardware_names[0], rs.tps[0])


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 256), st.lists(st.integers(0, 200_000), min_size=1, max_size=50), st.integers(1, 9))
def test_array_fast_path_is_the_general_path(deps, batch, contexts, vt):
    for role in ("base", "small", "draft"):
        pc = PassCost(deps[role])
        B, n = float(batch), float(batch * vt)
        kv = np.array(contexts, dtype=float)
        attn = vt * kv + B * vt * (vt + 1) / 2.0
        fast = pc.times(n, kv, attn, n, B)
        general = pc.times(np.array(n), kv, attn, np.array(n), np.array(B))  # 0-d arrays take the general path
        assert np.array_equal(fast, general)


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 64), st.lists(st.integers(0, 200_000), min_size=1, max_size=40), st.integers(1, 8))
def test_one_evaluation_of_a_speculative_iteration_is_its_passes_one_by_one(deps, batch, contexts, gamma):
    d, b = PassCost(deps["draft"]), PassCost(deps["base"])
    B, vt = float(batch), gamma + 1
    ctx = np.sort(np.array(contexts, dtype=float))
    fused = spec_iteration_times(d, b, gamma, B, vt, ctx)
    t = sum(d.times(B, ctx + B * (i + 1.0), ctx + B * (i + 1.0), B) for i in range(gamma))
    n = B * vt
    assert fused is not None and np.array_equal(fused, t + b.times(n, ctx + n, vt * ctx + B * vt * (vt + 1) / 2.0, n, B))


@pytest.mark.parametrize("gamma", [None, 1, 4])
def test_a_stretch_of_k_rounds_starts_with_the_stretch_of_fewer(deps, gamma):
    out = 3000
    e = Engine("base", deps["base"], 10**8, 64, draft=deps["draft"] if gamma else None, gamma=gamma, max_spec_iters=out)
    rng = np.random.default_rng(1)
    for rid in range(7):
        cum = np.cumsum(rng.integers(1, (gamma or 0) + 2, 1000)) if gamma else None
        e.submit(rid, Call(1, int(rng.integers(50, 900)), 0, out if gamma is None else int(cum[-1]), cum))
    e.admit()
    e.round_time()
    e.advance(1)  # the prefills
    k = min(e.rounds_left(), 300)
    Gs = e.growth(k)
    t = e.times_for(k, Gs)
    for j in (1, 2, 17, k // 2):
        Gj = e.growth(j)
        assert Gs is None and Gj is None or np.array_equal(Gs[: j + 1], Gj)
        assert np.array_equal(t[:j], e.times_for(j, Gj))


def _plain(monkeypatch):
    """Switch the shortcuts off: every stretch evaluates all its rounds, no memo, passes one by one."""
    monkeypatch.setattr(Replica, "_plan_rounds", lambda self, active, k: self._plan_k(
        active, k, min(self.env.peek(), self.ready[0][0] if self.ready else float("inf")) - self.env.now))
    monkeypatch.setattr(Engine, "stretch_growth", Engine.growth)
    monkeypatch.setattr(Engine, "stretch_times", Engine.times_for)
    monkeypatch.setattr(stretch_mod, "spec_iteration_times", lambda *a: None)


CASES = [
    ("cpu-smollm2", SystemConfig(system="specdecode", gamma=3), PoissonArrivals(0.6), Execution()),
    ("cpu-smollm2", SystemConfig(system="specreason-decode", threshold=5, gamma=2), ClosedLoopUsers(6), Execution()),
    ("cpu-smollm2", SystemConfig(system="specdecode", gamma=4, gamma_policy="goodput"), PoissonArrivals(0.5), Execution()),
    ("cpu-smollm2", SystemConfig(system="vanilla-base"), BurstyArrivals(1.0, 2.0), Execution(max_num_batched_tokens=64)),
    ("reference-a6000-qwq32b", SystemConfig(system="specdecode", gamma=5), PoissonArrivals(0.06), Execution()),
]


@pytest.mark.parametrize("scenario,cfg,arrivals,ex", CASES, ids=[f"{c[0]}-{c[1].label}" for c in CASES])
def test_simulations_are_the_same_without_the_shortcuts(monkeypatch, scenario, cfg, arrivals, ex):
    rs = load_scenario(scenario)
    d = rs.deployments(rs.hardware_names[0], rs.tps[0])
    n = 60 if scenario == "reference-a6000-qwq32b" else 40
    run = lambda: simulate_serving(cfg, d, rs.workload, arrivals, n, 5, (0.05, 0.3), execution=ex)  # noqa: E731
    fast = run()
    _plain(monkeypatch)
    plain = run()
    assert fast.requests.equals(plain.requests)
    assert fast.timeline.equals(plain.timeline)
    for a, b in zip(fast.info["itl"], plain.info["itl"]):
        assert np.array_equal(a, b)
