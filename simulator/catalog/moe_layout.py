"""How vLLM stores MXFP4 routed experts on a GPU: the MoE backend it picks and the padded expert shape it allocates.

vLLM's ``Mxfp4MoEMethod`` (``vllm/model_executor/layers/quantization/mxfp4.py``, ``create_weights``) allocates each
expert's gate/up and down projections with the hidden size and the per-GPU intermediate size rounded up to what its
backend's kernels need, and loads the checkpoint into the padded tensors. The padding is resident memory: vLLM's
start-up profile counts it as weights ("Model loading took ... GiB") and sizes the KV cache from what is left. On
gpt-oss (hidden 2880, intermediate 2880) it is 6-14% of the experts, which on one 80 GB GPU holding gpt-oss-120b
(~61 GiB of checkpoint) is most of the KV cache.

Backends by compute capability (``get_mxfp4_backend``; ``HardwareSpec.compute_capability``):

- Blackwell (10.x, FlashInfer present, the default install): FlashInfer's MXFP4 MoE, hidden and intermediate each
  rounded up to 256;
- Hopper (9.0, ``triton_kernels`` present): OpenAI's Triton ``matmul_ogs`` kernels, intermediate rounded up to 64
  in ``create_weights``; the swizzled Hopper value layout the weights are converted to holds the hidden size rounded
  up to 256 (inferred from vLLM's own load report, not from the layout's code: "Model loading took 64.38 GiB" for
  gpt-oss-120b on one H100 under the Triton backend, vllm-project/vllm#33155, against 64.47 GiB from this rule and
  60.69 GiB unpadded);
- Ampere and Ada (8.x): Marlin's weight-only kernels, intermediate rounded up to 128 and hidden to 256 (``n % 256 ==
  0 and k % 128 == 0`` for both projections); vLLM 0.10.1 on an H100 without ``triton_kernels`` took this path and
  logged 65.97 GiB (vllm-project/vllm#23278), 65.82 GiB from this rule.

Only the stored bytes (KV capacity) take the padding; the pass's weight reads stay the checkpoint's (the MoE
efficiencies were fitted without it; docs/moe.md)."""

from __future__ import annotations

from math import ceil

from simulator.catalog.hardware import HardwareSpec
from simulator.catalog.models import ModelSpec

# (hidden alignment, per-GPU intermediate alignment) of vLLM's MXFP4 MoE backend by compute-capability major version
MXFP4_ALIGN = {10: (256, 256), 9: (256, 64), 8: (256, 128)}


def round_up(x: int, a: int) -> int:
    return int(ceil(x / a) * a)


def mxfp4_backend_align(hardware: HardwareSpec) -> tuple[int, int] | None:
    """(hidden, intermediate) alignment of vLLM's MXFP4 MoE backend on ``hardware``; None: no CUDA GPU."""
    cc = hardware.compute_capability
    return None if cc is None else MXFP4_ALIGN.get(cc[0])


def stored_expert_factor(model: ModelSpec, hardware: HardwareSpec, intermediate_split: int) -> float:
    """Stored / checkpoint bytes of one routed expert as vLLM allocates it on ``hardware``, the intermediate size
    split over ``intermediate_split`` GPUs (tp where experts are sharded, 1 with whole experts per GPU); 1.0 for
    experts that are not MXFP4 or a GPU without a known backend."""
    if not model.is_moe or model.expert_weight_dtype != "mxfp4":
        return 1.0
    align = mxfp4_backend_align(hardware)
    if align is None:
        return 1.0
    h, i = model.hidden, max(1, model.expert_intermediate // intermediate_split)
    return round_up(h, align[0]) / h * round_up(i, align[1]) / i
