"""Microbenchmarks of the ops the cost model needs, on a real engine.

Ops (one record per configuration, median over ``repeats`` after one warm-up):
- ``decode``  batch B sequences with context L generate n tokens: wall time of the n decode steps
  (vLLM: t(max_tokens=n+1) - t(max_tokens=1) on fresh prompts, i.e. minus the prefill).
- ``prefill`` N new prompt tokens on C cached tokens (max_tokens 1); cached = what the engine reports.
- ``score``   ~70 new tokens on a cached prefix, max_tokens 1, top-10 logprobs.
- ``draft``   the draft model decodes gamma tokens at context L.
- ``verify``  the target prefills gamma+1 tokens on a cached context L (one verification pass).
Random token ids are used as prompts (timing does not depend on content); prefix caches are
defeated between repeats with fresh random ids.
"""

from __future__ import annotations

import datetime as _dt
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.measure.hardware import detect_hardware
from calibrate.measure.run_directory import RunDirectory
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError

SCORE_NEW_TOKENS = 70


@dataclass
class MicrobenchPlan:
    contexts: list[int] = field(default_factory=lambda: [128, 512])
    batches: list[int] = field(default_factory=lambda: [1, 2])
    new_tokens: list[int] = field(default_factory=lambda: [16, 128])
    cached_tokens: list[int] = field(default_factory=lambda: [0, 256])
    gammas: list[int] = field(default_factory=lambda: [1, 3, 5])
    decode_tokens: int = 16
    repeats: int = 3


class _Ids:
    """Fresh random token ids (avoid special ids at the bottom of the vocab)."""

    def __init__(self, vocab: int, seed: int = 0):
        self.rng, self.hi = random.Random(seed), max(200, min(vocab, 30000)) - 1

    def __call__(self, n: int) -> list[int]:
        return [self.rng.randint(100, self.hi) for _ in range(n)]


def _record(op, model, batch, new, cached, gamma, times) -> dict:
    return {"schema_version": SCHEMA_VERSION, "kind": "microbench", "op": op, "model": model, "batch": batch,
            "new_tokens": new, "cached_tokens": cached, "gamma": gamma,
            "wall_time_s": statistics.median(times), "wall_times_s": list(times), "repeats": len(times)}


def _measure(fn, repeats: int) -> list[float]:
    fn()  # warm-up (kernel selection / compilation for this shape)
    out = []
    for _ in range(repeats):
        out.append(fn())
    return out


class _VllmOps:
    def __init__(self, engine):
        self.e, self.ids = engine, _Ids(engine.info["vocab_size"])

    def _gen(self, prompts, max_tokens, logprobs=None) -> tuple[float, int]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=logprobs,
                            detokenize=False)
        t0 = time.perf_counter()
        outs = self.e.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        return time.perf_counter() - t0, int(outs[0].num_cached_tokens or 0)

    def decode(self, ctx, batch, n) -> float:
        t1, _ = self._gen([self.ids(ctx) for _ in range(batch)], 1)
        tn, _ = self._gen([self.ids(ctx) for _ in range(batch)], n + 1)
        return max(tn - t1, 0.0)

    def prefill(self, new, cached, logprobs=None) -> tuple[float, int]:
        prefix = self.ids(cached)
        if cached:
            self._gen([prefix], 1)
        return self._gen([prefix + self.ids(new)], 1, logprobs)


class _TorchOps:
    def __init__(self, engine):
        self.e, self.ids = engine, _Ids(engine.info["vocab_size"])

    def _sync(self):
        import torch

        if self.e.device == "cuda":
            torch.cuda.synchronize()

    def decode(self, ctx, batch, n, state=None) -> float:
        import torch
        from transformers import DynamicCache

        model = (state or self.e.target).model
        cache = DynamicCache(config=model.config)
        x = torch.tensor([self.ids(ctx) for _ in range(batch)], device=model.device)
        with torch.inference_mode():
            out = model(input_ids=x, past_key_values=cache, use_cache=True)
            self._sync()
            t0 = time.perf_counter()
            for _ in range(n):
                nxt = out.logits[:, -1:].argmax(-1)
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            self._sync()
        return time.perf_counter() - t0

    def prefill(self, new, cached, logprobs=None, state=None) -> tuple[float, int]:
        import torch

        st = state or self.e.target
        prefix = self.ids(max(cached, 1))[:cached] if cached else []
        if cached:
            st.extend(prefix)
        self._sync()
        t0 = time.perf_counter()
        logits, n_cached = st.extend(prefix + self.ids(new))
        if logprobs:
            torch.log_softmax(logits[-1], -1).topk(logprobs)
        self._sync()
        return time.perf_counter() - t0, n_cached


