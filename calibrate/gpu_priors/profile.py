"""GPU profiles (``calibrate/gpu_priors/profiles/gpu_<gpu>.yaml``): fitted kernel parameters with provenance,
(the transfer to GPUs nobody profiled lives in ``transfer.py`` and, for the step terms, ``engine_fit.py``).

Each parameter carries ``kind`` (calibrated | prior | transferred), its ``source`` and a stderr.
``cost_profile`` maps the kernel parameters onto the whole-pass cost model's named parameters
(``simulator.cost.cost_profile.CostProfile``): mem_efficiency, compute_efficiency,
layer_overhead_s = KERNELS_PER_LAYER x kernel_overhead_s, allreduce_latency_s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import yaml

from simulator.inputs.loading import write_atomic
from calibrate.gpu_priors.fit import fit_gpu, today
from calibrate.gpu_priors.kernel_model import KernelParams
from calibrate.gpu_priors.kernel_model import KERNELS_PER_LAYER

UNITS = {"kernel_overhead_s": "s", "allreduce_latency_s": "s", "allreduce_bandwidth_bytes_per_s": "bytes/s",
         "gemm_tile_tokens": "tokens"}


def build_gpu_profile(records: pd.DataFrame, gpu: str, inputs: dict[str, str], command: str, date: str | None = None) -> dict:
    """Fit ``gpu``'s parameters from ``records`` and describe them (a YAML-ready dict)."""
    d = records[records["gpu"] == gpu]
    if d.empty:
        from simulator.errors import InputError

        held = ", ".join(sorted(records["gpu"].unique()))
        raise InputError(None, "--gpu", f"no records for {gpu!r}; " + (f"the records hold {held}" if held else
                                                                        "the records file holds none"))
    params, info = fit_gpu(records, gpu)
    default = KernelParams()
    ops = sorted(set(d["op"]))
    srcs = sorted(set(d["source"]))
    src_text = "; ".join(f"{s}: {inputs.get(s, s)}" for s in srcs)
    out = {}
    for name, value in params.as_dict().items():
        # free in the fit and moved from the default; the GEMM tile is a step with no stderr (searched over the
        # token grid's gaps: fit._polish_tile), every other parameter needs a finite stderr
        step = name == "gemm_tile_tokens"
        fitted = (name in info["stderr"] and (step or not np.isnan(info["stderr"][name]))
                  and value != getattr(default, name))
        e = {"value": float(f"{value:.6g}"), "kind": "calibrated" if fitted else "prior"}
        e["source"] = (f"fitted on {gpu} op records ({src_text})" + (" (a step: the gap of the GEMM token grid it "
                       "falls in, searched over the grid)" if step else "") if fitted else
                       "prior (kernel_model.KernelParams default): no records of the ops that pin it")
        if fitted and not np.isnan(info["stderr"][name]):
            e["stderr"] = float(f"{info['stderr'][name]:.3g}")
        out[name] = e
    return {
        "name": f"gpu-{gpu}",
        "hardware": gpu,
        "provenance": {"kind": "fitted", "date": date or today(), "method": "calibrate.gpu_priors.fit (soft-L1 least "
                       "squares on log op time, subsampled per (gpu, op, source) with seed 0)",
                       "sources": {s: inputs.get(s, s) for s in srcs}, "ops": ops,
                       "rows": {"compute": info["compute_rows"], "allreduce": info["allreduce_rows"]},
                       "command": command},
        "params": out,
        "cost_profile": {"mem_efficiency": out["mem_efficiency"]["value"],
                         "compute_efficiency": out["compute_efficiency"]["value"],
                         "layer_overhead_s": float(f"{KERNELS_PER_LAYER * params.kernel_overhead_s:.4g}"),
                         "allreduce_latency_s": out["allreduce_latency_s"]["value"]},
    }


def write_gpu_profile(profile: dict, path, command: str):
    header = ("# GPU kernel-model profile fitted by calibrate.gpu_priors (docs/gpu-cost-model.md).\n"
              f"# Regenerate (do not edit by hand):\n#   {command}\n")
    return write_atomic(path, header + yaml.safe_dump(profile, sort_keys=False, width=120))
