"""Workload mixtures over problems: a one-problem mixture is today's workload exactly; analytic = DES
on mixtures; kept share monotone in the threshold per problem and overall; the sampler draws problems
by weight; the fit from aggregates pins what it claims; bad aggregates exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from simulator.engines.analytic import MixturePredictor, predict
from simulator.cost.cost_tables import CostTables
from simulator.engines.des import simulate, summarize
from simulator.cost.execution import Execution
from simulator.engines.request_model import RequestSampler
from simulator.inputs.systems import SYSTEMS, SystemConfig
from tests.conftest import SMALL_WORKLOAD, deployments, make_workload, examples

CONFIGS = [SystemConfig(system="vanilla-base"), SystemConfig(system="vanilla-small"), SystemConfig(system="specdecode", gamma=3),
           SystemConfig(system="specreason", threshold=5, first_n=1),
           SystemConfig(system="specreason-decode", gamma=3, threshold=6)]


def _problem(name, mean_steps, median_small, tilt_to, weight=1.0):
    scores = np.asarray(SMALL_WORKLOAD["scores"]) * np.exp(tilt_to * np.arange(10))
    return {"name": name, "weight": weight,
            "steps_per_request": {"base": {"kind": "geometric", "mean": mean_steps, "min": 1, "max": 60}},
            "step_tokens": {"small": {"kind": "lognormal", "median": median_small, "sigma": 0.6, "min": 1, "max": 64},
                            "base": {"kind": "lognormal", "median": 25, "sigma": 0.5, "min": 1, "max": 64}},
            "scores": list(scores / scores.sum())}


@pytest.mark.parametrize("step_calls", [False, True])
def test_one_problem_mixture_reproduces_the_workload_exactly(step_calls):
    w = make_workload()
    w1 = make_workload(problems=[{"name": "only"}])
    b, s = deployments("l40s", 2)
    for cfg in CONFIGS:
        t0 = CostTables(b, s, s, w, cfg.gamma, execution=Execution(step_calls=step_calls))
        t1 = CostTables(b, s, s, w1, cfg.gamma, execution=Execution(step_calls=step_calls))
        assert predict(cfg, t1)["latency_s"] == pytest.approx(predict(cfg, t0)["latency_s"], rel=1e-12, abs=0)
        r0, s0 = simulate(cfg, t0, 40, 3)
        r1, s1 = simulate(cfg, t1, 40, 3)
        assert r0.equals(r1) and s0.equals(s1), cfg.label


@st.composite
def mixtures(draw):
    k = draw(st.integers(2, 3))
    probs = [_problem(f"p{i}", draw(st.floats(2, 12)), draw(st.floats(5, 40)), draw(st.floats(-0.5, 0.5)),
                      draw(st.floats(0.2, 3.0))) for i in range(k)]
    return make_workload(problems=probs, prompt_tokens=draw(st.integers(20, 200)))


@pytest.mark.parametrize("system", SYSTEMS)
@settings(max_examples=examples(4), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
def test_des_mean_within_its_ci_of_the_analytic_mixture(system, data):
    w = data.draw(mixtures())
    spec = SystemConfig(system=system).spec
    cfg = SystemConfig(system=system, gamma=3 if spec.draft else None, threshold=data.draw(st.integers(0, 9)) if spec.scores_steps else None)
    b, s = deployments("a100-80gb", 2)
    tables = CostTables(b, s, s, w, cfg.gamma, execution=Execution(step_calls=data.draw(st.booleans())))
    a = predict(cfg, tables)
    req, _ = simulate(cfg, tables, 3000, data.draw(st.integers(0, 2**31 - 1)))
    # 5 systems x 4 examples share 0.1% (Bonferroni): per-request latencies of a mixture are skewed (a 600-request
    # mean of one example sat 3.7 standard errors high in a full-suite run; 1000 seeds of it: z sd 1.03, no bias),
    # and hypothesis does not replay the same examples in every run, so a looser family level made CI flaky
    d = summarize(req, level=1 - 0.001 / 20)
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"], (cfg.label, a["latency_s"], d)


@settings(max_examples=examples(10), deadline=None, derandomize=True)
@given(mixtures(), st.integers(0, 3))
def test_kept_share_monotone_in_threshold_per_problem_and_overall(w, first_n):
    cfgs = [SystemConfig(system="specreason", threshold=t, first_n=first_n) for t in range(11)]
    mp = MixturePredictor(w)
    mp.prepare(cfgs)
    b, s = deployments()
    vec = mp.vectors(CostTables(b, s, s, w, None))
    per = np.array([[p["small_step_fraction"] for p in mp.per_problem(c, vec)] for c in cfgs])
    overall = np.array([mp.predict(c, vec)["small_step_fraction"] for c in cfgs])
    assert np.all(np.diff(per, axis=0) <= 1e-12) and np.all(np.diff(overall) <= 1e-12)
    lo, hi = per.min(axis=1), per.max(axis=1)
    assert np.all(lo - 1e-12 <= overall) and np.all(overall <= hi + 1e-12)  # a mixture lies between its problems


def test_sampler_draws_problems_by_weight():
    w = make_workload(problems=[_problem("a", 4, 10, 0, weight=1.0), _problem("b", 4, 10, 0, weight=3.0)])
    reqs = RequestSampler(SystemConfig(system="specreason", threshold=5), w).sample(4000, 0)
    share_b = np.mean([r.problem == 1 for r in reqs])
    assert abs(share_b - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 4000)


def test_mixture_prediction_is_the_weighted_mean_of_its_problems():
    w = make_workload(problems=[_problem("a", 3, 10, 0.3, 1.0), _problem("b", 10, 30, -0.3, 2.0)])
    b, s = deployments()
    cfg = SystemConfig(system="specreason", threshold=6)
    tb = CostTables(b, s, s, w, None)
    mp = MixturePredictor(w)
    mp.prepare([cfg])
    parts = mp.per_problem(cfg, mp.vectors(tb))
    whole = mp.predict(cfg, mp.vectors(tb))
    assert whole["latency_s"] == pytest.approx((parts[0]["latency_s"] + 2 * parts[1]["latency_s"]) / 3, rel=1e-12)
    kept = (parts[0]["small_step_fraction"] * parts[0]["steps"] + 2 * parts[1]["small_step_fraction"] * parts[1]["steps"])
    assert whole["small_step_fraction"] == pytest.approx(kept / (parts[0]["steps"] + 2 * parts[1]["steps"]), rel=1e-12)


# ---- the fit from aggregates ---------------------------------------------------------------------------
from calibrate.fit.fit_mixture import AGGREGATES, DATA_DIR, tilt, tilt_for_acceptance  # noqa: E402

needs_data = pytest.mark.skipif(not AGGREGATES.is_file() or not (DATA_DIR / "problem60-runs0-7.jsonl").is_file(),
                                reason="shared SpecReason traces absent")


def test_tilt_hits_its_target_and_is_monotone():
    p = np.asarray(SMALL_WORKLOAD["scores"])
    for target in (0.05, 0.3, 0.6, 0.95):
        th = tilt_for_acceptance(p, target)
        assert tilt(p, th)[7:].sum() == pytest.approx(target, abs=1e-8)
    accs = [tilt(p, th)[7:].sum() for th in np.linspace(-3, 3, 13)]
    assert np.all(np.diff(accs) > 0)


@needs_data
def test_fit_pins_each_problems_steps_share_and_proposal_length():
    from calibrate.fit.fit_mixture import fit_mixture, load_aggregates, shared_profile

    aggs = load_aggregates()
    shared, sigma, _ = shared_profile()
    w = fit_mixture(aggs, shared, sigma, problems=["62", "69"])
    mp = MixturePredictor(w)
    cfg = SystemConfig(system="specreason", threshold=7)
    mp.prepare([cfg])
    b, s = deployments()
    for (name, part), (_, c) in zip(zip(["62", "69"], mp.per_problem(cfg, mp.vectors(CostTables(b, s, s, w, None)))), mp.components):
        v = aggs[name].averages
        assert part["steps"] == pytest.approx(v.total_steps, rel=0.01)
        assert part["small_step_fraction"] == pytest.approx(v.acceptance_rate, abs=0.01)
        assert c.step_pmf_small.mean == pytest.approx((v.small_tokens_accepted + v.small_tokens_rejected) / v.total_steps, rel=0.02)
    assert "aggregates of problem 62" in w.problems[0].source and "PRIORS" in w.provenance.method


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["per_problem"]["62"]["averages"].pop("total_steps"), "per_problem.62.averages.total_steps"),
    (lambda d: d["per_problem"]["63"]["averages"].__setitem__("rejected_steps", -1.0), "per_problem.63.averages.rejected_steps"),
    (lambda d: d["per_problem"]["64"].__setitem__("completed_runs", 0), "per_problem.64.completed_runs"),
    (lambda d: d.pop("per_problem"), "per_problem"),
    (lambda d: d["per_problem"]["62"]["averages"].__setitem__("total_tokens", 10.0), "per_problem.62.averages: "
     "Value error, total_tokens 10 must equal base_tokens + small_tokens_accepted"),
    (lambda d: d["per_problem"]["63"]["averages"].__setitem__("base_model_time_s", 0.0), "per_problem.63.averages: "
     "Value error, base_model_time_s must be > 0"),
    (lambda d: d["per_problem"]["64"]["averages"].__setitem__("total_time_s", 1.0), "per_problem.64.averages: "
     "Value error, total_time_s 1 is shorter than its parts"),
    (lambda d: d["per_problem"]["64"].__setitem__("correct_count", 40), "per_problem.64: Value error, correct_count 40 "
     "exceeds completed_runs 4"),
])
def test_bad_aggregates_exit_2_with_one_line(tmp_path, mutate, field):
    good = {"config": {"score_threshold": 7.0}, "per_problem": {
        str(pid): {"completed_runs": 4, "accuracy": 0.5, "averages": {
            "total_steps": 100.0, "accepted_steps": 60.0, "rejected_steps": 40.0, "acceptance_rate": 0.6,
            "small_tokens_accepted": 2000.0, "small_tokens_rejected": 1000.0, "base_tokens": 1500.0, "total_tokens": 3500.0,
            "small_model_time_s": 30.0, "base_model_time_s": 80.0, "eval_time_s": 15.0, "total_time_s": 125.0}}
        for pid in (62, 63, 64)}}
    mutate(good)
    path = tmp_path / "agg.json"
    path.write_text(json.dumps(good))
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "import", "aggregates", str(path)],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {field}"), r.stderr
    assert "Traceback" not in r.stderr
