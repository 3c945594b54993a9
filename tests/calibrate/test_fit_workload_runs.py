"""Workload fit from runner run directories (calibrate.fit.fit_workload_runs).

The run directories are written by the real orchestrator and RunDirectory, driven by the
fake-engine test double with seeded random step lengths, answer hazards and judge scores, so
the fitted profile can be checked against the generating law.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.measure.datasets import Problem
from calibrate.fit.fit_workload_runs import fit_workload_from_runs
from calibrate.measure.orchestrator import RunConfig, run_request
from calibrate.measure.run_directory import RunDirectory
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError
from simulator.inputs.workload import WorkloadProfile, load_workload
from tests.calibrate.fake_engine import FakeEngine
from tests.conftest import REPO, examples

PROFILES = REPO / "simulator" / "profiles"


def _manifest(system: str, budget: int, step_max: int, gamma: int = 0, threshold: float = 7.0) -> dict:
    return {"schema_version": SCHEMA_VERSION, "kind": "run", "created_at": "2026-01-01T00:00:00+00:00",
            "engine": "fake", "engine_version": "0", "hardware": {"cpu_model": "test"},
            "models": {"base": {"path": "fake-base"}, "small": {"path": "fake-small"}}, "dtype": "float32",
            "tensor_parallel": 1, "system": system, "gamma": gamma, "threshold": threshold, "first_n": 0,
            "budget_tokens": budget, "score_mode": "greedy",
            "sampling": {"temperature": 0.0, "top_p": 1.0, "step_max_tokens": step_max, "stop": ["\n\n"]},
            "seed": 0, "dataset": "synthetic", "num_requests": 0, "command": "test",
            "options": {"budget_rule": "checked_between_steps"}}


def _writer(rng, hazard: float, lo: int, hi: int):
    """Step text: 'Answer: 42' with probability ``hazard``, else lo..hi random characters; + blank line."""
    def w(_k: int) -> str:
        if rng.random() < hazard:
            return "Answer: 42\n\n"
        return "x" * int(rng.integers(lo, hi + 1)) + "\n\n"
    return w


def write_run(path, system: str, n: int, *, seed: int = 0, hazard: float = 0.25, budget: int = 10_000,
              step_max: int = 64, gamma: int = 0, threshold: float = 7.0, score_p=None):
    rng = np.random.default_rng(seed)
    score_p = np.full(10, 0.1) if score_p is None else np.asarray(score_p)
    judge = lambda _step: int(rng.choice(10, p=score_p))  # noqa: E731
    cfg = RunConfig(system=system, threshold=threshold, budget_tokens=budget, step_max_tokens=step_max)
    rd = RunDirectory.open(path, _manifest(system, budget, step_max, gamma, threshold))
    for i in range(n):
        base = FakeEngine(_writer(rng, hazard, 5, 40), judge=judge, gamma=gamma)
        small = FakeEngine(_writer(rng, hazard, 3, 20))
        steps, req = run_request(cfg, Problem(f"p{i}", "What is 6*7?", "42"), i,
                                 None if system == "vanilla-small" else base, small if cfg.uses_small else None, seed=i)
        rd.write_request(steps, req)
    rd.close()
    return path


def test_vanilla_runs_recover_step_counts_lengths_and_verbosity(tmp_path):
    b = write_run(tmp_path / "vb", "vanilla-base", 400, hazard=0.25)
    s = write_run(tmp_path / "vs", "vanilla-small", 400, seed=1, hazard=0.2)
    fit = fit_workload_from_runs([b, s])
    w = fit.profile
    # geometric N with hazard h: mean 1/h; 400 uncensored chains -> within ~4 standard errors
    assert w.steps_pmf_base.mean == pytest.approx(4.0, rel=0.2)
    assert w.steps_pmf_small.mean == pytest.approx(5.0, rel=0.2)
    assert w.verbosity == pytest.approx(w.steps_pmf_small.mean / w.steps_pmf_base.mean, rel=1e-3)
    # empirical step lengths: exactly the sample (conservation of the recorded tokens)
    steps = [json.loads(x) for x in (b / "steps.jsonl").read_text().splitlines()]
    assert w.step_pmf_base.mean == pytest.approx(np.mean([x["base_tokens"] for x in steps]), rel=1e-9)
    assert fit.parts["steps_per_request.base"].fitted and fit.parts["verbosity"].fitted
    assert not fit.parts["scores"].fitted and not fit.parts["token_acceptance"].fitted
    from calibrate.measure.orchestrator import INSTRUCTION

    assert w.prompt_tokens == len(FakeEngine(str).chat_prompt(f"{INSTRUCTION}\n\nWhat is 6*7?"))
    assert w.answer_tokens == 0 and w.token_budget == 10_000 and w.max_step_tokens == 64


def test_specreason_runs_fit_scores_and_judge_template(tmp_path):
    p = np.array([0.02, 0.03, 0.05, 0.05, 0.05, 0.1, 0.1, 0.2, 0.2, 0.2])
    r = write_run(tmp_path / "sr", "specreason", 300, hazard=0.2, score_p=p, threshold=7)
    w = fit_workload_from_runs([r]).profile
    assert np.abs(np.asarray(w.scores) - p).max() < 0.04
    # FakeEngine.score reports 80 uncached tokens: judge template + step = 80 - ... is recorded as
    # new + cached - context - step; the fake's judge template is its encode(JUDGE_TEMPLATE)
    from calibrate.measure.orchestrator import JUDGE_TEMPLATE

    assert w.judge_template_tokens == len(JUDGE_TEMPLATE)
    # no vanilla runs: N_base from the mixed chains, no small entry
    assert w.steps_per_request.small is None and w.steps_pmf_base.mean == pytest.approx(5.0, rel=0.25)


def test_acceptance_is_pooled_per_position_and_non_increasing(tmp_path):
    r = write_run(tmp_path / "sd", "specdecode", 50, gamma=3)
    w = fit_workload_from_runs([r]).profile
    steps = [json.loads(x) for x in (r / "steps.jsonl").read_text().splitlines()]
    d = np.sum([s["spec_drafted_per_pos"] for s in steps], axis=0)
    a = np.sum([s["spec_accepted_per_pos"] for s in steps], axis=0)
    expect = np.minimum.accumulate(a / d)
    assert w.token_acceptance == pytest.approx(expect.tolist(), rel=1e-5)
    assert all(x >= y for x, y in zip(w.token_acceptance, w.token_acceptance[1:]))


def test_all_censored_gives_a_point_mass_beyond_the_budget(tmp_path):
    r = write_run(tmp_path / "vb", "vanilla-base", 20, hazard=0.0, budget=60, step_max=64)
    fit = fit_workload_from_runs([r])
    w = fit.profile
    shortest = w.step_pmf_base.min
    assert w.steps_pmf_base.min == w.steps_pmf_base.max == int(np.ceil(60 / shortest)) + 1
    assert "censored" in fit.parts["steps_per_request.base"].how
    # the budget binds before N: every simulated request ends on the budget, as every measured one did
    from simulator.engines.request_model import RequestSampler
    from simulator.inputs.systems import SystemConfig as SimConfig

    plans = RequestSampler(SimConfig(system="vanilla-base"), w).plans(200, 0)
    assert {p.stop_reason for p in plans} == {"budget"}


def test_prior_fills_what_the_runs_cannot_identify(tmp_path):
    prior = load_workload(PROFILES / "workload_cpu_gsm_smollm2.yaml")
    r = write_run(tmp_path / "vb", "vanilla-base", 30, budget=prior.token_budget, step_max=prior.max_step_tokens)
    fit = fit_workload_from_runs([r], prior=prior)
    assert fit.profile.token_acceptance == prior.token_acceptance
    assert fit.profile.scores == prior.scores
    assert "from prior cpu_gsm_smollm2" in fit.profile.provenance.method


def test_runs_of_different_budgets_are_refused(tmp_path):
    a = write_run(tmp_path / "a", "vanilla-base", 3, budget=100)
    b = write_run(tmp_path / "b", "vanilla-base", 3, budget=200)
    with pytest.raises(InputError, match="budget_tokens"):
        fit_workload_from_runs([a, b])


def test_cli_writes_a_loadable_profile_and_bad_input_exits_2(tmp_path):
    r = write_run(tmp_path / "sr", "specreason", 10)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "w.yaml"
    ok = subprocess.run([sys.executable, "-m", "specsim_cli", "fit", "workload", str(r), "--out", str(out),
                         "--form", "parametric"], cwd=REPO, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    w = load_workload(out)
    assert isinstance(w, WorkloadProfile) and w.step_tokens.small.kind == "lognormal"
    assert "Regenerate" in out.read_text()
    before = out.read_bytes()
    bad = subprocess.run([sys.executable, "-m", "specsim_cli", "fit", "workload", str(tmp_path / "nope"),
                          "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.strip().count("\n") == 0
    assert out.read_bytes() == before  # nothing already written is lost


@settings(max_examples=examples(25), deadline=None)
@given(counts=st.lists(st.integers(1, 30), min_size=1, max_size=40))
def test_km_without_censoring_is_the_empirical_distribution(counts):
    """Law: with every chain answered, the fitted N distribution is the sample's own pmf."""
    import pandas as pd

    from calibrate.fit.fit_workload_runs import _step_count_dist

    chains = pd.DataFrame({"num_steps": counts, "stop_reason": ["answer"] * len(counts)})
    dist, _, mean = _step_count_dist(chains, "empirical", budget=10_000, shortest_step=1)
    vals, cnt = np.unique(counts, return_counts=True)
    assert dist["values"] == vals.tolist()
    assert np.allclose(dist["weights"], cnt / cnt.sum())
    assert mean == pytest.approx(np.mean(counts))


