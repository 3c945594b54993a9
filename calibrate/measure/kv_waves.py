"""KV-bound bursts on the real vLLM scheduler, counted in engine steps (``specsim validate kv-waves``).

A burst of requests arrives at once at an engine whose KV cache holds only part of it (vLLM's
``num_gpu_blocks_override``): admission, chunked prefill, preemption and re-admission decide which step each request
gets its first token in and finishes in. Those are properties of the scheduler, not of the hardware, so they are
measured in steps (no clock): the same counts on any machine, and what the serving simulator's engine
(:mod:`simulator.engines.serving.engine`) must reproduce step for step (:mod:`validate.kv_waves`).

Each burst's requests get random prompt tokens and lengths drawn uniformly in [L/2, 3L/2] (seeded; with shared system
prompts, prompt ``i mod n`` ahead of each request's own tokens), are decoded
greedily with ``ignore_eos`` (each produces exactly its ``max_tokens``), and are stepped by hand through vLLM's engine
core (:class:`calibrate.measure.vllm_stepping.VllmSteppingEngine`); a speculative burst drafts with the base's 6-layer cut
(vLLM's ``draft_model`` method, gamma drafts per step). Per step: tokens scheduled, sequences, prefill tokens,
waiting, preemptions; per request: its lengths, the step of its first token and of its last, the prompt
tokens its first scheduling found in the prefix cache (vLLM's ``num_cached_tokens``), and (speculative) the tokens
each of its verifications gained.
"""

from __future__ import annotations

import datetime
import platform
import random
from dataclasses import asdict, dataclass
from pathlib import Path

SOURCE = "calibrate/measure/kv_waves.py"


