"""Speculative-decoding math core (Leviathan et al. 2023; Chen et al. 2023).

Symbols: gamma = drafted tokens per iteration, alpha = i.i.d. per-token acceptance,
a_i = P(first i drafts accepted) (per-position form, a_0 = 1), c = T_draft / T_target.

One iteration yields M = 1 + (accepted drafts) tokens, M in 1..gamma+1, with
    P(M = m) = a_{m-1} - a_m   (m <= gamma),   P(M = gamma + 1) = a_gamma,
so E[M] = 1 + sum_{i=1..gamma} a_i; with a_i = alpha^i this is (1 - alpha^(gamma+1)) / (1 - alpha).
"""

from __future__ import annotations

import numpy as np


def iid_acceptance(alpha: float, gamma: int) -> np.ndarray:
    """a_i = alpha^i, i = 1..gamma."""
    return alpha ** np.arange(1, gamma + 1, dtype=float)


def tokens_per_iteration_pmf(a: np.ndarray) -> np.ndarray:
    """pmf over M = 1..gamma+1 (index m-1) from a_1..a_gamma."""
    a_full = np.concatenate([[1.0], np.asarray(a, dtype=float), [0.0]])
    p = a_full[:-1] - a_full[1:]
    return np.clip(p, 0.0, 1.0) / max(p.clip(0).sum(), 1e-300)


def expected_tokens_per_iteration(a: np.ndarray) -> float:
    """E[M] = 1 + sum a_i (the acceptance length vLLM reports)."""
    return 1.0 + float(np.sum(a))


def leviathan_expected_tokens(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha), the i.i.d. closed form."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime speedup S = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."""
    return leviathan_expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def iteration_occupancy(a: np.ndarray, length: int) -> np.ndarray:
    """u[g] = P(an iteration starts after exactly g generated tokens), g = 0..length-1.

    Renewal recursion u[0] = 1, u[g] = sum_m P(M = m) u[g - m]. A segment needing r tokens
    runs an iteration at offset g iff g < r, so E[#iterations] = sum_{g<r} u[g].
    """
    p = tokens_per_iteration_pmf(a)
    impulse = np.zeros(length)
    if length:
        impulse[0] = 1.0
    # u - sum_m p_m u[. - m] = delta: an all-pole IIR filter (scipy.signal imported here: it
    # costs half a second at start-up, paid by every CLI call otherwise)
    from scipy.signal import lfilter

    return lfilter([1.0], np.concatenate([[1.0], -p]), impulse)


def iteration_cdf(a: np.ndarray) -> np.ndarray:
    """CDF over M = 1..gamma+1 of ``tokens_per_iteration_pmf(a)``, closed at 1 so every u < 1 lands inside."""
    from simulator.inputs.distributions import closed_cdf

    return closed_cdf(tokens_per_iteration_pmf(a))


def draw_iterations(m_cdf: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """M of ``total`` successive speculative iterations (inverse-CDF draws, one uniform each): the sampler's
    one draw rule. Segments needing r[k] tokens use ``sum(r)`` draws (enough: an iteration yields >= 1),
    segment k the ones from position ``sum(r[:k])`` on.

    Drawn with γ_max's CDF, the draws serve every γ <= γ_max: M_γ = min(M, γ + 1) has
    P(M_γ > i) = a_i for i <= γ (the per-iteration γ policy of the serving engine uses this)."""
    return np.searchsorted(m_cdf, rng.random(total), side="right") + 1


def split_iterations(m_cdf: np.ndarray, r: np.ndarray, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Speculative iterations of segments needing r[k] tokens each at a fixed γ.

    ``draw_iterations`` gives one M per token of the segments; iterations are kept while their offset
    g < r; the last one of a segment is cut to what it needs.
    Returns (segment, offset g, tokens produced) per iteration, in segment order."""
    r = np.asarray(r, np.int64)
    total = int(r.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    inc = draw_iterations(m_cdf, total, rng)
    seg = np.repeat(np.arange(len(r)), r)
    ends = np.cumsum(r)
    cs = np.cumsum(inc)
    # draws consumed before each segment's start (a segment needing 0 tokens starts where the next one does)
    before = np.concatenate([[0], cs])[np.r_[0, ends[:-1]]]
    g = cs - inc - before[seg]
    ok = g < r[seg]
    seg, g, inc = seg[ok], g[ok], inc[ok]
    return seg, g, np.minimum(inc, r[seg] - g)

