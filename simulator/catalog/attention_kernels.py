"""Which attention kernel an engine runs for a model on a GPU, and what it costs against the FlashAttention kernels
the step model's compute efficiency was fitted on (``attention_kernels.yaml``, docs/gpu-cost-model.md).

The rule (vLLM's backend selection, ``vllm/platforms/cuda.py``):

- a model with **attention sinks** (gpt-oss: a learned logit per head that every softmax includes) on a GPU older
  than Hopper (compute capability below 9.0: A100, A40, RTX A6000, L40S): FlashAttention 2 has no sinks, so vLLM
  runs its Triton unified-attention kernel; its prefill runs ``triton_prefill_ratio`` times a FlashAttention
  kernel's time (fitted on AIConfigurator's tables where both ran the same shapes:
  :mod:`calibrate.gpu_priors.attention_fit`);
- everything else runs the kernels the compute efficiency was fitted on (FlashAttention 2 / 3, FlashInfer,
  FlashMLA; Hopper and Blackwell take sinks in FlashAttention 3 / FlashInfer): ratio 1.

The ratio scales the attention FLOPs' compute roof only: decode attention is KV-bandwidth-bound, where the Triton
kernel reads the cache as fast as FlashAttention (its split-KV decode path) and the KV roof prices it. SGLang also
runs a Triton attention kernel for gpt-oss on these GPUs; the same ratio is taken for it (not measured)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from simulator.catalog.hardware import HardwareSpec, PriorParam
from simulator.catalog.models import ModelSpec
from simulator.inputs.loading import load_yaml_model
from simulator.paths import CATALOG_DIR

ATTENTION_PATH = CATALOG_DIR / "attention_kernels.yaml"
SINKS_NATIVE_FROM = (9, 0)  # compute capability from which vLLM's FlashAttention / FlashInfer kernels take sinks
FLASH = PriorParam(value=1.0, kind="prior", source="the kernels the compute efficiency was fitted on")


class AttentionCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provenance: dict | None = None
    triton_prefill_ratio: PriorParam = PriorParam(value=1.0, kind="prior",
                                                  source="unfitted: as FlashAttention (attention_kernels.yaml absent)")
    evidence: list[dict] = []


def read_attention_catalog(path: Path | None = None) -> AttentionCatalog:
    """The file at ``path`` (default the catalog's), checked; the unfitted catalog (ratio 1) where it is absent."""
    path = path or ATTENTION_PATH
    return load_yaml_model(path, AttentionCatalog) if path.is_file() else AttentionCatalog()


@lru_cache(maxsize=None)
def attention_catalog() -> AttentionCatalog:
    return read_attention_catalog()


def attention_backend(model: ModelSpec, hardware: HardwareSpec) -> str:
    """``"triton"`` where the engine runs its Triton attention for ``model`` on ``hardware`` (module docstring),
    else ``"flash"``."""
    cc = hardware.compute_capability
    if model.attention_sinks and cc is not None and tuple(cc) < SINKS_NATIVE_FROM:
        return "triton"
    return "flash"


def prefill_attention_ratio(model: ModelSpec, hardware: HardwareSpec) -> PriorParam:
    """The attention FLOPs' time against a FlashAttention kernel's on ``hardware`` (1 unless :func:`attention_backend`
    is Triton)."""
    return attention_catalog().triton_prefill_ratio if attention_backend(model, hardware) == "triton" else FLASH
