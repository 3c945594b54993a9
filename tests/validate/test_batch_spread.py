"""Intervals for a run of a new batch (validate.batch): the between-batch term widens them with the batches' spread,
reduces to the old interval at spread 0, covers new batches at the stated level on synthetic batches, and on the
shared SpecReason data (skipped without it) leave-one-batch-out covers at least as well as the old interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from simulator.errors import InputError
from validate.batch import BatchSpread, lobo_aggregates
from validate.replay import CallNoise, OffsetPredictive, request_totals
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
DATA = next((p for p in (Path("/work/shared/data"), ROOT.parent / "shared" / "data") if p.is_dir()), None)
TRACES = DATA / "specreason-aime-traces" if DATA else None
AGG = TRACES / "per-problem-aggregates.json" if TRACES else None
PROFILE = ROOT / "simulator" / "profiles" / "cost_a100-80gb-vllm082-specreason-traces.yaml"
KINDS = ("small_generate", "score", "base_generate")


def _noise(run_sd: float = 0.1, within: float = 0.05) -> dict[str, CallNoise]:
    q = stats.norm.ppf(np.clip(np.linspace(0, 1, 101), 1e-3, 1 - 1e-3), scale=within)
    return {k: CallNoise(OffsetPredictive(6, 0.0, run_sd, 5.0, np.zeros(6), "t"), q) for k in KINDS}


def _width(batch: BatchSpread | None, seed: int = 0, n_boot: int = 2000) -> tuple[float, float, np.ndarray]:
    """90% interval of one request (30 calls of each kind, 1 s predicted each) for a run of a new batch."""
    ops = np.repeat(np.array(KINDS), 30)
    rows = np.zeros(len(ops), dtype=int)
    bd = batch.draws(list(KINDS), (1, n_boot), np.random.default_rng([seed, 2])) if batch is not None else None
    tot = request_totals(np.ones(len(ops)), rows, ops, 1, _noise(), n_boot, np.random.default_rng(seed), bd)[0]
    lo, hi = np.quantile(tot, [0.05, 0.95])
    return lo, hi, tot


@settings(max_examples=examples(15), deadline=None)
@given(sd1=st.floats(0.0, 0.4), extra=st.floats(0.02, 0.4))
def test_interval_widens_with_between_batch_spread(sd1, extra):
    """More spread between batches -> a wider interval for a run of a new batch (same draws otherwise)."""
    lo1, hi1, _ = _width(BatchSpread.constant(sd1))
    lo2, hi2, _ = _width(BatchSpread.constant(sd1 + extra))
    assert hi2 - lo2 > hi1 - lo1
    assert lo2 < lo1 and hi2 > hi1


def test_zero_spread_is_the_old_interval_draw_for_draw():
    old = _width(None)[2]
    for b in (BatchSpread.constant(0.0), BatchSpread({k: {"a": 0.1, "b": 0.1, "c": 0.1} for k in KINDS})):
        assert b.draws(list(KINDS), (1, 10), np.random.default_rng(0)) == {}
        assert np.array_equal(_width(b)[2], old)


def test_predictive_scale_is_sqrt2_times_the_batch_sd_and_pools_missing_kinds():
    f = {"base_generate": {"a": 0.0, "b": 0.2, "c": 0.4}, "score": {"a": 0.0, "b": 0.1, "c": -0.1, "d": 0.0},
         "e2e": {"a": 0.0, "b": 1.0, "c": 2.0}}  # the end-to-end ratio is never pooled into a call kind
    p, notes = BatchSpread(f).predictives(["base_generate", "score", "spec_generate"])
    assert p["base_generate"].scale == pytest.approx(np.sqrt(2) * 0.2) and p["base_generate"].dof == 2
    assert p["score"].dof == 3 and p["base_generate"].loc == 0.0
    pooled = np.sqrt((2 * 0.2 ** 2 + 3 * np.var([0, 0.1, -0.1, 0], ddof=1)) / 5)
    assert p["spec_generate"].scale == pytest.approx(np.sqrt(2) * pooled) and p["spec_generate"].dof == 5
    assert len(notes) == 1 and notes[0].startswith("spec_generate") and "pooled" in notes[0]


def _coverage_of_new_batches(with_batch: bool, reps: int = 250, tau_b: float = 0.2, tau_r: float = 0.05,
                             k: int = 10, n_fit: int = 6, seed: int = 3) -> float:
    """Batches of runs with known effects (batch ~ N(0, tau_b), run ~ N(0, tau_r), one kind). The profile is
    anchored on a fit batch; k other batches' means give the spread; how often does the 90% interval of a run of
    yet another batch hold its time?"""
    rng = np.random.default_rng(seed)
    q = np.zeros(11)
    hit = 0
    for _ in range(reps):
        b_fit = rng.normal(0, tau_b)
        fit = b_fit + rng.normal(0, tau_r, n_fit)
        pred = float(np.exp(fit.mean()))  # the fitted profile: the fit batch's mean speed
        noise = {"score": CallNoise(OffsetPredictive(n_fit, 0.0, fit.std(ddof=1) * np.sqrt(1 + 1 / n_fit),
                                                     n_fit - 1.0, fit, "t"), q)}
        seen = rng.normal(0, tau_b, k) + rng.normal(0, tau_r / 4, k) - fit.mean()  # 16-run batch means, vs the fit
        bd = (BatchSpread({"score": {str(i): float(v) for i, v in enumerate(seen)}})
              .draws(["score"], (1, 400), rng) if with_batch else None)
        tot = request_totals(np.array([pred]), np.zeros(1, dtype=int), np.array(["score"]), 1, noise, 400, rng, bd)[0]
        lo, hi = np.quantile(tot, [0.05, 0.95])
        new = np.exp(rng.normal(0, tau_b) + rng.normal(0, tau_r))
        hit += lo <= new <= hi
    return hit / reps


def test_new_batch_coverage_near_nominal_and_the_old_interval_misses():
    assert 0.84 <= _coverage_of_new_batches(True) <= 0.97
    assert _coverage_of_new_batches(False) < 0.6


def test_lobo_aggregates_on_synthetic_batches():
    rng = np.random.default_rng(1)
    f = {"score": {str(i): float(v) for i, v in enumerate(rng.normal(0, 0.2, 12))}}
    run = {"score": OffsetPredictive(6, 0.0, 0.03, 5.0, np.zeros(6), "t")}
    t = lobo_aggregates(f, run).set_index("kind")
    assert t.loc["score", "pairs"] == 12 * 11
    assert t.loc["score", "coverage_new"] >= 0.8 > t.loc["score", "coverage_old"]
    assert t.loc["score", "half_width_new"] > t.loc["score", "half_width_old"]


def test_bad_aggregates_is_an_input_error(tmp_path):
    from validate.batch import aggregate_log_factors, from_aggregates

    bad = tmp_path / "a.json"
    bad.write_text('{"per_problem": {"1": {"averages": {}}, "2": {"averages": {}}}}')
    with pytest.raises(InputError) as e:
        aggregate_log_factors(bad, None, None)
    assert "a.json" in str(e.value) and "per_problem" in str(e.value)
    (tmp_path / "b.json").write_text("[1, 2]")
    with pytest.raises(InputError):
        from_aggregates(tmp_path / "b.json", None, None)


def test_batches_holdout_rule_parses_disjoint_groups():
    from validate.holdout import batch_groups

    known = ["r/0", "r/1", "r/2", "r/3"]
    assert batch_groups("batches:0-1/2-3", known) == [{"r/0", "r/1"}, {"r/2", "r/3"}]
    for rule, msg in (("batches:0-3", "at least 2 batches"), ("batches:0-1/1-2", "in two batches"),
                      ("batches:0-1/9", "unknown run")):
        with pytest.raises(InputError) as e:
            batch_groups(rule, known)
        assert msg in str(e.value)


# ---- the shared SpecReason data ------------------------------------------------------------------------------
needs_data = pytest.mark.skipif(AGG is None or not AGG.is_file(), reason="../shared/data/specreason-aime-traces absent")


@needs_data
def test_aggregates_spread_and_leave_one_batch_out_on_the_shared_data():
    """Every kind the aggregates show has a finite, positive spread; leave one problem-batch out, the new interval
    covers at least as many pairs as the old and is no narrower; it covers at the stated level or better."""
    from simulator.cost.cost_profile import load_profile
    from validate.batch import aggregate_log_factors
    from validate.replay import noise_model, setup_from_profile

    profile = load_profile(PROFILE)
    setup = setup_from_profile(profile)
    f = aggregate_log_factors(AGG, profile, setup)
    assert set(KINDS) <= set(f)
    sds = BatchSpread(f).table().set_index("kind")["sd_log"]
    assert (sds > 0).all() and np.isfinite(sds).all()
    noise, _ = noise_model(profile)
    t = lobo_aggregates({k: v for k, v in f.items() if k in noise}, {k: noise[k].offset for k in noise})
    assert len(t) and (t["coverage_new"] >= t["coverage_old"]).all()
    assert (t["half_width_new"] >= t["half_width_old"]).all()
    assert (t["coverage_new"] >= 0.8).all()


@needs_data
def test_cli_batch_spread_bad_file_exits_2_one_line(tmp_path):
    bad = tmp_path / "agg.json"
    bad.write_text("not json")
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "validate", str(TRACES), "--profile", str(PROFILE),
                        "--holdout", "batches:0-3/4-7", "--batch-spread", str(bad), "--no-distribution",
                        "--out", str(tmp_path / "rep")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "agg.json" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "rep" / "report.md").exists()


@needs_data
def test_leave_one_batch_out_on_the_shared_traces():
    """batches:0-3/4-7: two folds, disjoint, covering every run; per fold the new-batch interval of every request
    is wider than the old one (same fold, same profile) and covers at least as many runs."""
    from calibrate.fit.measured import load_measured
    from validate.batch import from_aggregates
    from validate.holdout import fold_test_set
    from validate.replay import replay
    from validate.validation import run_validation

    res = run_validation([str(TRACES)], str(PROFILE), "batches:0-3/4-7", distribution=False, n_boot=300,
                         between_batch=str(AGG))
    ms = load_measured([str(TRACES)])
    assert len(res.folds) == 2 and sorted(sum((f.test_runs for f in res.folds), [])) == sorted(ms.run_keys)
    inside = {"old": 0, "new": 0}
    for fold in res.folds:
        assert not set(fold.test_runs) & set(fold.fit_runs)
        test = fold_test_set(ms, fold)
        old, _ = replay(test, fold.profile, res.setup, n_boot=300)
        new, _ = replay(test, fold.profile, res.setup, n_boot=300, batch=from_aggregates(AGG, fold.profile, res.setup))
        assert ((new["pi_high_s"] - new["pi_low_s"]) > (old["pi_high_s"] - old["pi_low_s"])).all()
        for k, d in (("old", old), ("new", new)):
            inside[k] += int(((d["measured_s"] >= d["pi_low_s"]) & (d["measured_s"] <= d["pi_high_s"])).sum())
    assert inside["new"] >= inside["old"]
    assert any("new batch" in n for n in res.notes) and "new batch" in res.interval_statement


@needs_data
def test_unseen_runs_of_the_traced_problem_recombine_to_its_aggregate():
    """The traced problem's other runs, derived from its n-run aggregate, recombine with the traces' runs to the
    aggregate; none negative; the held-out-batch check prints the old and the new interval, the new one wider."""
    from calibrate.fit.import_specreason import import_specreason
    from validate.batch import AVG_KEYS, read_aggregates, unseen_batch_check, unseen_runs

    data, trace = read_aggregates(AGG), import_specreason(TRACES)
    got = unseen_runs(data, trace)
    if got is None:
        pytest.skip("the traces are not some of the completed runs of one aggregates problem")
    pid, known, other, n_other = got
    m = len(trace.requests)
    n = int(data["per_problem"][pid]["completed_runs"])
    assert n_other == n - m > 0
    for k in AVG_KEYS:
        assert other[k] >= 0
        assert (m * known[k] + n_other * other[k]) / n == pytest.approx(float(data["per_problem"][pid]["averages"][k]))
    text = unseen_batch_check(str(AGG), str(TRACES), str(PROFILE), n_boot=500)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()[:1] in (["old"], ["new"])}
    assert float(rows["new"][3]) > float(rows["old"][3])  # width
