"""The fused-MoE kernel terms of older vLLM generations, per GPU (``simulator/catalog/moe_kernels.yaml``).

vLLM's fused-MoE kernels change between versions (Triton configs, CUTLASS and TRT-LLM experts, the expert map), and
AIConfigurator timed them on several (the H100: 0.14, 0.19, 0.24). ``gpu_priors.yaml`` carries each GPU's terms
fitted on its newest table; this catalog carries the terms of its older tables (``specsim fit moe`` writes both;
calibrate/gpu_priors/moe_fit.py). A deployment on an older vLLM takes the terms of the table whose version is the
newest at or below its own, else the oldest table (vLLM 0.11 on an H100: the 0.14 table, the nearest generation
measured); the newest table's terms, and every engine that is not vLLM, stay with ``gpu_priors.yaml``
(:func:`moe_kernel_terms`, the one rule; ``simulator.cost.cost_profile.prior_profile`` applies it). A GPU without
tables of its own takes its same chip's (``hardware.yaml`` ``same_chip_as``: the H200 the H100's)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from simulator.catalog.hardware import PriorParam, same_chip
from simulator.catalog.versions import version_key
from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

MOE_KERNELS_PATH = CATALOG_DIR / "moe_kernels.yaml"
KINDS = ("moe_mem_efficiency", "moe_compute_efficiency", "moe_layer_overhead_s", "expert_overhead_s",
         "moe_token_passes", "moe_ep_overhead_s")


class KernelTable(BaseModel):
    """One GPU's MoE terms fitted on one vLLM version's table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    terms: dict[str, PriorParam]


class GpuTables(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    newest: str  # the version of the table gpu_priors.yaml's terms come from
    older: list[KernelTable]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provenance: dict
    gpus: dict[str, GpuTables]


def table_version(version: str) -> tuple[int, ...]:
    """A table's version as numbers (:func:`simulator.catalog.versions.version_key`), errors naming the catalog."""
    return version_key(version, str(MOE_KERNELS_PATH))


@lru_cache(maxsize=1)
def moe_kernel_tables() -> dict[str, GpuTables]:
    """{GPU: its tables} as the catalog file holds them (empty without the file)."""
    if not MOE_KERNELS_PATH.is_file():
        return {}
    try:
        f = TypeAdapter(_File).validate_python(read_yaml(MOE_KERNELS_PATH))
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(MOE_KERNELS_PATH), e) from None
    for g, t in f.gpus.items():
        bad = sorted(set().union(*(k.terms for k in t.older)) - set(KINDS)) if t.older else []
        if bad:
            raise InputError(str(MOE_KERNELS_PATH), f"gpus.{g}", f"unknown terms {bad}; expected {', '.join(KINDS)}")
        for v in (t.newest, *(k.version for k in t.older)):
            table_version(v)
    return f.gpus


def pick_table(tables: GpuTables, version: str) -> KernelTable | None:
    """The table a vLLM ``version`` runs the kernels of: the newest at or below it, else the oldest; None where that
    is the newest table (gpu_priors.yaml's)."""
    want = version_key(version)
    every = sorted([(table_version(k.version), k) for k in tables.older] + [(table_version(tables.newest), None)],
                   key=lambda x: x[0])
    below = [k for v, k in every if v <= want]
    return below[-1] if below else every[0][1]


def moe_kernel_terms(gpu: str, engine_name: str, version: str | None) -> dict[str, PriorParam]:
    """The MoE terms replacing ``gpu``'s newest-table ones for ``engine_name`` at ``version`` (None: the newest):
    empty for the newest table, an engine other than vLLM, or a GPU (and same chip) without older tables."""
    if engine_name != "vllm" or version is None:
        return {}
    tables = moe_kernel_tables()
    chip = gpu if gpu in tables else same_chip().get(gpu)
    if chip not in tables:
        return {}
    table = pick_table(tables[chip], version)
    if table is None:
        return {}
    via = f"{chip}'s " if chip != gpu else ""
    return {k: p.model_copy(update={"source": f"vLLM {table.version} fused-MoE table ({via}simulator/catalog/"
                                              f"moe_kernels.yaml): {p.source}"})
            for k, p in table.terms.items()}
