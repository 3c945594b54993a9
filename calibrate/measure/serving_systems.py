"""Concurrent serving of the step-wise systems on the real engines: SpecReason under load.

``specsim measure serve-run`` measures one engine serving fixed-length generations. This module
serves whole *systems* -- ``vanilla-base``, ``vanilla-small``, ``specreason`` -- to many concurrent
requests, with the small and the base vLLM engines colocated in one process (they share the CPU
or GPU; their iterations never overlap), exactly the setting the serving simulator models
(``simulator.engines.serving.replica``).

How: every request runs the runner's own orchestrator (``calibrate.measure.orchestrator.run_request``:
the same step, scoring, acceptance, answer and budget rules as single-request runs) in a thread
of its own, against :class:`BrokeredEngine` s whose ``generate`` / ``score`` hand the call to a
:class:`Broker` and block. One driver loop (:func:`serve`) owns the engines and runs *rounds*:

1. wait until every request thread is parked (blocked on a call, or finished): the host work of
   all requests between two rounds (tokenisation, step bookkeeping, answer checks) happens here,
   and its wall time is recorded as ``host_s`` of the round;
2. admit the arrivals that are due (closed loop: a finished request's user sends the next at
   once; open loop: seeded Poisson instants) and add every submitted call to its engine;
3. step the small engine once if it has work, then the base engine once if it has work (the
   simulator's round: small, then base);
4. hand finished calls back to their threads.

Because calls are only added between rounds and threads only run while the engines are idle, a
run is deterministic up to the engines' own timing. Records (``calibrate.contracts.trace_schema``):
``serve_requests.jsonl`` (arrival / first token / done per request), ``serve_calls.jsonl`` (every
engine call: engine, op, prompt / cached / output tokens, submit / first token / done instants),
``serve_steps.jsonl`` and ``serve_small_steps.jsonl`` (every step of the base / small engine: wall
time, batch, new and cached tokens per scheduled request), and the orchestrator's ``steps.jsonl`` /
``requests.jsonl`` (the usual per-step records, times measured under load).

The broker and the driver only need the ``add_raw`` / ``step`` / ``has_unfinished`` protocol of
``calibrate.measure.vllm_stepping.VllmSteppingEngine``; a test double drives them in
tests/calibrate/test_serving_systems.py.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from calibrate.measure.broker import Broker, BrokeredEngine, CallSlot
from calibrate.measure.engine import Sampling
from calibrate.contracts.serving_records import step_record
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from calibrate.measure.serving_run import (Arrivals, ClosedLoop, PoissonLoop, check_levels, finish_manifest, level_complete,
                                           loadavg, partial_dir, publish_level)
from simulator.errors import InputError
from simulator.inputs.systems import REGISTRY, SYSTEMS, spec_of

SYSTEM_FILES = ("run.json", "serve_requests.jsonl", "serve_calls.jsonl", "serve_steps.jsonl", "serve_small_steps.jsonl",
                "steps.jsonl", "requests.jsonl")
ROUND_ORDER = ("small", "base")  # the serving simulator's round order (simulator/engines/serving/replica.py)


# ---- the driver ----------------------------------------------------------------------------------------
@dataclass
class _Req:
    request_id: int
    problem_id: str
    user: int
    arrival_s: float
    submitted_s: float


def _call_record(s: CallSlot, out_tokens: int, cached: int, speculative: bool = False) -> dict:
    spec = {"spec_drafts": [int(k) for k, _e in s.verify], "spec_emitted": [int(e) for _k, e in s.verify]} \
        if speculative else {}
    return {**spec, "schema_version": SCHEMA_VERSION, "kind": "serve_call", "request_id": s.request_id,
            "call_index": s.call_index, "engine": s.engine, "op": s.op, "prompt_tokens": len(s.prompt_ids),
            "cached_tokens": int(cached), "output_tokens": int(out_tokens),
            "max_tokens": int(getattr(s.params, "max_tokens", out_tokens) or out_tokens),
            "submitted_s": s.submitted_s, "first_token_s": s.first_token_s if s.first_token_s is not None else s.done_s,
            "done_s": s.done_s}


def _out_tokens(out) -> int:
    return len(out.outputs[0].token_ids)


@dataclass
class _Rounds:
    """The driver's state over one run: requests in flight, their calls, per-engine step bookkeeping, run facts."""

    engines: dict
    broker: Broker
    start_request: Callable[[int], Callable[[], object]]
    problems: list
    write: Callable[[str, dict], None]
    times: object  # open loop: the arrival instants; closed loop: None
    nxt: int = 0
    done: int = 0
    reqs: dict[int, _Req] = field(default_factory=dict)
    first_token: dict[int, float] = field(default_factory=dict)
    calls: dict[int, list[dict]] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)  # output tokens so far per call (speculative ``emitted``)

    def __post_init__(self) -> None:
        self.clock = self.broker.clock
        self.n = len(self.problems)
        engines = self.engines
        self.facts = {"rounds": 0, "host_s": 0.0, "steps": {r: 0 for r in engines}, "busy_s": {r: 0.0 for r in engines}}
        self.prompt_len: dict[str, dict[int, int]] = {r: {} for r in engines}
        self.step_index = {r: 0 for r in engines}

    def launch(self, i: int, user: int, arrival_s: float) -> None:
        self.reqs[i] = _Req(i, str(getattr(self.problems[i], "problem_id", i)), user, arrival_s, self.clock())
        self.broker.start(i, self.start_request(i))

    def wait_parked(self) -> None:
        """Until every request thread is parked; the host time this takes is counted."""
        th = self.clock()
        self.broker.wait_parked()
        self.facts["host_s"] += self.clock() - th

    def finish_requests(self) -> None:
        """A record per finished request (and the orchestrator's); a closed-loop user sends its next at once."""
        first_token, write = self.first_token, self.write
        for rid, done_s, result in self.broker.take_finished():
            r = self.reqs[rid]
            cs = self.calls.pop(rid, [])
            rec = {"schema_version": SCHEMA_VERSION, "kind": "serve_request", "request_id": rid,
                   "problem_id": r.problem_id, "user": r.user, "arrival_s": r.arrival_s, "submitted_s": r.submitted_s,
                   "first_token_s": first_token.get(rid, done_s), "done_s": done_s,
                   "prompt_tokens": cs[0]["prompt_tokens"] if cs else 0,
                   "cached_tokens": int(sum(c["cached_tokens"] for c in cs)),
                   "output_tokens": int(sum(c["output_tokens"] for c in cs)),
                   "max_tokens": int(sum(c["max_tokens"] for c in cs)),
                   "ttft_s": first_token.get(rid, done_s) - r.arrival_s, "latency_s": done_s - r.arrival_s}
            if isinstance(result, tuple) and len(result) == 2:  # the orchestrator's (steps, request record)
                for st in result[0]:
                    write("step", st)
                write("request", result[1])
            write("serve_request", rec)
            self.done += 1
            if self.times is None and self.nxt < self.n:
                self.launch(self.nxt, r.user, done_s)
                self.nxt += 1

    def admit_arrivals(self) -> None:
        times = self.times
        if times is not None:
            while self.nxt < self.n and times[self.nxt] <= self.clock() + 1e-9:  # tolerance: a sleep may end a rounding error early
                self.launch(self.nxt, -1, float(times[self.nxt]))
                self.nxt += 1

    def submit_calls(self) -> None:
        for s in self.broker.take_submitted():
            self.engines[s.engine].add_raw(s.req_id, s.prompt_ids, s.params)
            self.prompt_len[s.engine][s.request_id] = len(s.prompt_ids)

    def step_engines(self, active: list[str]) -> list[CallSlot]:
        """One step of every active engine (small, then base); the calls it finished."""
        ready: list[CallSlot] = []
        for role in active:
            ts = self.clock()
            rep = self.engines[role].step()
            te = self.clock()
            self.facts["steps"][role] += 1
            self.facts["busy_s"][role] += te - ts
            if rep.request_ids:
                self._record_step(role, ts, te, rep)
            for o in rep.raw:
                s = self.broker.in_flight.get(str(o.request_id))
                if s is None:
                    continue
                if s.first_token_s is None and _out_tokens(o) > 0:
                    s.first_token_s = te
                    self.first_token.setdefault(s.request_id, te)
                if o.finished:
                    s.done_s, s.output = te, o
                    ready.append(s)
        return ready

    def _record_step(self, role: str, ts: float, te: float, rep) -> None:
        rec = step_record(self.step_index[role], ts, te - ts, rep, self.prompt_len[role])
        self.step_index[role] += 1
        if rep.spec_tokens is not None:
            produced = self.produced
            now_out = {str(o.request_id): _out_tokens(o) for o in rep.raw}
            gained = [now_out.get(c, produced.get(c, 0)) - produced.get(c, 0) for c in rep.call_ids]
            rec["spec_tokens"], rec["emitted"] = [int(k) for k in rep.spec_tokens], [int(e) for e in gained]
            produced.update(now_out)
            for c, k, e, ctx in zip(rep.call_ids, rep.spec_tokens, gained, rep.context_tokens):
                s = self.broker.in_flight.get(c)
                if s is not None and e > 0 and ctx >= len(s.prompt_ids):  # a verification (not the prefill)
                    s.verify.append((int(k), int(e)))
        self.write("serve_step" if role == "base" else "serve_small_step", rec)

    def deliver(self, ready: list[CallSlot]) -> None:
        for s in ready:
            rec = _call_record(s, _out_tokens(s.output), int(s.output.num_cached_tokens or 0),
                               bool(getattr(self.engines[s.engine], "speculative", None)))
            self.calls.setdefault(s.request_id, []).append(rec)
            self.write("serve_call", rec)
            self.broker.deliver(s)


