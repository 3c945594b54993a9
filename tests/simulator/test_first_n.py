"""first_n over its whole range: the analytic engine equals the DES in expectation for any first_n, including a
first_n past a request's last step (the chain ends by its answer, its token budget or its step count before the small
model ever proposes: every step is the base model's), and first_n is bounded the same in a scenario and on the
command line."""

import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import specsim_cli.main as cli
from simulator.engines.analytic import CostVectors, chain_for, predict_point
from simulator.engines.chain import run_chains
from simulator.cost.cost_tables import CostTables
from simulator.engines.des import simulate, summarize
from simulator.option_values import FIRST_N_MAX
from simulator.inputs.scenario import SCENARIOS_DIR
from simulator.inputs.systems import SystemConfig
from tests.conftest import deployments, make_workload

FIELDS = ("small_first", "small_rest", "score_rest", "score_prompt", "base_gen", "base_prompt", "regen_continue",
          "end_pmf", "steps", "small_proposals", "small_kept", "base_steps")


def _same(a, b, rel=1e-9):
    for f in FIELDS:
        u, v = np.asarray(getattr(a, f), float), np.asarray(getattr(b, f), float)
        assert np.abs(u - v).max(initial=0.0) <= rel * max(float(np.abs(u).max(initial=0.0)), 1.0), f


@pytest.mark.parametrize("method", ["auto", "stepwise"])
def test_first_n_past_the_chain_is_the_all_base_chain(method):
    """The conftest workload's chain ends within its 600-token budget after ~30 steps (steps are ~25 tokens): from
    first_n 40 on, and for first_n 60 (the step count's support) up to the bound, it is the chain whose steps are
    all the base model's (first_n = inf), in both evaluations of the DP (composed up to first_n 64, stepwise past
    it)."""
    w = make_workload()
    q = w.acceptance_probability(3)
    fns = [40, 59, 60, 61, 64, 65, 1000, FIRST_N_MAX]
    occ = run_chains(w, [q] * (len(fns) + 1), [*fns, np.inf], method=method)
    for o in occ[:-1]:
        _same(o, occ[-1])
        assert o.small_proposals == 0.0 and o.small_kept == 0.0


@pytest.mark.parametrize("first_n", [0, 3, 40, 70, 1000])
def test_analytic_latency_within_the_des_interval_for_first_n(first_n):
    """first_n before, across and past the conftest workload's chain end (~30-40 steps)."""
    w = make_workload()
    b, s = deployments()
    cfg = SystemConfig(system="specreason", threshold=3, first_n=first_n)
    tables = CostTables(b, s, s, w, None)
    a = predict_point(cfg, chain_for(cfg, w, {}), CostVectors(tables))
    d = summarize(simulate(cfg, tables, 1500, 11)[0], level=0.999)
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"], (first_n, a["latency_s"], d)
    if first_n >= 40:
        assert a["small_step_fraction"] == 0.0 == d["small_step_fraction"]


@st.composite
def _workloads(draw):
    """Chains of at most 80 steps within budgets of 150-900 tokens: first_n over [0, FIRST_N_MAX] is mostly past
    every chain's end, and [0, 100] crosses it."""
    max_step = draw(st.sampled_from([32, 64]))
    conds = draw(st.lists(st.floats(0.0, 0.95), min_size=8, max_size=8))
    raw = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=10, max_size=10)))
    step = lambda: {"kind": "lognormal", "median": draw(st.floats(3, 30)), "sigma": draw(st.floats(0.2, 1.0)),  # noqa: E731
                    "min": 1, "max": max_step}
    return make_workload(token_budget=draw(st.integers(150, 900)), max_step_tokens=max_step,
                         prompt_tokens=draw(st.integers(1, 300)), judge_template_tokens=draw(st.integers(1, 100)),
                         steps_per_request={"base": {"kind": "geometric", "mean": draw(st.floats(1.5, 20)), "min": 1,
                                                     "max": 80}},
                         step_tokens={"small": step(), "base": step()}, scores=list(raw / raw.sum()),
                         token_acceptance=list(np.cumprod(conds)))


N_EXAMPLES = 12


@settings(max_examples=N_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate])  # no shrinking: it would hunt for the sampling flukes
@given(w=_workloads(), system=st.sampled_from(["specreason", "specreason-decode"]), thr=st.integers(0, 9),
       first_n=st.one_of(st.integers(0, 100), st.integers(100, FIRST_N_MAX)), seed=st.integers(0, 2**31 - 1))
def test_analytic_mean_within_the_des_interval_for_any_first_n(w, system, thr, first_n, seed):
    """Analytic = DES in expectation for first_n drawn over [0, FIRST_N_MAX]; 0.2% family error shared over the
    examples (Bonferroni), as tests/simulator/test_engines_agree.py does."""
    cfg = SystemConfig(system=system, threshold=thr, first_n=first_n, gamma=3 if system == "specreason-decode" else None)
    b, s = deployments()
    tables = CostTables(b, s, s, w, cfg.gamma)
    a = predict_point(cfg, chain_for(cfg, w, {}), CostVectors(tables))
    d = summarize(simulate(cfg, tables, 1500, seed)[0], level=1 - 0.002 / N_EXAMPLES)
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"], (cfg.label, a["latency_s"], d)


def _run(args, capsys):
    rc = cli.main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_reference_scenario_latency_does_not_fall_past_the_chain(capsys):
    """first_n 400 and 1000 lie past (nearly) every chain of the reference workload: their latency is the base
    model's step by step, above first_n 200's and about vanilla-base's."""
    rc, out, err = _run(["simulate", "whatif", "reference-a6000-qwq32b", "--system", "specreason", "--system", "vanilla-base",
                         "--threshold", "3", "--first-n", "0,200,400,1000", "--format", "csv"], capsys)
    assert rc == 0, err
    df = pd.read_csv(io.StringIO(out))
    sr = df[df.system == "specreason"].set_index("first_n")["latency_s"]
    base = float(df[df.system == "vanilla-base"]["latency_s"].iloc[0])
    assert sr[0] < sr[200] < sr[400] and sr[400] == pytest.approx(sr[1000], rel=1e-6)
    assert sr[1000] == pytest.approx(base, rel=0.05)  # step calls and their overheads: a few percent above


def test_first_n_is_bounded_the_same_in_a_scenario_and_on_the_command_line(tmp_path, capsys):
    text = (SCENARIOS_DIR / "reference-a6000-qwq32b.yaml").read_text()
    for value, cli_value in ((FIRST_N_MAX + 1, str(FIRST_N_MAX + 1)), (100_000_000, "100000000")):
        p = tmp_path / "s.yaml"
        p.write_text(text.replace("first_n: [0]", f"first_n: [{value}]"))
        rc, _, yaml_err = _run(["simulate", "whatif", str(p), "--system", "specreason"], capsys)
        rc2, _, cli_err = _run(["simulate", "whatif", "reference-a6000-qwq32b", "--system", "specreason", "--first-n", cli_value],
                               capsys)
        assert rc == rc2 == 2 and yaml_err.count("\n") == cli_err.count("\n") == 1
        want = f"must lie in 0..{FIRST_N_MAX} (got {value})"
        assert "grid.first_n" in yaml_err and want in yaml_err and "--first-n" in cli_err and want in cli_err
    p.write_text(text.replace("first_n: [0]", "first_n: [true]"))
    rc, _, err = _run(["simulate", "whatif", str(p), "--system", "specreason"], capsys)
    assert rc == 2 and "grid.first_n" in err and "valid integer" in err
