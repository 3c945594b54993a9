"""The fused-MoE kernel terms of older vLLM generations, per GPU (``simulator/catalog/moe_kernels.yaml``).

vLLM's fused-MoE kernels change between versions (Triton configs, CUTLASS and TRT-LLM experts, the expert map), and
AIConfigurator timed them on several (the H100: 0.14, 0.19, 0.24). ``gpu_priors.yaml`` carries each GPU's terms
fitted on its newest table; this catalog carries the terms of its older tables (``specsim fit moe`` writes both;
calibrate/gpu_priors/moe_fit.py). A deployment on an older vLLM takes the terms of the table whose version is the
newest at or below its own, else the oldest table (vLLM 0.11 on an H100: the 0.14 table, the nearest generation
measured); the newest table's terms, and every engine that is not vLLM, stay with ``gpu_priors.yaml``
(:func:`moe_kernel_terms`, the one rule; ``simulator.cost.cost_profile.prior_profile`` applies it). A GPU without
tables of its own takes its same chip's (``hardware.yaml`` ``same_chip_as``: the H200 the H100's).

Each table also carries its kernel kinds' ratios (FP8 block, 4-bit weight-only: compute and streaming efficiency
relative to the same table's bf16 fused-MoE kernels), fitted only where the table times the kind: they belong to a
kernel generation (the H100's vLLM 0.14 FP8 block kernels reach their FP8 peak's share as well as its bf16 ones
reach theirs, 0.24's about half). A deployment takes the ratios of the table it runs (:func:`moe_kind_params`); a
kind its table does not time runs at bf16's efficiencies (the A100's MXFP4 experts: Marlin, which no table times);
a GPU without tables (nor a same chip's) takes the median over the GPUs' newest tables (``kinds``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from simulator.catalog.hardware import PriorParam, same_chip
from simulator.catalog.versions import version_key
from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

MOE_KERNELS_PATH = CATALOG_DIR / "moe_kernels.yaml"
KINDS = ("moe_mem_efficiency", "moe_compute_efficiency", "moe_layer_overhead_s", "expert_overhead_s",
         "moe_token_passes", "moe_ep_overhead_s")


# per fused-MoE kernel kind but bf16 (MOE_KINDS): its compute and streaming efficiencies relative to the same
# table's bf16 fused-MoE ones (the MoE fit's ``<unit>|<kind>.<ratio>``)
KindRatios = dict[Literal["w8a8-fp8", "w8a8-fp8-block", "w4a16"], dict[Literal["compute_ratio", "mem_ratio"], PriorParam]]


class KernelTable(BaseModel):
    """One GPU's MoE terms fitted on one vLLM version's table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    terms: dict[str, PriorParam]
    kinds: KindRatios = {}