def serve(engines: dict, broker: Broker, start_request: Callable[[int], Callable[[], object]], problems: list,
          arrivals: Arrivals, *, sleep: Callable[[float], None] = time.sleep,
          write: Callable[[str, dict], None] = lambda kind, rec: None) -> dict:
    """Serve ``len(problems)`` requests; ``start_request(i)`` returns request i's thread body.

    ``engines``: role -> stepping engine (``small`` and/or ``base``). ``write(kind, record)`` gets
    every record (``serve_request``, ``serve_call``, ``serve_step`` / ``serve_small_step``, and the
    orchestrator's ``step`` / ``request`` records when the thread body returns them). Returns run
    facts: rounds, steps per engine, host seconds."""
    n = len(problems)
    times = arrivals.times(n) if isinstance(arrivals, PoissonLoop) else None
    run = _Rounds(engines, broker, start_request, problems, write, times)
    clock = run.clock
    if times is None:
        for u in range(min(arrivals.users, n)):
            run.launch(u, u, clock())
        run.nxt = min(arrivals.users, n)
    while run.done < n:
        run.wait_parked()
        run.finish_requests()
        run.admit_arrivals()
        run.wait_parked()  # newly launched requests run to their first call
        run.submit_calls()
        if run.done >= n:
            break
        active = [r for r in ROUND_ORDER if r in engines and engines[r].has_unfinished()]
        if not active:
            if broker.finished:
                continue
            if times is not None and run.nxt < n:
                sleep(max(float(times[run.nxt]) - clock(), 0.0))
                continue
            raise RuntimeError(f"engines idle with {n - run.done} request(s) not finished")
        ready = run.step_engines(active)
        run.facts["rounds"] += 1
        run.deliver(ready)
    return run.facts


