"""validate: metrics on hand-computed cases, replay with the true profile, hold-out rules, the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit.fit_cost import CallPredictor, Setup, build_profile, fit_cost
from simulator.cost.cost_profile import profile_to_yaml
from calibrate.fit.measured import calls_from_run_dir, load_measured
from simulator.inputs.loading import write_atomic
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.cost.cost_profile import CostParams
from simulator.inputs.systems import SystemConfig
from validate.metrics import ape, coverage, summarize
from tests.conftest import examples, error_lines

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "specreason-aime-traces"
SPECSIM = [sys.executable, "-m", "specsim_cli"]
TRUE = {"mem_efficiency": 0.7, "compute_efficiency": 0.45, "step_overhead_s": 3e-3, "layer_overhead_s": 15e-6,
        "call_overhead_s": 0.05, "allreduce_latency_s": 8e-6, "seq_overhead_s": 2e-5}


def _shape() -> dict:
    """The step's shape a fitted profile carries from the hardware's prior (calibrate.fit.fit_cost.SHAPE_NAMES): the
    synthetic runs are timed with it so the 'true' profile reproduces them exactly."""
    from calibrate.fit.fit_cost import SHAPE_NAMES
    from simulator.catalog import get_hardware
    from simulator.cost.cost_profile import prior_profile

    hw = get_hardware("a100-80gb")
    p = prior_profile(hw).params(hw)
    return {n: getattr(p, n) for n in SHAPE_NAMES}


# ---- metrics ----------------------------------------------------------------------------------------
def test_metrics_hand_computed():
    pred, meas = [110.0, 90.0, 100.0, 150.0], [100.0, 100.0, 100.0, 100.0]
    assert np.allclose(ape(pred, meas), [0.1, 0.1, 0.0, 0.5])
    s = summarize(pred, meas, low=[95, 95, 101, 0], high=[120, 99, 130, 200])
    assert s["n"] == 4
    assert s["median_ape"] == pytest.approx(0.1)
    assert s["mean_ape"] == pytest.approx(0.175)
    assert s["p90_ape"] == pytest.approx(0.1 + 0.7 * 0.4)  # numpy linear quantile of [0, .1, .1, .5]
    assert s["bias"] == pytest.approx(0.05)  # median of [+.1, -.1, 0, +.5]
    assert s["coverage"] == pytest.approx(0.5)  # 100 in [95,120] and [0,200]; not in [95,99] nor [101,130]
    assert coverage([1.0, 2.0], [np.nan, 1.5], [np.nan, 2.5]) == 1.0  # rows without an interval do not count


# ---- synthetic runner run directories ----------------------------------------------------------------
def _setup() -> Setup:
    return Setup.from_names("a100-80gb", 2, "qwq-32b", "r1-distill-qwen-1.5b")


def _manifest(threshold: float) -> dict:
    return {"schema_version": SCHEMA_VERSION, "kind": "run", "created_at": "2026-01-01T00:00:00", "engine": "fake",
            "engine_version": "0", "hardware": {"device": "cuda", "gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_count": 2},
            "models": {"base": {"path": "/m/qwq-32b"}, "small": {"path": "/m/r1-distill-qwen-1.5b"}}, "dtype": "bfloat16",
            "tensor_parallel": 2, "system": "specreason", "gamma": 0, "threshold": threshold, "first_n": 0,
            "budget_tokens": 8192, "score_mode": "greedy", "sampling": {}, "seed": 0, "dataset": "synthetic",
            "num_requests": 2, "command": "test", "options": {}}


def make_run_dir(path: Path, rng: np.random.Generator, threshold: float = 7.0, sigma: float = 0.0,
                 n_requests: int = 2, steps: int = 30) -> Path:
    """A SpecReason run whose call times come from the cost model at TRUE (times lognormal noise)."""
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(_manifest(threshold)))
    recs = []
    for rid in range(n_requests):
        ctx = 200
        for j in range(steps):
            ks, score = int(rng.integers(5, 60)), int(rng.integers(0, 10))
            acc = score >= threshold
            kb = 0 if acc else int(rng.integers(5, 60))
            recs.append({"schema_version": SCHEMA_VERSION, "kind": "step", "request_id": rid, "step_index": j,
                         "proposer": "small" if acc else "base", "small_tokens": ks, "small_time_s": 1.0,
                         "score_new_tokens": ks + 80, "score_cached_tokens": ctx, "score_time_s": 1.0,
                         "score": float(score), "digit_logprobs": {}, "accepted": acc, "base_tokens": kb,
                         "base_time_s": 1.0 if kb else 0.0, "base_prompt_tokens": ctx + 1 if kb else 0,
                         "base_cached_tokens": ctx if kb else 0, "spec_gamma": 0, "spec_drafted_per_pos": [],
                         "spec_accepted_per_pos": [], "context_tokens": ctx, "kept_tokens": kb or ks, "text": "x",
                         "started_at": 0.0})
            ctx += kb or ks
    _write_steps(path, recs)
    _write_requests(path, recs, n_requests)  # provisional (1 s calls): the run directory is read for its calls
    # times from the model, keyed by (request, step, op)
    calls, _ = calls_from_run_dir(path)
    t = CallPredictor(calls, _setup()).predict(CostParams(**{**_shape(), **TRUE})) * np.exp(rng.normal(0, sigma, len(calls)))
    key = {(int(r.split("/")[-1]), s, op): v for r, s, op, v in zip(calls.request_id, calls.step_index, calls.op, t)}
    for s in recs:
        k = (s["request_id"], s["step_index"])
        s["small_time_s"] = float(key[(*k, "small_generate")])
        s["score_time_s"] = float(key[(*k, "score")])
        s["base_time_s"] = float(key.get((*k, "base_generate"), 0.0))
    _write_steps(path, recs)
    _write_requests(path, recs, n_requests)
    return path


def _write_requests(path: Path, recs: list[dict], n_requests: int) -> None:
    reqs = []
    for rid in range(n_requests):
        mine = [s for s in recs if s["request_id"] == rid]
        tot = {f: sum(s[f] for s in mine) for f in ("small_time_s", "score_time_s", "base_time_s")}
        reqs.append({"schema_version": SCHEMA_VERSION, "kind": "request", "request_id": rid, "problem_id": str(rid),
                     "system": "specreason", "num_steps": len(mine),
                     "num_small_steps": sum(s["proposer"] == "small" for s in mine),
                     "num_base_steps": sum(s["proposer"] == "base" for s in mine),
                     "thinking_tokens": sum(s["kept_tokens"] for s in mine),
                     "small_tokens": sum(s["small_tokens"] for s in mine), "base_tokens": sum(s["base_tokens"] for s in mine),
                     **tot, "spec_drafted_tokens": 0, "spec_accepted_tokens": 0, "stop_reason": "answer", "answer": "1",
                     "reference_answer": "1", "correct": True, "latency_s": sum(tot.values()), "started_at": 0.0})
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))


def _write_steps(path: Path, recs: list[dict]) -> None:
    (path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _true_profile(path: Path, runs: list[str]) -> Path:
    """A profile at TRUE, with residual quantiles from a noiseless fit (for the interval sampler)."""
    from simulator.cost.cost_profile import Param

    setup = _setup()
    ms = load_measured([str(p) for p in path.parent.glob("run*")])
    f = fit_cost(ms.calls, setup, candidates=())
    prof = build_profile(f, setup, name="true", engine="fake", inputs=["synthetic"], runs=runs, hardware_note="test")
    prof = prof.model_copy(update={n: Param(value=v, kind="calibrated", source="truth") for n, v in TRUE.items()})
    return write_atomic(path, profile_to_yaml(prof, "test"))


def test_run_dir_loader_and_hints(tmp_path):
    make_run_dir(tmp_path / "runA", np.random.default_rng(0))
    ms = load_measured([str(tmp_path / "runA")])
    assert ms.kind == "run_dir" and ms.run_keys == [(tmp_path / "runA").as_posix()]  # full path: the run's key
    assert ms.hint["hardware"] == "a100-80gb" and ms.hint["base_model"] == "qwq-32b" and ms.hint["tp"] == 2
    assert set(ms.calls["op"]) <= {"small_generate", "score", "base_generate"}
    assert len(ms.requests) == 2


def test_replay_with_true_profile_has_zero_error(tmp_path):
    from validate.validation import run_validation

    make_run_dir(tmp_path / "runA", np.random.default_rng(1))
    make_run_dir(tmp_path / "runB", np.random.default_rng(2))
    prof = _true_profile(tmp_path / "true.yaml", runs=["runA"])
    res = run_validation([str(tmp_path / "runB")], str(prof), distribution=False, n_boot=200)
    fig = res.figures["replay_calls"].iloc[0]
    assert fig["n"] == 2 and fig["median_ape"] < 1e-9 and abs(fig["bias"]) < 1e-9
    assert res.folds[0].test_runs == [(tmp_path / "runB").as_posix()]


def _run(args, **kw):
    return subprocess.run([*SPECSIM, *args], capture_output=True, text=True, cwd=ROOT, **kw)


def test_cli_fit_validate_exit_codes(tmp_path):
    rng = np.random.default_rng(3)
    for name in ("runA", "runB", "runC"):
        make_run_dir(tmp_path / name, rng, sigma=0.05)
    prof = tmp_path / "cost.yaml"
    r = _run(["fit", "cost", str(tmp_path / "runA"), str(tmp_path / "runB"), "--out", str(prof)])
    assert r.returncode == 0, r.stderr
    assert "calibrated" in prof.read_text()
    common = ["validate", "runs", str(tmp_path / "runA"), str(tmp_path / "runB"), str(tmp_path / "runC"), "--profile", str(prof),
              "--no-distribution"]
    ok = _run([*common, "--out", str(tmp_path / "rep"), "--max-median-ape", "0.5"])
    assert ok.returncode == 0, ok.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    a, b, c = ((tmp_path / n).as_posix() for n in ("runA", "runB", "runC"))
    assert f"| held-out | {a}, {b} | {c} |" in text
    assert (tmp_path / "rep" / "predicted_vs_measured.png").stat().st_size > 1000
    bad = _run([*common, "--out", str(tmp_path / "rep2"), "--max-median-ape", "1e-9"])
    assert bad.returncode == 1 and "FAIL" in bad.stderr
    insample = _run([*common, "--out", str(tmp_path / "rep3"), "--holdout", f"runs:{a}"])
    assert insample.returncode == 2 and "in-sample" in insample.stderr and "Traceback" not in insample.stderr


def test_cli_malformed_input_exits_2_one_line(tmp_path):
    d = make_run_dir(tmp_path / "runA", np.random.default_rng(4))
    with (d / "steps.jsonl").open("a") as fh:
        fh.write("{not json\n")
    prof = tmp_path / "p.yaml"
    prof.write_text("name: x\n")
    r = _run(["validate", "runs", str(d), "--profile", str(prof), "--out", str(tmp_path / "rep")])
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1
    r = _run(["fit", "cost", str(d), "--out", str(tmp_path / "o.yaml")])
    assert r.returncode == 2 and "steps.jsonl" in r.stderr and len(error_lines(r.stderr)) == 1


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_real_traces_held_out_replay(tmp_path):
    from calibrate.fit.fit_cost import fit_measured
    from validate.validation import run_validation

    from calibrate.fit.measured import parse_run_rule

    ms = load_measured([str(DATA)])
    ms = ms.select_runs(parse_run_rule("0-3", ms.run_keys))  # "0" names results/60/0 (a unique tail)
    prof = fit_measured(ms, _setup(), engine="vllm-0.8.2", hardware_note="test", command="pytest")
    path = write_atomic(tmp_path / "cost.yaml", profile_to_yaml(prof, "pytest"))
    res = run_validation([str(DATA)], str(path), distribution=False, n_boot=200)
    fig = res.figures["replay_e2e"].iloc[0]
    assert res.folds[0].test_runs == [f"results/60/{i}" for i in (4, 5, 6, 7)] and fig["n"] == 4
    assert 0.0 < fig["median_ape"] < 0.5


# ---- request-level hold-out (requests:SPEC) ----------------------------------------------------------
def _fake_set(sizes: list[int]):
    """A MeasuredSet with only its request table: run r{i} holds sizes[i] requests r{i}/0.."""
    import pandas as pd

    from calibrate.fit.measured import MeasuredSet

    rows = [{"run_key": f"r{i}", "run_id": f"r{i}", "request_id": f"r{i}/{j}"} for i, n in enumerate(sizes)
            for j in range(n)]
    return MeasuredSet(pd.DataFrame(columns=["request_id"]), pd.DataFrame(rows), ["x"], "run_dir", {})


@settings(max_examples=examples(60), deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), k=st.integers(2, 6), seed=st.integers(0, 2**16))
def test_request_kfold_partitions_stratified_and_deterministic(sizes, k, seed):
    from simulator.errors import InputError
    from validate.holdout import request_splits

    ms = _fake_set(sizes)
    keys = [(r, q) for r, q in zip(ms.requests["run_key"], ms.requests["request_id"])]
    spec = f"kfold={k},seed={seed}"
    if k > len(keys):
        with pytest.raises(InputError, match="folds but only"):
            request_splits(ms, spec)
        return
    folds = request_splits(ms, spec)
    assert len(folds) == k
    tests = [t for _, _, t in folds]
    assert sorted(x for t in tests for x in t) == sorted(keys)           # the test sets partition the requests
    for _, fit, test in folds:
        assert test and fit and not set(fit) & set(test)                 # disjoint, never in-sample
        assert sorted(fit + test) == sorted(keys)                        # fit = everything else
    sizes_of = [len(t) for t in tests]
    assert max(sizes_of) - min(sizes_of) <= 1                            # balanced folds
    for run in set(ms.requests["run_key"]):                              # stratified per run
        per = [sum(r == run for r, _ in t) for t in tests]
        assert max(per) - min(per) <= 1
    assert request_splits(ms, spec) == folds                             # same seed, same folds


def test_request_kfold_seed_changes_the_assignment_and_parity_rules():
    from simulator.errors import InputError
    from validate.holdout import request_splits

    ms = _fake_set([6, 6, 6])
    assert request_splits(ms, "kfold=3,seed=1") != request_splits(ms, "kfold=3,seed=2")
    (_, fit, test), = request_splits(ms, "odd")
    assert {q for _, q in test} == {f"r{i}/{j}" for i in range(3) for j in (1, 3, 5)}
    assert {q for _, q in fit} == {f"r{i}/{j}" for i in range(3) for j in (0, 2, 4)}
    (_, fit_e, test_e), = request_splits(ms, "even")
    assert fit_e == test and test_e == fit
    # one request per run (the SpecReason traces): parity leaves nothing to fit -> a clear error;
    # kfold is then K-fold over runs
    one = _fake_set([1] * 5)
    with pytest.raises(InputError, match="single request"):
        request_splits(one, "odd")
    with pytest.raises(InputError, match="single request"):
        request_splits(one, "even")
    assert sorted(len(t) for _, _, t in request_splits(one, "kfold=2")) == [2, 3]
    for bad in ("", "odd,seed=1", "kfold=1", "kfold=x", "kfold=3,seed=-1", "kfold=3,seed=1,seed=2", "folds=3", "kfold"):
        with pytest.raises(InputError, match="requests:"):
            request_splits(ms, bad)


def test_in_sample_fold_is_refused():
    from simulator.errors import InputError
    from validate.holdout import Fold, check_out_of_sample

    fold = Fold("f", ["a", "b"], ["a", "b"], None, unit="requests", fit_requests=[("a", "a/0"), ("b", "b/1")],
                test_requests=[("a", "a/1"), ("b", "b/1")])
    with pytest.raises(InputError, match="in-sample"):
        check_out_of_sample(fold)
    fold.test_requests = [("a", "a/1")]
    check_out_of_sample(fold)  # same runs, different requests: fine for a request fold
    with pytest.raises(InputError, match="in-sample"):
        check_out_of_sample(Fold("g", ["a", "b"], ["b"], None))
    with pytest.raises(InputError, match="predicts nothing"):
        check_out_of_sample(Fold("h", ["a"], [], None))


def test_requests_holdout_end_to_end(tmp_path):
    """requests:odd on synthetic runs: every fold refitted on its fit requests' calls, predicts exactly
    its test requests, and the report prints both key lists."""
    monkeypatch_chdir = pytest.MonkeyPatch.context()
    with monkeypatch_chdir as mp:
        mp.chdir(tmp_path)  # run keys are paths relative to the working directory: runA, runB
        _requests_holdout_end_to_end(tmp_path)


def _requests_holdout_end_to_end(tmp_path):
    from validate.report import write_report
    from validate.validation import run_validation

    rng = np.random.default_rng(5)
    for name in ("runA", "runB"):
        make_run_dir(tmp_path / name, rng, sigma=0.03, n_requests=4, steps=12)
    prof = _true_profile(tmp_path / "true.yaml", runs=[])
    res = run_validation([str(tmp_path / "runA"), str(tmp_path / "runB")], str(prof), "requests:odd",
                         distribution=False, n_boot=100)
    (fold,) = res.folds
    assert fold.unit == "requests" and fold.fit_runs == fold.test_runs == ["runA", "runB"]
    assert sorted(fold.test_requests) == [(r, f"{r}/{j}") for r in ("runA", "runB") for j in (1, 3)]
    assert sorted(res.replay["request_id"]) == sorted(q for _, q in fold.test_requests)
    assert set(fold.profile.fit["runs"]) == {"runA", "runB"} and fold.profile.fit["calls"] < len(
        load_measured([str(tmp_path / "runA"), str(tmp_path / "runB")]).calls)
    text = write_report(res, tmp_path / "rep", "test", None, "e2e").read_text()
    assert "runA[1, 3]; runB[1, 3]" in text and "runA[0, 2]; runB[0, 2]" in text
    assert res.figures["replay_e2e"].iloc[0]["median_ape"] < 0.1


def test_cli_bad_requests_spec_exits_2_one_line(tmp_path):
    d = make_run_dir(tmp_path / "runA", np.random.default_rng(6), n_requests=2, steps=5)
    prof = _true_profile(tmp_path / "p.yaml", runs=[])
    r = _run(["validate", "runs", str(d), "--profile", str(prof), "--out", str(tmp_path / "rep"), "--holdout",
              "requests:kfold=two"])
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1
    assert "requests:kfold=two" in r.stderr


# ---- prediction intervals ---------------------------------------------------------------------------
@settings(max_examples=examples(40), deadline=None)
@given(sd=st.floats(0.01, 1.0), n=st.integers(3, 30), mean=st.floats(-1, 1))
def test_t_predictive_widens_as_fit_runs_shrink(sd, n, mean):
    """Same sample mean and sd, fewer fit runs -> a wider interval for the next run's offset; many runs ->
    the normal interval mean ± 1.645 sd."""
    from validate.replay import t_predictive

    def width(k):
        z = np.linspace(-1, 1, k)
        o = mean + sd * (z - z.mean()) / z.std(ddof=1)
        p = t_predictive(o)
        assert p.loc == pytest.approx(mean) and p.dof == k - 1
        lo, hi = p.interval(0.9)
        return hi - lo

    assert width(n) > width(n + 1) > 2 * 1.6448 * sd
    assert width(2000) == pytest.approx(2 * 1.6449 * sd, rel=2e-3)


def test_offset_fallbacks_pool_then_resample():
    from validate.replay import offset_predictives

    pred, notes = offset_predictives({"a": [0.1, -0.1, 0.2, 0.0], "b": [0.3]})
    assert pred["a"].dof == 3 and pred["b"].dof == 3 and pred["b"].loc == pytest.approx(0.3)
    assert pred["b"].scale == pytest.approx(np.std([0.1, -0.1, 0.2, 0.0], ddof=1) * np.sqrt(2))
    assert len(notes) == 1 and notes[0].startswith("b: 1 fit run") and "pooled" in notes[0]
    pred, notes = offset_predictives({"a": [0.1, -0.1], "b": [0.3]})  # 1 pooled dof: not enough
    assert pred["a"].dof is None and pred["b"].dof is None and len(notes) == 2 and "not estimable" in notes[0]


def _coverage_of_new_runs(method: str, reps: int = 300, n_fit: int = 5, tau: float = 0.15, sigma: float = 0.1,
                          calls: int = 20, seed: int = 7) -> float:
    """Fit runs with known log offsets u_r ~ N(0, tau), within-run noise N(0, sigma); how often does
    the 90% interval of a request of a *new* run (20 calls, predicted 1 s each) hold its time?"""
    from scipy import stats as sst

    from validate.replay import CallNoise, OffsetPredictive, offset_predictives, request_totals

    rng = np.random.default_rng(seed)
    within = sst.norm.ppf(np.clip(np.linspace(0, 1, 101), 1e-3, 1 - 1e-3), scale=sigma)
    hit = 0
    for _ in range(reps):
        offsets = rng.normal(0, tau, n_fit)
        if method == "t":
            off = offset_predictives({"op": offsets})[0]["op"]
        else:  # the old rule: resample the fit runs' own offsets
            off = OffsetPredictive(n_fit, 0.0, 0.0, None, offsets, "observed")
        noise = {"op": CallNoise(off, within)}
        totals = request_totals(np.ones(calls), np.zeros(calls, dtype=int), np.full(calls, "op"), 1, noise, 400, rng)
        lo, hi = np.quantile(totals[0], [0.05, 0.95])
        measured = np.exp(rng.normal(0, tau) + rng.normal(0, sigma, calls)).sum()
        hit += lo <= measured <= hi
    return hit / reps


def test_interval_coverage_near_nominal_with_known_run_offsets():
    """The t-predictive covers ~90% of new runs; resampling 5 observed offsets covers far fewer
    (a test that fails for the old intervals)."""
    assert 0.85 <= _coverage_of_new_runs("t") <= 0.95
    assert _coverage_of_new_runs("observed") < 0.8


def test_distribution_interval_adds_cost_uncertainty(workload):
    """Every simulated second is assigned to one call; with no cost noise the widened latencies are the
    DES's own; with a known offset they scale by exp(offset); with real noise the interval widens."""
    from simulator.cost.cost_tables import CostTables
    from simulator.engines.des import simulate
    from validate.distribution import simulated_calls
    from validate.replay import CallNoise, OffsetPredictive, request_totals
    from tests.conftest import deployments, examples

    b, s = deployments()
    for cfg in (SystemConfig(system="specreason", threshold=7), SystemConfig(system="vanilla-base")):
        req, steps = simulate(cfg, CostTables(b, s, s, workload, cfg.gamma), 200, 3)
        rows, ops, secs = simulated_calls(cfg, req, steps)
        lat = req["latency_s"].to_numpy()
        assert np.allclose(np.bincount(rows, weights=secs, minlength=len(req)), lat)
        assert ("score" in ops) == (cfg.system == "specreason")

        def noise(loc, scale, dof, sigma):
            q = np.linspace(-1, 1, 101) * sigma
            return {op: CallNoise(OffsetPredictive(5, loc, scale, dof, np.zeros(5), "x"), q) for op in set(ops)}

        rng = np.random.default_rng(0)
        assert np.allclose(request_totals(secs, rows, ops, len(req), noise(0, 0, 4.0, 0), 1, rng)[:, 0], lat)
        assert np.allclose(request_totals(secs, rows, ops, len(req), noise(np.log(2), 0, 4.0, 0), 1, rng)[:, 0], 2 * lat)
        wide = request_totals(secs, rows, ops, len(req), noise(0, 0.2, 4.0, 0.1), 50, rng).ravel()  # 50 draws per request
        w = np.quantile(wide, 0.95) - np.quantile(wide, 0.05)
        assert w > np.quantile(lat, 0.95) - np.quantile(lat, 0.05)