class GpuTables(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    newest: str  # the version of the table gpu_priors.yaml's terms come from
    kinds: KindRatios = {}  # the newest table's kernel kinds
    older: list[KernelTable]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provenance: dict
    gpus: dict[str, GpuTables]
    kinds: KindRatios = {}  # for a GPU without tables: the median over the GPUs' newest tables


def table_version(version: str) -> tuple[int, ...]:
    """A table's version as numbers (:func:`simulator.catalog.versions.version_key`), errors naming the catalog."""
    return version_key(version, str(MOE_KERNELS_PATH))


# The fused-MoE kernel kind vLLM runs a model's expert weights with: FP8 experts as 128 x 128 block-scaled FP8 (the
# published FP8 MoE checkpoints -- DeepSeek-V3 / R1, Qwen3 FP8, GLM FP8 -- are block-scaled; per-tensor FP8 MoE is
# measured but not fitted: its kernels differ four-fold between vLLM versions on the H100, docs/moe.md), on a GPU
# without FP8 tensor cores weight-only (FP8 Marlin: no table times it, so no ratio); 4-bit experts (MXFP4, INT4)
# weight-only, dequantised to bf16 in the kernel (the kind the tables time on every GPU); NVFP4 experts their own kind
# (FP4 tensor-core kernels on Blackwell, which the fit leaves out, Marlin elsewhere: no ratio, bf16's efficiencies).
MOE_KINDS = {"bf16": "bf16", "fp16": "bf16", "fp8": "w8a8-fp8-block", "fp8_block": "w8a8-fp8-block",
             "int4": "w4a16", "mxfp4": "w4a16", "nvfp4": "nvfp4"}


def moe_kind(expert_dtype: str, hardware) -> str:
    """The fused-MoE kernel kind ``expert_dtype`` experts run as on ``hardware`` (:data:`MOE_KINDS`)."""
    kind = MOE_KINDS.get(expert_dtype, "bf16")
    return "w8a16-fp8" if kind.startswith("w8a8") and not hardware.dense_fp8_flops_per_s else kind


def moe_kind_ratios(expert_dtype: str, hardware, ratios: dict[str, float]) -> tuple[float, float]:
    """(streaming, compute) efficiency ratios of the kernel kind ``expert_dtype`` experts run as on ``hardware``
    (:func:`moe_kind`) to the bf16 fused-MoE efficiencies, from a deployment's ``ratios`` (``{"<kind>.<ratio>":
    value}``, :func:`moe_kind_params` as ``CostParams.moe_kind_ratios`` carries them): (1, 1) for bf16 and a kind
    without ratios. The one rule the cost model (``Deployment``) reads."""
    kind = moe_kind(expert_dtype, hardware)
    return ratios.get(f"{kind}.mem_ratio", 1.0), ratios.get(f"{kind}.compute_ratio", 1.0)


def moe_kind_params(gpu: str, engine_name: str = "vllm", version: str | None = None) -> dict[str, PriorParam]:
    """``{"<kind>.<ratio>": param}``: the kernel kinds' ratios a deployment on ``gpu`` runs with: those of the table
    :func:`moe_kernel_terms` picks (the newest for an engine other than vLLM or no version), a kind that table does not
    time left out (bf16's efficiencies); a GPU without tables of its own or its same chip's: the catalog's median
    over the GPUs' newest tables."""
    chip, table = picked_table(gpu, engine_name, version)
    if chip is None:
        return {f"{k}.{r}": p.model_copy(update={"kind": "transferred"}) for k, rs in catalog_file()[1].items()
                for r, p in rs.items()}
    kinds = table.kinds if table is not None else moe_kernel_tables()[chip].kinds
    if chip != gpu:  # the same chip's tables, as gpu_priors.yaml transfers its other MoE terms
        return {f"{k}.{r}": p.model_copy(update={"kind": "transferred", "source": f"same chip as {chip}: {p.source}"})
                for k, rs in kinds.items() for r, p in rs.items()}
    return {f"{k}.{r}": p for k, rs in kinds.items() for r, p in rs.items()}


def kind_values(gpu: str, version: str | None = None) -> dict[str, float]:
    """:func:`moe_kind_params` of ``gpu`` under vLLM ``version`` as the MoE fit names them (``<gpu>|<kind>.<ratio>``:
    what ``moe_fit.predict`` reads for rows of that GPU)."""
    return {f"{gpu}|{n}": p.value for n, p in moe_kind_params(gpu, "vllm", version).items()}


def moe_kernel_tables() -> dict[str, GpuTables]:
    """{GPU: its tables} as the catalog file holds them (empty without the file)."""
    return catalog_file()[0]


@lru_cache(maxsize=1)
def catalog_file() -> tuple[dict[str, GpuTables], dict]:
    """(GPU tables, kernel kinds) of ``moe_kernels.yaml``, validated (errors name the file and field)."""
    if not MOE_KERNELS_PATH.is_file():
        return {}, {}
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
    every = [("kinds", f.kinds)] + [(f"gpus.{g}.kinds", t.kinds) for g, t in f.gpus.items()] + [
        (f"gpus.{g}.older[{i}].kinds", k.kinds) for g, t in f.gpus.items() for i, k in enumerate(t.older)]
    for where, kinds in every:
        for k, rs in kinds.items():
            for r, p in rs.items():
                if p.value <= 0:  # the cost model divides by them
                    raise InputError(str(MOE_KERNELS_PATH), f"{where}.{k}.{r}", f"must be > 0 (got {p.value})")
    return f.gpus, f.kinds


def pick_table(tables: GpuTables, version: str) -> KernelTable | None:
    """The table a vLLM ``version`` runs the kernels of: the newest at or below it, else the oldest; None where that
    is the newest table (gpu_priors.yaml's)."""
    want = version_key(version)
    every = sorted([(table_version(k.version), k) for k in tables.older] + [(table_version(tables.newest), None)],
                   key=lambda x: x[0])
    below = [k for v, k in every if v <= want]
    return below[-1] if below else every[0][1]


def picked_table(gpu: str, engine_name: str, version: str | None) -> tuple[str | None, KernelTable | None]:
    """(the GPU whose tables ``gpu`` takes: itself or its same chip, None without either; the older table
    ``engine_name`` at ``version`` runs, :func:`pick_table`, None for the newest): the one table choice of the MoE
    terms and the kernel kinds. An engine other than vLLM, or no version, runs the newest."""
    tables = moe_kernel_tables()
    chip = gpu if gpu in tables else same_chip().get(gpu)
    if chip not in tables:
        return None, None
    return chip, (pick_table(tables[chip], version) if engine_name == "vllm" and version is not None else None)


def moe_kernel_terms(gpu: str, engine_name: str, version: str | None) -> dict[str, PriorParam]:
    """The MoE terms replacing ``gpu``'s newest-table ones for ``engine_name`` at ``version`` (None: the newest):
    empty for the newest table, an engine other than vLLM, or a GPU (and same chip) without older tables."""
    chip, table = picked_table(gpu, engine_name, version)
    if table is None:
        return {}
    via = f"{chip}'s " if chip != gpu else ""
    return {k: p.model_copy(update={"source": f"vLLM {table.version} fused-MoE table ({via}simulator/catalog/"
                                              f"moe_kernels.yaml): {p.source}"})
            for k, p in table.terms.items()}