# ---- the real campaign -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SystemServeConfig:
    base: str
    small: str
    systems: tuple[str, ...]
    arrivals: tuple[Arrivals, ...]
    requests: int = 12
    threshold: float = 7.0
    score_mode: str = "greedy"
    budget_tokens: int = 48
    step_max_tokens: int = 24
    seed: int = 0
    warmup: int = 4
    dtype: str = "float32"
    max_model_len: int = 2048
    dataset: str = "gsm_symbolic"
    gamma: int = 0  # draft tokens per iteration of the speculative systems (the small model drafts)

    def check(self) -> None:
        for s in self.systems:
            if s not in REGISTRY:
                raise InputError(None, "--system", f"{s!r} is not a system served here (one of: {', '.join(SYSTEMS)})")
        spec = [s for s in self.systems if spec_of(s).draft]  # their base engine speculates, the small model drafting
        if spec and not 1 <= self.gamma <= 16:
            raise InputError(None, "--gamma", f"{spec[0]} needs 1 <= gamma <= 16 (got {self.gamma})")
        if self.gamma and not spec:
            raise InputError(None, "--gamma", "only specdecode / specreason-decode speculate (got gamma without them)")
        if not self.systems:
            raise InputError(None, "--system", "give at least one system")
        if self.requests < 1:
            raise InputError(None, "--requests", f"must be >= 1 (got {self.requests})")
        check_levels(self.warmup, self.arrivals)
        for s in self.systems:
            self.system_config(s)  # threshold, budget, score mode: the orchestrator's checks

    def system_config(self, system: str):
        from calibrate.measure.orchestrator import RunConfig

        return RunConfig(system=system, threshold=self.threshold, budget_tokens=self.budget_tokens,
                            step_max_tokens=self.step_max_tokens, score_mode=self.score_mode,
                            sampling=Sampling(temperature=0.0))


