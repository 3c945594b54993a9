"""Minimal greedy speculative decoding on torch (gpt-fast style), timed per pass.

q = draft, p = target (greedy: both are argmax, so the output equals the target's own greedy
output). Drafters: ``ModelDrafter`` (any causal LM with the target's tokenizer, e.g. a
layer-truncated cut) and ``NgramDrafter`` (prompt lookup, no model). KV caches reuse the
longest common prefix (``calibrate.torch_engine.KVState``). Assumes batch size 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from calibrate.torch_engine import KVState


@dataclass
class DecodeResult:
    tokens: list[int]
    time_s: float
    log: list[tuple[int, int]] = field(default_factory=list)  # (k drafted, accepted) per iteration
    draft_pass_s: list[float] = field(default_factory=list)   # one draft forward (model drafters)
    verify_s: list[tuple[int, float]] = field(default_factory=list)  # (k, target pass time)
    decode_s: list[float] = field(default_factory=list)       # single-token target passes


def _argmax(logits) -> int:
    return int(logits.argmax(-1).item())


class ModelDrafter:
    def __init__(self, model):
        self.kv = KVState(model)
        self.pass_s: list[float] = []

    def propose(self, ids: list[int], k: int) -> list[int]:
        """Phase 1: draft k tokens sequentially (greedy q)."""
        d: list[int] = []
        for _ in range(k):
            t0 = time.perf_counter()
            logits, _ = self.kv.extend(ids + d)
            d.append(_argmax(logits[-1]))
            self.pass_s.append(time.perf_counter() - t0)
        return d


class NgramDrafter:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the last n tokens."""

    def __init__(self, n_max: int = 4, n_min: int = 2):
        self.n_max, self.n_min = n_max, n_min
        self.pass_s: list[float] = []

    def propose(self, ids: list[int], k: int) -> list[int]:
        t0 = time.perf_counter()
        out: list[int] = []
        for n in range(self.n_max, self.n_min - 1, -1):
            if len(ids) <= n:
                continue
            pat = ids[-n:]
            for j in range(len(ids) - n - 1, -1, -1):
                if ids[j:j + n] == pat:
                    out = ids[j + n:j + n + k]
                    break
            if out:
                break
        self.pass_s.append(time.perf_counter() - t0)
        return out


def _finish(gen: list[int], max_new: int, eos: set[int]) -> list[int]:
    for i, t in enumerate(gen):
        if t in eos:
            return gen[:i + 1]
    return gen[:max_new]


def vanilla_decode(target: KVState, prompt: list[int], max_new: int, eos: set[int]) -> DecodeResult:
    t_start = time.perf_counter()
    logits, _ = target.extend(prompt)
    gen, decode_s = [_argmax(logits[-1])], []
    while len(gen) < max_new and gen[-1] not in eos:
        t0 = time.perf_counter()
        logits, _ = target.extend(prompt + gen)
        gen.append(_argmax(logits[-1]))
        decode_s.append(time.perf_counter() - t0)
    return DecodeResult(gen, time.perf_counter() - t_start, decode_s=decode_s)


def speculative_decode(target: KVState, drafter, prompt: list[int], max_new: int, gamma: int,
                       eos: set[int]) -> DecodeResult:
    """Greedy speculative decoding; the result's tokens equal ``vanilla_decode``'s (up to numerics)."""
    t_start = time.perf_counter()
    drafter.pass_s = []
    logits, _ = target.extend(prompt)
    gen = [_argmax(logits[-1])]  # the prefill's token
    res = DecodeResult([], 0.0)
    while len(gen) < max_new and gen[-1] not in eos:
        k = min(gamma, max_new - len(gen) - 1)
        d = drafter.propose(prompt + gen, k) if k >= 1 else []
        # Phase 2: verify the drafts (and get the bonus token) in one target pass.
        t0 = time.perf_counter()
        logits, _ = target.extend(prompt + gen + d)
        p_argmax = logits[-len(d) - 1:].argmax(-1).tolist()
        res.verify_s.append((len(d), time.perf_counter() - t0))
        # Phase 3: accept the longest prefix where draft == target argmax, then the target's token.
        acc = 0
        while acc < len(d) and d[acc] == p_argmax[acc]:
            acc += 1
        gen += d[:acc] + [p_argmax[acc]]
        res.log.append((len(d), acc))
    res.tokens = _finish(gen, max_new, eos)
    res.time_s = time.perf_counter() - t_start
    res.draft_pass_s = list(drafter.pass_s)
    return res


def teacher_forced(model, ids: list[int]):
    """Logits [len(ids), vocab] (float32) of one full-sequence pass, no cache."""
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()
