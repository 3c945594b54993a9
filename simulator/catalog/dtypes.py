"""Storage dtypes of weights and KV caches: bytes per element, and the fields a model stored in a dtype carries."""

from __future__ import annotations

from typing import Literal

# Bytes per stored element by dtype. INT4 weight-only (W4A16, GPTQ/AWQ-style) stores 4 bits per weight plus
# one fp16 scale and one fp16 zero point per group of 128 weights: 0.5 + 4/128 bytes (assumption: group size 128).
# FP8 weights (W8A8, per-channel or per-tensor scales: negligible bytes). The embedding and LM head stay in
# bf16 in quantized checkpoints (assumption: the usual recipe leaves lm_head unquantized).
# MXFP4 (OCP microscaling, gpt-oss's experts): 4-bit E2M1 values plus one 8-bit E8M0 scale per block of 32: 0.5 + 1/32
# bytes per weight (the same bytes as INT4 with group 128, by coincidence); weight-only on GPUs without FP4 cores.
# FP8 with 128 x 128 block scales (DeepSeek-style checkpoints): one fp32 scale per block. NVFP4: 4-bit E2M1 values plus
# one FP8 E4M3 scale per block of 16 (and one fp32 scale per tensor: negligible). Which GEMM kernel each dtype runs on a
# GPU, and what it costs: simulator/catalog/quant_gemm.py.
WEIGHT_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5 + 4.0 / 128.0, "mxfp4": 0.5 + 1.0 / 32.0,
                      "fp8_block": 1.0 + 4.0 / (128.0 * 128.0), "nvfp4": 0.5 + 1.0 / 16.0}
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
WeightDtype = Literal["bf16", "fp16", "fp8", "int4", "mxfp4", "fp8_block", "nvfp4"]
KvDtype = Literal["bf16", "fp16", "fp8"]


def weight_bytes(dtype: str) -> dict:
    """A model's fields for layer weights stored in ``dtype`` (known: WEIGHT_DTYPE_BYTES); the embedding and LM head
    stay bf16 when quantized. The one rule of the catalog, config.json files and :meth:`ModelSpec.with_dtypes`."""
    b = WEIGHT_DTYPE_BYTES[dtype]
    return {"weight_dtype": dtype, "bytes_per_param": b, "head_bytes_per_param": None if b == 2.0 else 2.0}
