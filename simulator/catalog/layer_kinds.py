"""Layer kinds beyond the plain decoder layer: the fields and per-layer quantities of ``ModelSpec``'s
interleaved MoE, chunked local attention, hybrid linear attention (Gated DeltaNet) and sparse attention (DeepSeek's
lightning indexer + top-k). :class:`LayerKinds` is a base of :class:`~simulator.catalog.models.ModelSpec`; its methods
read the shape fields ModelSpec declares (``layers``, ``hidden``, ``full_attention_every``, ...).

- **Interleaved MoE** (Llama 4 Maverick): ``moe_every`` P -- layer i (from 0, after ``first_k_dense_layers``) has
  routed experts iff (i + 1) % P == 0 (transformers' ``interleave_moe_layer_step``); the others are dense layers of
  ``intermediate`` features.
- **Chunked local attention** (Llama 4): ``local_attention: chunked`` with ``sliding_window`` the chunk (8192): a token
  attends to the keys of its own aligned chunk only, and vLLM frees the blocks of finished chunks. Priced as a sliding
  window of the chunk size (at most a chunk of KV held and read per sequence): an upper bound on reads (a token at
  position p reads p mod C + 1 keys, C/2 on average over a long sequence), exact on the KV held.
- **Linear attention** (Gated DeltaNet: Qwen3-Next, Qwen3.5): ``linear_value_heads`` > 0 -- every layer but the
  ``full_attention_every``-th is a linear-attention layer. It keeps a fixed-size state per sequence (no KV growth):
  the recurrent state (value heads x key dim x value dim) in ``ssm_state_dtype`` (the config's ``mamba_ssm_dtype``,
  which vLLM takes as its ``mamba_ssm_cache_dtype`` for Qwen3.5: float32; ``auto``: the model's activation dtype) and
  the causal-convolution window ((kernel - 1) x conv channels) in the activation dtype (vLLM's ``mamba_cache_dtype``
  ``auto``; neither follows an FP8 KV cache). Weights (vLLM ``Qwen3NextGatedDeltaNet``): the
  q/k/v/z input projection H x (2 Kd + 2 Vd), the beta/alpha projection H x 2 Hv, the depthwise conv (2 Kd + Vd) x
  kernel, A_log and dt_bias (Hv each), the gated norm (value dim) and the output projection Vd x H, with Kd = key
  heads x key dim and Vd = value heads x value dim. Per token beyond those projections: the delta-rule recurrence,
  about 6 Hv dk dv FLOPs (S k, the rank-1 update of S, q S), and the convolution 2 (2 Kd + Vd) kernel. A pass reads
  and writes each running sequence's state once per layer.
- **Sparse attention** (DeepSeek-V3.2): ``index_topk`` k -- each query attends to at most k KV entries selected by
  the lightning indexer, which scores every cached key with ``index_heads`` heads of ``index_head_dim`` (its own
  FP8 key cache: index_head_dim bytes + one fp32 scale per 128 per token and layer, vLLM's indexer cache). Indexer
  weights per layer: wq_b (q_lora_rank x heads dim), wk (H x dim), its LayerNorm (2 dim) and weights_proj (H x
  heads). The MLA latent reads are capped at k per query; the indexer reads every key.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel

# Fields a draft head built from a target drops (a dense full-attention layer; a local window it keeps): their defaults
PLAIN_LAYER = {"moe_every": 1, "linear_key_heads": 0, "linear_value_heads": 0, "ssm_state_dtype": "auto",
               "linear_key_head_dim": None, "linear_value_head_dim": None, "index_topk": None, "index_heads": None,
               "index_head_dim": None}
INDEX_SCALE_BYTES = 4.0 / 128.0  # the indexer key cache's fp32 scale per 128 values
ACTIVATION_BYTES = 2.0  # the activation (model) dtype vLLM serves in: bf16 / fp16, whatever the weights' quantisation
STATE_DTYPE_BYTES = {"auto": ACTIVATION_BYTES, "float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def skewed_experts_hit(experts: int, k: int, tokens, skew: float = 0.0):
    """Expected distinct experts ``tokens`` tokens hit when each picks ``k`` of ``experts`` experts, expert e (1..E)
    with popularity proportional to e^-skew (skew 0: uniform). Expert e is in a token's top-k with probability
    pi_e = min(1, c e^-skew), c such that sum_e pi_e = k (the most popular experts saturate at 1), tokens independent:
    E[hit] = sum_e 1 - (1 - pi_e)^N. skew = 0 gives E [1 - (1 - k/E)^N] exactly (:meth:`ModelSpec.experts_hit`);
    one token always hits k. Broadcasts over ``tokens``."""
    n = np.asarray(tokens, dtype=float)
    if skew == 0.0:
        return experts * (1.0 - (1.0 - k / experts) ** n)
    w = np.arange(1, experts + 1, dtype=float) ** -skew  # descending
    pi = np.ones(experts)
    for top in range(k + 1):  # the first ``top`` experts saturate; the rest share k - top in proportion to w
        rest = w[top:]
        pi_rest = (k - top) * rest / rest.sum()
        if top == experts or pi_rest[0] <= 1.0:
            pi[top:] = pi_rest
            break
    return (1.0 - (1.0 - pi)[:, None] ** n.reshape(1, -1)).sum(axis=0).reshape(n.shape)


class LayerKinds(BaseModel):
    """The layer-kind fields of a model (module docstring); every default is a plain decoder layer."""

    moe_every: int = 1
    local_attention: Literal["sliding", "chunked"] = "sliding"
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel: int = 4
    ssm_state_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    index_topk: int | None = None
    index_heads: int | None = None
    index_head_dim: int | None = None

    def _check_kinds(self) -> None:
        if self.linear_value_heads:
            if not (self.linear_key_heads and self.linear_key_head_dim and self.linear_value_head_dim):
                raise ValueError("linear attention needs linear_key_heads, linear_key_head_dim and linear_value_head_dim")
            if self.sliding_window is not None:
                raise ValueError("linear attention and a sliding window do not mix")
        if self.index_topk is not None and (not self.index_heads or not self.index_head_dim or not self.is_mla):
            raise ValueError("sparse attention (index_topk) needs index_heads, index_head_dim and latent attention")
        if self.moe_every > 1 and not self.experts:
            raise ValueError("moe_every needs experts > 0")

    # ---- linear attention -----------------------------------------------------------------
    @property
    def is_linear_hybrid(self) -> bool:
        return self.linear_value_heads > 0

    @property
    def linear_layers(self) -> int:
        """Linear-attention layers: all but every ``full_attention_every``-th (0 without linear attention)."""
        if not self.is_linear_hybrid:
            return 0
        return self.layers - (self.layers // self.full_attention_every if self.full_attention_every else 0)

    @property
    def kv_layers(self) -> int:
        """Layers that cache keys and values (all but the linear-attention ones)."""
        return self.layers - self.linear_layers

    @property
    def _linear_dims(self) -> tuple[int, int, int]:
        kd = self.linear_key_heads * self.linear_key_head_dim
        vd = self.linear_value_heads * self.linear_value_head_dim
        return kd, vd, 2 * kd + vd  # key dim, value dim, conv channels

    @property
    def linear_params_per_layer(self) -> int:
        """One Gated DeltaNet token mixer's weights (module docstring); 0 without linear attention."""
        if not self.is_linear_hybrid:
            return 0
        kd, vd, conv = self._linear_dims
        hv = self.linear_value_heads
        return (self.hidden * (2 * kd + 2 * vd) + self.hidden * 2 * hv + conv * self.linear_conv_kernel + 2 * hv
                + self.linear_value_head_dim + vd * self.hidden)

    @property
    def linear_flops_per_token(self) -> float:
        """FLOPs per token of one linear-attention layer beyond its projections: recurrence and convolution."""
        if not self.is_linear_hybrid:
            return 0.0
        conv = self._linear_dims[2]
        return 6.0 * self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim \
            + 2.0 * conv * self.linear_conv_kernel

    def linear_state_bytes(self, tp: int = 1) -> float:
        """Bytes of one sequence's linear-attention state on one GPU (all linear layers; heads split over TP): the
        recurrent state in ``ssm_state_dtype``, the convolution window in the activation dtype (module docstring)."""
        if not self.is_linear_hybrid:
            return 0.0
        share = -(-self.linear_value_heads // tp) / self.linear_value_heads
        state = self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = (self.linear_conv_kernel - 1) * self._linear_dims[2]
        ssm_b = STATE_DTYPE_BYTES[self.ssm_state_dtype]
        return self.linear_layers * (state * ssm_b + conv * ACTIVATION_BYTES) * share

    # ---- sparse attention (DeepSeek-V3.2's indexer) -------------------------------------------
    @property
    def indexer_params_per_layer(self) -> int:
        if self.index_topk is None:
            return 0
        q_in = self.q_lora_rank or self.hidden
        return (q_in * self.index_heads * self.index_head_dim + self.hidden * self.index_head_dim
                + 2 * self.index_head_dim + self.hidden * self.index_heads)

    @property
    def indexer_bytes_per_token(self) -> float:
        """Indexer key-cache bytes per token (all layers; replicated on every GPU like the latent)."""
        if self.index_topk is None:
            return 0.0
        return self.layers * self.index_head_dim * (1.0 + INDEX_SCALE_BYTES)

    def sparse_cap(self, tokens, new_tokens):
        """KV entries (or query-key pairs) sparse attention touches: at most ``index_topk`` per query."""
        return np.minimum(np.asarray(tokens, dtype=float), np.asarray(new_tokens, dtype=float) * self.index_topk)

    @property
    def indexer_flops_per_pair(self) -> float:
        return 2.0 * self.index_heads * self.index_head_dim if self.index_topk is not None else 0.0

    # ---- interleaved MoE ------------------------------------------------------------------------
    def count_moe_layers(self) -> int:
        """Layers with routed experts: i >= first_k_dense_layers with (i + 1) % moe_every == 0."""
        if not self.experts:
            return 0
        if self.moe_every == 1:
            return max(0, self.layers - self.first_k_dense_layers)
        return self.layers // self.moe_every - min(self.first_k_dense_layers, self.layers) // self.moe_every
