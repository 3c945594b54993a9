"""What a model's shape must satisfy, and what a tensor-parallel degree must satisfy to shard it: the one set of rules
every model passes (the catalog's ``models.yaml``, a local ``config.json``, a draft head built from a target) and
every placement is checked by (``specsim pass-time``, a scenario's ``whatif`` / ``capacity`` / ``report``).

**Bounds** (:data:`DIMENSION_BOUNDS`). Every dimension is an integer (a boolean is not one) within bounds: counts
and widths at most a power of two at least four times the largest of any published decoder (each bound's comment
names the largest we know of; every kind of head shares the heads' and head_dim's bounds); token counts (an
attention window, a sparse top-k) at most 2^24 = 16.8M tokens, longer than any context a model serves. A value past a bound is a typo or a unit slip (an extra zero, a count in the
wrong field) that the cost model would otherwise price without complaint: a hidden size of 1e9 is 1e18 parameters.
Whether a model within the bounds fits a GPU is the memory check's question (``simulator/cost/memory_check.py``).

**Laws** (with the bounds, :func:`dimension_error`): the KV heads divide the attention heads (grouped-query attention
shares each KV head among heads / kv_heads query heads; transformers and vLLM refuse any other split); at most
``layers`` dense-first layers.

**Tensor parallelism** (:func:`tp_error`), vLLM's rules (``ModelConfig.verify_with_parallel_config``,
``QKVParallelLinear``): TP divides the attention heads; KV heads split evenly over TP, or, where TP exceeds them,
each is replicated on TP / kv_heads GPUs (so kv_heads divides TP). Latent attention (DeepSeek's MLA) keeps one latent
per token on every GPU: only the heads split.
"""

from __future__ import annotations

# field -> (lowest, highest); the comment: the largest published value, which the upper bound is >= 4x of
TOKENS = 1 << 24
DIMENSION_BOUNDS: dict[str, tuple[int, int]] = {
    "layers": (1, 512),  # 126, Llama-3.1-405B
    "hidden": (1, 131072),  # 18,432, Nemotron-4-340B
    "heads": (1, 512), "kv_heads": (1, 512),  # 128, DeepSeek-V3
    "head_dim": (1, 1024),  # 256, Gemma 3 and Qwen3.5 (DeepSeek's MLA: 192)
    "intermediate": (1, 1 << 19),  # 73,728, Nemotron-4-340B
    "vocab": (1, 1 << 20),  # 262,144, Gemma 3
    "experts": (0, 2048),  # 512, Qwen3-Next
    "experts_per_token": (0, 64),  # 10, Qwen3-Next
    "expert_intermediate": (1, 65536),  # 16,384, Mixtral-8x22B
    "shared_experts": (0, 16),  # 2, DeepSeek-V2
    "shared_expert_intermediate": (1, 131072),  # 20,480, Qwen2-57B-A14B
    "first_k_dense_layers": (0, 512), "moe_every": (1, 512), "full_attention_every": (1, 512),  # at most layers
    "q_lora_rank": (1, 8192), "kv_lora_rank": (1, 8192),  # 1,536 and 512, DeepSeek-V3
    "qk_rope_head_dim": (1, 1024), "qk_nope_head_dim": (1, 1024), "v_head_dim": (1, 1024),  # 64, 128, 128
    "mtp_layers": (0, 16),  # 3, MiMo-7B (DeepSeek-V3 and GLM-4.5: 1)
    "linear_key_heads": (0, 512), "linear_value_heads": (0, 512),  # 16 and 32, Qwen3-Next
    "linear_key_head_dim": (1, 1024), "linear_value_head_dim": (1, 1024),  # 128 and 128
    "linear_conv_kernel": (1, 64),  # 4
    "index_heads": (1, 512), "index_head_dim": (1, 1024),  # 64 and 128, DeepSeek-V3.2
    "sliding_window": (1, TOKENS), "index_topk": (1, TOKENS),  # token counts
}


def dimension_error(field: str, value, before: dict) -> str | None:
    """Why ``value`` is not a valid ``field`` (None: it is): an integer, not a boolean, within its bounds, and
    keeping the laws with the fields ``before`` it (module docstring). The value itself is not repeated: the caller's
    error says what it got."""
    lo, hi = DIMENSION_BOUNDS[field]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return "expected an integer"
    if value < lo:
        return f"must lie in {lo}..{hi:,}"
    if value > hi:
        return f"must lie in {lo}..{hi:,} ({hi:,}: far past any published model's, simulator/catalog/model_shape.py)"
    heads, layers = before.get("heads"), before.get("layers")
    if field == "kv_heads" and isinstance(heads, int) and heads % value:
        return (f"{value} KV heads do not divide {heads} attention heads (grouped-query attention shares each KV head "
                "among heads / kv_heads query heads)")
    if field == "first_k_dense_layers" and isinstance(layers, int) and value > layers:
        return f"{value} dense-first layers in a model of {layers} layers"
    return None


def tp_error(m, tp: int) -> str | None:
    """Why vLLM cannot shard model ``m`` over ``tp`` GPUs (module docstring), None when it can."""
    if tp < 1:
        return f"must be >= 1 (got {tp})"
    if m.heads % tp:
        return f"tp={tp} does not divide {m.name}'s {m.heads} attention heads"
    if not m.is_mla:
        kv = m.kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            return (f"tp={tp} cannot shard {m.name}'s {kv} KV heads (they split evenly over TP, or each is "
                    f"replicated on TP / kv_heads GPUs)")
    return None


def draft_vocabulary_error(target, draft) -> str | None:
    """Why ``draft``, a separate model, cannot draft for ``target`` (None: it can): its tokens must be the target's."""
    if draft.tokenizer_id == target.tokenizer_id:
        return None
    return (f"vocabulary mismatch: draft {draft.name} uses the {draft.tokenizer_id} tokenizer, base {target.name} the "
            f"{target.tokenizer_id} one (a separate draft must share its target's vocabulary")
