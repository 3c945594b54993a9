"""Large all-reduces: the NCCL path vLLM takes for messages above its custom all-reduce's cap (``allreduce.yaml``,
docs/gpu-cost-model.md "Large all-reduces").

One all-reduce of ``b`` bytes over a TP group of g GPUs costs the faster of the two paths vLLM has:

    small (custom all-reduce, CUDA graphs; the hardware's fitted pair):  t_ar + 2 (g-1)/g b / B_ar
    large (NCCL, eager):                                                   t_L  + 2 (g-1)/g b / (f_L x link)

vLLM picks the custom kernel below its size cap (8 MiB), where it is the faster, and NCCL above, where it is; the
minimum of the two lines is that choice without a size threshold of its own. (t_L, f_L) per GPU and TP degree where
AIConfigurator measured them (:mod:`calibrate.gpu_priors.allreduce_fit`); a GPU with the same chip takes its
twin's; another NVLink GPU the median of the measured ones at that TP degree (the nearest measured degree when its own
was not measured); PCIe GPUs have no large path (their small pair stands)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from simulator.catalog.hardware import HardwareSpec
from simulator.inputs.loading import load_yaml_model
from simulator.paths import CATALOG_DIR

ALLREDUCE_PATH = CATALOG_DIR / "allreduce.yaml"


class LargePath(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_s: float
    link_fraction: float
    source: str = ""


class AllreduceCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provenance: dict | None = None
    gpus: dict[str, dict[int, LargePath]] = {}
    nvlink_transfer: dict[int, LargePath] = {}
    not_applied: dict[str, str] = {}


def read_allreduce_catalog(path: Path | None = None) -> AllreduceCatalog:
    """The file at ``path`` (default the catalog's), checked; an empty catalog (no large path) where it is absent."""
    path = path or ALLREDUCE_PATH
    return load_yaml_model(path, AllreduceCatalog) if path.is_file() else AllreduceCatalog()


@lru_cache(maxsize=None)
def allreduce_catalog() -> AllreduceCatalog:
    return read_allreduce_catalog()


def _nearest(table: dict[int, LargePath], tp: int) -> LargePath | None:
    return table[min(table, key=lambda t: (abs(t - tp), -t))] if table else None


def large_allreduce(hardware: HardwareSpec, tp: int, catalog: AllreduceCatalog | None = None) -> tuple[float, float] | None:
    """(t_L seconds, B_L bytes/s) of the large path on ``hardware`` at TP ``tp`` (module docstring); None where it
    has none (PCIe, no catalog, TP 1)."""
    cat = catalog or allreduce_catalog()
    if tp <= 1 or hardware.interconnect != "nvlink":
        return None
    own = cat.gpus.get(hardware.name) or cat.gpus.get(hardware.same_chip_as or "") or cat.nvlink_transfer
    p = _nearest(own, tp)
    if p is None:
        return None
    return p.latency_s, p.link_fraction * hardware.datasheet_link_bytes_per_s


def allreduce_lines(hardware: HardwareSpec, tp: int, token_bytes: float, t_ar: float) -> tuple[tuple[float, float], ...]:
    """(seconds, seconds per token) of each path vLLM can take for one all-reduce of N tokens of ``token_bytes`` each
    over ``tp`` GPUs: its custom all-reduce (``t_ar`` + 2 (g-1)/g N bytes / B_ar, the hardware's fitted pair) and, on
    NVLink, NCCL's large-message path (:func:`large_allreduce`). One all-reduce costs the smallest line at N (vLLM
    takes the faster path; module docstring); none at TP 1. The cost model's one rule (``Deployment.allreduce_lines``,
    which the serving loop's ``PassCost`` reads)."""
    if tp <= 1:
        return ()
    ring = 2.0 * (tp - 1) / tp * token_bytes
    lines = [(t_ar, ring / hardware.link_bandwidth_bytes_per_s)]
    big = large_allreduce(hardware, tp)
    if big is not None:
        lines.append((big[0], ring / big[1]))
    return tuple(lines)


def smallest_line(lines: tuple[tuple[float, float], ...], n):
    """min over ``lines`` of (a + b n) for a scalar or an array ``n`` (0 without lines): the time of the path vLLM
    takes. Scalars stay Python floats (the serving loop's hot path evaluates it millions of times)."""
    if not lines:
        return 0.0 * n
    (a, b), *rest = lines
    t = a + b * n
    for a, b in rest:
        t = np.minimum(t, a + b * n) if np.ndim(n) else min(t, a + b * n)
    return t
