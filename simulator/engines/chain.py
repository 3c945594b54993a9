"""The reasoning chain as a Markov chain over (step index j, thinking tokens t).

Shared semantics of both engines (the DES samples it, the analytic engine sums it):

- Step j is produced by the base model if j < first_n; otherwise the small model proposes a
  step of K_s tokens, which is kept with probability q = P(score >= threshold), else the
  base model writes a step of K_b tokens. (Vanilla-small: q = 1; vanilla-base: first_n = inf.)
- After step j the request ends with probability h_X(j), X the producer of the kept step
  (the answer hazard of ``workload.answer_hazard``), or when t reaches the token budget B
  (a step may overshoot B: the budget is checked between steps).

The DP carries m_j(t) = P(alive before step j, thinking tokens t) for t < B:
    m_{j+1}(t') = sum_t m_j(t) [ q (1 - h_s(j)) p_s(t' - t) + (1 - q) (1 - h_b(j)) p_b(t' - t) ]
and accumulates the *occupancies* -- expected mass at each t of each kind of call -- so that
any expected cost is a dot product of an occupancy with a cost vector over t. It is evaluated step
by step (``_stepwise_sums``, the definition) or, where that is exact, by composing generating
functions (``_composed_sums``: a few dozen polynomial products instead of one per step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft

from simulator.inputs.workload import WorkloadProfile, answer_hazard

EPS_MASS = 1e-12


@dataclass
class ChainOccupancy:
    budget: int
    small_first: np.ndarray  # mass of the small model's first call, by t
    small_rest: np.ndarray  # later small calls (prefix cached), by t
    score_rest: np.ndarray  # scoring calls with the prefix cached, by t
    score_prompt: float  # scoring call at j = 0 (base has not seen the prompt)
    base_gen: np.ndarray  # base generations with the prefix cached, by t
    base_prompt: float  # base generation at j = 0 (prefills the prompt)
    regen_continue: np.ndarray  # base regenerations (j >= first_n) times (1 - h_b(j)): small catch-up charge
    end_pmf: np.ndarray  # final thinking tokens, index t in [0, B + max_step)
    steps: float
    small_proposals: float
    small_kept: float
    base_steps: float

    @property
    def mean_thinking_tokens(self) -> float:
        return float(np.dot(np.arange(len(self.end_pmf)), self.end_pmf))


def run_chain(workload: WorkloadProfile, q: float, first_n: int | float, max_steps: int | None = None) -> ChainOccupancy:
    """Occupancies of the step chain for keep-probability ``q`` and ``first_n`` base steps."""
    return run_chains(workload, [q], first_n, max_steps)[0]


def run_chains(workload: WorkloadProfile, qs, first_n, max_steps: int | None = None, *,
               method: str = "auto") -> list[ChainOccupancy]:
    """The DP for several (keep-probability, first_n) chains at once (rows); ``first_n`` is one value for
    every row or one per row.

    Two evaluations of the same sums: ``"composed"`` (:func:`_composed_sums`, the default where it applies)
    and ``"stepwise"`` (:func:`_stepwise_sums`, one FFT pair per step: the definition, and the fallback).
    ``"auto"`` takes the composed one where it applies. The call occupancies are linear in the m_j with
    coefficients constant over the phases, so only sum_j m_j, sum_j h_b(j) m_j and each row's m at
    j = first_n are needed, with the end-token pmf.
    """
    qs = np.asarray(qs, dtype=float)
    R = len(qs)
    fns = np.broadcast_to(np.asarray(first_n, dtype=float), (R,)).copy()
    n_max = max_steps or (workload.max_steps() + 1)
    sums = None
    if method in ("auto", "composed"):
        sums = _composed_sums(workload, qs, fns, n_max)
        if sums is None and method == "composed":
            raise ValueError("the composed evaluation does not apply to these chains")
    if sums is None:
        sums = _stepwise_sums(workload, qs, fns, n_max)
    return _occupancies(workload, qs, fns, sums)


def _stepwise_sums(workload: WorkloadProfile, qs: np.ndarray, fns: np.ndarray, n_max: int) -> dict:
    """One FFT pair per step for all rows.

    With M = FFT(m_j), S, Bk the FFTs of the step-length pmfs and the row's step weights (w_s, w_b) =
    (q, 1 - q) from step first_n on, (0, 1) before: X = M w_s S, Y = M w_b Bk and
        ending by the answer   = IFFT(h_s(j) X + h_b(j) Y)        (accumulated in the frequency domain)
        continuing             = IFFT((1 - h_s(j)) X + (1 - h_b(j)) Y), below B; from B on it ends (budget).
    """
    R = len(qs)
    B = workload.token_budget
    K = workload.max_step_tokens
    L = B + K  # t + k <= B - 1 + K
    nfft = next_fast_len(L)
    S = rfft(workload.step_pmf_small.dense(K + 1), nfft)
    Bk = rfft(workload.step_pmf_base.dense(K + 1), nfft)
    hs = answer_hazard(workload.steps_pmf_small, n_max)
    hb = answer_hazard(workload.steps_pmf_base, n_max)
    in_phase = fns <= 0
    w_s = np.where(in_phase, qs, 0.0)
    QS, QB = w_s[:, None] * S, (1.0 - w_s)[:, None] * Bk
    A, Hb = np.zeros((R, B)), np.zeros((R, B))  # sum_j m_j, sum_j h_b(j) m_j
    A_pre, Hb_pre, first = np.zeros((R, B)), np.zeros((R, B)), np.zeros((R, B))  # at j = first_n
    E = np.zeros((R, nfft // 2 + 1), dtype=complex)
    end_B = np.zeros((R, K))
    steps, small_prop = np.zeros(R), np.zeros(R)
    m = np.zeros((R, B))
    m[:, 0] = 1.0
    for j in range(n_max):
        alive = m.sum(axis=1)
        if alive.max() < EPS_MASS:
            break
        switch = fns == j
        if switch.any():  # rows entering the small-proposal phase
            A_pre[switch], Hb_pre[switch], first[switch] = A[switch], Hb[switch], m[switch]
            in_phase = in_phase | switch
            w_s = np.where(in_phase, qs, 0.0)
            QS, QB = w_s[:, None] * S, (1.0 - w_s)[:, None] * Bk
        steps += alive
        small_prop += np.where(in_phase, alive, 0.0)
        A += m
        Hb += hb[j] * m
        M = rfft(m, nfft, axis=1)
        X, Y = M * QS, M * QB
        Z = hs[j] * X + hb[j] * Y
        E += Z
        C = irfft(X + Y - Z, nfft, axis=1)
        end_B += np.clip(C[:, B:L], 0.0, None)
        m = np.where(C[:, :B] > 1e-300, C[:, :B], 0.0)
    end_pmf = np.clip(irfft(E, nfft, axis=1)[:, :L], 0.0, None)
    end_pmf[:, B:] += end_B
    # a row whose chain ended (answer, budget or step count) before step first_n: every step was the base model's
    never = ~in_phase
    A_pre[never], Hb_pre[never] = A[never], Hb[never]
    if alive.max() >= EPS_MASS:  # ran out of steps (the hazard is 1 past the step-count support: not reached)
        end_pmf[:, :B] += m
    return {"A": A, "Hb": Hb, "A_pre": A_pre, "Hb_pre": Hb_pre, "first": first, "end_pmf": end_pmf,
            "steps": steps, "small_prop": small_prop}


COMPOSED_MAX_FIRST_N = 64  # a finite first_n above this: the stepwise DP
COMPOSED_MAX_BLOCK = 32  # baby steps Q^0..Q^(s-1) (s at most this)
COMPOSED_HAZARD_TOL = 1e-11  # how far h_s may differ from h_b in a mixed row (bound on the mass moved), else stepwise


def _mulmod(a: np.ndarray, b_f: np.ndarray, n: int, B: int) -> np.ndarray:
    """(a * b) mod x^B for a of length B and b given by its length-n rfft (n >= deg a + deg b + 1)."""
    return irfft(rfft(a, n, axis=-1) * b_f, n, axis=-1)[..., :B]


def _composed_sums(workload: WorkloadProfile, qs: np.ndarray, fns: np.ndarray, n_max: int) -> dict | None:
    """The stepwise DP's sums by composition of generating functions: ``None`` where it does not apply.

    Mass below the budget never comes from mass at or above it (steps are >= 1 token), so m_j restricted to
    t < B is the product of the step kernels mod x^B. From first_n on a row's kernel is
    q (1 - h_s(j)) S + (1 - q) (1 - h_b(j)) Bk = g_j Q with Q = q S + (1 - q) Bk and g_j = 1 - h_b(j) (1 - h_s(j)
    for q = 1) -- exact when q is 0 or 1 or h_s = h_b (a step count without its own small-model pmf); a mixed
    row whose hazards differ is taken only where the neglected q (h_b - h_s) S terms are bounded below
    COMPOSED_HAZARD_TOL of the mass, else the stepwise DP runs. Then m_(f+n) = m_f c_n Q^n mod x^B,
    c_n = prod_(l<n) g_(f+l), and every sum over j is m_f times sum_n a_n Q^n mod x^B: baby steps Q^0..Q^(s-1)
    and giant steps Q^(s i) (Paterson-Stockmeyer), sum_i Q^(s i) (sum_k a_(s i + k) Q^k), the inner sums by one
    matrix product: about s + 4 J / s FFTs of length 2B per row for J steps instead of 2 J of length B + K.
    The j < first_n steps (base only) are stepped. The stopping rule is the stepwise one: the first j at which
    every row's mass below B is under EPS_MASS (that mass comes from the giant and baby steps by dot products);
    a chain that has not stopped by n_max goes stepwise. Equal to the stepwise DP up to FFT round-off
    (tests/simulator/test_analytic_fast.py): the sums are the same.
    """
    comp = _Composition.prepare(workload, qs, fns, n_max)
    if comp is None:
        return None
    comp.step_base_phase()
    comp.phase_coefficients()
    comp.baby_steps()
    if not comp.find_stop() or not comp.mixed_rows_bounded():
        return None
    comp.phase_sums()
    return comp.result()


class _Composition:
    """The state of one composed evaluation (:func:`_composed_sums`), built phase by phase: R rows, budget B,
    step tokens up to K, f the first step of each row's Q phase, qe its keep-probability (0 for a row that never
    switches), ps / pb the step pmfs, hs / hb the answer hazards, FFTs of length nfft, baby-step block s."""

    @classmethod
    def prepare(cls, workload: WorkloadProfile, qs: np.ndarray, fns: np.ndarray, n_max: int) -> "_Composition | None":
        """The evaluation's constants, or None where the composition does not apply to these first_n."""
        finite = np.isfinite(fns)
        if (finite & ((fns > COMPOSED_MAX_FIRST_N) | (fns != np.floor(fns)) | (fns >= n_max))).any() or (fns < 0).any():
            return None
        self = cls()
        self.R, self.n_max, self.finite = len(qs), n_max, finite
        self.B, self.K = workload.token_budget, workload.max_step_tokens
        self.L = self.B + self.K
        self.f = np.where(finite, np.maximum(fns, 0), 0).astype(int)  # first step of the Q phase
        self.qe = np.where(finite, qs, 0.0)  # a row that never switches steps with Bk throughout
        self.ps, self.pb = workload.step_pmf_small.dense(self.K + 1), workload.step_pmf_base.dense(self.K + 1)
        self.hs = answer_hazard(workload.steps_pmf_small, n_max)
        self.hb = answer_hazard(workload.steps_pmf_base, n_max)
        self.nfft = next_fast_len(max(2 * self.B - 1, self.B + self.K + 1), real=True)
        self.s = int(max(2, min(COMPOSED_MAX_BLOCK, (self.nfft - 1) // self.K + 1)))  # (s - 1) K < nfft: no wrap
        return self

    def step_base_phase(self) -> None:
        """j < first_n: base steps, stepped (few): ``ms[j]``, the mass alive per step, ``m_start`` = m at first_n."""
        R, B, f = self.R, self.B, self.f
        fmax = int(f.max())
        ms = np.zeros((fmax + 1, R, B))
        ms[0, :, 0] = 1.0
        alive1 = np.ones((R, max(fmax, 1)))
        if fmax > 0:
            n1 = next_fast_len(self.L, real=True)
            Bk1 = rfft(self.pb, n1)
            for j in range(fmax):
                alive1[:, j] = ms[j].sum(axis=1)
                C = irfft(rfft(ms[j], n1, axis=1) * Bk1, n1, axis=1)[:, :B] * (1.0 - self.hb[j])
                ms[j + 1] = np.where(C > 1e-300, C, 0.0)
        self.ms, self.alive1 = ms, alive1
        self.m_start = ms[f, np.arange(R)]  # (R, B)

    def phase_coefficients(self) -> None:
        """The Q phase's coefficients per row over n (j = f + n): g_n, c_n and the hazard weights."""
        R, f, hs, hb, qe, n_max = self.R, self.f, self.hs, self.hb, self.qe, self.n_max
        self.n_len = n_len = n_max + 1
        self.one_s = one_s = qe == 1.0  # small steps only (w_b = 0)
        self.mixed = ~one_s & (qe != 0.0)  # both kernels (q outside [0, 1] by rounding included)
        g = np.zeros((R, n_len))
        ws, wb = np.zeros((R, n_len)), np.zeros((R, n_len))
        for r in range(R):
            span = n_max - f[r]
            if span > 0:
                g[r, :span] = (1.0 - hs[f[r]:]) if one_s[r] else (1.0 - hb[f[r]:])
                ws[r, :span], wb[r, :span] = hs[f[r]:], hb[f[r]:]
        c = np.ones((R, n_len))
        c[:, 1:] = np.cumprod(g[:, :-1], axis=1)
        self.g, self.ws, self.wb, self.c = g, ws, wb, c

    def baby_steps(self) -> None:
        """Q, the baby steps Q^0..Q^(s-1) mod x^B and the first giant step Q^s mod x^B (with their FFTs)."""
        R, s, B, nfft = self.R, self.s, self.B, self.nfft
        Q = self.qe[:, None] * self.ps + (1.0 - self.qe)[:, None] * self.pb
        self.Qf = Qf = rfft(Q, nfft, axis=1)
        babies_f = np.empty((R, s, Qf.shape[1]), dtype=complex)
        babies_f[:, 0] = 1.0
        for k in range(1, s):
            np.multiply(babies_f[:, k - 1], Qf, out=babies_f[:, k])
        babies = np.empty((R, s, B))  # Q^k mod x^B, k < s (row by row: FFTs of moderate batches run faster)
        for r in range(R):
            babies[r] = irfft(babies_f[r], nfft, axis=1)[:, :B]
        babies[:, 0, :] = 0.0
        babies[:, 0, 0] = 1.0
        self.babies = babies
        self.G1_f = rfft(_mulmod(babies[:, s - 1], Qf, nfft, B), nfft, axis=1)  # Q^s mod x^B

    def find_stop(self) -> bool:
        """The giant steps up to the stop index ``J_stop`` (the first j with every row's mass below B under EPS_MASS,
        phase-1 steps first); False: not stopped by n_max (the stepwise DP adds the mass left)."""
        R, f, s, n_max = self.R, self.f, self.s, self.n_max
        # the mass below B: alive_(f+si+k) = c_(si+k) sum_(t<B) (m_f G_i Q^k)[t] = c_(si+k) <Q^k, cumsum(U_i) reversed>,
        # U_i = m_f G_i mod x^B (G_i itself where first_n = 0)
        self.later = later = np.nonzero(f > 0)[0]
        self.m_start_f = rfft(self.m_start[later], self.nfft, axis=1) if len(later) else None
        J_row = np.full(R, -1)
        for r in range(R):
            low = np.nonzero(self.alive1[r, : f[r]] < EPS_MASS)[0]
            if len(low):
                J_row[r] = low[0]
        giants, self.giants_f = [np.zeros((R, self.B))], [np.ones((R, self.Qf.shape[1]), dtype=complex)]
        giants[0][:, 0] = 1.0
        i = 0
        while True:
            todo = np.nonzero(J_row < 0)[0]
            if len(todo):
                self._stops_in_block(i, todo, giants[i][todo], J_row)
            if (J_row >= 0).all():
                J_stop = int(J_row.max())
                if ((i + 1) * s + f >= J_stop).all():
                    break
            if ((J_row < 0) & ((i + 1) * s + f >= n_max)).any() or (J_row >= n_max).any():
                return False
            G = irfft(self.giants_f[i] * self.G1_f, self.nfft, axis=1)[:, : self.B]
            giants.append(G)
            self.giants_f.append(rfft(G, self.nfft, axis=1))
            i += 1
        self.J_stop = J_stop
        return J_stop < n_max

    def _stops_in_block(self, i: int, todo: np.ndarray, U: np.ndarray, J_row: np.ndarray) -> None:
        """Set ``J_row`` of the rows in ``todo`` whose mass below B ends under EPS_MASS inside giant block i (the
        mass only falls with j: look inside a block only where it ends there)."""
        s, n_len, c, f = self.s, self.n_len, self.c, self.f
        a = c[todo, i * s : (i + 1) * s] if (i + 1) * s <= n_len else \
            np.pad(c[todo, i * s :], ((0, 0), (0, (i + 1) * s - n_len)))
        if self.m_start_f is not None:
            for t, r in enumerate(todo):
                if f[r] > 0:
                    U[t] = irfft(self.giants_f[i][r] * self.m_start_f[np.searchsorted(self.later, r)], self.nfft)[: self.B]
        cs = np.cumsum(U, axis=1)[:, ::-1]
        end = a[:, -1] * np.einsum("rb,rb->r", self.babies[todo, s - 1], cs)
        for t, r in enumerate(todo):
            if end[t] < EPS_MASS:
                low = np.nonzero(a[t] * (self.babies[r] @ cs[t]) < EPS_MASS)[0]
                J_row[r] = f[r] + i * s + low[0]

    def mixed_rows_bounded(self) -> bool:
        """Mixed rows with h_s != h_b: the dropped q (h_b - h_s) S terms (first order), bounded against the unit
        mass, stay within COMPOSED_HAZARD_TOL (else False: the stepwise DP)."""
        f, hs, hb = self.f, self.hs, self.hb
        self.N = N = np.maximum(self.J_stop - f, 0)  # Q-phase terms per row
        for r in np.nonzero(self.mixed)[0]:
            n = int(N[r])
            d = self.qe[r] * np.abs(hb[f[r] : f[r] + n] - hs[f[r] : f[r] + n])
            if n == 0 or not d.any():
                continue
            e, tot = 0.0, 0.0
            for k in range(n):  # e_(k+1) = e_k g_k + |delta_k| c_k  (>= the first-order coefficient)
                e = e * self.g[r, k] + d[k] * self.c[r, k]
                tot += e
            if tot > COMPOSED_HAZARD_TOL:
                return False
        return True

    def phase_sums(self) -> None:
        """Sums over the Q phase: sum_n w(f+n) c_n Q^n for w = 1, h_b (h_s for q = 1) and, in a mixed row whose
        hazards differ, h_s too: ``A_ph``, ``Hb_ph``, ``Hs_ph``."""
        R, s, B, nfft, f, N, hs, hb = self.R, self.s, self.B, self.nfft, self.f, self.N, self.hs, self.hb
        n_g = max(1, -(-int(N.max()) // s))
        width = n_g * s
        mixed_hs = [r for r in range(R) if self.mixed[r] and N[r] > 0
                    and not np.array_equal(hs[f[r] : f[r] + N[r]], hb[f[r] : f[r] + N[r]])]
        n_seq = 3 if mixed_hs else 2
        coef = np.zeros((R, n_seq, width))
        for r in range(R):
            n = int(N[r])
            coef[r, 0, :n] = self.c[r, :n]
            coef[r, 1, :n] = (self.ws if self.one_s[r] else self.wb)[r, :n] * self.c[r, :n]
            if n_seq == 3:
                coef[r, 2, :n] = self.ws[r, :n] * self.c[r, :n]
        coef = coef.reshape(R, n_seq * n_g, s)
        acc = np.zeros((R, n_seq, nfft // 2 + 1), dtype=complex)
        for r in range(R):  # inner sums sum_k a_(s i + k) Q^k by one matrix product, then sum_i Q^(s i) (inner sum i)
            combos_f = rfft((coef[r] @ self.babies[r]).reshape(n_seq, n_g, B), nfft, axis=2)
            for i in range(n_g):
                acc[r] += combos_f[:, i] * self.giants_f[i][r]
        sums = irfft(acc, nfft, axis=2)[:, :, :B]
        if len(self.later):  # from m_f: (m_f * sum) mod x^B
            sums[self.later] = _mulmod(sums[self.later], self.m_start_f[:, None, :], nfft, B)
        self.A_ph = sums[:, 0]
        # h_b- and h_s-weighted sums (h_b = h_s where the rows share one; a q = 1 row needs only h_s, q = 0 only h_b)
        self.Hb_ph = np.where(self.one_s[:, None], 0.0, sums[:, 1])
        self.Hs_ph = sums[:, 2] if n_seq == 3 else sums[:, 1]
        if n_seq == 3:
            pure = np.ones(R, bool)
            pure[mixed_hs] = False
            self.Hs_ph = np.where(pure[:, None], sums[:, 1], sums[:, 2])

    def result(self) -> dict:
        """The j < first_n sums and the stepwise DP's variables (the end-token pmf by the answer and the budget)."""
        R, B, L, f, J_stop, hb = self.R, self.B, self.L, self.f, self.J_stop, self.hb
        A_ph, Hb_ph, Hs_ph = self.A_ph, self.Hb_ph, self.Hs_ph
        A_pre_s, Hb_pre_s = np.zeros((R, B)), np.zeros((R, B))
        for r in range(R):
            for j in range(min(int(f[r]), J_stop)):
                A_pre_s[r] += self.ms[j, r]
                Hb_pre_s[r] += hb[j] * self.ms[j, r]
        switched = self.finite & (f < J_stop)
        A = A_pre_s + A_ph
        Hb = Hb_pre_s + Hb_ph
        sw = switched[:, None]
        # end of the chain: by the answer (h weights) below and above B, by the budget (the rest) from B on
        n1 = next_fast_len(L, real=True)
        S1, Bk1 = rfft(self.ps, n1), rfft(self.pb, n1)
        F = lambda x: rfft(x, n1, axis=1)  # noqa: E731
        qc = self.qe[:, None]
        E = Bk1 * F(Hb_pre_s) + qc * S1 * F(Hs_ph) + (1.0 - qc) * Bk1 * F(Hb_ph)
        Cont = Bk1 * F(A_pre_s - Hb_pre_s) + qc * S1 * F(A_ph - Hs_ph) + (1.0 - qc) * Bk1 * F(A_ph - Hb_ph)
        end_pmf = np.clip(irfft(E, n1, axis=1)[:, :L], 0.0, None)
        end_pmf[:, B:] += np.clip(irfft(Cont, n1, axis=1)[:, B:L], 0.0, None)
        # A_pre_s sums j < min(first_n, J_stop): a row that stopped before first_n has every step in it (A_ph = 0)
        return {"A": A, "Hb": Hb, "A_pre": A_pre_s, "Hb_pre": Hb_pre_s, "first": np.where(sw, self.m_start, 0.0),
                "end_pmf": end_pmf, "steps": A.sum(axis=1),
                "small_prop": np.where(switched, A_ph.sum(axis=1), 0.0)}


def _occupancies(workload: WorkloadProfile, qs: np.ndarray, fns: np.ndarray, sums: dict) -> list[ChainOccupancy]:
    """The call occupancies of each row from the DP's sums."""
    B = workload.token_budget
    A, Hb, A_pre, Hb_pre, first = sums["A"], sums["Hb"], sums["A_pre"], sums["Hb_pre"], sums["first"]
    end_pmf, steps, small_prop = sums["end_pmf"], sums["steps"], sums["small_prop"]
    e0 = np.zeros(B)
    e0[0] = 1.0
    out = []
    for r in range(len(qs)):
        q, f = qs[r], fns[r]
        if np.isfinite(f):
            occ_ph = A[r] - A_pre[r]
            small_first, small_rest = first[r], occ_ph - first[r]
            score_prompt = 1.0 if f <= 0 else 0.0
            score_rest = occ_ph - score_prompt * e0
            regen = (1.0 - q) * (occ_ph - (Hb[r] - Hb_pre[r]))
            base_prompt = 0.0 if f <= 0 else 1.0
            base_gen = (A_pre[r] - e0 if f > 0 else 0.0) + (1.0 - q) * occ_ph
        else:
            z = np.zeros(B)
            small_first, small_rest, score_rest, regen, score_prompt = z, z, z, z, 0.0
            base_prompt, base_gen = 1.0, A[r] - e0
        kept = q * small_prop[r] if np.isfinite(f) else 0.0
        out.append(ChainOccupancy(B, small_first, small_rest, score_rest, float(score_prompt), np.asarray(base_gen, float),
                                  float(base_prompt), regen, end_pmf[r], float(steps[r]), float(small_prop[r]),
                                  float(kept), float(steps[r] - kept)))
    return out
