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
    bytes_per_param: float = Field(default=2.0, gt=0)

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
        return self.layers * self.params_per_layer + self.embedding_params + head + self.hidden

    @property
    def matmul_params_per_token(self) -> int:
        """Weights every token multiplies through (the layers; the LM head is counted per logit)."""
        return self.layers * self.params_per_layer

    @property
    def weight_bytes_read(self) -> float:
        """Bytes of weights streamed per forward pass: layers + LM head (the input embedding
        is a row lookup, so an untied input table is not streamed)."""
        return (self.layers * self.params_per_layer + self.embedding_params) * self.bytes_per_param

    @property
    def weight_bytes_resident(self) -> float:
        return self.params * self.bytes_per_param

    def kv_bytes_per_token(self, tp: int = 1, kv_bytes_per_element: float = 2.0) -> float:
        """2 (K and V) x layers x KV heads on one GPU x head_dim x bytes; KV heads are
        replicated when TP exceeds their number."""
        kv_per_gpu = -(-self.kv_heads // tp)
        return 2 * self.layers * kv_per_gpu * self.head_dim * kv_bytes_per_element


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
