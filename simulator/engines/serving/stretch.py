"""k-round stretches of a serving engine (the mixin :class:`Stretches` of
:class:`simulator.engines.serving.engine.Engine`): the KV growth and the times of the next k decode-only iterations,
evaluated at once as numpy vectors, so a long generation costs one event per change of the batch, not one per token.

Three rules keep every float the same as evaluating one iteration, one pass, at a time (tested in
``tests/simulator/test_serving_fast_paths.py``):

- element r of a stretch depends only on the engine's state and the tokens produced before round r (integer sums,
  exact in any order), so the first j rounds of a k-round evaluation are the j-round evaluation;
- the γ draft passes and the verification of k speculative iterations are one evaluation of γ + 1 rows
  (:func:`simulator.engines.serving.pass_cost.spec_iteration_times`: the same operations per element, rows summed in pass
  order);
- while no slot joins or leaves (the engine's ``version``), a later stretch is a slice of the last evaluation
  (the memo): j iterations later the contexts are the same integers, so the times are the same floats.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from simulator.engines.serving.pass_cost import spec_iteration_times
from simulator.cost.spec_iteration import speculative_iteration


class Stretches:
    """Stretch evaluation for :class:`~simulator.engines.serving.engine.Engine` (which holds the state it reads: ``act``,
    ``kv``, ``it``, ``remaining``, ``cum``, the pass costs, γ, and the memo fields ``version``, ``rounds``,
    ``_memo``)."""

    def round_times(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(time, KV growth) of each of the next k > 1 decode-only iterations (no prefill pending);
        growth None on a plain engine (one token per sequence per round)."""
        Gs = self.growth(k)
        return self.times_for(k, Gs), (None if Gs is None else np.diff(Gs))

    def first_growth(self) -> int:
        """KV growth of the next decode-only iteration (= ``growth(k)[1]``; ``len(act)`` on a plain engine)."""
        if self.policy is not None:
            self.sync_gamma()
        act = self.act
        if not self.spec:
            return len(act)
        it, cum_at, rem = self.it, self._cum_at, self.remaining
        return sum([min(cum_at(s, it[s] + 1) - cum_at(s, it[s]), rem[s]) for s in act])

    def stretch_growth(self, k: int) -> np.ndarray | None:
        """:meth:`growth` (k + 1 entries), from the memo of an earlier evaluation when the batch has not changed
        since (no slot joined or left: only whole iterations ran, j of them): ``Gs[j:j+k+1] - Gs[j]``, the same
        integers a fresh evaluation gives (no call finished in those iterations, so none was cut)."""
        m = self._memo
        if m is not None and m[0] == self.version:
            j = self.rounds - m[1]
            if j + k < len(m[2]):
                return m[2][j : j + k + 1] - m[2][j] if m[2] is not None and self.spec else None
        Gs = self.growth(k)
        self._memo = None if self.policy is not None else (self.version, self.rounds, Gs if self.spec else np.zeros(k + 1), None)
        return Gs

    def stretch_times(self, k: int, Gs: np.ndarray | None) -> np.ndarray:
        """:meth:`times_for` (k iterations, after :meth:`stretch_growth`), from the memo when it holds them: element
        j + r of the earlier evaluation has the same context (integer sums) as element r now, so the same time."""
        m = self._memo
        if m is not None and m[0] == self.version and m[3] is not None:
            j = self.rounds - m[1]
            if j + k <= len(m[3]):
                return m[3][j : j + k]
        t = self.times_for(k, Gs)
        if self.policy is None:
            self._memo = (self.version, self.rounds, Gs if self.spec else np.zeros(k + 1), t)
        return t

    def growth(self, k: int) -> np.ndarray | None:
        """Tokens produced before each of the next k + 1 decode-only iterations, cut to what each call still
        needs (int64, ``Gs[0]`` = 0); None on a plain engine (``len(act)`` tokens every iteration). A policy
        engine re-decides γ first. Integer sums: ``Gs[:j]`` is the same whatever k >= j."""
        if self.policy is not None:
            self.sync_gamma()
        if not self.spec:
            return None
        act = self.act
        get = itemgetter(*act) if len(act) > 1 else (lambda x: (x[act[0]],))
        first = np.array(act) * self.cum.shape[1] + np.array(get(self.it))
        G = self.cum.ravel().take(first[:, None] + np.arange(k + 1))  # produced before round r
        G -= G[:, :1]
        np.minimum(G, np.array(get(self.remaining))[:, None], out=G)
        return G.sum(axis=0)

    def times_for(self, k: int, Gs: np.ndarray | None) -> np.ndarray:
        """Times of the next k decode-only iterations given :meth:`growth` (at least k + 1 entries on a
        speculative engine). Element r depends only on the state and ``Gs[r]``, so a prefix of a longer
        evaluation is bit-identical to a shorter one. A speculative engine's iterations are
        :func:`~simulator.cost.spec_iteration.speculative_iteration` over the k rounds' total contexts: its γ draft passes
        and verification as one (γ + 1)-row evaluation (``spec_iteration_times``, rows summed in pass order), or
        the function itself where that form does not apply (a formula that is not affine, a free drafter, γ = 0)."""
        act = self.act
        B = float(len(act))
        kvs = float(sum([self.kv[s] for s in act]))
        if not self.spec:
            kv = kvs + B * np.arange(1.0, k + 1.0)  # sum (c_i + 1), c_i growing by 1
            return self.pc.times(B, kv, kv, B)
        ctx = kvs + Gs[:k].astype(float)
        g, d, vt = self.g_cur, self.pc_draft, self.vt_cur
        if d is not None:
            t = None if self._drafting.kind == "block" else spec_iteration_times(d, self.pc, g, B, vt, ctx,
                                                                                 self._drafting.tree_width)
            if t is not None:
                return t
        # the one iteration over the k rounds' contexts, one pass at a time (the fused form's reference)
        dr, ver = speculative_iteration(self.pc.times, None if d is None else d.times, self._drafting, g, len(act), ctx,
                                        verify_tokens=vt)
        return dr + ver