@dataclass(frozen=True)
class KvBurst:
    """One burst: ``requests`` at once, prompt and output lengths uniform in [L/2, 3L/2] around the given means."""

    name: str
    requests: int
    input_tokens: int
    output_tokens: int
    max_num_batched_tokens: int
    seed: int = 0
    prefixes: int = 0  # shared system prompts: request i's prompt starts with prompt i mod prefixes
    prefix_tokens: int = 0  # each shared prompt's length (before the request's own ``input_tokens``)
    gamma: int = 0  # speculative decoding with the base's 6-layer cut as draft model (vLLM's draft_model method)

    def lengths(self) -> tuple[list[int], list[int]]:
        """Prompt lengths (shared prompt included) and output lengths."""
        rng = random.Random(self.seed)
        own = [rng.randint(self.input_tokens // 2, self.input_tokens * 3 // 2) for _ in range(self.requests)]
        outs = [rng.randint(self.output_tokens // 2, self.output_tokens * 3 // 2) for _ in range(self.requests)]
        return [n + (self.prefix_tokens if self.prefixes else 0) for n in own], outs

    def prefix_of(self) -> list[int | None]:
        """Request i's shared prompt (None: none)."""
        return [i % self.prefixes if self.prefixes else None for i in range(self.requests)]


# the committed campaign (reports/kv-waves): each engine's cache holds only part of what its burst writes
BURSTS = (KvBurst("short prompts", 24, 200, 100, 256, 0),
          KvBurst("long prompts, chunked", 24, 600, 50, 256, 1),
          KvBurst("many short", 40, 100, 200, 512, 2),
          KvBurst("mixed", 32, 400, 150, 384, 3),
          KvBurst("4 system prompts", 32, 64, 120, 384, 4, prefixes=4, prefix_tokens=256),
          KvBurst("1 long system prompt", 24, 100, 80, 512, 5, prefixes=1, prefix_tokens=640),
          KvBurst("16 system prompts, each reused after others ran", 32, 64, 120, 384, 6, prefixes=16,
                  prefix_tokens=256),
          KvBurst("speculative, draft model, gamma 3", 24, 200, 100, 256, 0, gamma=3),
          KvBurst("speculative, draft model, gamma 5", 24, 200, 100, 256, 0, gamma=5))
CACHE_BLOCKS = (100, 100, 200, 150, 120, 80, 120, 100, 90)  # blocks of each burst's engine
BLOCK_SIZE = 32  # vLLM's CPU attention needs a multiple of 32


def measure_burst(model_dir: str | Path, burst: KvBurst, blocks: int, block_size: int = BLOCK_SIZE,
                  log=print, draft_dir: str | Path | None = None) -> dict:
    """Run ``burst`` on a fresh vLLM engine with ``blocks`` KV blocks (with ``burst.gamma``: speculative decoding
    with ``draft_dir`` as draft model); the step-level record."""
    from vllm import SamplingParams

    from calibrate.measure.vllm_stepping import VllmSteppingEngine

    spec = {"draft_dir": draft_dir, "gamma": burst.gamma} if burst.gamma else {}
    eng = VllmSteppingEngine(model_dir, max_model_len=2048, prefix_caching=True, max_num_seqs=256,
                             engine_args={"num_gpu_blocks_override": int(blocks), "block_size": int(block_size),
                                          "max_num_batched_tokens": int(burst.max_num_batched_tokens)}, **spec)
    try:
        ins, outs = burst.lengths()
        rng = random.Random(10_000 + burst.seed)
        shared = [[rng.randrange(1000, 40000) for _ in range(burst.prefix_tokens)] for _ in range(burst.prefixes)]
        for i, (n_in, n_out, j) in enumerate(zip(ins, outs, burst.prefix_of())):
            head = shared[j] if j is not None else []
            ids = head + [rng.randrange(1000, 40000) for _ in range(n_in - len(head))]
            eng.add_raw(str(i), ids, SamplingParams(max_tokens=n_out, temperature=0.0, ignore_eos=True,
                                                    detokenize=False))
        steps, first, done, cached = [], {}, {}, {}
        gained: dict[int, list[int]] = {i: [] for i in range(len(ins))}  # tokens per verification, in order
        seen = dict.fromkeys(range(len(ins)), 0)
        while eng.has_unfinished():
            rep = eng.step()
            if not rep.request_ids:
                continue
            decoding = {r for r, n, c, k in zip(rep.request_ids, rep.new_tokens, rep.context_tokens,
                                                rep.spec_tokens or [0] * len(rep.request_ids))
                        if c >= ins[r] and n == 1 + k}
            steps.append({"tokens": int(sum(rep.new_tokens)), "sequences": len(rep.request_ids),
                          "prefill_tokens": int(sum(n for r, n in zip(rep.request_ids, rep.new_tokens)
                                                    if r not in decoding)),
                          "waiting": int(rep.waiting), "preempted": eng.last_preemptions()})
            for rid, n_out, finished, hit in rep.outputs:
                if n_out >= 1:
                    first.setdefault(rid, len(steps))
                    cached.setdefault(rid, int(hit))  # prompt tokens its first scheduling found in the prefix cache
                if rid in decoding and n_out > seen[rid]:
                    gained[rid].append(n_out - seen[rid])
                seen[rid] = max(seen[rid], n_out)
                if finished:
                    done[rid] = len(steps)
        limits = dict(eng.limits)
        version = eng.version()
    finally:
        eng.close()
    log(f"{burst.name}: {len(steps)} steps, {sum(s['preempted'] for s in steps)} preemptions")
    return {"burst": asdict(burst), "blocks": int(blocks), "block_size": int(block_size), "engine_limits": limits,
            "vllm_version": version, "input_tokens": ins, "output_tokens": outs,
            "prefix_of": burst.prefix_of(), "cached_tokens": [cached.get(i) for i in range(len(ins))],
            "draft": Path(draft_dir).name if burst.gamma and draft_dir else None,
            "tokens_per_verification": [gained[i] for i in range(len(ins))] if burst.gamma else None,
            "first_token_step": [first.get(i) for i in range(len(ins))],
            "finish_step": [done.get(i) for i in range(len(ins))], "steps": steps}


def measure_campaign(model_dir: str | Path, draft_dir: str | Path | None, bursts=BURSTS, blocks=CACHE_BLOCKS,
                     log=print) -> dict:
    """Every burst of the campaign (the speculative ones with ``draft_dir`` as draft model), with provenance
    (engine, version, models, host, date, seeds)."""
    runs = [measure_burst(model_dir, b, n, log=log, draft_dir=draft_dir) for b, n in zip(bursts, blocks)]
    return {"source": SOURCE, "model_dir": Path(model_dir).name, "date": datetime.date.today().isoformat(),
            "draft_dir": Path(draft_dir).name if draft_dir else None,
            "host": {"machine": platform.machine(), "python": platform.python_version()},
            "engine": "vllm (engine core stepped in-process)", "vllm_version": runs[0]["vllm_version"] if runs else None,
            "runs": runs}
