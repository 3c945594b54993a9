"""Quantised GEMMs (``quant_gemm.yaml``): which kernel kind a linear layer runs on a GPU, and what that kind costs
relative to a bf16 GEMM on the same GPU (docs/gpu-cost-model.md, "Quantised GEMMs").

Kinds (vLLM's choice of kernel for a checkpoint's weights on a GPU):

    bf16            bf16 / fp16 weights: cuBLAS; the reference (ratios 1, no extra cost)
    w8a8-fp8        FP8 weights and activations (per-tensor / per-channel scales) on FP8 tensor cores (Ada, Hopper,
                    Blackwell): CUTLASS scaled_mm; activations quantised per pass
    w8a8-fp8-block  FP8 with 128x128 block scales (DeepSeek-style checkpoints): DeepGEMM / CUTLASS / Triton block kernels
    w4a4-fp4        NVFP4 / MXFP4 weights and activations on FP4 tensor cores (Blackwell)
    w8a16-fp8       FP8 weights on a GPU without FP8 tensor cores (Ampere): FP8-Marlin, dequantised to bf16 in the kernel
    w4a16           4-bit weight-only (AWQ / GPTQ int4; MXFP4 / NVFP4 without FP4 cores): Marlin, dequantised to bf16

A kind's parameters (each a value with its kind and source, written by ``specsim fit quant``):

    peak             the tensor-core rate its MMAs run at: bf16, fp8 or fp4 (the GPU's datasheet figure)
    compute_ratio    rc: its compute efficiency above the ridge relative to bf16's (eta_comp,kind = rc eta_comp);
                     dequantisation inside the main loop (weight-only) or scale handling (block scales) lowers it
    mem_ratio        rm: its weight-streaming efficiency below the ridge relative to bf16's (eta_mem,kind = rm eta_mem)
    gemm_overhead_s  t_q: extra fixed time per GEMM against a bf16 GEMM (activation quantisation, scale reads)

The rule that uses them (one place: :func:`simulator.cost.cost_model.linear_terms`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.catalog.hardware import HardwareSpec, PriorParam
from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

QUANT_PATH = CATALOG_DIR / "quant_gemm.yaml"
GEMM_KINDS = ("bf16", "w8a8-fp8", "w8a8-fp8-block", "w4a4-fp4", "w8a16-fp8", "w4a16")
WEIGHT_ONLY = ("w8a16-fp8", "w4a16")


class GemmKind(BaseModel):
    """One kernel kind's cost relative to bf16 GEMMs on the same GPU (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    peak: Literal["bf16", "fp8", "fp4"]
    compute_ratio: PriorParam
    mem_ratio: PriorParam
    gemm_overhead_s: PriorParam

    @model_validator(mode="after")
    def _positive_ratios(self) -> "GemmKind":
        for name in ("compute_ratio", "mem_ratio"):  # the pass formula divides by them
            if getattr(self, name).value <= 0:
                raise ValueError(f"{name} must be > 0 (got {getattr(self, name).value})")
        return self


class QuantCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kinds: dict[Literal["w8a8-fp8", "w8a8-fp8-block", "w4a4-fp4", "w8a16-fp8", "w4a16"], GemmKind] = Field(
        default_factory=dict)
    # a GPU whose own kernels were measured: its fitted kinds (else the pooled ``kinds``; a GPU of the same chip,
    # hardware.yaml same_chip_as, takes its sibling's)
    gpu_kinds: dict[str, dict[Literal["w8a8-fp8", "w8a8-fp8-block", "w4a4-fp4", "w8a16-fp8", "w4a16"], GemmKind]] = Field(
        default_factory=dict)
    fit: dict | None = None  # the fit's held-out checks (written by the fitter; read by docs and tests)


BF16 = GemmKind(peak="bf16", compute_ratio=PriorParam(value=1.0, kind="datasheet", source="reference kind"),
                mem_ratio=PriorParam(value=1.0, kind="datasheet", source="reference kind"),
                gemm_overhead_s=PriorParam(value=0.0, kind="datasheet", source="reference kind"))
# Before any fit (the file absent): every kind costs as a bf16 GEMM on its own peak, reading its own bytes -- the
# cost model before quantised kinds existed.
UNFITTED = PriorParam(value=1.0, kind="prior", source="unfitted: as a bf16 GEMM on this kind's peak")
NO_OVERHEAD = PriorParam(value=0.0, kind="prior", source="unfitted: no extra cost per GEMM")
PEAKS = {"bf16": "bf16", "w8a8-fp8": "fp8", "w8a8-fp8-block": "fp8", "w4a4-fp4": "fp4", "w8a16-fp8": "bf16",
         "w4a16": "bf16"}


def read_quant_catalog(path: Path | None = None) -> QuantCatalog:
    path = path or QUANT_PATH
    if not path.is_file():
        return QuantCatalog()
    try:
        return QuantCatalog.model_validate(read_yaml(path) or {})
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(path), e) from None


@lru_cache(maxsize=None)
def quant_catalog() -> QuantCatalog:
    return read_quant_catalog()


def gemm_kind_name(weight_dtype: str, hardware: HardwareSpec) -> str:
    """The kernel kind vLLM runs ``weight_dtype`` weights with on ``hardware``: W8A8 / W4A4 where the GPU has the
    tensor cores for it, else weight-only (Marlin, dequantised to bf16); bf16 / fp16 weights: bf16."""
    if weight_dtype in ("bf16", "fp16"):
        return "bf16"
    if weight_dtype in ("fp8", "fp8_block"):
        if hardware.dense_fp8_flops_per_s:
            return "w8a8-fp8" if weight_dtype == "fp8" else "w8a8-fp8-block"
        return "w8a16-fp8"
    if weight_dtype in ("nvfp4", "mxfp4"):
        return "w4a4-fp4" if hardware.dense_fp4_flops_per_s else "w4a16"
    if weight_dtype == "int4":
        return "w4a16"
    raise InputError(None, "weight_dtype", f"no GEMM kind for weight dtype {weight_dtype!r}")


def gemm_kind(weight_dtype: str, hardware: HardwareSpec) -> tuple[str, GemmKind]:
    """(name, parameters) of the kind ``weight_dtype`` weights run as on ``hardware`` (:func:`gemm_kind_name`)."""
    name = gemm_kind_name(weight_dtype, hardware)
    if name == "bf16":
        return name, BF16
    cat = quant_catalog()
    own = cat.gpu_kinds.get(hardware.name) or cat.gpu_kinds.get(hardware.same_chip_as or "") or {}
    have = own.get(name) or cat.kinds.get(name)
    if have is None:
        return name, GemmKind(peak=PEAKS[name], compute_ratio=UNFITTED, mem_ratio=UNFITTED, gemm_overhead_s=NO_OVERHEAD)
    return name, have


def peak_flops(kind: GemmKind, hardware: HardwareSpec) -> float:
    """The datasheet tensor-core rate of ``kind``'s MMAs on ``hardware`` (a peak the GPU lacks: bf16's)."""
    if kind.peak == "fp8" and hardware.dense_fp8_flops_per_s:
        return hardware.dense_fp8_flops_per_s
    if kind.peak == "fp4" and hardware.dense_fp4_flops_per_s:
        return hardware.dense_fp4_flops_per_s
    return hardware.dense_bf16_flops_per_s
