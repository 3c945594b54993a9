"""The analytic engine's fast paths equal the straightforward computations they replace:

- the chain DP by composition of generating functions (``chain._composed_sums``) = the stepwise DP
  (one FFT pair per step, ``method="stepwise"``) on random workloads, keep-probabilities and first_n;
- the scoring / catch-up prefill expectations evaluated in one vectorised cost-model call
  (``analytic.PrefillRows``) = the sum over step lengths of one cost-model call each;
- cost vectors shared across gammas (``CostVectors.shared``) = vectors computed on their own.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.engines.analytic import CostVectors, MixturePredictor, chain_for, predict_point
from simulator.engines.chain import run_chains
from simulator.cost.cost_tables import CostTables
from simulator.cost.execution import Execution
from simulator.inputs.systems import SystemConfig
from tests.conftest import deployments, make_workload, examples

FIELDS = ("small_first", "small_rest", "score_rest", "score_prompt", "base_gen", "base_prompt", "regen_continue",
          "end_pmf", "steps", "small_proposals", "small_kept", "base_steps")


@st.composite
def chain_workloads(draw, shared_hazard=True):
    """Workloads whose small-model step count is the base one (h_s = h_b: the composed DP applies to every row)
    or, with ``shared_hazard=False``, has its own pmf."""
    budget = draw(st.integers(20, 2500))
    max_step = draw(st.sampled_from([4, 16, 64, 256]))
    steps_kind = draw(st.sampled_from(["geometric", "lognormal", "empirical"]))
    if steps_kind == "geometric":
        steps = {"kind": "geometric", "mean": draw(st.floats(1.5, 60)), "min": 1, "max": draw(st.integers(2, 400))}
    elif steps_kind == "lognormal":
        steps = {"kind": "lognormal", "median": draw(st.floats(2, 80)), "sigma": draw(st.floats(0.1, 1.2)), "min": 1,
                 "max": draw(st.integers(2, 400))}
    else:
        steps = {"kind": "empirical", "values": draw(st.lists(st.integers(1, 300), min_size=1, max_size=12))}
    step_len = lambda: {"kind": "lognormal", "median": draw(st.floats(1.5, max_step)),  # noqa: E731
                        "sigma": draw(st.floats(0.1, 1.2)), "min": draw(st.integers(1, 2)), "max": max_step}
    over = {}
    if not shared_hazard:
        over["steps_per_request"] = {"base": steps, "small": {"kind": "geometric", "mean": draw(st.floats(1.5, 60)),
                                                              "min": 1, "max": 300}}
    else:
        over["steps_per_request"] = {"base": steps}
        over["verbosity"] = 1.0
    return make_workload(token_budget=budget, max_step_tokens=max_step, step_tokens={"small": step_len(), "base": step_len()},
                         **over)


def _assert_same(a, b, rel=1e-10):
    """Equal to ``rel`` of the field's largest value, or of the chain's unit probability mass where that is larger
    (FFT round-off leaves ~1e-17 where a field is 0)."""
    for x, y in zip(a, b):
        for f in FIELDS:
            u, v = np.asarray(getattr(x, f), float), np.asarray(getattr(y, f), float)
            scale = max(float(np.abs(u).max()) if u.size else 0.0, 1.0)
            assert np.abs(u - v).max(initial=0.0) <= rel * scale, (f, np.abs(u - v).max() / scale)


# keep-probabilities: sums of score pmfs can round past 1 (1 + 2^-52: both kernels, the base one at -2e-16)
ROWS = st.lists(st.tuples(st.one_of(st.sampled_from([0.0, 1.0, 1.0000000000000002, 0.9999999999999999]), st.floats(0.0, 1.0)),
                          st.sampled_from([0, 0, 1, 3, 70, np.inf])), min_size=1, max_size=6)


@settings(max_examples=examples(60), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(chain_workloads(), ROWS)
def test_composed_dp_equals_stepwise(w, rows):
    qs, fns = [r[0] for r in rows], [r[1] for r in rows]
    _assert_same(run_chains(w, qs, fns, method="stepwise"), run_chains(w, qs, fns))


@settings(max_examples=examples(40), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(chain_workloads(shared_hazard=False), ROWS)
def test_auto_dp_equals_stepwise_when_hazards_differ(w, rows):
    """Mixed rows whose hazards differ go stepwise; the result is the stepwise one either way."""
    qs, fns = [r[0] for r in rows], [r[1] for r in rows]
    _assert_same(run_chains(w, qs, fns, method="stepwise"), run_chains(w, qs, fns))


@settings(max_examples=examples(25), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(chain_workloads(), st.floats(0.0, 1.0), st.sampled_from([0, 2, 64, np.inf]), st.floats(1.5, 60))
def test_composed_dp_applies_where_documented(w, q, first_n, mean_steps):
    """Shared hazards and first_n <= 64 (below n_max) or infinite: the composed evaluation applies to every chain
    that stops before n_max -- here every chain, the step count reaching past the budget (steps are >= 1 token)."""
    steps = {"kind": "geometric", "mean": mean_steps, "min": 1, "max": w.token_budget + 1}
    w = type(w).model_validate({**w.model_dump(), "steps_per_request": {"base": steps}})
    first_n = min(first_n, w.token_budget) if np.isfinite(first_n) else first_n  # below n_max
    run_chains(w, [q, 0.0, 1.0], [first_n, np.inf, 0], method="composed")


def test_composed_dp_on_the_shipped_profiles():
    from simulator.inputs.scenario import PROFILES_DIR
    from simulator.inputs.workload import load_workload

    w = load_workload(PROFILES_DIR / "workload_aime60_qwq32b_r1-1.5b.yaml")  # h_s, h_b differ by rounding only
    keys = [(0.0, np.inf), (1.0, 0), (w.acceptance_probability(3), 0), (w.acceptance_probability(7), 0),
            (w.acceptance_probability(7), 2)]
    qs, fns = [k[0] for k in keys], [k[1] for k in keys]
    _assert_same(run_chains(w, qs, fns, method="stepwise"), run_chains(w, qs, fns, method="composed"), rel=1e-11)


def test_mixed_rows_with_different_hazards_are_refused_by_the_composed_dp(workload):
    # conftest's workload: small steps = base steps x 1.3, so h_s != h_b
    with pytest.raises(ValueError):
        run_chains(workload, [0.5], [0], method="composed")
    run_chains(workload, [0.0, 1.0], [np.inf, 0], method="composed")  # pure rows need one hazard only


# ---- cost vectors ---------------------------------------------------------------------------------------
def _score_loop(tables, w, who):
    """The definition: one cost-model call per step length."""
    P, J, t = w.prompt_tokens, w.judge_template_tokens, np.arange(w.token_budget)
    rest, prompt = np.zeros(w.token_budget), 0.0
    for k, p in zip(w.step_pmf_small.support, w.step_pmf_small.probs):
        rest += p * tables.prefill(who, k + J, P + t)
        prompt += p * float(tables.prefill(who, P + k + J, 0))
    return rest, prompt


def _catchup_loop(tables, w):
    P, B, t = w.prompt_tokens, w.token_budget, np.arange(w.token_budget)
    out = np.zeros(B)
    for k, p in zip(w.step_pmf_base.support, w.step_pmf_base.probs):
        extra = tables.prefill("small", k, P + t) - tables.prefill("small", 1, P + t + k)
        out += p * np.where(t + k < B, extra, 0.0)
    return out


HW = st.sampled_from([("rtx-a6000", 2), ("h100-sxm", 1), ("a100-80gb", 2), ("l40s", 2)])


@settings(max_examples=examples(25), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(chain_workloads(), HW, st.sampled_from([1, 16, 128]), st.integers(1, 300), st.integers(1, 100))
def test_vectorised_prefill_expectations_equal_the_loop(w, hw, block, prompt, judge):
    w = w.model_copy(update={"prompt_tokens": prompt, "judge_template_tokens": judge})
    b, s = deployments(*hw)
    tables = CostTables(b, s, s, w, 3, execution=Execution(prefix_cache_block=block))
    vec = CostVectors(tables)
    for who, got in (("base", vec.score), ("draft", vec.draft_score)):
        rest, prompt_cost = _score_loop(tables, w, who)
        np.testing.assert_allclose(got[0], rest, rtol=1e-12, atol=0)
        assert got[1] == pytest.approx(prompt_cost, rel=1e-12)
    np.testing.assert_allclose(vec.small_catchup_charge, _catchup_loop(tables, w), rtol=1e-12,
                               atol=1e-12 * np.abs(_catchup_loop(tables, w)).max())


def test_shared_vectors_equal_vectors_of_their_own(workload):
    """A grid shares the gamma-independent vectors (and prefill rows across problems): same predictions."""
    b, s = deployments("l40s", 2)
    mix = MixturePredictor(workload)
    cfgs = [SystemConfig(system="vanilla-base"), SystemConfig(system="specreason", threshold=5, first_n=1),
            SystemConfig(system="specreason-decode", gamma=3, threshold=5, first_n=1),
            SystemConfig(system="specreason-decode", gamma=5, threshold=7), SystemConfig(system="specdecode", gamma=5)]
    mix.prepare(cfgs)
    t0 = CostTables(b, s, s, workload, None)
    shared0 = mix.vectors(t0)
    for cfg in cfgs:
        tg = CostTables(b, s, s, workload, cfg.gamma)
        shared = mix.vectors(tg, shared=shared0) if cfg.gamma else shared0
        got = mix.predict(cfg, shared)
        want = predict_point(cfg, chain_for(cfg, workload, mix.chains[0]), CostVectors(tg))
        for k in want:
            if isinstance(want[k], float) and np.isfinite(want[k]):
                assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15), (cfg.label, k)
