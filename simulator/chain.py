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
any expected cost is a dot product of an occupancy with a cost vector over t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft

from simulator.workload import WorkloadProfile, answer_hazard

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


def run_chains(workload: WorkloadProfile, qs, first_n, max_steps: int | None = None) -> list[ChainOccupancy]:
    """The DP for several (keep-probability, first_n) chains at once (rows), one FFT pair per step for all
    of them; ``first_n`` is one value for every row or one per row.

    With M = FFT(m_j), S, Bk the FFTs of the step-length pmfs and the row's step weights (w_s, w_b) =
    (q, 1 - q) from step first_n on, (0, 1) before: X = M w_s S, Y = M w_b Bk and
        ending by the answer   = IFFT(h_s(j) X + h_b(j) Y)        (accumulated in the frequency domain)
        continuing             = IFFT((1 - h_s(j)) X + (1 - h_b(j)) Y), below B; from B on it ends (budget).
    The call occupancies are linear in the m_j with coefficients constant over the phases, so only
    sum_j m_j, sum_j h_b(j) m_j and each row's m at j = first_n are kept per step.
    """
    qs = np.asarray(qs, dtype=float)
    R = len(qs)
    fns = np.broadcast_to(np.asarray(first_n, dtype=float), (R,)).copy()
    B = workload.token_budget
    K = workload.max_step_tokens
    L = B + K  # t + k <= B - 1 + K
    nfft = next_fast_len(L)
    S = rfft(workload.step_pmf_small.dense(K + 1), nfft)
    Bk = rfft(workload.step_pmf_base.dense(K + 1), nfft)
    n_max = max_steps or (workload.max_steps() + 1)
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
    if alive.max() >= EPS_MASS:  # ran out of steps (the hazard is 1 past the step-count support: not reached)
        end_pmf[:, :B] += m
    e0 = np.zeros(B)
    e0[0] = 1.0
    out = []
    for r in range(R):
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
