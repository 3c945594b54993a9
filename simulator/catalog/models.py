"""Model architectures (``models.yaml``): shapes, parameter counts, bytes moved per pass."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.loading import read_yaml

CATALOG_PATH = Path(__file__).with_name("models.yaml")
PARAM_TOLERANCE = 0.03

# Bytes per stored element by dtype. INT4 weight-only (W4A16, GPTQ/AWQ-style) stores 4 bits per weight plus
# one fp16 scale and one fp16 zero point per group of 128 weights: 0.5 + 4/128 bytes (assumption: group size 128).
# FP8 weights (W8A8, per-channel or per-tensor scales: negligible bytes). The embedding and LM head stay in
# bf16 in quantized checkpoints (assumption: the usual recipe leaves lm_head unquantized).
WEIGHT_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5 + 4.0 / 128.0}
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
WeightDtype = Literal["bf16", "fp16", "fp8", "int4"]
KvDtype = Literal["bf16", "fp16", "fp8"]


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape. ``head_dim`` may differ from hidden/heads (Qwen3, Gemma 3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    hf_id: str | None = None
    arch: Literal["qwen2", "qwen3", "llama", "gemma3"]
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate: int = Field(ge=1)
    vocab: int = Field(ge=1)
    tie_embeddings: bool
    qkv_bias: bool = False
    published_params: float | None = None
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

    # ---- shape-derived quantities -------------------------------------------------------
    @property
    def params_per_layer(self) -> int:
        """Attention (q, k, v, o [+ qkv bias] [+ q/k norms]) + SwiGLU MLP (3 matrices) + 2 norms."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * q + 2 * self.hidden * kv + q * self.hidden
        if self.qkv_bias:
            attn += q + 2 * kv
        if self.arch in ("qwen3", "gemma3"):
            attn += 2 * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        return attn + mlp + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters computed from the shape."""
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.layers * self.params_per_layer + self.extra_matmul_params + self.embedding_params + head + self.hidden

    @property
    def matmul_params_per_token(self) -> int:
        """Weights every token multiplies through (the layers; the LM head is counted per logit)."""
        return self.layers * self.params_per_layer + self.extra_matmul_params

    @property
    def tokenizer_id(self) -> str:
        return self.tokenizer or self.name

    @property
    def weight_bytes_read(self) -> float:
        """Bytes of weights streamed per forward pass: layers + LM head (the input embedding
        is a row lookup, so an untied input table is not streamed)."""
        if self.head_bytes_per_param is None and not self.extra_matmul_params:
            return (self.layers * self.params_per_layer + self.embedding_params) * self.bytes_per_param
        return self.matmul_params_per_token * self.bytes_per_param + self.embedding_params * self.head_bytes

    @property
    def head_bytes(self) -> float:
        return self.bytes_per_param if self.head_bytes_per_param is None else self.head_bytes_per_param

    @property
    def weight_bytes_resident(self) -> float:
        if self.head_bytes_per_param is None and not self.extra_matmul_params and not self.shares_target_embeddings:
            return self.params * self.bytes_per_param
        emb = 0 if self.shares_target_embeddings else self.params - self.matmul_params_per_token - self.hidden
        return (self.matmul_params_per_token + self.hidden) * self.bytes_per_param + emb * self.head_bytes

    def kv_bytes_per_token(self, tp: int = 1, kv_bytes_per_element: float | None = None) -> float:
        """2 (K and V) x layers x KV heads on one GPU x head_dim x bytes (default: the model's KV dtype);
        KV heads are replicated when TP exceeds their number."""
        kv_per_gpu = -(-self.kv_heads // tp)
        b = self.kv_bytes_per_element if kv_bytes_per_element is None else kv_bytes_per_element
        return 2 * self.layers * kv_per_gpu * self.head_dim * b

    def with_dtypes(self, weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> "ModelSpec":
        """This model served with ``weight_dtype`` layer weights (embedding / LM head stay bf16 when
        quantized) and a ``kv_dtype`` KV cache. bf16/bf16 returns the model unchanged."""
        if weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise ValueError(f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_DTYPE_BYTES)}")
        if kv_dtype not in KV_DTYPE_BYTES:
            raise ValueError(f"unknown KV dtype {kv_dtype!r}; known: {', '.join(KV_DTYPE_BYTES)}")
        if (weight_dtype, kv_dtype) == (self.weight_dtype, self.kv_dtype):
            return self
        upd: dict = {"weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "kv_bytes_per_element": KV_DTYPE_BYTES[kv_dtype]}
        if weight_dtype != self.weight_dtype:
            upd["bytes_per_param"] = WEIGHT_DTYPE_BYTES[weight_dtype]
            upd["head_bytes_per_param"] = None if WEIGHT_DTYPE_BYTES[weight_dtype] == 2.0 else 2.0
        return self.model_copy(update=upd)

    def cut(self, layers: int, name: str | None = None) -> "ModelSpec":
        """This model's first ``layers`` decoder layers with its embedding, final norm and LM head (a draft cut by
        ``specsim calibrate cut-draft``, a CPU-sized benchmark run): same shape, fewer layers. Itself when nothing
        changes."""
        if layers == self.layers and name is None:
            return self
        return self.model_copy(update={"layers": layers, "published_params": None,
                                       "name": name or f"{self.name}-cut{layers}"})

    def draft_head(self, layers: int = 1, vocab: int | None = None, fusion: bool = True) -> "ModelSpec":
        """An EAGLE / MTP-style draft head of this (target) model: ``layers`` decoder layers of the target's
        shape fed the target's hidden states, a fusion projection (2H x H) of [token embedding, hidden state]
        when ``fusion``, and the target's LM head (or its own of ``vocab`` rows, e.g. EAGLE-3's reduced draft
        vocabulary). Its KV cache is its own layers' only; it shares the target's embedding (and LM head
        when ``vocab`` is None): no resident copy."""
        return self.model_copy(update={
            "name": f"{self.name}-head{layers}", "hf_id": None, "layers": layers, "published_params": None,
            "vocab": vocab or self.vocab, "extra_matmul_params": 2 * self.hidden * self.hidden if fusion else 0,
            "shares_target_embeddings": vocab is None, "tie_embeddings": True,
            "head_bytes_per_param": self.head_bytes,
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
        try:
            spec = ModelSpec.model_validate(item)
        except ValidationError as e:
            raise pydantic_error_to_input_error(f"{CATALOG_PATH}[{i}]", e) from None
        if spec.published_params and abs(spec.params / spec.published_params - 1) > PARAM_TOLERANCE:
            raise InputError(
                str(CATALOG_PATH), f"{spec.name}.published_params",
                f"shape gives {spec.params / 1e9:.3f}B parameters, published {spec.published_params / 1e9:.3f}B",
            )
        out[spec.name] = spec
    return out


def get_model(name: str, file: str | None = None, field: str = "model") -> ModelSpec:
    cat = model_catalog()
    if name not in cat:
        raise InputError(file, field, f"unknown model {name!r}; known: {', '.join(sorted(cat))}")
    return cat[name]
