"""Acceptance bookkeeping and the speedup predictions (REFERENCE §2), in the paper's symbols.

An accept log is a list of (k, accepted) per iteration: k drafted tokens, the first
``accepted`` of them accepted (0 <= accepted <= k; k = 0 is a plain target step).

    a_i  = P(first i drafts accepted) = #(accepted >= i) / #(k >= i)
    E[M] = 1 + sum_i a_i                        (per-position form, tokens per iteration)
    E    = (1 - alpha^(gamma+1)) / (1 - alpha)  (i.i.d. closed form)
    S    = E / (gamma c + v)                    (v = verify cost / decode cost; v = 1 in the paper)
"""

from __future__ import annotations

import numpy as np

from simulator.engines.speculative import leviathan_expected_tokens


def per_position_acceptance(log: list[tuple[int, int]], gamma: int) -> np.ndarray:
    """a_1..a_gamma from an accept log (NaN where no iteration drafted that far)."""
    k = np.array([x[0] for x in log], dtype=int)
    acc = np.array([x[1] for x in log], dtype=int)
    out = np.full(gamma, np.nan)
    for i in range(1, gamma + 1):
        tried = k >= i
        if tried.any():
            out[i - 1] = float((acc[tried] >= i).mean())
    return out


def conditional_acceptance(a: np.ndarray) -> np.ndarray:
    """P(draft i accepted | drafts 1..i-1 accepted) = a_i / a_{i-1}."""
    prev = np.concatenate([[1.0], a[:-1]])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(prev > 0, a / prev, np.nan)


def acceptance_length(log: list[tuple[int, int]]) -> float:
    """Mean tokens emitted per iteration that drafted (accepted + the target's own token)."""
    acc = [a for k, a in log if k > 0]
    return 1.0 + float(np.mean(acc)) if acc else float("nan")


def replay_greedy(run: np.ndarray, avail: np.ndarray, gamma: int, n_tokens: int) -> list[tuple[int, int]]:
    """Accept log of greedy speculative decoding replayed from teacher-forced matches.

    Under greedy decoding every accepted draft equals the target's token, so the draft's
    proposals while it is right are its teacher-forced predictions: ``run[t]`` = how many
    consecutive drafts starting at generated position t the target accepts, ``avail[t]`` =
    how many the drafter can propose there. Mirrors the loop in ``greedy_spec``: the first
    token comes from the prefill, each iteration drafts k = min(gamma, avail, room - 1).
    """
    log, t = [], 1
    while t < n_tokens:
        k = int(min(gamma, avail[t], n_tokens - t - 1))
        if k < 1:
            log.append((0, 0))
            t += 1
            continue
        acc = int(min(run[t], k))
        log.append((k, acc))
        t += acc + 1
    return log


def run_lengths(match: np.ndarray, cap: int) -> np.ndarray:
    """run[t] = number of consecutive True in match[t:], capped at ``cap``."""
    out = np.zeros(len(match) + 1, dtype=int)
    for t in range(len(match) - 1, -1, -1):
        out[t] = min(out[t + 1] + 1, cap) if match[t] else 0
    return out[:-1]


def fit_alpha(match_rate: float) -> float:
    """alpha = E[beta]: under greedy, beta_t is 1 if the draft's argmax equals the target's."""
    return float(np.clip(match_rate, 0.0, 0.999999))


def speedup_iid(alpha: float, gamma: int, c: float, v: float = 1.0) -> float:
    return leviathan_expected_tokens(alpha, gamma) / (gamma * c + v)


def speedup_per_position(a: np.ndarray, c: float, v: float = 1.0) -> float:
    return (1.0 + float(np.nansum(a))) / (len(a) * c + v)
