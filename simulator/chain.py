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
    """The DP for several (keep-probability, first_n) chains at once (rows), one FFT per step for all of
    them; ``first_n`` is one value for every row or one per row.

    With M = FFT(m_j) and S, Bk the FFTs of the step-length pmfs, per step:
        all moved mass  = IFFT(M [w_s S + w_b Bk])
        continuing mass = IFFT(M [w_s (1 - h_s) S + w_b (1 - h_b) Bk]) below B
        ending mass     = the difference below B, all moved mass from B on.
    """
    qs = np.asarray(qs, dtype=float)
    R = len(qs)
    first_ns = np.broadcast_to(np.asarray(first_n, dtype=float), (R,))
    B = workload.token_budget
    K = workload.max_step_tokens
    L = B + K  # t + k <= B - 1 + K
    nfft = next_fast_len(L)
    S = rfft(workload.step_pmf_small.dense(K + 1), nfft)
    Bk = rfft(workload.step_pmf_base.dense(K + 1), nfft)
    n_max = max_steps or (workload.max_steps() + 1)
    hs = answer_hazard(workload.steps_pmf_small, n_max)
    hb = answer_hazard(workload.steps_pmf_base, n_max)
    z = lambda: np.zeros((R, B))  # noqa: E731
    small_first, small_rest, score_rest, base_gen, regen_continue = z(), z(), z(), z(), z()
    score_prompt, base_prompt = np.zeros(R), np.zeros(R)
    steps, small_prop, small_kept, base_steps = np.zeros(R), np.zeros(R), np.zeros(R), np.zeros(R)
    end_pmf = np.zeros((R, L))

    m = z()
    m[:, 0] = 1.0
    for j in range(n_max):
        alive = m.sum(axis=1)
        if alive.max() < EPS_MASS:
            break
        phase = j >= first_ns  # rows in the small-proposal phase
        w_s = np.where(phase, qs, 0.0)
        w_b = 1.0 - w_s
        steps += alive
        if phase.any():
            ph = phase[:, None]
            small_prop += np.where(phase, alive, 0.0)
            first = (j == first_ns)[:, None]
            small_first += np.where(first, m, 0.0)
            small_rest += np.where(ph & ~first, m, 0.0)
            if j == 0:
                score_prompt += np.where(phase, alive, 0.0)
            else:
                score_rest += np.where(ph, m, 0.0)
            regen_continue += np.where(ph, (w_b * (1.0 - hb[j]))[:, None] * m, 0.0)
            small_kept += w_s * alive
        if j == 0:
            base_prompt += np.where(phase, 0.0, w_b * alive)
            base_gen += np.where(phase, w_b, 0.0)[:, None] * m
        else:
            base_gen += w_b[:, None] * m
        base_steps += w_b * alive
        M = rfft(m, nfft, axis=1)
        ws, wb = w_s[:, None], w_b[:, None]
        total = irfft(M * (ws * S + wb * Bk), nfft, axis=1)[:, :L]
        cont = np.clip(irfft(M * (ws * (1.0 - hs[j]) * S + wb * (1.0 - hb[j]) * Bk), nfft, axis=1)[:, :B], 0.0, None)
        end_pmf[:, :B] += np.clip(total[:, :B] - cont, 0.0, None)
        end_pmf[:, B:] += np.clip(total[:, B:], 0.0, None)
        m = cont
        m[m < 1e-300] = 0.0
    else:
        end_pmf[:, :B] += m  # not reached: the hazard is 1 past the step-count support
    return [
        ChainOccupancy(B, small_first[r], small_rest[r], score_rest[r], float(score_prompt[r]), base_gen[r],
                       float(base_prompt[r]), regen_continue[r], end_pmf[r], float(steps[r]), float(small_prop[r]),
                       float(small_kept[r]), float(base_steps[r]))
        for r in range(R)
    ]
