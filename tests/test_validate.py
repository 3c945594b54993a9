"""validate: metrics on hand-computed cases, replay with the true profile, hold-out rules, the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.fit_cost import (CallPredictor, Setup, build_profile, calls_from_run_dir, fit_cost, load_measured,
                                profile_to_yaml, write_atomic)
from calibrate.trace_schema import SCHEMA_VERSION
from simulator.cost_model import CostParams
from validate.metrics import ape, coverage, summarize

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "specreason-aime-traces"
SPECSIM = [sys.executable, "-m", "simulator.cli"]
TRUE = {"mem_efficiency": 0.7, "compute_efficiency": 0.45, "step_overhead_s": 3e-3, "layer_overhead_s": 15e-6,
        "call_overhead_s": 0.05, "allreduce_latency_s": 8e-6, "seq_overhead_s": 2e-5}


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
    recs, reqs = [], []
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
    # times from the model, keyed by (request, step, op)
    calls, _ = calls_from_run_dir(path)
    t = CallPredictor(calls, _setup()).predict(CostParams(**TRUE)) * np.exp(rng.normal(0, sigma, len(calls)))
    key = {(int(r.split("/")[-1]), s, op): v for r, s, op, v in zip(calls.request_id, calls.step_index, calls.op, t)}
    for s in recs:
        k = (s["request_id"], s["step_index"])
        s["small_time_s"] = float(key[(*k, "small_generate")])
        s["score_time_s"] = float(key[(*k, "score")])
        s["base_time_s"] = float(key.get((*k, "base_generate"), 0.0))
    _write_steps(path, recs)
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
    return path


def _write_steps(path: Path, recs: list[dict]) -> None:
    (path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _true_profile(path: Path, runs: list[str]) -> Path:
    """A profile at TRUE, with residual quantiles from a noiseless fit (for the interval sampler)."""
    from simulator.cost_model import Param

    setup = _setup()
    ms = load_measured([str(p) for p in path.parent.glob("run*")])
    f = fit_cost(ms.calls, setup, candidates=())
    prof = build_profile(f, setup, name="true", engine="fake", inputs=["synthetic"], runs=runs, hardware_note="test")
    prof = prof.model_copy(update={n: Param(value=v, kind="calibrated", source="truth") for n, v in TRUE.items()})
    return write_atomic(path, profile_to_yaml(prof, "test"))


def test_run_dir_loader_and_hints(tmp_path):
    make_run_dir(tmp_path / "runA", np.random.default_rng(0))
    ms = load_measured([str(tmp_path / "runA")])
    assert ms.kind == "run_dir" and ms.run_keys == ["runA"]
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
    assert res.folds[0].test_runs == ["runB"]


def _run(args, **kw):
    return subprocess.run([*SPECSIM, *args], capture_output=True, text=True, cwd=ROOT, **kw)


def test_cli_fit_validate_exit_codes(tmp_path):
    rng = np.random.default_rng(3)
    for name in ("runA", "runB", "runC"):
        make_run_dir(tmp_path / name, rng, sigma=0.05)
    prof = tmp_path / "cost.yaml"
    r = _run(["calibrate", "fit", str(tmp_path / "runA"), str(tmp_path / "runB"), "--out", str(prof)])
    assert r.returncode == 0, r.stderr
    assert "calibrated" in prof.read_text()
    common = ["validate", str(tmp_path / "runA"), str(tmp_path / "runB"), str(tmp_path / "runC"), "--profile", str(prof),
              "--no-distribution"]
    ok = _run([*common, "--report", str(tmp_path / "rep"), "--max-median-ape", "0.5"])
    assert ok.returncode == 0, ok.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| held-out | runA, runB | runC |" in text
    assert (tmp_path / "rep" / "predicted_vs_measured.png").stat().st_size > 1000
    bad = _run([*common, "--report", str(tmp_path / "rep2"), "--max-median-ape", "1e-9"])
    assert bad.returncode == 1 and "FAIL" in bad.stderr
    insample = _run([*common, "--report", str(tmp_path / "rep3"), "--holdout", "runs:runA"])
    assert insample.returncode == 2 and "in-sample" in insample.stderr and "Traceback" not in insample.stderr


def test_cli_malformed_input_exits_2_one_line(tmp_path):
    d = make_run_dir(tmp_path / "runA", np.random.default_rng(4))
    with (d / "steps.jsonl").open("a") as fh:
        fh.write("{not json\n")
    prof = tmp_path / "p.yaml"
    prof.write_text("name: x\n")
    r = _run(["validate", str(d), "--profile", str(prof), "--report", str(tmp_path / "rep")])
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _run(["calibrate", "fit", str(d), "--out", str(tmp_path / "o.yaml")])
    assert r.returncode == 2 and "steps.jsonl" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_real_traces_held_out_replay(tmp_path):
    from calibrate.fit_cost import fit_measured
    from validate.validation import run_validation

    ms = load_measured([str(DATA)]).select_runs({"0", "1", "2", "3"})
    prof = fit_measured(ms, _setup(), engine="vllm-0.8.2", hardware_note="test", command="pytest")
    path = write_atomic(tmp_path / "cost.yaml", profile_to_yaml(prof, "pytest"))
    res = run_validation([str(DATA)], str(path), distribution=False, n_boot=200)
    fig = res.figures["replay_e2e"].iloc[0]
    assert res.folds[0].test_runs == ["4", "5", "6", "7"] and fig["n"] == 4
    assert 0.0 < fig["median_ape"] < 0.5
