"""One continuous-batching engine (vLLM-like) of a replica, as struct-of-arrays state.

Every iteration serves the whole running batch: sequences with a pending prefill process
their new tokens (producing their first output token), decoding sequences produce one token,
and on a speculative engine decoding sequences run one speculative iteration instead: gamma
draft passes (the draft model, one token each) then one verification pass of the base model
over gamma+1 tokens (gamma+1 logit rows), accepting a pre-sampled number of tokens. The
iteration time is the cost model's pass time for the batch's aggregates -- exactly
``Deployment.batch_forward_time`` of the batch's (new, cached, logit-row) arrays:

    T_iter = sum_{i<gamma} T_pass^draft(batch at context + i) + T_pass^base(batch)   (speculative)
    T_iter = T_pass^base(batch)                                                     (otherwise)

Several identical decode-only iterations are evaluated at once (``round_times(k)``), vectorised
over the k iterations, so a long generation costs one event per change of the batch, not one
per token.

KV cache (tokens): running sequences pin their KV; a request's prefix stays cached in the
engine between its calls (prefix caching) and is evicted LRU when room is needed (its next
call then recomputes the prefix). A call waits in FIFO order while its prefill does not fit;
when decoding growth does not fit, the youngest running sequence is preempted
(recompute-style: it re-queues at the head and re-prefills its whole context).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from simulator.cost_model import Deployment
from simulator.serving.pass_cost import PassCost
from simulator.serving.request_plan import Call


@dataclass(slots=True)
class Job:
    """A call waiting for (or preempted from) an engine."""

    rid: int
    call: Call
    kv: int = 0  # tokens whose KV is written (cached prefix)
    pending: int = 0  # tokens to prefill at the next iteration
    remaining: int = 0  # output tokens still to produce
    it: int = 0  # speculative iterations done
    started: bool = False  # prefill done once (a re-prefill after preemption produces no token)
    ready_at: float = 0.0


class Engine:
    """Continuous-batching engine: admission, iteration times, state advance."""

    def __init__(self, name: str, dep: Deployment, kv_capacity_tokens: int, max_batch: int = 256,
                 draft: Deployment | None = None, gamma: int | None = None, max_spec_iters: int = 0):
        self.name, self.dep, self.draft, self.gamma = name, dep, draft, gamma
        self.spec = draft is not None and bool(gamma)
        self.pc = PassCost(dep)
        self.pc_draft = PassCost(draft) if self.spec else None
        self.capacity = int(kv_capacity_tokens)
        self.max_batch = max_batch
        M = max_batch
        self.kv = np.zeros(M, np.int64)
        self.pending = np.zeros(M, np.int64)
        self.remaining = np.zeros(M, np.int64)
        self.it = np.zeros(M, np.int64)
        self.order = np.zeros(M, np.int64)
        self.active = np.zeros(M, bool)
        self.started = np.zeros(M, bool)
        self.jobs: list[Job | None] = [None] * M
        self.free_slots = list(range(M - 1, -1, -1))
        # cum[s, j] = tokens produced by the first j speculative iterations of slot s's call
        self.cum = np.zeros((M, max_spec_iters + 2), np.int64) if self.spec else None
        self.waiting: deque[Job] = deque()
        self.cache: OrderedDict[int, int] = OrderedDict()  # rid -> cached prefix tokens (evictable)
        self.cache_tokens = 0
        self.pinned = 0
        self.admitted = 0
        self.preemptions = 0
        self.evictions = 0
        self.busy_s = 0.0
        self.admitted_rids: list[int] = []  # first admissions since the replica last looked
        self._act: np.ndarray | None = None  # cached flatnonzero(active)

    # ---- queue and KV ---------------------------------------------------------------------
    @property
    def n_active(self) -> int:
        return self.max_batch - len(self.free_slots)

    @property
    def kv_used(self) -> int:
        return self.pinned + self.cache_tokens

    def submit(self, rid: int, call: Call) -> None:
        self.waiting.append(Job(rid, call, remaining=call.out_tokens))

    def drop_cache(self, rid: int) -> None:
        self.cache_tokens -= self.cache.pop(rid, 0)

    def _evict_until(self, need: int) -> bool:
        """Evict cached prefixes (LRU) until ``need`` tokens are free; True if they are."""
        while self.capacity - self.kv_used < need and self.cache:
            _, tok = self.cache.popitem(last=False)
            self.cache_tokens -= tok
            self.evictions += 1
        return self.capacity - self.kv_used >= need

    def admit(self) -> None:
        """Move waiting jobs into the batch, FIFO, while their prefill fits in the KV cache."""
        while self.waiting and self.free_slots:
            job = self.waiting[0]
            if not job.started and job.kv == 0 and job.pending == 0:
                have = self.cache.pop(job.rid, 0)
                self.cache_tokens -= have
                c = job.call
                if c.cached_tokens > 0 and have == 0:
                    job.pending = c.cached_tokens + c.new_tokens  # prefix evicted: recompute it
                else:
                    job.kv, job.pending = c.cached_tokens, c.new_tokens
            # room for the prefill plus one round of growth of the batch it joins (no admit/preempt ping-pong)
            need = job.kv + job.pending + (self.n_active + 1) * ((self.gamma or 0) + 1 if self.spec else 1)
            if not self._evict_until(need) and self.n_active > 0:
                return  # wait for room (head-of-line, FIFO)
            self.waiting.popleft()
            self._place(job)

    def _place(self, job: Job) -> None:
        s = self.free_slots.pop()
        self.jobs[s] = job
        self.kv[s], self.pending[s], self.remaining[s], self.it[s] = job.kv, job.pending, job.remaining, job.it
        self.started[s] = job.started
        self.active[s] = True
        self._act = None
        self.order[s] = self.admitted
        self.admitted += 1
        self.pinned += job.kv + job.pending
        if not job.started:
            self.admitted_rids.append(job.rid)
        if self.spec:
            sc = job.call.spec_cum
            n = len(sc) if sc is not None else 0
            row = self.cum[s]
            row[0] = 0
            if n:
                row[1 : n + 1] = sc
                row[n + 1 :] = sc[-1]
            else:
                row[1:] = 0

    def _release(self, s: int) -> Job:
        job = self.jobs[s]
        self.jobs[s] = None
        self.active[s] = False
        self._act = None
        self.free_slots.append(s)
        self.pinned -= int(self.kv[s] + self.pending[s])
        return job

    def preempt_youngest(self) -> None:
        """Recompute-style preemption: free the youngest sequence's KV, re-queue it first."""
        act = self.act
        s = int(act[np.argmax(self.order[act])])
        kv, pend = int(self.kv[s]), int(self.pending[s])
        job = self._release(s)
        job.kv, job.pending = 0, kv + pend
        job.remaining, job.it, job.started = int(self.remaining[s]), int(self.it[s]), True
        self.waiting.appendleft(job)
        self.preemptions += 1

    # ---- iterations -----------------------------------------------------------------------
    @property
    def act(self) -> np.ndarray:
        if self._act is None:
            self._act = np.flatnonzero(self.active)
        return self._act

    def has_prefill(self) -> bool:
        return bool((self.pending[self.act] > 0).any())

    def rounds_left(self) -> int:
        """Decode-only iterations until the first running call finishes."""
        act = self.act
        if not self.spec:
            return int(self.remaining[act].min())
        n_iter = np.argmax(self.cum[act] >= self.cum[act, -1:], axis=1)  # iterations to the end
        return max(int((n_iter - self.it[act]).min()), 1)

    def round_times(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(time, KV growth) of each of the next k iterations; k > 1 only without prefills."""
        act = self.act
        if k == 1 and (self.pending[act] > 0).any():
            return self._mixed_round(act)
        B = float(len(act))
        if not self.spec and k == 1:
            kv = float(self.kv[act].sum()) + B
            return np.array([self.pc.time(B, kv, kv, B)]), np.array([len(act)])
        if not self.spec:
            kv = float(self.kv[act].sum()) + B * np.arange(1.0, k + 1.0)  # sum (c_i + 1), c_i growing by 1
            return self.pc.times(B, kv, kv, B), np.full(k, len(act), np.int64)
        G = self.cum[act[:, None], self.it[act][:, None] + np.arange(k + 1)]  # produced before round r
        Gs = G.sum(axis=0)
        ctx = float(self.kv[act].sum()) + (Gs[:k] - Gs[0]).astype(float)
        g = self.gamma
        d = self.pc_draft
        # gamma draft passes at context + i (one token each), summed per round
        t = sum(d.times(B, ctx + B * (i + 1.0), ctx + B * (i + 1.0), B) for i in range(g))
        n = B * (g + 1)
        t = t + self.pc.times(n, ctx + n, (g + 1) * ctx + B * (g + 1) * (g + 2) / 2.0, n)
        return t, np.diff(Gs)

    def _mixed_round(self, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pre = self.pending[act] > 0
        c = self.kv[act].astype(float)
        pend = self.pending[act].astype(float)
        if not self.spec:
            t = self.pc.batch(np.where(pre, pend, 1.0), c)
            return np.array([t]), np.array([int((~pre).sum())])
        dec = ~pre
        g = self.gamma
        t = self.pc_draft.batch(np.where(pre, pend, 1.0), c)
        nd = float(dec.sum())
        if nd:
            cd = float(c[dec].sum())
            for i in range(1, g):
                kv = cd + nd * (i + 1.0)
                t += self.pc_draft.time(nd, kv, kv, nd)
        t += self.pc.batch(np.where(pre, pend, g + 1.0), c, np.where(pre, 1.0, g + 1.0))
        a = act[dec]
        grow = (self.cum[a, self.it[a] + 1] - self.cum[a, self.it[a]]).sum()
        return np.array([t]), np.array([int(grow)])

    def advance(self, k: int) -> tuple[list[int], list[int]]:
        """Apply k iterations. Returns (slots whose first prefill just ended, finished jobs' slots)."""
        act = self.act
        pre = self.pending[act] > 0
        first = [int(s) for s in act[pre & ~self.started[act]]]
        if pre.any():  # k == 1 here
            p = act[pre]
            self.kv[p] += self.pending[p]
            self.pending[p] = 0
            fresh = p[~self.started[p]]
            self.remaining[fresh] -= 1  # the prefill produces the first token
            self.started[p] = True
            act = act[~pre]
        if len(act):
            if self.spec:
                before = self.cum[act, self.it[act]]
                self.it[act] += k
                prod = self.cum[act, self.it[act]] - before
            else:
                prod = k
            self.kv[act] += prod
            self.remaining[act] -= prod
            self.pinned += int(np.sum(prod)) if self.spec else k * len(act)
        a = self.act
        done = a[(self.pending[a] == 0) & (self.remaining[a] <= 0)]
        return first, done.tolist()

    def finish(self, s: int) -> Job:
        """Release a finished call's slot; its context stays cached for the request's next call."""
        kv = int(self.kv[s])
        job = self._release(s)
        self.cache[job.rid] = kv
        self.cache_tokens += kv
        return job
