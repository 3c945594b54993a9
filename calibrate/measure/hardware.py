"""Detect the hardware a run executes on (for the run manifest's provenance)."""

from __future__ import annotations

import os
import platform


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def detect_hardware() -> dict:
    """CPU model and count; GPU name/count/memory when torch sees CUDA devices."""
    hw = {"cpu_model": _cpu_model(), "cpu_count": os.cpu_count() or 0, "gpu_name": "", "gpu_count": 0,
          "gpu_memory_gib": 0.0, "device": "cpu"}
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            hw.update(gpu_name=props.name, gpu_count=torch.cuda.device_count(),
                      gpu_memory_gib=round(props.total_memory / 2**30, 1), device="cuda")
    except ImportError:
        pass
    return hw