def _engine(engine: str, model_dir: Path, dummy: bool, dtype: str, device: str):
    if engine == "vllm":
        from calibrate.measure.vllm_engine import VllmEngine

        return VllmEngine(model_dir, dtype=dtype, dummy=dummy, max_model_len=4096), _VllmOps
    if engine == "torch":
        from calibrate.measure.torch_engine import TorchEngine

        return TorchEngine(model_dir, dtype=dtype, dummy=dummy, device=device), _TorchOps
    raise InputError(None, "engine", f"unknown engine {engine!r} (vllm | torch)")


def run_microbench(engine: str, model: str | None, arch: str | None, draft: str | None, plan: MicrobenchPlan,
                   dtype: str, device: str, out: str | Path, log=print, layers: int | None = None) -> int:
    """Measure every op of ``plan``; write records to ``out/microbench.jsonl``; return how many."""
    from calibrate.measure.model_cache import dummy_model_dir

    if (model is None) == (arch is None):
        raise InputError(None, "model", "give exactly one of --model DIR or --arch NAME")
    model_dir = Path(model) if model else dummy_model_dir(arch, layers=layers)
    dummy = model is None
    e, ops_cls = _engine(engine, model_dir, dummy, dtype, device)
    ops, n = ops_cls(e), 0
    manifest = {
        "schema_version": SCHEMA_VERSION, "kind": "microbench",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "engine": engine,
        "engine_version": e.version(), "hardware": detect_hardware(), "models": {"base": e.describe()},
        "dtype": dtype, "tensor_parallel": 1, "system": "", "gamma": 0, "threshold": 0.0, "first_n": 0,
        "budget_tokens": 0, "score_mode": "", "sampling": {"temperature": 0.0}, "seed": 0,
        "dataset": "", "num_requests": 0, "command": "microbench",
        "options": {"plan": plan.__dict__, "env": getattr(e, "env", {})},
    }
    rd = RunDirectory.open(out, manifest)
    try:
        for ctx in plan.contexts:
            for b in plan.batches:
                log(f"decode ctx={ctx} batch={b}")
                t = _measure(lambda: ops.decode(ctx, b, plan.decode_tokens), plan.repeats)
                rd.write("microbench", _record("decode", "base", b, plan.decode_tokens, ctx, 0, t)); n += 1
        for new in plan.new_tokens:
            for c in plan.cached_tokens:
                log(f"prefill new={new} cached={c}")
                res = [ops.prefill(new, c) for _ in range(plan.repeats + 1)][1:]
                rd.write("microbench", _record("prefill", "base", 1, new, min(r[1] for r in res), 0,
                                               [r[0] for r in res])); n += 1
        for c in plan.contexts:
            log(f"score cached={c}")
            res = [ops.prefill(SCORE_NEW_TOKENS, c, logprobs=10) for _ in range(plan.repeats + 1)][1:]
            rd.write("microbench", _record("score", "base", 1, SCORE_NEW_TOKENS, min(r[1] for r in res), 0,
                                           [r[0] for r in res])); n += 1
            for g in plan.gammas:
                res = [ops.prefill(g + 1, c) for _ in range(plan.repeats + 1)][1:]
                rd.write("microbench", _record("verify", "base", 1, g + 1, min(r[1] for r in res), g,
                                               [r[0] for r in res])); n += 1
        if draft:
            e.close()
            d, _ = _engine(engine, Path(draft), dummy, dtype, device)
            dops = ops_cls(d)
            for c in plan.contexts:
                for g in plan.gammas:
                    log(f"draft ctx={c} gamma={g}")
                    t = _measure(lambda: dops.decode(c, 1, g), plan.repeats)
                    rd.write("microbench", _record("draft", "draft", 1, g, c, g, t)); n += 1
            d.close()
        else:
            e.close()
    finally:
        rd.close()
    return n
