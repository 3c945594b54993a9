"""Speculative decoding: Leviathan's closed form, its bounds and limits, and the engines' agreement."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.engines.analytic import CostVectors, chain_for, predict_point
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams
from simulator.cost.cost_tables import CostTables
from simulator.catalog import get_hardware, get_model
from simulator.engines.speculative import (expected_tokens_per_iteration, iid_acceptance, iteration_occupancy,
                                   leviathan_expected_tokens, leviathan_speedup, tokens_per_iteration_pmf)
from simulator.inputs.systems import SystemConfig
from tests.conftest import flat_params, make_workload, examples

alphas = st.floats(min_value=0.0, max_value=0.99)
gammas = st.integers(min_value=1, max_value=12)


@given(alphas, gammas)
def test_per_position_form_reproduces_leviathan(alpha, gamma):
    a = iid_acceptance(alpha, gamma)
    assert expected_tokens_per_iteration(a) == pytest.approx(leviathan_expected_tokens(alpha, gamma), rel=1e-9)
    pmf = tokens_per_iteration_pmf(a)
    assert pmf.sum() == pytest.approx(1.0)
    assert np.dot(np.arange(1, gamma + 2), pmf) == pytest.approx(leviathan_expected_tokens(alpha, gamma), rel=1e-9)


@given(alphas, gammas, st.floats(min_value=0.0, max_value=1.0))
def test_speedup_never_exceeds_gamma_plus_one_over_cost(alpha, gamma, c):
    assert leviathan_speedup(alpha, gamma, c) <= (gamma + 1) / (gamma * c + 1) + 1e-12


@given(st.floats(min_value=0.05, max_value=0.95))
def test_speedup_tends_to_one_over_one_minus_alpha(alpha):
    assert leviathan_speedup(alpha, 400, 0.0) == pytest.approx(1 / (1 - alpha), rel=1e-6)


def test_alpha_one_gives_gamma_plus_one_tokens():
    assert leviathan_expected_tokens(1.0, 5) == 6
    assert expected_tokens_per_iteration(np.ones(5)) == 6


@given(alphas, gammas)
def test_renewal_occupancy_converges_to_one_over_e(alpha, gamma):
    a = iid_acceptance(alpha, gamma)
    u = iteration_occupancy(a, 3000)
    assert u[0] == 1.0
    assert u[-200:].mean() == pytest.approx(1 / expected_tokens_per_iteration(a), rel=2e-2)


def _const_cost_deployments(c_ratio: float):
    """Target pass cost constant (weights only, no KV, no overhead); draft = c x target."""
    h = get_hardware("h100-sxm")
    base = get_model("qwq-32b").model_copy(update={"kv_heads": 1, "head_dim": 1})  # ~no KV traffic
    p = flat_params()
    b = Deployment(base, h, 1, p)
    draft_model = base.model_copy(update={"bytes_per_param": base.bytes_per_param * c_ratio})
    return b, Deployment(draft_model, h, 1, p)


@settings(max_examples=examples(15), deadline=None)
@given(st.floats(min_value=0.3, max_value=0.9), st.integers(min_value=1, max_value=8), st.sampled_from([0.05, 0.1, 0.2]))
def test_engine_speedup_matches_leviathan_on_long_generations(alpha, gamma, c):
    b, d = _const_cost_deployments(c)
    w = make_workload(token_acceptance=list(iid_acceptance(alpha, 8)), token_budget=4000, answer_tokens=0,
                      prompt_tokens=1, steps_per_request={"base": {"kind": "constant", "value": 400}},
                      step_tokens={"small": {"kind": "constant", "value": 10}, "base": {"kind": "constant", "value": 10}})
    chains = {}
    van = predict_point(SystemConfig(system="vanilla-base"), chain_for(SystemConfig(system="vanilla-base"), w, chains),
                        CostVectors(CostTables(b, d, d, w, None)))
    cfg = SystemConfig(system="specdecode", gamma=gamma)
    sd = predict_point(cfg, chain_for(cfg, w, chains), CostVectors(CostTables(b, d, d, w, gamma)))
    # the engine's c is the ratio of pass times (the LM head and embeddings scale too)
    c_eff = float(d.decode_time(10) / b.decode_time(10))
    expected = leviathan_speedup(alpha, gamma, c_eff)
    assert van["latency_s"] / sd["latency_s"] == pytest.approx(expected, rel=0.02)


def test_zero_acceptance_makes_specdecode_slower_by_the_drafting_cost(workload):
    from tests.conftest import deployments

    w = workload.model_copy(update={"token_acceptance": [0.0] * 8})
    b, s = deployments()
    chains = {}
    van_cfg, sd_cfg = SystemConfig(system="vanilla-base"), SystemConfig(system="specdecode", gamma=4)
    van = predict_point(van_cfg, chain_for(van_cfg, w, chains), CostVectors(CostTables(b, s, s, w, None)))
    sd = predict_point(sd_cfg, chain_for(sd_cfg, w, chains), CostVectors(CostTables(b, s, s, w, 4)))
    extra = sd["latency_s"] - van["latency_s"]
    assert extra > 0
    # every token still costs one target pass (now a verification of 5 tokens on the speculating engine, which a
    # draft model runs without async scheduling by default: r plain decodes) plus 4 draft passes
    from simulator.cost.spec_iteration import speculating_target

    r = float(speculating_target(b, s).verify_time(4, 2000) / b.decode_time(2000))
    assert r >= 1.0
    assert extra == pytest.approx(sd["draft_s"] + (r - 1.0) * van["base_decode_s"], rel=0.05)
    assert sd["acceptance_length"] == 1.0