def _manifest(cfg: SystemServeConfig, system: str, engines: dict, arr: Arrivals, warm: dict, command: str) -> dict:
    from calibrate.measure.hardware import detect_hardware

    sc = cfg.system_config(system)
    base = engines["base"]
    return {
        "schema_version": SCHEMA_VERSION, "kind": "serve",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "engine": "vllm", "engine_version": base.version(), "hardware": detect_hardware(),
        "models": {role: e.info for role, e in engines.items()}, "dtype": cfg.dtype, "tensor_parallel": 1,
        "system": system, "gamma": int(base.gamma), "threshold": float(sc.threshold), "first_n": sc.first_n,
        "budget_tokens": sc.budget_tokens, "score_mode": sc.score_mode,
        "sampling": {"temperature": 0.0, "top_p": 1.0, "step_max_tokens": sc.step_max_tokens, "stop": ["\n\n"]},
        "seed": cfg.seed, "dataset": cfg.dataset, "num_requests": cfg.requests, "command": command,
        "options": {"arrivals": arr.describe(), "label": arr.label, "driver": "calibrate.measure.serving_systems",
                    "colocated_engines": list(engines), "round_order": list(ROUND_ORDER),
                    "engine_limits": {r: e.limits for r, e in engines.items()},
                    "env": base.env, "warmup": warm, "loadavg_before": loadavg(),
                    **({"speculative_config": base.speculative} if base.speculative else {})},
    }


def _load_engines(cfg: SystemServeConfig, todo: list[tuple[str, Arrivals]]) -> dict:
    """The stepping engines the levels to do need: small, base, and a speculating base (it drafts with the small)."""
    from calibrate.measure.vllm_stepping import VllmSteppingEngine

    # prefix caching on: a request's chain is re-sent every step (the runner's setting)
    engines = {}
    if any(spec_of(s).small_writes_steps for s, _ in todo):
        engines["small"] = VllmSteppingEngine(cfg.small, dtype=cfg.dtype, max_model_len=cfg.max_model_len, seed=cfg.seed,
                                              prefix_caching=True)
    if any(not spec_of(s).draft for s, _ in todo):
        engines["base"] = VllmSteppingEngine(cfg.base, dtype=cfg.dtype, max_model_len=cfg.max_model_len, seed=cfg.seed,
                                             prefix_caching=True)
    if any(spec_of(s).draft for s, _ in todo):  # vLLM's speculation is per engine: a second base engine drafts
        engines["base_spec"] = VllmSteppingEngine(cfg.base, dtype=cfg.dtype, max_model_len=cfg.max_model_len,
                                                  seed=cfg.seed, prefix_caching=True, draft_dir=cfg.small, gamma=cfg.gamma)
    return engines


