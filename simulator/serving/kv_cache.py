"""Static KV-cache memory split of colocated engines (vLLM ``gpu-memory-utilization``).

Each engine gets ``memory_fraction`` of every GPU's memory; what its weights leave is KV cache:

    capacity_tokens = (fraction * memory_bytes - sum_models weights_resident / TP)
                      / sum_models kv_bytes_per_token_per_gpu

where the sums run over the models living in the engine (the base engine of a speculative
system also holds the draft model and its KV, one draft KV entry per base KV entry).

Sliding-window layers (gpt-oss, Gemma 3) keep at most ``sliding_window`` tokens per sequence (vLLM's hybrid KV
allocator frees the blocks that slide out): the capacity counts full-attention tokens only, and each running
sequence reserves its window's worth of sliding-layer KV, in full-attention token equivalents
(``seq_reserve_tokens``; exact once a sequence is longer than the window, an upper bound before). A model whose
layers all slide keeps the per-token count of every layer (no reservation).
"""

from __future__ import annotations

import math

from simulator.cost_model import Deployment


def kv_layout(fraction: float, deployments: list[Deployment]) -> tuple[int, int]:
    """(capacity in tokens, KV tokens each running sequence reserves) of an engine holding ``deployments``."""
    hw = deployments[0].hardware
    free = fraction * hw.memory_bytes - sum(d.resident_bytes_per_gpu for d in deployments)
    full, sliding = 0.0, 0.0  # bytes per token of full-attention layers; bytes of one sequence's sliding windows
    for d in deployments:
        per, m = d.kv_bytes_per_token_per_gpu, d.model
        s = m.sliding_layers
        full += per * (m.layers - s) / m.layers
        if s:
            sliding += per * s / m.layers * m.sliding_window
    if full <= 0.0:  # every layer slides: count every layer per token, no reservation
        per_token = sum(d.kv_bytes_per_token_per_gpu for d in deployments)
        return max(int(free // per_token), 0), 0
    return max(int(free // full), 0), int(math.ceil(sliding / full))


def kv_capacity_tokens(fraction: float, deployments: list[Deployment]) -> int:
    """Tokens of KV cache an engine holding ``deployments`` can keep (>= 0; :func:`kv_layout`)."""
    return kv_layout(fraction, deployments)[0]
