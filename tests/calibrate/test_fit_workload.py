"""Workload fit from SpecReason traces: validity, acceptance vs the trace, KM handling, committed profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.fit.fit_workload import (
    SCORE_PSEUDO_COUNT,
    fit_workload_from_trace,
    score_pmf,
    steps_km_with_geometric_tail,
    write_workload_yaml,
)
from calibrate.fit.import_specreason import DEFAULT_DATA_DIR, import_specreason, steps_upto_answer
from simulator.inputs.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "simulator" / "profiles" / "workload_aime60_qwq32b_r1-1.5b.yaml"
needs_data = pytest.mark.skipif(not (DEFAULT_DATA_DIR / "problem60-runs0-7.jsonl").is_file(),
                                reason=f"shared trace data absent ({DEFAULT_DATA_DIR})")


@pytest.fixture(scope="module")
def trace():
    return import_specreason(DEFAULT_DATA_DIR)


@needs_data
def test_fitted_profile_validates_and_scores_sum_to_one(trace):
    prof = fit_workload_from_trace(trace)
    assert sum(prof.scores) == pytest.approx(1.0, abs=1e-9)
    assert min(prof.scores) > 0  # pseudo-count: no score has probability exactly 0
    assert 1 <= prof.step_pmf_small.min and prof.step_pmf_small.max <= 512
    assert prof.provenance.kind == "fitted" and prof.provenance.engine == "vLLM 0.8.2"
    assert "PRIORS" in prof.provenance.method


@needs_data
def test_acceptance_at_threshold_7_matches_trace(trace):
    steps = steps_upto_answer(trace)
    scored = steps[~steps["scoring_skipped"]]
    empirical_kept = float((scored["kept_by"] == "small").mean())
    n = len(scored)
    smoothing_bound = 10 * SCORE_PSEUDO_COUNT / (n + 10 * SCORE_PSEUDO_COUNT)
    prof = fit_workload_from_trace(trace)
    assert abs(prof.acceptance_probability(7) - empirical_kept) <= smoothing_bound + 1e-12


def test_score_pmf_hand_case():
    p = score_pmf([9, 9, 0], pseudo_count=0.5)
    assert p[9] == pytest.approx(2.5 / 8) and p[0] == pytest.approx(1.5 / 8) and p[4] == pytest.approx(0.5 / 8)


def test_km_without_censoring_is_the_empirical_distribution():
    dist, info = steps_km_with_geometric_tail([10, 20, 20, 40], [True] * 4)
    assert dist["values"] == [10, 20, 40]
    np.testing.assert_allclose(dist["weights"], [0.25, 0.5, 0.25])
    assert info["km_leftover_mass"] == pytest.approx(0.0, abs=1e-12)


def test_km_censored_run_puts_its_mass_beyond_its_censoring_point():
    dist, info = steps_km_with_geometric_tail([10, 30, 50], [True, True, False])
    v, w = np.array(dist["values"]), np.array(dist["weights"])
    assert w[v == 10] == pytest.approx(1 / 3) and w[v == 30] == pytest.approx(1 / 3)
    assert w[v > 50].sum() == pytest.approx(1 / 3)
    assert w[(v > 30) & (v <= 50)].sum() == 0
    assert info["geometric_mle_mean_steps"] == pytest.approx(90 / 2)


@needs_data
def test_committed_profile_equals_a_fresh_fit(trace, tmp_path):
    committed = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    fresh_path = write_workload_yaml(fit_workload_from_trace(trace), tmp_path / "w.yaml")
    fresh = yaml.safe_load(fresh_path.read_text(encoding="utf-8"))
    committed["provenance"].pop("date")
    fresh["provenance"].pop("date")
    assert fresh == committed


def test_committed_profile_loads():
    prof = load_workload(PROFILE)
    assert prof.token_budget == 8192 and prof.answer_tokens == 0 and prof.verbosity == 1.0


def test_score_pmf_bins_real_scores_so_that_integer_thresholds_are_exact():
    """Logprob-weighted scores are real: q(τ) = sum_{k>=τ} p_k must equal the fraction with s >= τ."""
    import numpy as np

    from calibrate.fit.fit_workload import score_pmf

    s = np.array([5.2, 5.96, 6.0, 6.4, 6.99, 7.0, 8.5, 9.0, 0.3, 9.0])
    p = np.asarray(score_pmf(s, pseudo_count=0.0))
    for tau in range(10):
        assert p[tau:].sum() == pytest.approx(np.mean(s >= tau))


@needs_data
def test_name_and_dataset_describe_the_runs_fitted(trace):
    from calibrate.fit.fit_workload import fit_workload_from_steps

    assert fit_workload_from_trace(trace).dataset.startswith("AIME 2024 problem 60 (")
    runs = trace.requests.run_id.iloc[:3]
    steps = trace.steps[trace.steps.run_id.isin(runs)].assign(problem_id=7)
    prof = fit_workload_from_steps(steps_upto_answer(type(trace)(steps, trace.requests[trace.requests.run_id.isin(runs)])),
                                   trace.requests[trace.requests.run_id.isin(runs)], source="relabelled")
    assert prof.name == "aime7_qwq32b_r1-1.5b"
    assert prof.dataset.startswith("AIME 2024 problem 7, 3 SpecReason runs") and "60" in prof.dataset  # the prompt's
