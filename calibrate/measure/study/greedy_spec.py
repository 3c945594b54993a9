"""Minimal greedy speculative decoding on torch (gpt-fast style), timed per pass.

q = draft, p = target (greedy: both are argmax, so the output equals the target's own greedy
output). Drafters: ``ModelDrafter`` (any causal LM with the target's tokenizer, e.g. a
layer-truncated cut), ``NgramDrafter`` (prompt lookup, no model) and ``HeadDrafter`` (an EAGLE-style
head fed the target's features; the target is then a ``HiddenKVState``). KV caches reuse the
longest common prefix (``calibrate.measure.torch_engine.KVState``). Assumes batch size 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from calibrate.measure.torch_engine import KVState


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


class HiddenKVState(KVState):
    """The target with a KV cache that also keeps its features: ``feats`` [len(ids), H] for every cached
    position (cropped with the cache), the output of the final decoder layer BEFORE the final norm (the
    norm's input, captured by a hook); ``hidden`` = the rows computed by the last ``extend``."""

    def __init__(self, model):
        super().__init__(model)
        self.feats = None

    def extend(self, ids: list[int]):
        import torch

        got = []
        hook = self.model.model.norm.register_forward_hook(lambda m, inp, out: got.append(inp[0]))
        try:
            logits, n = super().extend(ids)
        finally:
            hook.remove()
        self.hidden = got[-1][0].float()
        self.feats = self.hidden if self.feats is None or n == 0 else torch.cat([self.feats[:n], self.hidden])
        return logits, n


class HeadDrafter:
    """EAGLE-style head (``calibrate.measure.study.draft_head``): drafts from the target's features of the accepted
    positions, chaining its own predicted feature and drafted token. ``observe`` receives the target's
    features (all positions) after every target pass (``speculative_decode`` calls it; the target must be a
    ``HiddenKVState``)."""

    def __init__(self, head):
        self.head = head
        self.pass_s: list[float] = []
        self.reset()

    def reset(self):
        self.cache = None
        self.head_ids: list[int] = []   # ids whose head positions 0..len-2 are cached with true features
        self.feat_ids: list[int] = []   # ids whose target features we hold (positions 0..len-1)
        self.feats = None

    def observe(self, ids: list[int], feats) -> None:
        """The target's features [len(ids), H] for every position of ``ids`` (``HiddenKVState.feats``)."""
        self.feats, self.feat_ids = feats, list(ids)

    def propose(self, ids: list[int], k: int) -> list[int]:
        import torch

        n = len(ids)
        if self.cache is None or ids[:1] != self.head_ids[:1]:
            self.cache, self.head_ids = self.head.new_cache(), []
        m = 0  # head positions still valid: j < m with ids[j+1] unchanged
        for a, b in zip(self.head_ids, ids):
            if a != b:
                break
            m += 1
        m = max(0, min(m - 1, n - 2))
        fm = 0
        for a, b in zip(self.feat_ids, ids):
            if a != b:
                break
            fm += 1
        if fm < n - 1:
            raise RuntimeError(f"head drafter: target features cover {fm} of the {n - 1} positions it needs")
        extra = self.cache.get_seq_length() - m
        if extra > 0:
            self.cache.crop(-extra)
        d: list[int] = []
        with torch.inference_mode():
            t0 = time.perf_counter()
            g, lg = self.head(torch.tensor([ids[m + 1:n]]), self.feats[None, m:n - 1],
                              torch.arange(m + 1, n)[None], self.cache)
            d.append(_argmax(lg[0, -1]))
            self.pass_s.append(time.perf_counter() - t0)
            g = g[0, -1]
            for i in range(1, k):
                t0 = time.perf_counter()
                gg, lg = self.head(torch.tensor([[d[-1]]]), g[None, None], torch.tensor([[n - 1 + i]]), self.cache)
                d.append(_argmax(lg[0, -1]))
                g = gg[0, -1]
                self.pass_s.append(time.perf_counter() - t0)
        self.head_ids = list(ids)
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
    if not isinstance(gamma, int) or gamma < 1:
        from simulator.errors import InputError

        raise InputError(None, "gamma", f"speculative decoding needs gamma >= 1 (got {gamma!r})")
    t_start = time.perf_counter()
    drafter.pass_s = []
    observe = getattr(drafter, "observe", None)  # feature-fed drafters (HeadDrafter) need a HiddenKVState target
    if observe is not None:
        drafter.reset()
    logits, _ = target.extend(prompt)
    if observe is not None:
        observe(prompt, target.feats)
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
        if observe is not None:
            observe(prompt + gen + d, target.feats)
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
