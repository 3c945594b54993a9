"""The parts of a scenario (``simulator/inputs/scenario.py``): hardware, a model and its parallelism, the draft and its
acceptance, vLLM's memory share per engine, and the grid of system knobs. Defaults live here and nowhere else."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

from simulator.catalog.model_shape import DIMENSION_BOUNDS
from simulator.catalog.models import KvDtype, WeightDtype
from simulator.errors import InputError
from simulator.option_values import FIRST_N_MAX, check_range


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareChoice(StrictModel):
    gpu: str
    count: int = Field(default=1, ge=1, le=64, strict=True)


class ModelChoice(StrictModel):
    model: str  # a catalog name or a path to a Hugging Face config.json (relative to the scenario file)
    tp: int = Field(default=1, ge=1, le=64, strict=True)
    # pipeline parallelism: the layers split over pp stages of tp GPUs each (tp * pp GPUs per replica; base only)
    pp: int = Field(default=1, ge=1, le=64, strict=True)
    # data-parallel attention of a mixture of experts (DeepSeek's deployment): dp ranks of tp GPUs, experts over all
    # of them (ep = tp * dp); tp * dp GPUs per replica; base only
    dp: int = Field(default=1, ge=1, le=64, strict=True)
    # expert parallelism of a mixture of experts: 1 (experts sharded by TP) or the TP degree (whole experts per GPU)
    ep: int = Field(default=1, ge=1, le=64, strict=True)
    # bf16 | fp16 | fp8 (W8A8 where the GPU has FP8 tensor cores) | int4 (weight-only); default: the model's own
    # (its published checkpoint's: bf16, DeepSeek-R1's fp8)
    weight_dtype: WeightDtype | None = None
    kv_dtype: KvDtype = "bf16"  # bf16 | fp16 | fp8 KV cache


class AcceptancePrior(StrictModel):
    """Per-position acceptance a_i = P(first i drafts accepted) of a draft, with where it comes from: ``a`` given,
    or ``al1`` (the deployment's measured mean acceptance length at one draft, AL(1) = 1 + a_1) with the shape of
    the drafter kind's measured curves (``simulator/inputs/drafter_priors.py``, docs/drafters.md; eagle3, mtp, block)."""

    a: list[StrictFloat] | None = Field(default=None, min_length=1, max_length=16)
    al1: float | None = Field(default=None, ge=1.0, le=2.0, strict=True)
    kind: Literal["prior", "fitted", "measured"] = "prior"
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one(self) -> "AcceptancePrior":
        if (self.a is None) == (self.al1 is None):
            raise ValueError("give exactly one of a (a_1, a_2, ...) and al1 (the measured AL(1), in [1, 2])")
        return self

    @field_validator("a")
    @classmethod
    def _a(cls, v):
        if v is None:
            return v
        if any(not 0.0 <= x <= 1.0 for x in v):
            raise ValueError("a_i must lie in [0, 1]")
        if any(v[i + 1] > v[i] + 1e-12 for i in range(len(v) - 1)):
            raise ValueError("a_i = P(first i accepted) must be non-increasing in i")
        return v


class DraftChoice(StrictModel):
    """What drafts for the base engine of speculative systems (docs/model.md "Draft kinds", docs/drafters.md).

    ``kind: model`` (default) -- a separate model (``model``, default the small model) with its own KV cache,
    acceptance from the workload's ``token_acceptance`` unless ``acceptance`` is given;
    ``kind: head`` -- an EAGLE / MTP-style head of the base model (``layers`` decoder layers of its width,
    fusion projection, its LM head or an own one of ``vocab`` rows), needs ``acceptance``;
    ``kind: eagle3`` -- an EAGLE-3 head of the base model as built (three target layers fused by a 3H x H
    projection, ``layers`` decoder layers with a 2H-wide attention input, its own LM head of ``vocab`` rows,
    default 32000), needs ``acceptance``;
    ``kind: mtp`` -- the base model's own multi-token-prediction module (DeepSeek-V3/R1: one MoE layer sharing the
    embedding and LM head, run once per drafted token; vLLM runs one of a checkpoint's n modules per token), needs
    ``acceptance``;
    ``kind: block`` -- a block drafter (DSpark): a head of ``layers`` layers (as ``head``) that drafts gamma tokens
    in ONE pass, needs ``acceptance``;
    ``kind: ngram`` -- prompt lookup (no model cost), needs ``acceptance``.
    ``tree_width`` w > 1: tree drafting, the base verifies w*gamma + 1 tokens per iteration, at most
    ``verify_budget``."""

    kind: Literal["model", "head", "eagle3", "mtp", "block", "ngram"] = "model"
    model: str | None = None
    tp: int | None = Field(default=None, ge=1, le=64, strict=True)  # old scenarios: the draft runs at the base TP
    # default: a draft model's own, an MTP module's the base model's as served, a head's bf16 (as EAGLE heads are
    # published): catalog.draft_heads.draft_weight_dtype
    weight_dtype: WeightDtype | None = None
    kv_dtype: KvDtype | None = None  # default: the base model's
    layers: int = Field(default=1, ge=1, le=16, strict=True)
    vocab: int | None = Field(default=None, ge=1, le=DIMENSION_BOUNDS["vocab"][1], strict=True)
    fusion: bool = Field(default=True, strict=True)
    tree_width: int = Field(default=1, ge=1, le=64, strict=True)
    verify_budget: int = Field(default=64, ge=2, le=4096, strict=True)
    acceptance: AcceptancePrior | None = None


class MemoryFraction(StrictModel):
    """Each engine's vLLM ``gpu_memory_utilization`` when the small and base engines share the GPUs (specreason);
    a system that runs one engine gives it base + small (vLLM's default 0.9; ``serving/kv_cache.py``)."""

    base: float = Field(default=0.8, gt=0, le=1, strict=True)
    small: float = Field(default=0.1, gt=0, le=1, strict=True)

    @classmethod
    def of_total(cls, total: float) -> "MemoryFraction":
        """A whole-GPU utilization split between colocated engines in the default ratio (base 8 : small 1)."""
        d = cls()
        return cls(base=total * d.base / (d.base + d.small), small=total * d.small / (d.base + d.small))


class Grid(StrictModel):
    gamma: list[StrictInt] = Field(default=[5], min_length=1)
    threshold: list[StrictInt] = Field(default=[7], min_length=1)
    first_n: list[StrictInt] = Field(default=[0], min_length=1)
    tp: list[StrictInt] | None = Field(default=None, min_length=1)  # None: base.tp; an empty list is a mistake
    hardware: list[str] | None = Field(default=None, min_length=1)  # None: hardware.gpu

    @field_validator("gamma")
    @classmethod
    def _gamma(cls, v):
        for g in v:
            if not 1 <= g <= 16:
                raise ValueError(f"gamma must be in 1..16 (got {g})")
        return v

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, v):
        for t in v:
            if not 0 <= t <= 10:
                raise ValueError(f"threshold must be in 0..10 (10: never keep a small step; got {t})")
        return v

    @field_validator("first_n")
    @classmethod
    def _first_n(cls, v):
        for n in v:  # the bound and wording of --first-n
            try:
                check_range(n, "first_n", 0, FIRST_N_MAX)
            except InputError as e:
                raise ValueError(e.message) from None
        return v

    @field_validator("tp")
    @classmethod
    def _tp(cls, v):
        if v is not None and any(t < 1 for t in v):
            raise ValueError("tp must be >= 1")
        return v
