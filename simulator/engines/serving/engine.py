"""One continuous-batching engine (vLLM-like) of a replica, as struct-of-arrays state.

Every iteration serves the whole running batch: sequences with a pending prefill process
their new tokens (producing their first output token), decoding sequences produce one token,
and on a speculative engine decoding sequences run one speculative iteration instead: gamma
draft passes (the draft model, one token each) then one verification pass of the base model
over gamma+1 tokens (gamma+1 logit rows), accepting a pre-sampled number of tokens. The draft's
``drafting`` (``cost_model.Drafting``) generalises this: a tree of width w drafts w tokens per draft
pass and the target verifies w*gamma + 1 per sequence; prompt lookup (``ngram``) runs no draft pass. The
iteration time is the cost model's pass time for the batch's aggregates -- exactly
``Deployment.batch_forward_time`` of the batch's (new, cached, logit-row) arrays:

    T_iter = sum_{i<gamma} T_pass^draft(batch at context + i) + T_pass^base(batch)   (speculative)
    T_iter = T_pass^base(batch)                                                     (otherwise)

(the speculative iteration, prefills sharing its passes included, is
``simulator.cost.spec_iteration.speculative_iteration``: the one definition the cost tables and the γ rule use too).

A γ policy (``gamma_policy``: (iteration time at γ, decoding sequences) -> γ in 0..gamma, e.g.
``simulator.engines.gamma_choice.GoodputPolicy``) makes γ a per-iteration choice: it is re-decided before every
evaluation of the next iteration(s) from the decoding sequences as they stand (number and contexts). Calls
then carry M draws at gamma (= γ_max) instead of cut iterations; an iteration at γ produces
min(M, γ + 1) tokens, cut to what the call still needs (constant γ reproduces the fixed-γ engine).
At γ = 0 decoding sequences run no draft pass (the draft's catch-up of those tokens is not charged).

Several identical decode-only iterations are evaluated at once (``round_times(k)``, the k-round stretches
of :mod:`simulator.engines.serving.stretch`), vectorised over the k iterations, so a long generation costs one event
per change of the batch, not one per token.

KV cache (tokens): running sequences pin their KV; what is reused between calls -- a request's own prefix
between its calls, and prefixes shared across requests (system prompts, a session's earlier turns) -- is the
engine's :class:`~simulator.engines.serving.prefix_cache.PrefixCache` (vLLM V1's prefix caching: whole blocks of
``prefix_cache_block`` tokens, evicted LRU when room is needed; shared prefix tokens are stored once however many
running calls use them). A call waits in FIFO order while its prefill does not fit;
when decoding growth does not fit, the youngest running sequence is preempted
(recompute-style: it re-queues at the head; what it wrote stays in the prefix cache, so it re-prefills only what
was evicted meanwhile). A call that does not fit even alone is admitted all the same (the run goes on) and counted
(``over_capacity``): vLLM would not have started with a cache smaller than its longest context, so a count above 0
says the simulated cache is smaller than the deployment's.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass

import numpy as np

from simulator.cost.cost_model import Deployment
from simulator.engines.serving.pass_cost import PassCost
from simulator.engines.serving.prefix_cache import PrefixCache
from simulator.engines.serving.stretch import Stretches
from simulator.cost.spec_iteration import NO_PREFILL, speculating_target, speculative_iteration
from simulator.engines.request_model import Call


@dataclass(slots=True)
class Job:
    """A call waiting for (or preempted from) an engine."""

    rid: int
    call: Call
    kv: int = 0  # tokens whose KV is written (cached prefix)
    pending: int = 0  # tokens to prefill at the next iteration
    remaining: int = 0  # output tokens still to produce
    it: int = 0  # speculative iterations done
    started: bool = False  # prefill done once (a re-prefill after preemption yields its next token, not a first one)
    admitted: bool = False  # placed in a batch once (its first admission is reported once)
    fresh: bool = True  # its prefix-cache lookup is still to be decided (until it is first placed)
    own: int = -1  # tokens its request's own cache entry held (-1: not taken yet)
    own_cut: bool = False  # that entry had lost its tail to eviction
    paths: tuple = ()  # its prefix nodes, held in the prefix cache while it runs
    held: int = 0  # tokens of its context stored in those nodes (not in its own KV)
    resumed: int = -1  # a preempted call: the context tokens it had written (-1: never preempted)


class Engine(Stretches):
    """Continuous-batching engine: admission, iteration times, state advance.

    Per-slot state lives in Python lists and the running slots in a sorted list: batches are
    mostly small (1-30 sequences), where scalar Python beats numpy's per-call overhead by an
    order of magnitude. All batch aggregates are integer sums (exact in any order), so the
    times are bit-identical to evaluating ``PassCost.batch`` over numpy arrays. Only the
    k-round vectors (``round_times(k)``, k > 1) use numpy.
    """

    def __init__(self, name: str, dep: Deployment, kv_capacity_tokens: int, max_batch: int = 256,
                 draft: Deployment | None = None, gamma: int | None = None, max_spec_iters: int = 0,
                 prefix_cache_block: int = 1, gamma_policy=None, token_budget: int | None = None,
                 seq_reserve_tokens: int = 0, prefix_caching: bool = True):
        self.name, self.dep, self.draft, self.gamma = name, dep, draft, gamma
        self.reserve = int(seq_reserve_tokens)  # KV each running sequence holds besides its tokens (sliding windows)
        self.token_budget = token_budget  # max_num_batched_tokens (None: whole prefills, no budget)
        self.pcache = PrefixCache(prefix_cache_block, prefix_caching)
        self.spec = draft is not None and bool(gamma)
        if self.spec:  # a speculating engine (a γ policy's too, at its γ = 0 iterations): every pass as vLLM runs it
            dep = self.dep = speculating_target(dep, draft)
        self.pc = PassCost(dep)
        # the draft's passes: none for prompt lookup; a tree of width w drafts w tokens per pass and the
        # target verifies vt = w*gamma + 1 tokens per sequence (gamma + 1 for a chain)
        self.pc_draft = PassCost(draft) if self.spec and not draft.drafting.free else None
        self._drafting = draft.drafting if self.spec else None
        self._target_pass = self.pc.time  # _spec_time's pass-time callables (the one iteration's arguments)
        self._draft_pass = self.pc_draft.time if self.pc_draft is not None else None
        self.vt = draft.drafting.verify_tokens(gamma) if self.spec else 1  # at gamma: admission reserves this
        self.policy = gamma_policy if self.spec else None
        self.g_cur, self.vt_cur = (gamma, self.vt) if self.spec else (0, 1)  # γ of the iteration(s) being evaluated
        self.gamma_rounds: dict[int, int] = {}  # γ -> iterations run with decoding sequences at that γ
        self.capacity = int(kv_capacity_tokens)
        self.max_batch = max_batch
        M = max_batch
        self.kv = [0] * M
        self.pending = [0] * M
        self.remaining = [0] * M
        self.it = [0] * M
        self.order = [0] * M
        self.started = [False] * M
        self.held = [0] * M  # tokens of slot s's context held in the prefix cache (shared prefix nodes)
        self.jobs: list[Job | None] = [None] * M
        self.free_slots = list(range(M - 1, -1, -1))
        self.act: list[int] = []  # running slots, ascending
        self.n_prefill = 0  # running slots with a pending prefill
        # cum[s, j] = tokens produced by the first j speculative iterations of slot s's call
        self.cum = np.zeros((M, max_spec_iters + 2), np.int64) if self.spec else None
        self._last_col = max_spec_iters + 1
        self.n_iter = [0] * M  # speculative iterations of slot s's call
        self.draws: list[np.ndarray | None] = [None] * M  # a policy engine: slot s's M draws at gamma (int64)
        if self.policy is not None:
            self._cum_at = self._cum_at_row
        self.waiting: deque[Job] = deque()
        self.pinned = 0
        self.admitted = 0
        # stretch memo (see :meth:`stretch`): the batch's version (bumped whenever a slot joins or leaves) and the
        # decode-only iterations run so far
        self.version = 0
        self.rounds = 0
        self._memo: tuple | None = None
        self.preemptions = 0
        self.over_capacity = 0  # calls admitted alone without room for their context and a round of growth
        self.busy_s = 0.0
        self.admitted_rids: list[int] = []  # first admissions since the replica last looked

    # ---- queue and KV ---------------------------------------------------------------------
    @property
    def n_active(self) -> int:
        return len(self.act)

    @property
    def cache_tokens(self) -> int:
        return self.pcache.tokens

    @property
    def evictions(self) -> int:
        return self.pcache.evictions

    @property
    def kv_used(self) -> int:
        return self.pinned + self.pcache.tokens

    def submit(self, rid: int, call: Call) -> None:
        self.waiting.append(Job(rid, call, remaining=call.out_tokens))

    def drop_cache(self, rid: int) -> None:
        self.pcache.drop(rid)

    def evict_until(self, need: int) -> bool:
        """Evict cached prefixes (LRU) until ``need`` tokens are free; True if they are."""
        free = self.capacity - self.pinned - self.pcache.tokens
        if free >= need:
            return True
        return free + self.pcache.evict(free, need) >= need

    def _room_for(self, need: int, n_act: int) -> bool:
        """Room for ``need`` tokens once cached prefixes are evicted, or an empty batch (then counted: docstring)."""
        fits = self.evict_until(need)
        self.over_capacity += not fits and n_act == 0
        return fits or n_act == 0

    def admit(self) -> None:
        """Move waiting jobs into the batch, FIFO, while their prefill fits in the KV cache. A call not yet placed
        looks its context up in the prefix cache at every try (the cache moves while it waits): it needs room for
        what it does not find there."""
        waiting, pcache = self.waiting, self.pcache
        grow = self.vt
        while waiting and self.free_slots:
            job = waiting[0]
            n_act = len(self.act)
            if job.fresh:
                c = job.call
                if job.own < 0:
                    job.own, job.own_cut = pcache.take_own(job.rid)
                # a preempted call looks up its whole context so far, of which it had written `resumed` tokens
                total, known = (c.cached_tokens + c.new_tokens, c.cached_tokens) if job.resumed < 0 else \
                    (job.pending, job.resumed)
                if c.prefix:
                    kept, cached = pcache.match(c.prefix, job.own, known, total, job.own_cut)
                    paths = pcache.hold(c.prefix)
                else:  # no shared segment: only the request's own entry can give (the same rule, no chain)
                    kept, cached, paths = pcache.kept(0, job.own, known, total, job.own_cut), 0, ()
                # room for the prefill plus one round of growth of the batch it joins (no admit/preempt ping-pong)
                need = total - cached + self.reserve + (n_act + 1) * grow
                if not self._room_for(need, n_act):
                    if paths:
                        pcache.release(paths)
                    return  # wait for room (head-of-line, FIFO)
                if paths:
                    pcache.place(c.prefix, paths, kept, total, job.resumed < 0)
                elif job.resumed < 0:  # vLLM counts a preempted request's lookups apart (preempted_queries)
                    pcache.count(kept, total)
                job.kv, job.pending, job.paths, job.fresh = kept, total - kept, paths, False
                job.held = sum([n for _k, n in c.prefix]) if paths else 0
            else:
                need = job.kv + job.pending + self.reserve + (n_act + 1) * grow
                if not self._room_for(need, n_act):
                    return  # wait for room (head-of-line, FIFO)
            waiting.popleft()
            self._place(job)

    def _place(self, job: Job) -> None:
        self.version += 1
        s = self.free_slots.pop()
        self.jobs[s] = job
        self.kv[s], self.pending[s], self.remaining[s], self.it[s] = job.kv, job.pending, job.remaining, job.it
        self.started[s] = job.started
        self.held[s] = job.held
        if job.pending > 0:
            self.n_prefill += 1
        insort(self.act, s)
        self.order[s] = self.admitted
        self.admitted += 1
        self.pinned += job.kv + job.pending + self.reserve - job.held
        if not job.admitted:
            job.admitted = True
            self.admitted_rids.append(job.rid)
        if self.policy is not None:
            d = job.call.spec_draws  # None: a call that does not draft (a score: one token from its prefill)
            if d is None and job.call.spec_cum is not None:
                raise ValueError("a gamma-policy engine needs calls with spec_draws (a RequestSampler of an adaptive config)")
            d = np.zeros(0, np.int64) if d is None else d.astype(np.int64)
            self.draws[s] = d
            self.n_iter[s] = len(d)
            self._fill_row(s, 0)
        elif self.spec:
            sc = job.call.spec_cum
            n = len(sc) if sc is not None else 0
            row = self.cum[s]
            row[0] = 0
            if n:
                row[1 : n + 1] = sc
                row[n + 1 :] = sc[-1]
            else:
                row[1:] = 0
            self.n_iter[s] = n

    def _fill_row(self, s: int, j: int) -> None:
        """cum[s, j:] = tokens after each iteration from iteration j on, at the current γ (uncut)."""
        d = self.draws[s]
        row = self.cum[s]
        n = len(d)
        if j < n:
            row[j + 1 : n + 1] = row[j] + np.cumsum(np.minimum(d[j:], self.g_cur + 1))
        row[max(n, j) + 1 :] = row[max(n, j)]

    def sync_gamma(self) -> None:
        """Re-decide γ for the next iteration(s) (a policy engine) from the decoding sequences as they stand:
        the policy gets the time of their speculative iteration at any γ (the engine's own cost, at their
        contexts) and their number; rows are rebuilt when γ changes. Prefills sharing the pass are left out
        of the decision (counting them makes a myopic rule draft more while a long prefill makes the pass
        slow anyway; SmartSpec also decides on the decoding batch). With no decoding slot γ is kept."""
        act = self.act
        if self.policy is None or not act:
            return
        kvl, pend = self.kv, self.pending
        dec = [kvl[s] for s in act if pend[s] == 0]
        nd = len(dec)
        if nd == 0:
            return
        cd = sum(dec)
        tp, dp, dr, g0, v0 = self._target_pass, self._draft_pass, self._drafting, self.g_cur, self.vt_cur

        def iter_time(g: int) -> float:  # = _spec_time(g, 0, 0, 0, 0, nd, cd)
            d, v = speculative_iteration(tp, dp, dr, g, nd, cd, NO_PREFILL, v0 if g == g0 else None)
            return d + v

        g = int(self.policy(iter_time, nd))
        if g != self.g_cur:
            self.g_cur, self.vt_cur = g, self.draft.drafting.verify_tokens(g)
            it = self.it
            for s in act:
                self._fill_row(s, it[s])

    def _cum_at_row(self, s: int, j: int) -> int:
        return self.cum.item(s, j)

    def _release(self, s: int) -> Job:
        self.version += 1
        job = self.jobs[s]
        self.jobs[s] = None
        self.act.remove(s)
        if self.pending[s] > 0:
            self.n_prefill -= 1
        self.free_slots.append(s)
        self.pinned -= self.kv[s] + self.pending[s] + self.reserve - self.held[s]
        return job

    def preempt_youngest(self) -> None:
        """Recompute-style preemption (vLLM V1): free the youngest sequence's KV, re-queue it first. What it had
        written stays in the prefix cache (its own entry; vLLM frees its blocks with their hashes), so when it is
        placed again it re-prefills only what was evicted meanwhile, and its re-prefill samples its next token."""
        s = max(self.act, key=self.order.__getitem__)
        kv, pend = self.kv[s], self.pending[s]
        # vLLM recomputes every token it knows, the last sampled one too (a decoding sequence has not written it yet);
        # the re-prefill then samples the next token (:meth:`_advance_prefilling`); a speculating call's drawn
        # iterations go on from where they were (its last one is cut to what it still needs)
        last = 1 if self.started[s] and pend == 0 else 0
        job = self._release(s)
        self.pcache.keep(job.rid, kv - job.held, None, ())
        self.pcache.release(job.paths)
        job.kv, job.pending, job.resumed = 0, kv + pend + last, kv
        job.paths, job.held, job.fresh, job.own = (), 0, True, -1
        # a call preempted in the middle of its (chunked) prefill has not produced its first token yet: its
        # re-prefill will, so it keeps started = False
        job.remaining, job.it, job.started = self.remaining[s], self.it[s], self.started[s]
        self.waiting.appendleft(job)
        self.preemptions += 1

    # ---- iterations -----------------------------------------------------------------------
    def rounds_left(self) -> int:
        """Decode-only iterations until the first running call finishes."""
        if not self.spec:
            rem = self.remaining
            return min([rem[s] for s in self.act])
        if self.policy is not None:  # iterations until a call has what it needs, at the current γ
            self.sync_gamma()
            cum, it, rem = self.cum, self.it, self.remaining
            return max(min([int(cum[s].searchsorted(cum[s, it[s]] + rem[s], side="left")) - it[s]
                            for s in self.act]), 1)
        n_iter, it = self.n_iter, self.it
        return max(min([n_iter[s] - it[s] for s in self.act]), 1)

    def _cum_at(self, s: int, j: int) -> int:
        # row s holds the call's cumulative tokens, its last value repeated to the end of the row
        return self.cum.item(s, j if j < self._last_col else self._last_col)

    def round_time(self) -> tuple[float, int]:
        """(time, KV growth) of the next iteration (scalar)."""
        if self.policy is not None:
            self.sync_gamma()
        if self.n_prefill:
            return self._mixed_round()
        act, kvl = self.act, self.kv
        B = float(len(act))
        kvs = float(sum([kvl[s] for s in act]))
        if not self.spec:
            kv = kvs + B
            return self.pc.time(B, kv, kv, B), len(act)
        it, cum_at, rem = self.it, self._cum_at, self.remaining
        grow = sum([min(cum_at(s, it[s] + 1) - cum_at(s, it[s]), rem[s]) for s in act])
        d, v = speculative_iteration(self._target_pass, self._draft_pass, self._drafting, self.g_cur, len(act), kvs,
                                     NO_PREFILL, self.vt_cur)  # = _spec_time(g_cur, 0, 0, 0, 0, len(act), kvs)
        return d + v, grow

    def _spec_time(self, g: int, N: int, KV: int, A: int, n_pref: int, nd: int, cd: int) -> float:
        """One speculative-engine iteration at γ = g: n_pref prefills with aggregates (N, KV, A) and nd decoding
        slots of total context cd (draft passes, then the verification of w*g + 1 tokens per decoding slot): the one
        definition, :func:`simulator.cost.spec_iteration.speculative_iteration`, on this engine's pass costs."""
        d, v = speculative_iteration(self._target_pass, self._draft_pass, self._drafting, g, nd, cd, (N, KV, A, n_pref),
                                     self.vt_cur if g == self.g_cur else None)
        return d + v

    def _chunks(self, dec_tokens: int) -> dict[int, int]:
        """Prefill tokens per slot in the next iteration: what the token budget leaves after the decoding
        sequences' tokens, given to the pending prefills in admission order (vLLM V1: running requests first,
        then chunks of the prefills). No budget: every pending prefill whole."""
        act, pend = self.act, self.pending
        slots = [s for s in act if pend[s] > 0]
        if self.token_budget is None:
            return {s: pend[s] for s in slots}
        left = max(self.token_budget - dec_tokens, 0)
        out = {}
        for s in sorted(slots, key=self.order.__getitem__):
            if left <= 0:
                break
            c = min(pend[s], left)
            out[s] = c
            left -= c
        if not out and slots and dec_tokens >= self.token_budget:  # the decodes fill the budget: one chunk anyway
            s = min(slots, key=self.order.__getitem__)
            out[s] = min(pend[s], self.token_budget)
        return out

    def _mixed_round(self) -> tuple[float, int]:
        # PassCost.batch over (n_i, c_i): every aggregate is an integer sum, exact in any order
        act, kvl, pend = self.act, self.kv, self.pending
        N = KV = A = cd = 0
        dec = [s for s in act if pend[s] == 0]
        nd = len(dec)
        chunk = self._chunks(nd * (self.vt_cur if self.spec else 1))
        for s, p in chunk.items():
            c = kvl[s]
            N += p
            KV += c + p
            A += p * c + p * (p + 1) // 2
        for s in dec:
            cd += kvl[s]
        B = float(nd + len(chunk))
        if not self.spec:
            N1, KV1, A1 = N + nd, KV + cd + nd, A + cd + nd
            return self.pc.time(float(N1), float(KV1), float(A1), B * 1.0), nd
        t = self._spec_time(self.g_cur, N, KV, A, len(chunk), nd, cd)
        it, cum_at, rem = self.it, self._cum_at, self.remaining
        grow = sum([min(cum_at(s, it[s] + 1) - cum_at(s, it[s]), rem[s]) for s in dec])
        return t, grow

    def advance(self, k: int) -> tuple[list[int], list[int]]:
        """Apply k iterations. Returns (slots whose first prefill just ended, finished jobs' slots)."""
        act, kvl, rem = self.act, self.kv, self.remaining
        first: list[int] = []
        done: list[int] = []
        spec = self.spec
        grown = 0
        self.rounds += k
        if spec and len(act) > self.n_prefill:  # iterations that decoded speculatively, by γ
            self.gamma_rounds[self.g_cur] = self.gamma_rounds.get(self.g_cur, 0) + k
        if self.n_prefill:  # k == 1 here; the chunks are the ones the round's time was evaluated with
            grown = self._advance_prefilling(k, first, done)
        elif spec:
            it, cum_at = self.it, self._cum_at
            for s in act:
                j = it[s]
                prod = min(cum_at(s, j + k) - cum_at(s, j), rem[s])
                it[s] = j + k
                kvl[s] += prod
                rem[s] -= prod
                grown += prod
                if rem[s] <= 0:
                    done.append(s)
        else:
            for s in act:
                kvl[s] += k
                rem[s] -= k
                if rem[s] <= 0:
                    done.append(s)
            grown = k * len(act)
        self.pinned += grown
        return first, done

    def _advance_prefilling(self, k: int, first: list[int], done: list[int]) -> int:
        """One iteration (k == 1) of a batch with prefills: each prefill takes its chunk, each decoding slot its
        tokens; appends to ``first`` and ``done`` as :meth:`advance` returns them; returns the tokens grown."""
        act, kvl, pend, rem, started = self.act, self.kv, self.pending, self.remaining, self.started
        spec = self.spec
        grown = 0
        # the same chunks as the round's time (a function of the state, which has not moved since)
        nd = sum(1 for s in act if pend[s] == 0)
        chunk = self._chunks(nd * (self.vt_cur if spec else 1))
        for s in act:
            p = pend[s]
            if p > 0:
                c = chunk.get(s, 0)
                if c == 0:
                    continue  # waits for budget: neither prefills nor decodes this iteration
                kvl[s] += c
                pend[s] = p - c
                if pend[s] > 0:
                    continue  # a partial chunk: its first token comes with its last chunk
                self.n_prefill -= 1
                if not started[s]:
                    first.append(s)
                    rem[s] -= 1  # the prefill produces the first token
                    started[s] = True
                else:  # a re-prefill after preemption samples the next token too, as vLLM's does
                    rem[s] -= 1
            elif spec:
                j = self.it[s]
                prod = min(self._cum_at(s, j + k) - self._cum_at(s, j), rem[s])
                self.it[s] = j + k
                kvl[s] += prod
                rem[s] -= prod
                grown += prod
            else:
                kvl[s] += k
                rem[s] -= k
                grown += k
            if rem[s] <= 0:
                done.append(s)
        return grown

    def finish(self, s: int) -> Job:
        """Release a finished call's slot; its context stays cached (the request's next call, or with
        ``Call.publish`` any request whose prefix names it)."""
        kv = self.kv[s]
        job = self._release(s)
        self.pcache.keep(job.rid, kv - job.held, job.call.publish, job.paths)
        if job.paths:
            self.pcache.release(job.paths)
        return job
