"""Static KV-cache memory split of colocated engines (vLLM ``gpu-memory-utilization``).

Each engine gets ``memory_fraction`` of every GPU's memory; what its weights leave is KV cache:

    capacity_tokens = (fraction * memory_bytes - sum_models weights_resident / TP)
                      / sum_models kv_bytes_per_token_per_gpu

where the sums run over the models living in the engine (the base engine of a speculative
system also holds the draft model and its KV, one draft KV entry per base KV entry).
"""

from __future__ import annotations

from simulator.cost_model import Deployment


def kv_capacity_tokens(fraction: float, deployments: list[Deployment]) -> int:
    """Tokens of KV cache an engine holding ``deployments`` can keep (>= 0)."""
    hw = deployments[0].hardware
    free = fraction * hw.memory_bytes - sum(d.resident_bytes_per_gpu for d in deployments)
    per_token = sum(d.kv_bytes_per_token_per_gpu for d in deployments)
    return max(int(free // per_token), 0)
