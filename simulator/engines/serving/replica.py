"""A serving replica: colocated small and base engines sharing one set of GPUs (SimPy).

What it models: requests of one system configuration arrive (open loop at a rate, bursty, replayed from a file, or
closed loop with N users); each request executes its :class:`~simulator.engines.request_model.RequestPlan` call by
call. The two engines share the GPUs: their iterations never overlap. The GPU process runs *rounds*: one iteration of
every engine that has work, in a fixed order (small, then base) -- i.e. the engines alternate, and an engine alone
gets back-to-back iterations. Several identical rounds (no prefill, no call finishing, no event due) are advanced in
one SimPy timeout.

Every engine call first pays the engine's per-call overhead ``t_call`` outside the GPU
(API, tokenisation, scheduling on the host), then queues at its engine.

Scenario: one replica of ``hardware.count`` GPUs; each engine's KV cache from its vLLM version's memory plan at its
share of ``gpu_memory_utilization`` (``serving/kv_cache.py``: a lone engine gets the whole of it).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from simulator.catalog.engine_hosts import ServingEngine
from simulator.cost.cost_model import Deployment
from simulator.cost.execution import Execution
from simulator.engines.gamma_choice import gamma_policy
from simulator.engines.serving.arrivals import ArrivalProcess
from simulator.engines.serving.clients import start_clients
from simulator.engines.serving.engine import Engine
from simulator.engines.serving.kv_cache import (engine_utilizations, kv_layout, plan_version, speculative_slots,
                                                verified_drafts)
from simulator.engines.request_model import RequestPlan, RequestSampler
from simulator.inputs.systems import SystemConfig
from simulator.inputs.workload import WorkloadProfile

MAX_ROUNDS_PER_EVENT = 512
REQUEST_COLUMNS = ["request", "arrival_at", "first_admit_at", "first_token_at", "done_at", "queue_delay_s",
                   "ttft_s", "latency_s", "calls", "output_tokens", "thinking_tokens", "steps", "small_steps",
                   "stop_reason"]
ENGINE_COLUMNS = ["engine", "at", "duration_s", "rounds", "batch", "kv_used_tokens", "kv_capacity_tokens", "waiting"]


@dataclass
class ServingResult:
    """Per-request rows (``REQUEST_COLUMNS``), per-engine timeline (``ENGINE_COLUMNS``), facts."""
    requests: pd.DataFrame
    timeline: pd.DataFrame
    info: dict = field(default_factory=dict)


@dataclass(slots=True)
class _Req:
    plan: RequestPlan
    arrival_at: float
    next_call: int = 0
    first_admit_at: float = np.nan
    first_token_at: float = np.nan
    done_at: float = np.nan


class Replica:
    """Colocated small + base engines of one replica and their shared-GPU scheduler."""

    def __init__(self, env: simpy.Environment, cfg: SystemConfig, deps: dict[str, Deployment],
                 workload: WorkloadProfile, memory_fraction: tuple[float, float], execution: Execution | None = None,
                 engine: ServingEngine | None = None):
        self.env, self.cfg, self.serving_engine = env, cfg, engine
        ex = execution or Execution()
        small_dep = deps["small"] or deps["base"]  # no small model: an idle small engine (zero KV capacity)
        # vLLM's scheduler limits (max_num_seqs, max_num_batched_tokens: chunked prefill's tokens per engine step),
        # its defaults on the device where the scenario leaves them unset
        small_ex = ex.for_device(small_dep.hardware, engine, world_size=small_dep.tp * small_dep.pp)
        base_ex = ex.for_device(deps["base"].hardware, engine, world_size=deps["base"].tp * deps["base"].pp)
        block, caching = ex.prefix_cache_block, ex.prefix_caching
        spec = cfg.drafts
        base_models = [deps["base"], deps["draft"]] if spec else [deps["base"]]
        max_out = workload.token_budget + workload.max_step_tokens + workload.answer_tokens + 2
        u_small, u_base = engine_utilizations(cfg.spec, *memory_fraction)
        small_cap, small_res = kv_layout(u_small, [deps["small"]], small_ex, engine) if u_small > 0 else (0, 0)
        base_cap, base_res = kv_layout(u_base, base_models, base_ex, engine,
                                       spec_tokens=verified_drafts(deps["draft"].drafting, cfg.gamma) if spec else 0)
        dp = deps["base"].dp  # data-parallel attention: dp ranks, each with vLLM's max_num_seqs and token budget
        budget = base_ex.max_num_batched_tokens
        self.engines = [
            Engine("small", small_dep, small_cap, small_ex.max_num_seqs, prefix_cache_block=block,
                   token_budget=small_ex.max_num_batched_tokens, seq_reserve_tokens=small_res, prefix_caching=caching),
            Engine("base", deps["base"], base_cap, base_ex.max_num_seqs * dp,
                   draft=deps["draft"] if spec else None, gamma=cfg.gamma, max_spec_iters=max_out,
                   prefix_cache_block=block, gamma_policy=gamma_policy(cfg, deps, workload),
                   token_budget=budget and budget * dp, prefix_caching=caching,
                   seq_reserve_tokens=base_res + (speculative_slots(deps["draft"].drafting, cfg.gamma) if spec else 0)),
        ]
        self.t_call = deps["base"].cost.call_overhead_s
        fe = deps["base"].cost.front_end_serial_s  # the front-end process's own share of t_call (None: all of it)
        self.t_fe = self.t_call if fe is None else min(fe, self.t_call)
        self.serial_front_end = ex.serial_front_end(cfg.spec.one_call)
        self.t_tok = deps["base"].cost.front_end_token_s if self.serial_front_end else 0.0
        self.fe_first = deps["base"].cost.front_end_first_share if self.serial_front_end else 0.0
        if not 0.0 <= self.fe_first <= 1.0:
            raise ValueError(f"front_end_first_share is a share in [0, 1] (got {self.fe_first})")
        self._fe_jobs: list[tuple[float, int, int, int]] = []  # two stages: (joined the loop at, order, stage, rid)
        self._front_end_queue: deque[tuple[float, int]] = deque()
        self._front_end_free = 0.0
        self._front_end_wake = -1.0  # pending wake-up for the next turn (-1: none)
        self.reqs: dict[int, _Req] = {}
        self.ready: list[tuple[float, int, int]] = []  # (ready_at, seq, rid): next call becomes queueable
        self._seq = 0
        self.done_events: dict[int, simpy.Event] = {}
        self.completed = 0
        self.timeline: list[tuple] = []
        # inter-token latencies (vLLM bench's ITL: one gap per output chunk of a generating sequence): per round,
        # (start, duration of the whole round on the shared GPU, decoding sequences that emitted in it)
        self.itl_rounds: list[tuple[float, float, int]] = []
        self.itl_stretches: list[tuple[float, np.ndarray, int]] = []  # k-round stretches: (start, round ends, sequences)
        self.wake = env.event()
        self.all_done = env.event()
        self.n_target = 0
        self.stop = None  # an early_stop.SloStop: end the run once its SLO is certainly missed
        self.stopped_at: float | None = None
        self._round_est = 0.0  # the last k-round stretch's first round time (s): sizes the next evaluation

    # ---- requests -------------------------------------------------------------------------
    def submit(self, rid: int, plan: RequestPlan) -> None:
        self.reqs[rid] = _Req(plan, self.env.now)
        if self.stop is not None:
            self.stop.arrived(rid, self.env.now)
        self._schedule_call(rid, self.env.now)

    def _schedule_call(self, rid: int, at: float) -> None:
        if self.serial_front_end:  # one front-end process spends t_fe of each call's t_call in turn (Execution.front_end)
            if self.fe_first > 0:
                heapq.heappush(self._fe_jobs, (at, self._seq, 0, rid))
                self._seq += 1
            else:
                self._front_end_queue.append((at, rid))
            self._front_end_turns()
            return
        self._ready_at(at + self.t_call, rid)

    def _ready_at(self, t: float, rid: int) -> None:
        heapq.heappush(self.ready, (t, self._seq, rid))
        self._seq += 1
        if not self.wake.triggered:
            self.wake.succeed()

    def _front_end_turns(self, take_one: bool = False) -> None:
        """Start queued calls' turns on the serial front end in order (a turn: once arrived and the front end is
        free; the call reaches the engine t_call after). With t_tok > 0 (:meth:`_streamed`) a turn starts only when
        due, the next one's start a wake-up in the ready heap (rid -1); ``take_one``: also one arrived call waiting
        behind streaming (asyncio serves the output handler and waiting requests in turn: no starvation)."""
        if self.fe_first > 0:
            return self._two_stage_turns(take_one)
        horizon = self.env.now + 1e-12 if self.t_tok > 0 else math.inf
        q = self._front_end_queue
        while q:
            at, rid = q[0]
            start = max(at, self._front_end_free)
            if start > horizon and not (take_one and at <= horizon):
                if self._front_end_wake < 0:
                    self._front_end_wake = start
                    self._ready_at(start, -1)
                return
            take_one = take_one and start <= horizon
            q.popleft()
            self._front_end_free = start + self.t_fe
            self._ready_at(start + self.t_call, rid)

    def _two_stage_turns(self, take_one: bool = False) -> None:
        """The serial front end in two stages (``front_end_first_share`` s > 0): one first-in first-out loop runs its
        jobs one at a time in the order they joined it; a call's first stage (s t_fe) joins as the call arrives, its
        second ((1 - s) t_fe) as the first ends, behind every job that joined before; the call reaches the engine
        t_call - t_fe after its second stage. A job starts only once due (the next start: a wake-up in the ready heap,
        rid -1); ``take_one``: also a call's worth (t_fe) of joined jobs waiting behind streaming (:meth:`_streamed`)."""
        now = self.env.now + 1e-12
        jobs, first = self._fe_jobs, self.fe_first * self.t_fe
        budget = self.t_fe if take_one else 0.0  # the waiting jobs' share of this round
        while jobs:
            at, _, stage, rid = jobs[0]
            start = max(at, self._front_end_free)
            if start > now and not (budget > 1e-15 and at <= now):
                if self._front_end_wake < 0 or start < self._front_end_wake:
                    self._front_end_wake = start
                    self._ready_at(start, -1)
                return
            budget -= (first if stage == 0 else self.t_fe - first) * (start > now)
            heapq.heappop(jobs)
            if stage == 0:
                self._front_end_free = start + first
                heapq.heappush(jobs, (self._front_end_free, self._seq, 1, rid))
                self._seq += 1
            else:
                self._front_end_free = start + self.t_fe - first
                self._ready_at(self._front_end_free + self.t_call - self.t_fe, rid)

    def _streamed(self, tokens: int, ends) -> float:
        """The serial front end streams ``tokens`` output tokens at the end of each engine round (``ends``: their
        times), after the work it has started (turns begun, earlier tokens, one waiting call's turn), before the
        other waiting calls; returns when the last round's tokens reach their clients: f = max(end, f) + tokens t_tok
        round by round."""
        if tokens <= 0:
            return float(ends[-1])
        self._front_end_turns(take_one=True)  # turns due by now first, and one waiting call's turn
        k, w = len(ends), tokens * self.t_tok
        self._front_end_free = max(self._front_end_free + k * w, float(np.max(ends + w * np.arange(k, 0, -1))))
        return self._front_end_free

    def _release_ready(self) -> None:
        now = self.env.now
        while self.ready and self.ready[0][0] <= now + 1e-12:
            _, _, rid = heapq.heappop(self.ready)
            if rid < 0:  # the front end's next turn may start
                self._front_end_wake = -1.0
                self._front_end_turns()
                continue
            r = self.reqs[rid]
            call = r.plan.calls[r.next_call]
            self.engines[call.engine].submit(rid, call)

    def _call_done(self, rid: int, at: float) -> None:
        r = self.reqs[rid]
        r.next_call += 1
        if r.next_call < len(r.plan.calls):
            self._schedule_call(rid, at)
            return
        r.done_at = at
        for e in self.engines:
            e.drop_cache(rid)
        self.completed += 1
        if self.completed == self.n_target and not self.all_done.triggered:
            self.all_done.succeed()
        elif self.stop is not None and self.stopped_at is None:
            self.stop.finished(rid, at - r.arrival_at)
            if self.stop.missed(at, self.reqs):
                self.stopped_at = at
                if not self.all_done.triggered:
                    self.all_done.succeed()
        ev = self.done_events.pop(rid, None)
        if ev is not None:
            ev.succeed()

    # ---- the shared GPU -------------------------------------------------------------------
    def gpu(self):
        """The GPU process: rounds of every engine with work, one SimPy timeout per round or per k-round stretch."""
        env = self.env
        while True:
            if self.ready and self.ready[0][0] <= env.now + 1e-12:
                self._release_ready()
            self._admit()
            active = [e for e in self.engines if e.act]
            if not active:
                self.wake = env.event()
                if self.ready:
                    yield env.timeout(max(self.ready[0][0] - env.now, 0.0)) | self.wake
                else:
                    yield self.wake
                continue
            one_by_one = self.t_tok > 0 and self._front_end_queue  # calls take turns between rounds' streaming
            k = 1 if one_by_one or any(e.n_prefill for e in active) else min(MAX_ROUNDS_PER_EVENT, *(e.rounds_left() for e in active))
            if k == 1:
                yield from self._round(active)
            else:
                yield from self._stretch(active, k)

    def _admit(self) -> None:
        """Each engine admits what it can of its waiting calls; a request's first admission is noted."""
        isnan = math.isnan
        for e in self.engines:
            if e.waiting:
                e.admit()
                if e.admitted_rids:
                    for rid in e.admitted_rids:
                        r = self.reqs[rid]
                        if isnan(r.first_admit_at):
                            r.first_admit_at = self.env.now
                    e.admitted_rids.clear()

    def _round(self, active: list[Engine]):
        """One round (scalar path): the common case of SpecReason's many short calls (nothing: preempted, re-plan)."""
        env, timeline = self.env, self.timeline
        one = self._one_round(active)
        if one is None:
            return  # preempted: re-plan
        t0 = env.now
        duration = one[0] if len(one) == 1 else one[0] + one[1]
        n_dec = sum([len(e.act) - e.n_prefill for e in active])
        if n_dec:
            self.itl_rounds.append((t0, duration, n_dec))
        for e, t in zip(active, one):
            e.busy_s += t
            timeline.append((e.name, t0, t, 1, len(e.act), e.pinned + e.cache_tokens, e.capacity,
                             len(e.waiting)))
        yield env.timeout(duration)
        offset = 0.0
        for e, t in zip(active, one):
            offset += t
            at = t0 + offset  # end of this engine's iteration
            self._advanced(e, 1, at)

    def _stretch(self, active: list[Engine], k: int):
        """Up to ``k`` identical rounds in one timeout (nothing: preempted, re-plan)."""
        env = self.env
        plan = self._plan_rounds(active, k)
        if plan is None:
            return  # preempted: re-plan
        k, rows, cs = plan
        # cs = cumulative round times (sequential, numpy cumsum): the k rounds end at cs[k-1]
        duration = float(cs[k - 1])
        start = float(cs[k - 2]) if k > 1 else 0.0
        t0 = env.now
        self.itl_stretches.append((t0, cs[:k], sum([len(e.act) for e in active])))
        for e, row in zip(active, rows):
            busy = float(row[:k].sum())
            e.busy_s += busy
            self.timeline.append((e.name, t0, busy, k, len(e.act), e.pinned + e.cache_tokens, e.capacity, len(e.waiting)))
        yield env.timeout(duration)
        offset = 0.0
        for e, row in zip(active, rows):
            offset += float(row[k - 1])
            at = t0 + start + offset  # end of this engine's last iteration
            self._advanced(e, k, at, cs[:k] - cs[k - 1] + at)

    def _advanced(self, e: Engine, k: int, at: float, ends=None) -> None:
        """``e`` ran ``k`` rounds, the last ending at ``at`` (``ends``: each round's end, k > 1)."""
        decoding = len(e.act) - e.n_prefill
        first, done = e.advance(k)
        # the clients have the tokens once the front end has streamed them (a k-round stretch has no prefill)
        if self.t_tok > 0:
            at = self._streamed(decoding + len(first), np.array([at]) if ends is None else ends)
        for s in first:
            r = self.reqs[e.jobs[s].rid]
            if math.isnan(r.first_token_at):
                r.first_token_at = at
        for s in done:
            self._call_done(e.finish(s).rid, at)

    def _one_round(self, active: list[Engine]) -> list[float] | None:
        """Times of one round of every active engine; None if a preemption was needed."""
        one = []
        for e in active:
            t, g0 = e.round_time()
            if e.capacity - e.kv_used < g0 and not e.evict_until(g0) and e.n_active > 1:
                e.preempt_youngest()
                return None
            one.append(t)
        return one

    def _plan_rounds(self, active: list[Engine], k: int):
        """How many of the next k > 1 decode-only rounds to advance at once: until a call ends,
        the KV fills or an event is due. Returns (k, per-engine round times, cumulative round
        times) or None after a preemption.

        The KV checks (and a preemption) come before any time is evaluated; times are evaluated for
        as many rounds as the next event can allow (an estimate from the last stretch's round time,
        with a margin), and again for all k when the estimate fell short: the same k and times as
        evaluating all k rounds at once (each round's time depends only on the state and its own
        context, and cumulative sums of a prefix are the prefix of the cumulative sums)."""
        t_next = min(self.env.peek(), self.ready[0][0] if self.ready else math.inf) - self.env.now
        if t_next <= 0:
            k_try = 1
        else:
            est = self._round_est
            k_try = k if est <= 0 or t_next >= est * k else min(k, 2 * math.ceil(t_next / est) + 4)
        while True:
            plan = self._plan_k(active, k_try, t_next)
            if plan is None or plan[0] < k_try or k_try >= k:
                break
            k_try = k  # the estimate fell short: evaluate every round
        if plan is not None:
            self._round_est = float(plan[2][0])
        return plan

    def _plan_k(self, active: list[Engine], k: int, t_next: float):
        growth = []
        for e in active:
            g0 = e.first_growth()  # the first round's growth: room for it, or a preemption, before any array work
            if not e.evict_until(g0) and len(e.act) > 1:
                e.preempt_youngest()
                return None
            Gs = e.stretch_growth(k)
            # evictable cached prefixes make room round by round (vLLM evicts blocks as it needs them); nothing else
            # allocates within a stretch, so what its rounds need is evicted once, below, in the same LRU order
            free = e.capacity - e.pinned - e.cache_tokens + e.pcache.lru_tokens
            if Gs is not None:
                k_kv = int(Gs[1:].searchsorted(free, side="right"))  # Gs[1:]: tokens after each round
            else:  # constant growth: B tokens per round
                k_kv = min(k, free // g0) if free >= 0 else 0
            k = min(k, max(k_kv, 1))
            growth.append(Gs)
        rows = [e.stretch_times(k, Gs) for e, Gs in zip(active, growth)]
        round_s = rows[0] if len(rows) == 1 else rows[0] + rows[1]
        cs = round_s.cumsum()
        # next external event (arrival, call becoming ready): stop at the round that starts after it
        if t_next <= 0:
            k = 1
        else:
            k = min(k, 1 + int(cs[: k - 1].searchsorted(t_next, side="left")))
        for e, Gs in zip(active, growth):  # room for the k rounds' growth
            if e.pcache.lru_tokens:
                e.evict_until(int(Gs[k]) if Gs is not None else k * len(e.act))
        return k, rows, cs


def simulate_serving(cfg: SystemConfig, deps: dict[str, Deployment], workload: WorkloadProfile,
                     arrivals: ArrivalProcess, n_requests: int, seed: int,
                     memory_fraction: tuple[float, float] = (0.1, 0.8),
                     plans: list[RequestPlan] | None = None, execution: Execution | None = None,
                     stop=None, sessions: list[list[int]] | None = None, think_s=None,
                     engine: ServingEngine | None = None) -> ServingResult:
    """Serve ``n_requests`` requests of ``cfg`` on one replica; per-request and per-engine results.

    Streams: requests (plans) and arrivals come from two independent children of ``seed``,
    so the same seed gives the same requests at every load (common random numbers).
    ``plans`` (trace replay: each measured request's own calls) replaces the sampled plans;
    request i then gets ``plans[i]`` and ``n_requests`` is ``len(plans)``.
    ``execution`` (default: token-exact caching, one-call vanilla systems): block prefix caching in both engines and,
    with ``step_calls``, vanilla systems and specdecode planned step by step.
    ``stop`` (an :class:`simulator.engines.serving.early_stop.SloStop`, open loop only): end the run as soon as its SLO is
    certainly missed; the result then holds the requests that arrived by then and ``info["stopped_at"]``.
    ``sessions`` (with ``plans``): the request ids of each session's turns; arrival i starts session i (closed loop:
    each user runs one session after another), a turn is sent ``think_s[rid]`` seconds after the previous answer.
    ``engine`` (a ``ServingEngine``; None: the newest fitted vLLM): its version sizes the KV caches and fills the
    scheduler limits ``execution`` leaves unset."""
    execution = execution or Execution()
    arr_ss = np.random.SeedSequence(seed).spawn(2)[1]  # child 0: the requests (simulator.engines.request_model.request_seed)
    arr_rng = np.random.default_rng(arr_ss)
    if plans is None:
        plans = RequestSampler(cfg, workload, step_calls=execution.step_calls).plans(n_requests, seed)
    else:
        plans, n_requests = list(plans), len(plans)
    env = simpy.Environment()
    rep = Replica(env, cfg, deps, workload, memory_fraction, execution, engine)

    n_requests = start_clients(env, rep, arrivals, plans, n_requests, arr_rng, stop, sessions, think_s)
    rep.n_target = n_requests
    env.process(rep.gpu())
    env.run(until=rep.all_done)
    return _result(rep, arrivals, n_requests)


def _itl_samples(rep: Replica) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(round start, round duration, weight = sequences that emitted a chunk in it), every decoding round: the
    one-round samples, then each k-round stretch's rounds (durations: successive differences of the stretch's
    cumulative round ends; starts: the stretch's start plus the running sum of its durations)."""
    one = np.array(rep.itl_rounds, dtype=float).reshape(-1, 3)
    S = rep.itl_stretches
    if not S:
        return one[:, 0], one[:, 1], one[:, 2]
    lens = np.array([len(cs) for _, cs, _ in S])
    ends = lens.cumsum()
    firsts = ends - lens
    cs = np.concatenate([c for _, c, _ in S])
    prev = np.empty_like(cs)
    prev[1:] = cs[:-1]
    prev[firsts] = 0.0
    d = cs - prev  # per stretch: np.diff(cs, prepend=0.0)
    off = np.zeros_like(cs)
    for a, b in zip(firsts.tolist(), ends.tolist()):
        if b - a > 1:
            off[a + 1 : b] = d[a : b - 1].cumsum()
    start = np.repeat([t0 for t0, _, _ in S], lens) + off
    weight = np.repeat([float(n) for _, _, n in S], lens)
    return (np.concatenate([one[:, 0], start]), np.concatenate([one[:, 1], d]), np.concatenate([one[:, 2], weight]))


def _result(rep: Replica, arrivals, n_requests: int) -> ServingResult:
    rows = []
    for rid in (range(n_requests) if rep.stopped_at is None else sorted(rep.reqs)):  # stopped: those that arrived
        r = rep.reqs[rid]
        p = r.plan
        rows.append((rid, r.arrival_at, r.first_admit_at, r.first_token_at, r.done_at,
                     r.first_admit_at - r.arrival_at - rep.t_call, r.first_token_at - r.arrival_at,
                     r.done_at - r.arrival_at, len(p.calls), p.output_tokens, p.thinking_tokens, p.steps,
                     p.small_steps, p.stop_reason))
    req = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    tl = pd.DataFrame(rep.timeline, columns=ENGINE_COLUMNS)
    end = req.done_at.max() if rep.stopped_at is None else rep.stopped_at
    makespan = float(end - req.arrival_at.min()) if len(req) else 0.0
    info = {
        "system": rep.cfg.label, "arrivals": arrivals.label, "requests": n_requests, "makespan_s": makespan,
        "kv_capacity_tokens": {e.name: e.capacity for e in rep.engines},
        "kv_plan_vllm": plan_version(rep.serving_engine) or "newest",  # whose start-up accounting sized the KV caches
        "utilization": {e.name: e.busy_s / makespan if makespan else 0.0 for e in rep.engines},
        # preemptions, prefix-cache evictions, calls admitted alone whose context does not fit the cache (vLLM refuses to start)
        **{k: {e.name: getattr(e, k) for e in rep.engines} for k in ("preemptions", "evictions", "over_capacity")},
        # prefix-cache lookups per engine, as vLLM's /metrics counts them: (queried tokens, hit tokens, full blocks
        # queried, blocks hit), one lookup per call when it is first placed
        "prefix_cache": {e.name: (e.pcache.query_tokens, e.pcache.hit_tokens, e.pcache.query_blocks,
                                  e.pcache.hit_blocks) for e in rep.engines},
        "gamma_rounds": dict(sorted(rep.engines[1].gamma_rounds.items())),  # base engine: iterations per γ
        "call_overhead_s": rep.t_call,
        "itl": _itl_samples(rep),
    }
    if rep.stopped_at is not None:
        info["stopped_at"] = rep.stopped_at
    return ServingResult(req, tl, info)