def test_pi_rel_width_in_summary():
    s = summarize([100.0, 200.0, 50.0], [100.0, 200.0, 50.0], low=[90, 150, 45], high=[110, 250, 60])
    assert s["pi_rel_width"] == pytest.approx(0.3)  # median of 0.2, 0.5, 0.3
    assert np.isnan(summarize([1.0], [1.0])["pi_rel_width"])


def test_runs_are_replayed_with_their_own_models_on_the_profiles_hardware():
    """A profile's parameters belong to its hardware and TP; the models are the runs' (a profile fitted on one
    model pair, or on microbenchmarks, predicts runs of another model on that hardware)."""
    from simulator.cost.cost_profile import load_profile
    from validate.replay import setup_for_runs

    profile = load_profile(Path(__file__).resolve().parents[2] / "simulator" / "profiles" / "cost_cpu-vllm032.yaml")
    same, notes = setup_for_runs(profile, {"hardware": "cpu", "tp": 1, "base_model": "smollm2-135m"})
    assert same.describe() == {"hardware": "cpu", "tp": 1, "base_model": "smollm2-135m",
                               "small_model": "smollm2-135m-cut6", "draft_model": "smollm2-135m-cut6"} and notes == []
    other, notes = setup_for_runs(profile, {"hardware": "h100-sxm", "tp": 1, "base_model": "qwen2.5-7b",
                                            "small_model": "qwen2.5-7b-cut4", "draft_model": "qwen2.5-7b-cut4"})
    assert other.hardware.name == "cpu" and other.models["base"].name == "qwen2.5-7b"
    assert other.models["draft"].layers == 4
    assert any("recorded on h100-sxm" in n for n in notes) and any("base smollm2-135m -> qwen2.5-7b" in n for n in notes)


def test_profile_prior_and_datasheet_predict_every_run_on_its_own_hardware(tmp_path, capsys):
    """--profile prior|datasheet: the runs' hardware before any calibration (nothing fitted, every run held out)."""
    from specsim_cli.main import main

    runs = Path(__file__).resolve().parents[2] / "reports" / "cpu-campaign" / "runs"
    if not runs.is_dir():
        pytest.skip("committed CPU campaign runs absent")
    for kind in ("prior", "datasheet"):
        rc = main(["validate", "runs", str(runs / "vanilla-base"), str(runs / "specdecode-g4"), "--profile", kind,
                   "--out", str(tmp_path / kind), "--no-distribution", "--drift", "exclude"])
        assert rc == 0, capsys.readouterr().err
        text = (tmp_path / kind / "report.md").read_text()
        assert f"--profile {kind}:" in text
        assert "specdecode-g4[" in text and "vanilla-base[" in text  # both predicted