@dataclass
class _Campaigns:
    """Runs one system's requests at one arrival level on the loaded engines."""

    cfg: SystemServeConfig
    engines: dict

    def roles(self, system: str) -> dict:
        """role -> stepping engine that serves it for ``system`` (the speculative base for specdecode systems)."""
        sc = self.cfg.system_config(system)
        out = {}
        if sc.uses_small:
            out["small"] = self.engines["small"]
        if sc.uses_base:
            out["base"] = self.engines["base_spec" if spec_of(system).draft else "base"]
        return out

    def run(self, system: str, probs: list, arr: Arrivals, write) -> dict:
        from calibrate.measure.orchestrator import run_request

        cfg = self.cfg
        paths = {"small": cfg.small, "base": cfg.base}
        broker = Broker()
        used = self.roles(system)
        eng = {r: BrokeredEngine(r, e, broker, paths[r]) for r, e in used.items()}
        sc = cfg.system_config(system)
        base, small = eng.get("base"), eng.get("small")

        def start(i: int):
            return lambda: run_request(sc, probs[i], i, base, small, cfg.seed + i)

        t0 = time.perf_counter()
        facts = serve(used, broker, start, probs, arr, write=write)
        facts["wall_s"] = round(time.perf_counter() - t0, 3)
        return facts

    def warm_up(self, todo: list[tuple[str, Arrivals]], spare: list, log) -> dict:
        """One-off kernel warm-up (new GEMM shapes on CPU): other problems, discarded, at the largest level."""
        cfg = self.cfg
        if not cfg.warmup:
            return {"requests": 0, "seconds": 0.0}
        users = max([a.users for a in cfg.arrivals if isinstance(a, ClosedLoop)] or [4])
        t = time.perf_counter()
        for s in dict.fromkeys(s for s, _ in todo):
            self.run(s, spare[: max(cfg.warmup, users)], ClosedLoop(users), lambda k, r: None)
        warm = {"requests_per_system": max(cfg.warmup, users), "users": users,
                "seconds": round(time.perf_counter() - t, 2)}
        log(f"warm-up: {warm['requests_per_system']} requests per system in {warm['seconds']:.1f} s")
        return warm

    def level(self, system: str, arr: Arrivals, problems: list, d: Path, warm: dict, command: str, log) -> None:
        """One (system, level) measured with the records kept in memory, then written beside and renamed."""
        from calibrate.measure.run_directory import RunDirectory

        cfg = self.cfg
        used = self.roles(system)
        for e in self.engines.values():  # every level starts with a cold prefix cache (no hits on earlier levels' prompts)
            e.llm.reset_prefix_cache()
        manifest = _manifest(cfg, system, used, arr, warm, command)
        records: list[tuple[str, dict]] = []  # kept in memory while timing: no fsync inside the measured loop
        facts = self.run(system, problems, arr, lambda kind, rec: records.append((kind, rec)))
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = partial_dir(d)  # written beside, renamed when complete: a kill leaves no half-written level
        rd = RunDirectory.open(tmp, manifest)
        try:
            for kind, rec in records:
                rd.write(kind, rec)
        finally:
            rd.close()
        finish_manifest(tmp, loadavg(), facts["wall_s"])
        publish_level(tmp, d)
        log(f"{system} {arr.label}: {cfg.requests} requests in {facts['wall_s']:.1f} s, {facts['rounds']} rounds, "
            f"host {facts['host_s']:.1f} s, loadavg {loadavg()[:1]}")


def run_system_serving(cfg: SystemServeConfig, out: str | Path, *, command: str = "", log=print) -> list[Path]:
    """Every (system, arrival level) into ``out/SYSTEM/LABEL``; engines loaded and warmed up once."""
    from calibrate.measure.datasets import load_problems

    cfg.check()
    out = Path(out)
    todo = [(s, a) for s in cfg.systems for a in cfg.arrivals if not level_complete(out / s / a.label, cfg.requests)]
    dirs = [out / s / a.label for s in cfg.systems for a in cfg.arrivals]
    if not todo:
        return dirs
    engines = _load_engines(cfg, todo)
    campaigns = _Campaigns(cfg, engines)
    try:
        pool = load_problems(cfg.dataset, cfg.requests + max(cfg.warmup, 1) * 4, cfg.seed)
        problems, spare = pool[: cfg.requests], pool[cfg.requests:]
        warm = campaigns.warm_up(todo, spare, log)
        for system, arr in todo:
            campaigns.level(system, arr, problems, out / system / arr.label, warm, command, log)
    finally:
        for e in engines.values():
            e.close()
    return dirs
