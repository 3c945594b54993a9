"""Scenario: the validated what-if input (``scenarios/*.yaml``), resolved once.

Defaults live here and nowhere else. Profile references are either a path ending in
``.yaml`` (relative to the scenario file) or the name of a profile shipped in
``simulator/profiles/`` (``workload_<name>.yaml`` / ``cost_<name>.yaml``); the cost
profile ``prior`` means the datasheet prior of each hardware in the grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from simulator.catalog import get_hardware, get_model
from simulator.catalog.engine_hosts import ServingEngine
from simulator.catalog.model_shape import DIMENSION_BOUNDS, tp_error
from simulator.catalog.models import KvDtype, WeightDtype
from simulator.cost_model import Deployment, Drafting, expert_parallel_error
from simulator.cost_profile import CostProfile, prior_profile
from simulator.setup import Setup
from simulator.errors import InputError
from simulator.execution import Execution
from simulator.serving.bench_workload import ServingWorkload
from simulator.loading import load_yaml_model, read_yaml, validate_model
from simulator.option_values import FIRST_N_MAX, check_range
from simulator.systems import REGISTRY, SYSTEMS, SystemConfig, expand_systems
from simulator.workload import WorkloadProfile

PROFILES_DIR = Path(__file__).with_name("profiles")
SCENARIOS_DIR = Path(__file__).resolve().parent.parent / "scenarios"



MAX_REQUESTS = 10_000_000  # simulated requests per grid point or load level: the YAML and every --requests (one bound)

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareChoice(_Strict):
    gpu: str
    count: int = Field(default=1, ge=1, le=64, strict=True)


class ModelChoice(_Strict):
    model: str  # a catalog name or a path to a Hugging Face config.json (relative to the scenario file)
    tp: int = Field(default=1, ge=1, le=64, strict=True)
    # expert parallelism of a mixture of experts: 1 (experts sharded by TP) or the TP degree (whole experts per GPU)
    ep: int = Field(default=1, ge=1, le=64, strict=True)
    weight_dtype: WeightDtype = "bf16"  # bf16 | fp16 | fp8 (W8A8 where the GPU has FP8 tensor cores) | int4 (weight-only)
    kv_dtype: KvDtype = "bf16"  # bf16 | fp16 | fp8 KV cache


class AcceptancePrior(_Strict):
    """Per-position acceptance a_i = P(first i drafts accepted) of a draft, with where it comes from."""

    a: list[float] = Field(min_length=1, max_length=16)
    kind: Literal["prior", "fitted", "measured"] = "prior"
    source: str = Field(min_length=1)

    @field_validator("a")
    @classmethod
    def _a(cls, v):
        if any(not 0.0 <= x <= 1.0 for x in v):
            raise ValueError("a_i must lie in [0, 1]")
        if any(v[i + 1] > v[i] + 1e-12 for i in range(len(v) - 1)):
            raise ValueError("a_i = P(first i accepted) must be non-increasing in i")
        return v


class DraftChoice(_Strict):
    """What drafts for the base engine of speculative systems (README "Draft kinds").

    ``kind: model`` (default) -- a separate model (``model``, default the small model) with its own KV cache,
    acceptance from the workload's ``token_acceptance`` unless ``acceptance`` is given;
    ``kind: head`` -- an EAGLE / MTP-style head of the base model (``layers`` decoder layers of its width,
    fusion projection, its LM head or an own one of ``vocab`` rows), needs ``acceptance``;
    ``kind: mtp`` -- the base model's own multi-token-prediction module (DeepSeek-V3/R1: one MoE layer sharing the
    embedding and LM head, run once per drafted token), needs ``acceptance``;
    ``kind: ngram`` -- prompt lookup (no model cost), needs ``acceptance``.
    ``tree_width`` w > 1: tree drafting, the base verifies w*gamma + 1 tokens per iteration, at most
    ``verify_budget``."""

    kind: Literal["model", "head", "mtp", "ngram"] = "model"
    model: str | None = None
    tp: int | None = Field(default=None, ge=1, le=64, strict=True)  # old scenarios: the draft runs at the base TP
    weight_dtype: WeightDtype = "bf16"
    kv_dtype: KvDtype | None = None  # default: the base model's
    layers: int = Field(default=1, ge=1, le=16, strict=True)
    vocab: int | None = Field(default=None, ge=1, le=DIMENSION_BOUNDS["vocab"][1], strict=True)
    fusion: bool = Field(default=True, strict=True)
    tree_width: int = Field(default=1, ge=1, le=64, strict=True)
    verify_budget: int = Field(default=64, ge=2, le=4096, strict=True)
    acceptance: AcceptancePrior | None = None


class MemoryFraction(_Strict):
    """Each engine's vLLM ``gpu_memory_utilization`` when the small and base engines share the GPUs (specreason);
    a system that runs one engine gives it base + small (vLLM's default 0.9; ``serving/kv_cache.py``)."""

    base: float = Field(default=0.8, gt=0, le=1)
    small: float = Field(default=0.1, gt=0, le=1)

    @classmethod
    def of_total(cls, total: float) -> "MemoryFraction":
        """A whole-GPU utilization split between colocated engines in the default ratio (base 8 : small 1)."""
        d = cls()
        return cls(base=total * d.base / (d.base + d.small), small=total * d.small / (d.base + d.small))


class Grid(_Strict):
    gamma: list[StrictInt] = Field(default=[5], min_length=1)
    threshold: list[StrictInt] = Field(default=[7], min_length=1)
    first_n: list[StrictInt] = Field(default=[0], min_length=1)
    tp: list[StrictInt] | None = None
    hardware: list[str] | None = None

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


class Scenario(_Strict):
    name: str
    description: str = ""
    hardware: HardwareChoice
    base: ModelChoice
    small: ModelChoice
    draft: DraftChoice = Field(default_factory=DraftChoice)  # default: the small model drafts
    workload: str
    workload_overrides: dict = Field(default_factory=dict)
    cost_profiles: list[str] = Field(default=["prior"])
    # the serving engine and version whose host costs a GPU's prior takes (simulator/catalog/engine_hosts.yaml)
    serving_engine: ServingEngine = Field(default_factory=ServingEngine)
    # vLLM's gpu_memory_utilization: a number (the whole GPU's; colocated engines split it 8:1) or per engine
    # {base, small}; ``memory_fraction`` is its older name (per engine). Resolved into memory_fraction.
    gpu_memory_utilization: float | MemoryFraction | None = Field(default=None)
    memory_fraction: MemoryFraction = Field(default_factory=MemoryFraction)
    systems: list[str] = Field(default=list(SYSTEMS), min_length=1)
    grid: Grid = Field(default_factory=Grid)
    engine: Literal["analytic", "des"] = "analytic"
    # how the engine runs calls: prefix-cache block size, vanilla/specdecode step by step (simulator/execution.py)
    execution: Execution = Field(default_factory=Execution)
    slo: str | None = None  # capacity planning, e.g. "p99_latency<=300s" (specsim capacity / report)
    accuracy: str | None = None  # accuracy profile (simulator/accuracy.py); default: accuracy_<workload>.yaml if shipped
    requests: int = Field(default=1000, ge=2, le=MAX_REQUESTS, strict=True)
    seed: int = Field(default=0, ge=0, lt=2**63, strict=True)  # the CLI's --seed bounds
    # plain serving as benchmarks define it (simulator/serving/bench_workload.py): lengths, shared prefixes, sessions,
    # arrivals; or a `vllm bench serve ...` command line (a string, or {command: ...})
    serving_workload: ServingWorkload | None = None

    @field_validator("serving_workload", mode="before")
    @classmethod
    def _bench_command(cls, v):
        if isinstance(v, dict) and set(v) == {"command"}:
            v = v["command"]
        if isinstance(v, str):
            try:
                return ServingWorkload.from_command(v)
            except InputError as e:
                raise ValueError(e.one_line()) from None
        return v

    @field_validator("serving_engine")
    @classmethod
    def _engine_known(cls, v):
        from simulator.catalog.engine_hosts import engine_version

        try:
            engine_version(v)  # a name and a version the engine catalog can price, checked when the scenario loads
        except InputError as e:
            raise ValueError(e.message) from None
        return v

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _utilization(cls, v):
        if isinstance(v, float | int) and not 0 < v <= 1:
            raise ValueError("gpu_memory_utilization must lie in (0, 1]")
        return v

    @model_validator(mode="after")
    def _memory_split(self):
        u = self.gpu_memory_utilization
        if u is None:
            return self
        if "memory_fraction" in self.model_fields_set:
            raise ValueError("give gpu_memory_utilization or its older name memory_fraction, not both")
        self.memory_fraction = u if isinstance(u, MemoryFraction) else MemoryFraction.of_total(float(u))
        return self

    @property
    def memory_field(self) -> str:
        """The scenario field that set the memory split (for error messages)."""
        return "gpu_memory_utilization" if self.gpu_memory_utilization is not None else "memory_fraction"

    @field_validator("systems")
    @classmethod
    def _known_systems(cls, v: list[str]) -> list[str]:
        for s in v:
            if s not in REGISTRY:
                raise ValueError(f"unknown system {s!r}; known: {', '.join(SYSTEMS)}")
        return v


class ResolvedScenario:
    """A scenario with its profiles loaded and every grid point checked."""

    def __init__(self, scenario: Scenario, path: Path | None):
        self.scenario = scenario
        self.path = path
        self.file = str(path) if path else None
        self.workload = self._load_workload()
        self.cost_profiles = self._load_cost_profiles()
        self.base_model = self._model(scenario.base.model, "base.model").with_dtypes(
            scenario.base.weight_dtype, scenario.base.kv_dtype)
        self.small_model = self._model(scenario.small.model, "small.model").with_dtypes(
            scenario.small.weight_dtype, scenario.small.kv_dtype)
        self.drafting, self.draft_model = self._resolve_draft()
        self.hardware_names = scenario.grid.hardware or [scenario.hardware.gpu]
        for i, h in enumerate(self.hardware_names):
            get_hardware(h, self.file, "hardware.gpu" if scenario.grid.hardware is None else f"grid.hardware[{i}]")
        if scenario.slo is not None:
            from simulator.serving.slo import parse_slo

            try:
                parse_slo(scenario.slo, "slo")
            except InputError as e:
                raise InputError(self.file, "slo", e.message) from None
        self.tps = scenario.grid.tp or [scenario.base.tp]
        for hw in self.hardware_names:
            for tp in self.tps:
                self.check_placement(hw, tp)

    # ---- resolution ------------------------------------------------------------------------
    def _model(self, ref: str, field: str):
        """A catalog model or a config.json path (relative to the scenario's folder)."""
        return get_model(ref, self.file, field, self.path.parent if self.path is not None else None)

    @property
    def speculative(self) -> bool:
        return any(REGISTRY[s].draft for s in self.scenario.systems)

    def _resolve_draft(self):
        """(Drafting, draft ModelSpec) from ``draft``; checks it and applies its acceptance to the workload."""
        sc, f, d = self.scenario, self.file, self.scenario.draft
        kv = d.kv_dtype or sc.base.kv_dtype
        if d.kind == "model":
            if d.vocab is not None:
                raise InputError(f, "draft.vocab", "only a head draft has its own vocabulary size (kind: head)")
            name, fld = (d.model, "draft.model") if d.model else (sc.small.model, "small.model")
            m = self._model(name, fld)
            if self.speculative and m.tokenizer_id != self.base_model.tokenizer_id:
                raise InputError(f, fld, f"vocabulary mismatch: draft {m.name} uses the {m.tokenizer_id} tokenizer, "
                                 f"base {self.base_model.name} the {self.base_model.tokenizer_id} one (a separate draft "
                                 "must share its target's vocabulary; use kind: head or ngram)")
            m = m.with_dtypes(d.weight_dtype, kv)
        else:
            if d.model is not None:
                raise InputError(f, "draft.model", f"a {d.kind} draft has no separate model (a head is built from base.model)")
            if d.acceptance is None and self.speculative:
                raise InputError(f, "draft.acceptance", f"a {d.kind} draft needs its per-position acceptance "
                                 "(a: [a_1, ...], kind, source): the workload's token_acceptance is the separate model's")
            base = self._model(sc.base.model, "base.model")
            if d.kind == "head":
                m = base.draft_head(d.layers, d.vocab, d.fusion).with_dtypes(d.weight_dtype, kv)
            elif d.kind == "mtp":
                if not base.mtp_layers:
                    raise InputError(f, "draft.kind", f"{base.name} has no MTP module (mtp_layers 0; num_nextn_predict_layers "
                                     "in its config.json): use kind: head")
                if d.vocab is not None:
                    raise InputError(f, "draft.vocab", "an MTP module shares the base model's LM head")
                m = base.mtp_head().with_dtypes(d.weight_dtype, kv)
            else:
                m = self.base_model  # prompt lookup: no model runs (Drafting.free)
        if self.speculative:
            need = d.tree_width * max(sc.grid.gamma) + 1
            if need > d.verify_budget:
                raise InputError(f, "draft.tree_width", f"a tree of width {d.tree_width} at gamma={max(sc.grid.gamma)} "
                                 f"verifies {need} tokens per iteration, over draft.verify_budget={d.verify_budget}")
        if d.acceptance is not None:
            try:
                self.workload = WorkloadProfile.model_validate(
                    {**self.workload.model_dump(), "token_acceptance": list(d.acceptance.a)})
            except Exception as e:  # noqa: BLE001
                raise InputError(f, "draft.acceptance.a", str(e).splitlines()[0]) from None
        return Drafting(d.kind, d.tree_width), m

    def _ref(self, ref: str, prefix: str) -> Path:
        if ref.endswith((".yaml", ".yml")):
            p = Path(ref)
            if not p.is_absolute() and self.path is not None:
                p = self.path.parent / p
            return p
        return PROFILES_DIR / f"{prefix}_{ref}.yaml"

    def _load_workload(self) -> WorkloadProfile:
        p = self._ref(self.scenario.workload, "workload")
        if not p.is_file():
            raise InputError(self.file, "workload", f"workload profile {self.scenario.workload!r} not found ({p})")
        data = read_yaml(p)
        if not isinstance(data, dict):
            raise InputError(str(p), None, "expected a mapping")
        over = self.scenario.workload_overrides
        if over:
            try:
                return WorkloadProfile.model_validate({**data, **over})
            except Exception as e:  # noqa: BLE001 - re-raised as InputError naming the field
                from pydantic import ValidationError

                if isinstance(e, ValidationError):
                    first = e.errors()[0]
                    loc = ".".join(str(x) for x in first["loc"])
                    raise InputError(self.file, f"workload_overrides.{loc}", first["msg"]) from None
                raise
        return validate_model(data, WorkloadProfile, p)

    def _load_cost_profiles(self) -> dict[str, CostProfile]:
        out: dict[str, CostProfile] = {}
        for i, ref in enumerate(self.scenario.cost_profiles):
            if ref == "prior":
                continue
            p = self._ref(ref, "cost")
            if not p.is_file():
                raise InputError(self.file, f"cost_profiles[{i}]", f"cost profile {ref!r} not found ({p})")
            prof = load_yaml_model(p, CostProfile)
            get_hardware(prof.hardware, str(p), "hardware")
            out[prof.hardware] = prof
        return out

    def cost_profile(self, hardware: str) -> CostProfile:
        return self.cost_profiles.get(hardware) or prior_profile(get_hardware(hardware),
                                                                 serving_engine=self.scenario.serving_engine)

    def check_placement(self, hw_name: str, tp: int) -> None:
        """TP shards every model (``catalog/model_shape.tp_error``), fits the GPU count, and each engine starts in its
        memory share (``memory_check.check_plan``): the rules ``specsim pass-time`` checks too (``check_step``)."""
        sc, f = self.scenario, self.file
        hw = get_hardware(hw_name, f)
        tp_field = "grid.tp" if sc.grid.tp else "base.tp"
        if tp > sc.hardware.count:
            raise InputError(f, tp_field, f"tp={tp} exceeds hardware.count={sc.hardware.count}")
        for role, m in (("base", self.base_model), ("small", self.small_model), ("draft", self.draft_model)):
            if role == "draft" and self.drafting.free:
                continue
            err = tp_error(m, tp)
            if err:
                raise InputError(f, tp_field, f"{role} model: {err}")
        err = expert_parallel_error(self.base_model, tp, sc.base.ep)
        if err:
            raise InputError(f, "base.ep", err)
        err = expert_parallel_error(self.small_model, tp, sc.small.ep)
        if err:
            raise InputError(f, "small.ep", err)
        if sc.memory_fraction.base + sc.memory_fraction.small > 1.0:
            raise InputError(f, sc.memory_field, "base + small must not exceed 1")
        from simulator.memory_check import check_plan

        for plan, what, length, fld, _ in self.engine_plans(hw_name, tp):
            check_plan(self, plan, what, length, fld, tp)

    def engine_plans(self, hw_name: str, tp: int, length: int | None = None):
        """The vLLM memory plan of every engine the scenario's systems start (``simulator/memory_check.py``)."""
        from simulator.memory_check import engine_plans

        return engine_plans(self, hw_name, tp, length)

    # ---- views -----------------------------------------------------------------------------
    def workload_note(self) -> str | None:
        """None when the workload was fitted for this scenario's base and small models; else one line saying whose
        workload it borrows and which shipped workloads match these models, if any (issue 30: no silent borrowing)."""
        w = self.workload

        def norm(x) -> str:
            return str(x or "").strip().lower().rsplit("/", 1)[-1]

        def same(model, wname) -> bool:
            hf = model.hf_id or ""
            if " " in hf or not wname:  # a local cut / no HF id: nothing to compare
                return True
            return norm(wname) in {norm(hf), norm(model.name)}

        if same(self.base_model, w.base_model) and same(self.small_model, w.small_model):
            return None
        from simulator.loading import read_yaml

        match = []
        for p in sorted(PROFILES_DIR.glob("workload_*.yaml")):
            d = read_yaml(p)
            if isinstance(d, dict) and same(self.base_model, d.get("base_model")) and same(self.small_model, d.get("small_model")):
                match.append(p.stem[len("workload_"):])
        return (f"workload {w.name} was fitted for {w.base_model} + {w.small_model}, not this scenario's "
                f"{self.base_model.name} + {self.small_model.name}: its step counts, scores and acceptance are borrowed; "
                + (f"matching workload(s): {', '.join(match)}" if match else "no shipped workload matches these models"))

    def system_configs(self, systems: list[str] | None = None, gammas: list[int] | None = None,
                       thresholds: list[int] | None = None) -> list[SystemConfig]:
        """The scenario's grid of configurations; ``systems``/``gammas``/``thresholds`` override its values."""
        g = self.scenario.grid
        return expand_systems(systems or self.scenario.systems, gammas or g.gamma, thresholds or g.threshold, g.first_n)

    def deployments(self, hw_name: str, tp: int) -> dict[str, Deployment]:
        hw = get_hardware(hw_name)
        params = self.cost_profile(hw_name).params(hw)
        sc = self.scenario
        draft_ep = sc.base.ep if self.draft_model.is_moe and not self.drafting.free else 1
        models = {"base": self.base_model, "small": self.small_model, "draft": self.draft_model}
        return Setup(hw, tp, models, self.drafting, {"base": sc.base.ep, "small": sc.small.ep, "draft": draft_ep}).deployments(params)

    def to_dict(self) -> dict:
        """The scenario with every default filled in (``specsim show``)."""
        d = self.scenario.model_dump(mode="json")
        d["resolved"] = {
            "workload": self.workload.model_dump(mode="json"),
            "cost_profiles": {h: self.cost_profile(h).model_dump(mode="json") for h in self.hardware_names},
            "drafting": {"kind": self.drafting.kind, "tree_width": self.drafting.tree_width},
            "models": {r: m.model_dump(mode="json") | {"params_computed": m.params}
                       for r, m in (("base", self.base_model), ("small", self.small_model), ("draft", self.draft_model))},
            "hardware": {h: get_hardware(h).model_dump(mode="json") for h in self.hardware_names},
        }
        from simulator.memory_check import plan_view

        d["memory_plan"] = plan_view(self)  # vLLM's start-up memory of every engine (simulator/memory_plan.py)
        return d


def find_scenario(ref: str) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    cand = SCENARIOS_DIR / (ref if ref.endswith(".yaml") else f"{ref}.yaml")
    if cand.is_file():
        return cand
    raise InputError(ref, None, "scenario file not found")


def load_scenario(ref: str | Path, grid_overrides: dict | None = None) -> ResolvedScenario:
    """Load and resolve a scenario; ``grid_overrides`` (e.g. ``{"hardware": ["h100-sxm"], "tp": [1, 2]}``, from
    the command line) replace those ``grid`` entries before validation."""
    path = find_scenario(str(ref))
    d = read_yaml(path)
    if grid_overrides and isinstance(d, dict):
        d = {**d, "grid": {**(d.get("grid") or {}), **{k: v for k, v in grid_overrides.items() if v is not None}}}
    sc = validate_model(d, Scenario, path)
    return ResolvedScenario(sc, path)


def list_scenarios() -> list[Path]:
    return sorted(SCENARIOS_DIR.glob("*.yaml"))
