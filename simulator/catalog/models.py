"""Model architectures (``models.yaml``): shapes, parameter counts, bytes moved per pass."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from simulator.catalog.dtypes import (KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES, KvDtype, WeightDtype,  # noqa: F401 (re-exported)
                                      weight_bytes)
from simulator.catalog.model_shape import DIMENSION_BOUNDS, dimension_error
from simulator.catalog.layer_kinds import PLAIN_LAYER, LayerKinds, skewed_experts_hit  # noqa: F401 (re-exported)
from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

CATALOG_PATH = CATALOG_DIR / "models.yaml"
PARAM_TOLERANCE = 0.03

Arch = Literal["qwen2", "qwen3", "llama", "gemma3", "qwen3_moe", "deepseek_v3", "gpt_oss", "mixtral", "glm4_moe",
               "qwen3_next", "llama4", "deepseek_v32", "minimax_m2"]
# Architectures whose attention has per-head RMS norms on q and k (2 x head_dim parameters per layer)
QK_NORM_ARCHS = ("qwen3", "gemma3", "qwen3_moe", "qwen3_next")
# Architectures whose full-attention q projection also emits a sigmoid output gate (heads x head_dim more rows)
GATED_ATTENTION_ARCHS = ("qwen3_next",)
# A pass whose sequences bring at most this many new tokens each runs MLA's absorbed (decode) attention, as vLLM's
# MLA backends split a batch into decode-like requests (1 + speculative tokens) and prefills.
MLA_DECODE_MAX_TOKENS = 16
# Sparse MLA (DeepSeek-V3.2's FlashMLA-sparse kernels) runs at least this many query heads per GPU: a tensor-parallel
# rank with fewer is padded up to it (sources in docs/moe.md, "Sparse attention").
SPARSE_MLA_MIN_HEADS_PER_GPU = 64


class ModelSpec(LayerKinds):
    """A decoder-only transformer's shape. ``head_dim`` may differ from hidden/heads (Qwen3, Gemma 3). Interleaved MoE,
    chunked local, linear and sparse attention: :class:`~simulator.catalog.layer_kinds.LayerKinds`. Every dimension's
    bounds and laws (a boolean is no integer): :mod:`simulator.catalog.model_shape`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    hf_id: str | None = None
    arch: Arch
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    qkv_bias: bool = False
    published_params: float | None = None
    # Published active parameters of a mixture of experts (per token; embedding and LM head counted), checked like
    # ``published_params``
    published_active_params: float | None = None
    bytes_per_param: float = Field(default=2.0, gt=0)  # bytes per layer weight (set by ``with_dtypes``)
    # Tokenizer family: a separate draft model must share its target's (vocabulary sizes may differ by padding).
    tokenizer: str | None = None
    # Dtypes (labels; the bytes are ``bytes_per_param`` / ``head_bytes_per_param`` / ``kv_bytes_per_element``).
    weight_dtype: WeightDtype = "bf16"
    kv_dtype: KvDtype = "bf16"
    kv_bytes_per_element: float = Field(default=2.0, gt=0)
    head_bytes_per_param: float | None = Field(default=None, gt=0)  # embedding / LM head bytes (None: bytes_per_param)
    # Draft heads (EAGLE / MTP): the fusion projection of [token embedding, target hidden state] (2H x H)
    # in front of its layers, and whether it shares the target's embedding and LM head (no resident copy).
    extra_matmul_params: int = Field(default=0, ge=0)
    shares_target_embeddings: bool = False
    # ---- mixture of experts (docs/moe.md; 0 experts: a dense model, every field below at its default) -------------
    # A MoE layer: a router (hidden x experts [+ a bias per expert]), ``experts`` routed SwiGLU experts of
    # ``expert_intermediate`` features, each token routed to ``experts_per_token`` (top-k) of them, and
    # ``shared_experts`` always-on experts of ``shared_expert_intermediate`` features each. The first
    # ``first_k_dense_layers`` layers (DeepSeek) are dense, with ``intermediate`` features.
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int | None = None
    shared_experts: int = 0
    shared_expert_intermediate: int | None = None  # None: expert_intermediate
    first_k_dense_layers: int = 0
    router_bias: bool = False  # a bias (DeepSeek: the score-correction bias) per expert
    # The routed experts' storage dtype when it differs from the other layer weights (gpt-oss: MXFP4 experts,
    # bf16 attention and router); None: ``weight_dtype``. ``expert_bytes_per_param`` follows it.
    expert_weight_dtype: WeightDtype | None = None
    expert_bytes_per_param: float | None = Field(default=None, gt=0)
    # ---- multi-head latent attention (DeepSeek V2/V3; kv_lora_rank None: standard GQA attention) -------------
    q_lora_rank: int | None = None  # None with MLA: a full q projection
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # ---- sliding-window attention: sliding layers keep (and read) at most ``sliding_window`` tokens of KV.
    # ``full_attention_every`` P: layer i (from 0) is full attention iff (i + 1) % P == 0 (gpt-oss: 2, alternating;
    # Gemma 3: 6, five local to one global); None with a window: every layer slides (Mistral-7B v0.1).
    sliding_window: int | None = None
    full_attention_every: int | None = None
    # ---- multi-token prediction (DeepSeek-V3/R1): MTP modules after the model (not in ``params``: the published
    # totals count the main model; loaded only when the MTP module drafts, as a ``draft.kind: mtp``).
    mtp_layers: int = 0

    @field_validator(*DIMENSION_BOUNDS, mode="before")
    @classmethod
    def _dimension(cls, v, info: ValidationInfo):
        err = dimension_error(info.field_name, v, info.data)
        if err:
            raise PydanticCustomError("dimension", err)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise ValueError(f"experts_per_token must lie in 1..experts={self.experts} (got {self.experts_per_token})")
            if self.expert_intermediate is None:
                raise ValueError("a mixture of experts needs expert_intermediate")
        elif self.experts_per_token or self.shared_experts or self.first_k_dense_layers or self.expert_weight_dtype:
            raise ValueError("experts_per_token, shared_experts, first_k_dense_layers and expert_weight_dtype need experts > 0")
        mla = (self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if any(x is not None for x in mla) and any(x is None for x in mla):
            raise ValueError("multi-head latent attention needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
        if self.full_attention_every is not None and self.sliding_window is None and not self.is_linear_hybrid:
            raise ValueError("full_attention_every needs a sliding_window or linear attention")
        self._check_kinds()
        return self

    # ---- kinds ----------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def attention_sinks(self) -> bool:
        """A learned sink logit per head in every softmax (gpt-oss): which attention kernels an engine can run it on
        (:mod:`simulator.catalog.attention_kernels`)."""
        return self.arch == "gpt_oss"

    @property
    def is_plain(self) -> bool:
        """A dense model with standard (GQA) attention over its whole context: the original cost formulas apply
        unchanged."""
        return not self.is_moe and not self.is_mla and self.sliding_window is None and not self.is_linear_hybrid

    # ---- shape-derived quantities -------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """GQA: q, k, v, o [+ qkv bias] [+ q/k norms]. MLA (DeepSeek): q_a (H x q_lora) + its norm + q_b (q_lora x
        heads (nope + rope)) [or one H x heads (nope + rope) q projection], kv_a (H x (kv_lora + rope)) + its norm,
        kv_b (kv_lora x heads (nope + v)), o (heads v x H)."""
        if self.is_mla:
            qk = self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * qk if self.q_lora_rank
                 else self.hidden * qk)
            kv = (self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * self.hidden + self.indexer_params_per_layer
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * q + 2 * self.hidden * kv + q * self.hidden
        if self.arch in GATED_ATTENTION_ARCHS:
            attn += self.hidden * q
        if self.qkv_bias:
            attn += q + 2 * kv
        if self.arch in QK_NORM_ARCHS:
            attn += 2 * self.head_dim
        return attn

    @property
    def params_per_layer(self) -> int:
        """A dense layer: attention + SwiGLU MLP (3 matrices of ``intermediate``) + 2 norms."""
        mlp = 3 * self.hidden * self.intermediate
        return self.attention_params_per_layer + mlp + 2 * self.hidden

    # ---- mixture of experts ---------------------------------------------------------------
    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (all but the first ``first_k_dense_layers``); 0 for a dense model."""
        return self.count_moe_layers()

    @property
    def expert_params(self) -> int:
        """One routed expert: a SwiGLU MLP of ``expert_intermediate`` features (gate, up, down)."""
        return 3 * self.hidden * self.expert_intermediate if self.is_moe else 0

    @property
    def moe_block_params(self) -> int:
        """What a MoE layer runs for every token besides its routed experts: router (+ bias) and shared experts."""
        shared = self.shared_experts * 3 * self.hidden * (self.shared_expert_intermediate or self.expert_intermediate)
        return self.hidden * self.experts + (self.experts if self.router_bias else 0) + shared

    @property
    def expert_bytes_per_weight(self) -> float:
        return self.bytes_per_param if self.expert_bytes_per_param is None else self.expert_bytes_per_param

    @property
    def expert_bytes(self) -> float:
        """Stored bytes of one routed expert (its own dtype: MXFP4 for gpt-oss)."""
        return self.expert_params * self.expert_bytes_per_weight

    @property
    def routed_expert_bytes(self) -> float:
        """Stored bytes of every routed expert of every MoE layer (0 for a dense model)."""
        return self.moe_layers * self.experts * self.expert_bytes

    def experts_hit(self, tokens):
        """Expected distinct routed experts a pass of ``tokens`` tokens reads in one MoE layer, under uniform routing
        (each token picks top-k of E experts, every expert equally likely, tokens independent):
        E [1 - (1 - k/E)^N]. One token reads k; many tokens read all E. Broadcasts over arrays."""
        n = np.asarray(tokens, dtype=float)
        if not self.is_moe:
            return np.zeros_like(n)
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** n)

    @property
    def layer_params_total(self) -> int:
        """Every decoder layer's parameters, all experts included."""
        linear = self.linear_layers * (self.linear_params_per_layer - self.attention_params_per_layer)
        if not self.is_moe:
            return self.layers * self.params_per_layer + linear
        moe = self.attention_params_per_layer + 2 * self.hidden + self.moe_block_params + self.experts * self.expert_params
        return (self.layers - self.moe_layers) * self.params_per_layer + self.moe_layers * moe + linear

    @property
    def layer_params_active(self) -> int:
        """The decoder-layer weights one token multiplies through (top-k routed experts + shared + router)."""
        if not self.is_moe:
            return self.layer_params_total
        idle = (self.experts - self.experts_per_token) * self.expert_params
        return self.layer_params_total - self.moe_layers * idle

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters computed from the shape (the main model: MTP modules are ``mtp_params``)."""
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.layer_params_total + self.extra_matmul_params + self.embedding_params + head + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``params`` less the routed experts it is not sent to (embedding and LM head
        included)."""
        return self.params - (self.layer_params_total - self.layer_params_active)

    @property
    def mtp_params(self) -> int:
        """The MTP modules (DeepSeek-V3): per module one MoE layer, the projection of [embedding, hidden] (2H x H) and
        three norms; embedding and LM head shared with the main model."""
        if not self.mtp_layers:
            return 0
        layer = self.attention_params_per_layer + 2 * self.hidden + self.moe_block_params + self.experts * self.expert_params
        return self.mtp_layers * (layer + 2 * self.hidden * self.hidden + 3 * self.hidden)

    @property
    def matmul_params_per_token(self) -> int:
        """Weights every token multiplies through (the layers; the LM head is counted per logit)."""
        return self.layer_params_active + self.extra_matmul_params

    @property
    def tokenizer_id(self) -> str:
        return self.tokenizer or self.name

    @property
    def weight_bytes_read(self) -> float:
        """Bytes of weights streamed per forward pass: layers + LM head (the input embedding
        is a row lookup, so an untied input table is not streamed). A MoE model: with every routed expert (the
        many-token limit; a pass of N tokens reads ``weight_bytes_read_at(N)``)."""
        if self.is_moe:
            return float(self.weight_bytes_read_at(np.inf))
        if self.head_bytes_per_param is None and not self.extra_matmul_params:
            return (self.layer_params_total + self.embedding_params) * self.bytes_per_param
        return self.matmul_params_per_token * self.bytes_per_param + self.embedding_params * self.head_bytes

    @property
    def nonexpert_bytes_read(self) -> float:
        """Bytes streamed by every pass whatever its tokens: attention, dense MLPs, routers, shared experts, LM head."""
        routed = self.moe_layers * self.experts_per_token * self.expert_params
        return (self.matmul_params_per_token - routed) * self.bytes_per_param + self.embedding_params * self.head_bytes

    def weight_bytes_read_at(self, tokens):
        """Weight bytes a pass of ``tokens`` tokens streams: the non-expert weights plus, per MoE layer, the expected
        distinct experts hit (``experts_hit``). A dense model: ``weight_bytes_read`` whatever the tokens."""
        if not self.is_moe:
            return np.full_like(np.asarray(tokens, dtype=float), self.weight_bytes_read)
        return self.nonexpert_bytes_read + self.moe_layers * self.experts_hit(tokens) * self.expert_bytes

    @property
    def head_bytes(self) -> float:
        return self.bytes_per_param if self.head_bytes_per_param is None else self.head_bytes_per_param

    @property
    def weight_bytes_resident(self) -> float:
        if self.is_moe:
            emb = 0 if self.shares_target_embeddings else self.params - self.layer_params_total - self.extra_matmul_params - self.hidden
            all_experts = self.moe_layers * self.experts * self.expert_params
            other = self.layer_params_total - all_experts + self.extra_matmul_params + self.hidden
            return other * self.bytes_per_param + emb * self.head_bytes + self.routed_expert_bytes
        if self.head_bytes_per_param is None and not self.extra_matmul_params and not self.shares_target_embeddings:
            return self.params * self.bytes_per_param
        emb = 0 if self.shares_target_embeddings else self.params - self.matmul_params_per_token - self.hidden
        return (self.matmul_params_per_token + self.hidden) * self.bytes_per_param + emb * self.head_bytes

    # ---- KV cache and attention ----------------------------------------------------------------
    def kv_bytes_per_token(self, tp: int = 1, kv_bytes_per_element: float | None = None) -> float:
        """2 (K and V) x layers x KV heads on one GPU x head_dim x bytes (default: the model's KV dtype);
        KV heads are replicated when TP exceeds their number. MLA: the compressed latent and the shared RoPE key,
        (kv_lora_rank + qk_rope_head_dim) values per layer, one copy on every GPU (replicated across TP).
        Sliding-window layers count every token here (a token inside the window); ``kv_bytes`` caps them. Sparse
        attention adds the indexer's key cache; linear-attention layers hold no per-token KV (``kv_layers``)."""
        b = self.kv_bytes_per_element if kv_bytes_per_element is None else kv_bytes_per_element
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * b + self.indexer_bytes_per_token
        kv_per_gpu = -(-self.kv_heads // tp)
        return 2 * self.kv_layers * kv_per_gpu * self.head_dim * b

    @property
    def sliding_layers(self) -> int:
        """Layers with sliding-window attention (``full_attention_every`` P: all but every P-th)."""
        if self.sliding_window is None:
            return 0
        if self.full_attention_every is None:
            return self.layers
        return self.layers - self.layers // self.full_attention_every

    def kv_bytes(self, tokens, tp: int = 1, seqs=1.0, kv_bytes_per_element: float | None = None, rows=None):
        """KV bytes per GPU a pass over ``tokens`` cached tokens of ``seqs`` sequences reads: full-attention layers
        every token, sliding (chunked) layers at most ``sliding_window`` per sequence (min(tokens, seqs x window): exact
        when the sequences are equally long, an upper bound otherwise); sparse attention at most ``index_topk`` latent
        entries per sequence plus every indexer key; linear-attention layers their state, read once per sequence and
        written once per scored position (``rows``, the pass's logit rows, at least one per sequence: a verification
        of k drafts keeps the state after each of its k + 1 positions, vLLM's rollback slots; None: one).
        Broadcasts over arrays."""
        t = np.asarray(tokens, dtype=float)
        per_token = self.kv_bytes_per_token(tp, kv_bytes_per_element)
        if self.index_topk is not None:
            latent = per_token - self.indexer_bytes_per_token
            return latent * self.sparse_cap(t, seqs) + self.indexer_bytes_per_token * t
        if self.is_linear_hybrid:
            S = np.asarray(seqs, dtype=float)
            writes = S if rows is None else np.maximum(np.asarray(rows, dtype=float), S)
            return t * per_token + (S + writes) * self.linear_state_bytes(tp)
        if self.sliding_window is None:
            return t * per_token
        s = self.sliding_layers
        capped = np.minimum(t, np.asarray(seqs, dtype=float) * self.sliding_window)
        return per_token / self.layers * ((self.layers - s) * t + s * capped)

    def attention_flops(self, pairs, new_tokens=None, seqs=1.0, tp: int = 1):
        """Attention FLOPs of a pass with ``pairs`` = sum_i n_i (c_i + (n_i + 1)/2) query-key pairs, summed over the
        ``tp`` tensor-parallel ranks as they run it: GQA 4 heads head_dim per pair and layer (QK^T and PV). Sliding
        layers: at most ``new_tokens`` x window pairs. MLA: absorbed (decode: at most ``MLA_DECODE_MAX_TOKENS`` new
        tokens per sequence) 2 heads (2 kv_lora + rope) per pair, the latent read once for all heads; else expanded
        (prefill) 2 heads (nope + rope + v). Sparse attention: absorbed for every token (DSA runs in MLA's MQA mode,
        prefill too: DeepSeek-V3.2 report; vLLM's FlashMLA-sparse backend), each rank on at least
        ``SPARSE_MLA_MIN_HEADS_PER_GPU`` heads (padded), at most ``index_topk`` pairs per new token; plus the
        indexer's 2 heads dim per pair (every key), on every rank (vLLM replicates the indexer).
        Linear-attention layers: ``linear_flops_per_token`` per new token instead of pairs."""
        a = np.asarray(pairs, dtype=float)
        if self.is_linear_hybrid:
            n = np.asarray(a if new_tokens is None else new_tokens, dtype=float)
            return 4.0 * self.heads * self.head_dim * self.kv_layers * a + self.linear_layers * self.linear_flops_per_token * n
        if self.is_mla:
            n = np.asarray(a if new_tokens is None else new_tokens, dtype=float)
            absorbed = 2.0 * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
            if self.index_topk is not None:
                heads = max(self.heads, SPARSE_MLA_MIN_HEADS_PER_GPU * tp)
                return self.layers * (heads * absorbed * self.sparse_cap(a, n) + self.indexer_flops_per_pair * a * tp)
            per_seq = np.divide(n, np.maximum(np.asarray(seqs, dtype=float), 1e-300))
            expanded = 2.0 * self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
            per_pair = np.where(per_seq <= MLA_DECODE_MAX_TOKENS, self.heads * absorbed, expanded)
        else:
            per_pair = 4.0 * self.heads * self.head_dim
        if self.sliding_window is None or new_tokens is None:
            return per_pair * self.layers * a
        s = self.sliding_layers
        capped = np.minimum(a, np.asarray(new_tokens, dtype=float) * self.sliding_window)
        return per_pair * ((self.layers - s) * a + s * capped)

    def with_dtypes(self, weight_dtype: str | None = "bf16", kv_dtype: str | None = "bf16") -> "ModelSpec":
        """This model served with ``weight_dtype`` layer weights (:func:`weight_bytes`) and a ``kv_dtype`` KV cache;
        None: the model's own (its checkpoint's: DeepSeek-R1's FP8). Routed experts with their own dtype
        (``expert_weight_dtype``: gpt-oss's MXFP4) keep it."""
        weight_dtype, kv_dtype = weight_dtype or self.weight_dtype, kv_dtype or self.kv_dtype
        if weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise ValueError(f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_DTYPE_BYTES)}")
        if kv_dtype not in KV_DTYPE_BYTES:
            raise ValueError(f"unknown KV dtype {kv_dtype!r}; known: {', '.join(KV_DTYPE_BYTES)}")
        if (weight_dtype, kv_dtype) == (self.weight_dtype, self.kv_dtype):
            return self
        upd: dict = {"weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "kv_bytes_per_element": KV_DTYPE_BYTES[kv_dtype]}
        if weight_dtype != self.weight_dtype:
            upd.update(weight_bytes(weight_dtype))
        return self.model_copy(update=upd)

    def cut(self, layers: int, name: str | None = None) -> "ModelSpec":
        """This model's first ``layers`` decoder layers with its embedding, final norm and LM head (a draft cut by
        ``specsim measure cut-draft``, a CPU-sized benchmark run): same shape, fewer layers. Itself when nothing
        changes."""
        if layers == self.layers and name is None:
            return self
        upd = {"layers": layers, "published_params": None, "name": name or f"{self.name}-cut{layers}"}
        if self.published_active_params is not None:
            upd["published_active_params"] = None
        return self.model_copy(update=upd)

    def draft_head(self, layers: int = 1, vocab: int | None = None, fusion: bool = True) -> "ModelSpec":
        """An EAGLE / MTP-style draft head of this (target) model: ``layers`` decoder layers of the target's
        shape fed the target's hidden states, a fusion projection (2H x H) of [token embedding, hidden state]
        when ``fusion``, and the target's LM head (or its own of ``vocab`` rows, e.g. EAGLE-3's reduced draft
        vocabulary). Its KV cache is its own layers' only; it shares the target's embedding (and LM head
        when ``vocab`` is None): no resident copy. A mixture-of-experts target's EAGLE head is dense (a layer of
        the target's attention and an MLP of ``intermediate`` features, as published EAGLE heads of MoE models);
        its own MTP module is :meth:`mtp_head`; an EAGLE-3 head ``catalog.draft_heads.eagle3_head``."""
        upd = {
            "name": f"{self.name}-head{layers}", "hf_id": None, "layers": layers, "published_params": None,
            "vocab": vocab or self.vocab, "extra_matmul_params": 2 * self.hidden * self.hidden if fusion else 0,
            "shares_target_embeddings": vocab is None, "tie_embeddings": True,
            "head_bytes_per_param": self.head_bytes,
        }
        if self.published_active_params is not None:
            upd["published_active_params"] = None
        upd.update(PLAIN_LAYER)
        if self.is_moe or self.mtp_layers:
            upd.update({"experts": 0, "experts_per_token": 0, "expert_intermediate": None, "shared_experts": 0,
                        "shared_expert_intermediate": None, "first_k_dense_layers": 0, "router_bias": False,
                        "expert_weight_dtype": None, "expert_bytes_per_param": None, "mtp_layers": 0})
        return self.model_copy(update=upd)

    def mtp_head(self, layers: int | None = None) -> "ModelSpec":
        """This model's own multi-token-prediction module as a draft: ``layers`` (default 1) MoE layers of the target's
        shape behind the [embedding, hidden] projection (2H x H), sharing its embedding and LM head; its KV cache is its
        own. vLLM runs ONE module per drafted token (module ``step mod n`` of n = ``mtp_layers``): 1 whatever n (the
        other n - 1 modules' resident weights and KV are not counted; docs/drafters.md)."""
        if not self.mtp_layers:
            raise ValueError(f"{self.name} has no MTP module (mtp_layers = 0)")
        n = layers or 1
        return self.model_copy(update={
            "name": f"{self.name}-mtp{n}", "hf_id": None, "layers": n, "published_params": None, "published_active_params": None,
            "extra_matmul_params": 2 * self.hidden * self.hidden, "shares_target_embeddings": True,
            "tie_embeddings": True, "head_bytes_per_param": self.head_bytes, "first_k_dense_layers": 0, "mtp_layers": 0,
            "moe_every": 1, "linear_key_heads": 0, "linear_value_heads": 0, "linear_key_head_dim": None,
            "linear_value_head_dim": None,
        })


@lru_cache(maxsize=None)
def model_catalog() -> dict[str, ModelSpec]:
    raw = read_yaml(CATALOG_PATH)
    if not isinstance(raw, list):
        raise InputError(str(CATALOG_PATH), None, "expected a list of models")
    by_name: dict[str, dict] = {}
    out: dict[str, ModelSpec] = {}
    for i, item in enumerate(raw):
        item = dict(item)
        if "same_as" in item:
            ref = item.pop("same_as")
            if ref not in by_name:
                raise InputError(str(CATALOG_PATH), f"[{i}].same_as", f"unknown model {ref!r} (must come earlier)")
            item = {**by_name[ref], **item}
        by_name[item.get("name", f"#{i}")] = item
        if item.get("weight_dtype") in WEIGHT_DTYPE_BYTES:  # the checkpoint's own dtype (DeepSeek-R1: fp8)
            item = {**weight_bytes(item["weight_dtype"]), **item}
        try:
            spec = ModelSpec.model_validate(item)
        except ValidationError as e:
            raise pydantic_error_to_input_error(f"{CATALOG_PATH}[{i}]", e) from None
        if spec.published_params and abs(spec.params / spec.published_params - 1) > PARAM_TOLERANCE:
            raise InputError(
                str(CATALOG_PATH), f"{spec.name}.published_params",
                f"shape gives {spec.params / 1e9:.3f}B parameters, published {spec.published_params / 1e9:.3f}B",
            )
        if spec.published_active_params and abs(spec.active_params / spec.published_active_params - 1) > PARAM_TOLERANCE:
            raise InputError(
                str(CATALOG_PATH), f"{spec.name}.published_active_params",
                f"shape gives {spec.active_params / 1e9:.3f}B active parameters, published "
                f"{spec.published_active_params / 1e9:.3f}B",
            )
        out[spec.name] = spec
    return out


def catalog_name_of_folder(path: str | Path) -> str | None:
    """The catalog model a model folder holds, by its name: a catalog name or the last part of an hf_id
    (``smollm2-135m-instruct`` -> ``smollm2-135m``); None when it matches none."""
    tail = Path(str(path)).name.lower()
    return next((n for n, m in model_catalog().items() if tail in (n, (m.hf_id or "").split("/")[-1].lower())), None)
