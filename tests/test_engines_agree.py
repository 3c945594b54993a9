"""Analytic engine = discrete-event engine in expectation; chain laws; determinism."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.analytic import CostVectors, chain_for, predict_point
from simulator.chain import run_chain
from simulator.cost_tables import CostTables
from simulator.des import simulate, summarize
from simulator.systems import SYSTEMS, SystemConfig
from tests.conftest import deployments, make_workload


@st.composite
def workloads(draw):
    budget = draw(st.integers(150, 900))
    max_step = draw(st.sampled_from([32, 64, 128]))
    raw_scores = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=10, max_size=10)))
    conds = draw(st.lists(st.floats(0.0, 0.95), min_size=8, max_size=8))
    acc = list(np.cumprod(conds))
    return make_workload(
        prompt_tokens=draw(st.integers(1, 300)),
        answer_tokens=draw(st.sampled_from([0, 1, 2, 30])),
        judge_template_tokens=draw(st.integers(1, 100)),
        token_budget=budget,
        max_step_tokens=max_step,
        steps_per_request={"base": {"kind": "geometric", "mean": draw(st.floats(1.5, 12)), "min": 1, "max": 80}},
        verbosity=draw(st.floats(0.5, 2.0)),
        step_tokens={
            "small": {"kind": "lognormal", "median": draw(st.floats(3, 40)), "sigma": draw(st.floats(0.2, 1.0)), "min": 1, "max": max_step},
            "base": {"kind": "lognormal", "median": draw(st.floats(3, 40)), "sigma": draw(st.floats(0.2, 1.0)), "min": 1, "max": max_step},
        },
        scores=list(raw_scores / raw_scores.sum()),
        token_acceptance=acc,
    )


@st.composite
def system_configs(draw):
    system = draw(st.sampled_from(SYSTEMS))
    gamma = draw(st.integers(1, 8)) if system in ("specdecode", "specreason-decode") else None
    thr = draw(st.integers(0, 9)) if system.startswith("specreason") else None
    first_n = draw(st.integers(0, 3)) if system.startswith("specreason") else 0
    return SystemConfig(system=system, gamma=gamma, threshold=thr, first_n=first_n)


HW = st.sampled_from([("rtx-a6000", 2), ("h100-sxm", 1), ("a100-80gb", 2), ("l40s", 2)])


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), system_configs(), HW, st.integers(0, 2**31 - 1))
def test_des_mean_within_its_99ci_of_analytic(w, cfg, hw_tp, seed):
    b, s = deployments(*hw_tp)
    tables = CostTables(b, s, s, w, cfg.gamma)
    a = predict_point(cfg, chain_for(cfg, w, {}), CostVectors(tables))
    req, steps = simulate(cfg, tables, 400, seed)
    d = summarize(req, level=0.99)
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"], (cfg.label, a["latency_s"], d)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(workloads(), st.integers(0, 3))
def test_raising_threshold_never_lowers_base_fraction(w, first_n):
    fracs = []
    for thr in range(10):
        occ = run_chain(w, w.acceptance_probability(thr), first_n)
        fracs.append(occ.base_steps / occ.steps)
    assert all(b >= a - 1e-9 for a, b in zip(fracs, fracs[1:]))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(workloads(), st.floats(0.0, 1.0), st.integers(0, 4))
def test_tokens_and_probability_are_conserved(w, q, first_n):
    occ = run_chain(w, q, first_n)
    assert occ.end_pmf.sum() == pytest.approx(1.0, abs=1e-9)
    kept = occ.small_kept * w.step_pmf_small.mean + occ.base_steps * w.step_pmf_base.mean
    assert occ.mean_thinking_tokens == pytest.approx(kept, rel=1e-7)
    assert occ.steps == pytest.approx(occ.small_kept + occ.base_steps, rel=1e-9)


def test_des_tokens_are_conserved_per_request(workload):
    b, s = deployments()
    cfg = SystemConfig(system="specreason", threshold=7, first_n=1)
    req, steps = simulate(cfg, CostTables(b, s, s, workload, None), 200, 3)
    per_req = steps.groupby("request")["kept_tokens"].sum()
    assert (per_req.to_numpy() == req.set_index("request").loc[per_req.index, "thinking_tokens"].to_numpy()).all()
    # a step's time is the sum of its calls; the request's latency is its steps plus the answer call
    assert np.allclose(steps.step_s, steps.small_s + steps.scoring_s + steps.base_s)
    r = req.set_index("request").loc[per_req.index]
    assert (r.answer_s > 0).all()
    assert np.allclose(steps.groupby("request").step_s.sum() + r.answer_s, r.latency_s)


def test_same_seed_same_result(workload):
    b, s = deployments()
    cfg = SystemConfig(system="specreason-decode", threshold=5, gamma=3)
    tables = CostTables(b, s, s, workload, 3)
    r1, s1 = simulate(cfg, tables, 50, 7)
    r2, s2 = simulate(cfg, tables, 50, 7)
    r3, _ = simulate(cfg, tables, 50, 8)
    assert r1.equals(r2) and s1.equals(s2)
    assert not r1.latency_s.equals(r3.latency_s)


def test_threshold_zero_keeps_every_small_step_and_first_n_is_honoured(workload):
    occ = run_chain(workload, workload.acceptance_probability(0), 0)
    assert occ.base_steps == pytest.approx(0.0)
    b, s = deployments()
    cfg = SystemConfig(system="specreason", threshold=9, first_n=2)
    _, steps = simulate(cfg, CostTables(b, s, s, workload, None), 100, 1)
    assert (steps[steps.step < 2].proposer == "base").all()
    assert (steps[steps.step < 2].small_tokens == 0).all()