def test_request_filter_fits_only_the_named_requests(tmp_path):
    """requests={run: ids}: the fit equals a fit on a run holding only those requests; other runs keep all."""
    import shutil

    b = write_run(tmp_path / "vb", "vanilla-base", 40, hazard=0.25)
    s = write_run(tmp_path / "sr", "specreason", 12, seed=3, hazard=0.2)
    keep = {0, 3, 5, 8, 13, 21, 34}
    fit = fit_workload_from_runs([b, s], requests={b: keep}).profile
    # the same run with only those requests on disk
    sub = tmp_path / "vb_sub"
    shutil.copytree(b, sub)
    for name in ("requests.jsonl", "steps.jsonl"):
        lines = [x for x in (b / name).read_text().splitlines() if json.loads(x)["request_id"] in keep]
        (sub / name).write_text("".join(x + "\n" for x in lines))
    ref = fit_workload_from_runs([sub, s]).profile
    assert fit.steps_per_request.base == ref.steps_per_request.base
    assert fit.step_tokens == ref.step_tokens and fit.scores == ref.scores
    assert fit.steps_per_request.base != fit_workload_from_runs([b, s]).profile.steps_per_request.base
    assert "request filter" in fit.provenance.method
    # a run whose every request is filtered out is dropped; nothing left, an unknown id or run: errors
    only_sr = fit_workload_from_runs([b, s], requests={b: set(), s: {"1", "2"}}).profile
    assert "1 run(s)" in only_sr.provenance.method
    with pytest.raises(InputError, match="no request"):
        fit_workload_from_runs([b, s], requests={b: set(), s: set()})
    with pytest.raises(InputError, match="999"):
        fit_workload_from_runs([b], requests={b: {999}})
    with pytest.raises(InputError, match="not among the inputs"):
        fit_workload_from_runs([b], requests={s: {0}})
