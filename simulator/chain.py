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
from scipy.signal import fftconvolve

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
    B = workload.token_budget
    ps = workload.step_pmf_small.dense(workload.max_step_tokens + 1)
    pb = workload.step_pmf_base.dense(workload.max_step_tokens + 1)
    n_max = max_steps or (workload.max_steps() + 1)
    hs = answer_hazard(workload.steps_pmf_small, n_max)
    hb = answer_hazard(workload.steps_pmf_base, n_max)
    L = B + workload.max_step_tokens  # t + k <= B - 1 + max_step
    z = lambda: np.zeros(B)  # noqa: E731
    occ = ChainOccupancy(B, z(), z(), z(), 0.0, z(), 0.0, z(), np.zeros(L), 0.0, 0.0, 0.0, 0.0)
    beyond = np.arange(L) >= B  # mass landing here ends on the budget

    m = z()
    m[0] = 1.0
    for j in range(n_max):
        alive = m.sum()
        if alive < EPS_MASS:
            break
        small_phase = j >= first_n
        w_s = q if small_phase else 0.0
        w_b = 1.0 - w_s
        occ.steps += alive
        if small_phase:
            occ.small_proposals += alive
            (occ.small_first if j == first_n else occ.small_rest)[:] += m
            if j == 0:
                occ.score_prompt += alive
            else:
                occ.score_rest[:] += m
            occ.regen_continue[:] += w_b * (1.0 - hb[j]) * m
            occ.small_kept += w_s * alive
        if w_b > 0:
            if j == 0 and not small_phase:
                occ.base_prompt += w_b * alive
            else:
                occ.base_gen[:] += w_b * m
            occ.base_steps += w_b * alive
        nxt = np.zeros(L)
        if w_s > 0:
            cs = np.clip(fftconvolve(m, ps)[:L], 0.0, None)
            occ.end_pmf += w_s * cs * np.where(beyond, 1.0, hs[j])
            nxt += w_s * (1.0 - hs[j]) * cs
        if w_b > 0:
            cb = np.clip(fftconvolve(m, pb)[:L], 0.0, None)
            occ.end_pmf += w_b * cb * np.where(beyond, 1.0, hb[j])
            nxt += w_b * (1.0 - hb[j]) * cb
        m = nxt[:B]
    else:
        occ.end_pmf[:B] += m  # hazard 1 at the last index: cannot happen, kept for conservation
    return occ
