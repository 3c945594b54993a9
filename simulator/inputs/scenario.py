"""Scenario: the validated what-if input (``scenarios/*.yaml``), resolved once.

Defaults live here and nowhere else. Profile references are either a path ending in
``.yaml`` (relative to the scenario file) or the name of a profile shipped in
``simulator/profiles/`` (``workload_<name>.yaml`` / ``cost_<name>.yaml``); the cost
profile ``prior`` means the datasheet prior of each hardware in the grid.
"""

from __future__ import annotations

from simulator.paths import PROFILES_DIR, SCENARIOS_DIR

from pathlib import Path
from typing import Literal

from pydantic import Field, StrictFloat, ValidationError, field_validator, model_validator

from simulator.catalog import get_hardware, get_model
from simulator.catalog.engine_hosts import ServingEngine
from simulator.catalog.model_shape import draft_vocabulary_error, tp_error
from simulator.catalog.draft_heads import draft_built_from_base, draft_weight_dtype
from simulator.cost.cost_model import Deployment, Drafting, data_parallel_error, expert_parallel_error
from simulator.cost.cost_profile import CostProfile, load_profile, prior_profile
from simulator.inputs.drafter_priors import PRIOR_KINDS, prior_acceptance, prior_kind
from simulator.cost.setup import Setup
from simulator.errors import InputError
from simulator.cost.execution import Execution
from simulator.engines.serving.bench_workload import ServingWorkload
from simulator.inputs.loading import read_yaml, validate_model
from simulator.inputs.systems import REGISTRY, SYSTEMS, SystemConfig, expand_systems
from simulator.inputs.workload import WorkloadProfile
from simulator.option_values import MAX_REQUESTS
from simulator.inputs.scenario_fields import (  # noqa: F401 - the scenario's parts, importable from here as before
    AcceptancePrior, DraftChoice, Grid, HardwareChoice, MemoryFraction, ModelChoice, StrictModel)




PLAIN_SYSTEMS = ("vanilla-base",)  # a scenario without a small model runs these unless it names its systems


class Scenario(StrictModel):
    name: str
    description: str = ""
    hardware: HardwareChoice
    base: ModelChoice
    # the small model (step writer of specreason, default draft of specdecode); None: a plain deployment of the base
    # model alone, whose systems default to vanilla-base and may not use a small model (``uses_small_model``)
    small: ModelChoice | None = None
    draft: DraftChoice = Field(default_factory=DraftChoice)  # default: the small model drafts
    workload: str
    workload_overrides: dict = Field(default_factory=dict)
    cost_profiles: list[str] = Field(default=["prior"])
    # the serving engine and version whose host costs a GPU's prior takes (simulator/catalog/engine_hosts.yaml)
    serving_engine: ServingEngine = Field(default_factory=ServingEngine)
    # vLLM's gpu_memory_utilization: a number (the whole GPU's; colocated engines split it 8:1) or per engine
    # {base, small}; ``memory_fraction`` is its older name (per engine). Resolved into memory_fraction.
    gpu_memory_utilization: StrictFloat | MemoryFraction | None = Field(default=None)
    memory_fraction: MemoryFraction = Field(default_factory=MemoryFraction)
    systems: list[str] = Field(default_factory=lambda: list(SYSTEMS), min_length=1)
    grid: Grid = Field(default_factory=Grid)
    engine: Literal["analytic", "des"] = "analytic"
    # how the engine runs calls: prefix-cache block size, vanilla/specdecode step by step (simulator/cost/execution.py)
    execution: Execution = Field(default_factory=Execution)
    slo: str | None = None  # capacity planning, e.g. "p99_latency<=300s" (specsim capacity / report)
    accuracy: str | None = None  # accuracy profile (simulator/inputs/accuracy.py); default: accuracy_<workload>.yaml if shipped
    requests: int = Field(default=1000, ge=2, le=MAX_REQUESTS, strict=True)
    seed: int = Field(default=0, ge=0, lt=2**63, strict=True)  # the CLI's --seed bounds
    # plain serving as benchmarks define it (simulator/engines/serving/bench_workload.py): lengths, shared prefixes, sessions,
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

    @model_validator(mode="after")
    def _plain_deployment(self):
        if self.small is None and "systems" not in self.model_fields_set:
            self.systems = list(PLAIN_SYSTEMS)
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
        self.overrides: tuple = ()  # grid entries the command line replaced (load_scenario's grid_overrides), frozen
        self.file = str(path) if path else None
        self.workload = self._load_workload()
        self.cost_profiles = self._load_cost_profiles()
        if scenario.accuracy is not None:  # a named accuracy profile is checked before any work, not after it
            from simulator.inputs.accuracy import model_for_workload

            model_for_workload(self.workload, scenario.accuracy, self.file)
        self.base_model = self._model(scenario.base.model, "base.model").with_dtypes(
            scenario.base.weight_dtype, scenario.base.kv_dtype)
        self.small_model = None if scenario.small is None else self._model(scenario.small.model, "small.model").with_dtypes(
            scenario.small.weight_dtype, scenario.small.kv_dtype)
        for k in ("pp", "dp"):
            if scenario.small is not None and getattr(scenario.small, k) != 1:
                raise InputError(self.file, f"small.{k}", f"{k} is the base model's deployment (base.{k}); the small "
                                 f"model runs on the base's GPUs: leave small.{k} at 1")
        self.check_systems(scenario.systems, self.file, "systems")
        self.drafting, self.draft_model = self._resolve_draft()
        hardware = scenario.grid.hardware or [scenario.hardware.gpu]
        for i, h in enumerate(hardware):
            get_hardware(h, self.file, "hardware.gpu" if scenario.grid.hardware is None else f"grid.hardware[{i}]")
        # a value listed twice is one grid point (as systems, gamma and threshold are: systems.expand_systems)
        self.hardware_names = list(dict.fromkeys(hardware))
        if scenario.slo is not None:
            from simulator.engines.serving.slo import parse_slo

            try:
                parse_slo(scenario.slo, "slo")
            except InputError as e:
                raise InputError(self.file, "slo", e.message) from None
        self.tps = list(dict.fromkeys(scenario.grid.tp or [scenario.base.tp]))
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

    def uses_small_model(self, system: str) -> bool:
        """The system runs the small model: it writes steps (vanilla-small, specreason), or it drafts with the
        default draft (``draft.kind: model`` without ``draft.model``)."""
        spec, d = REGISTRY[system], self.scenario.draft
        return spec.small_writes_steps or (spec.draft and d.kind == "model" and d.model is None)

    def check_systems(self, systems: list[str], f: str | None, field: str) -> None:
        """The systems this scenario can run (the scenario's ``systems`` or a command's ``--system``): known names;
        a plain deployment (no ``small``) runs no system that needs the small model; pipeline parallelism
        (``base.pp`` > 1) serves the base model alone (vanilla-base). ``field``: ``systems`` or ``--system``."""
        sc = self.scenario
        for i, name in enumerate(systems):
            fld = f"{field}[{i}]" if f is not None else field
            if name not in REGISTRY:
                raise InputError(f, fld, f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
            if sc.small is None and self.uses_small_model(name):
                why = ("its draft is the small model: give draft.model, or a draft of kind head, mtp or ngram"
                       if REGISTRY[name].draft else "the small model writes its steps")
                raise InputError(f, fld, f"{name} needs a small model and scenario {self.file} has "
                                 f"none (no small:): {why}; a plain deployment runs {', '.join(PLAIN_SYSTEMS)}")
            for k, what in (("pp", "pipeline parallelism"), ("dp", "data-parallel attention")):
                v = getattr(sc.base, k)
                if v > 1 and (REGISTRY[name].uses_small or not REGISTRY[name].uses_base):
                    raise InputError(f, fld, f"{name} with base.{k}={v}: {what} is modelled for the base model "
                                     f"alone (vanilla-base); use {k}: 1 for this system")

    def _check_async_with(self, kind: str) -> None:
        """vLLM's own refusal: a stated ``--async-scheduling`` with CPU prompt lookup (``ngram``) speculation."""
        if self.speculative and kind == "ngram" and self.scenario.serving_engine.async_scheduling:
            raise InputError(self.file, "serving_engine.async_scheduling", "vLLM refuses async scheduling with ngram "
                             "(CPU prompt lookup) speculative decoding (\"async scheduling is only supported with "
                             "EAGLE/MTP/Draft Model/NGram GPU kind of speculative decoding\"): leave it unset or false")

    def _resolve_draft(self):
        """(Drafting, draft ModelSpec) from ``draft``; checks it and applies its acceptance to the workload."""
        sc, f, d = self.scenario, self.file, self.scenario.draft
        kv = d.kv_dtype or sc.base.kv_dtype
        if d.kind == "model":
            if d.vocab is not None:
                raise InputError(f, "draft.vocab", "only a head draft has its own vocabulary size (kind: head, eagle3 "
                                 "or block)")
            if d.model is None and sc.small is None:
                return Drafting(d.kind, d.tree_width), None  # no draft: a plain deployment (_check_systems)
            name, fld = (d.model, "draft.model") if d.model else (sc.small.model, "small.model")
            m = self._model(name, fld)
            err = self.speculative and draft_vocabulary_error(self.base_model, m)
            if err:
                raise InputError(f, fld, f"{err}; use kind: head or ngram)")
            served = self.small_model if d.model is None else m  # the small model drafts as it is served
            m = m.with_dtypes(draft_weight_dtype(d.kind, served, self.base_model, d.weight_dtype), kv)
        else:
            if d.model is not None:
                raise InputError(f, "draft.model", f"a {d.kind} draft has no separate model (a head is built from base.model)")
            if d.acceptance is None and self.speculative:
                raise InputError(f, "draft.acceptance", f"a {d.kind} draft needs its per-position acceptance "
                                 "(a: [a_1, ...], kind, source): the workload's token_acceptance is the separate model's")
            m = draft_built_from_base(self._model(sc.base.model, "base.model"), self.base_model, d, kv, f)
        self._check_async_with(d.kind)
        if self.speculative:
            need = d.tree_width * max(sc.grid.gamma) + 1
            if need > d.verify_budget:
                raise InputError(f, "draft.tree_width", f"a tree of width {d.tree_width} at gamma={max(sc.grid.gamma)} "
                                 f"verifies {need} tokens per iteration, over draft.verify_budget={d.verify_budget}")
        if d.acceptance is not None:
            a = d.acceptance.a
            if a is None:
                if d.kind not in PRIOR_KINDS:
                    raise InputError(f, "draft.acceptance.al1", f"a prior from AL(1) needs draft.kind one of "
                                     f"{', '.join(PRIOR_KINDS)} (got {d.kind}): give a")
                a = prior_acceptance(prior_kind(d.kind, arch=self.base_model.arch), d.acceptance.al1)
            try:
                self.workload = WorkloadProfile.model_validate(
                    {**self.workload.model_dump(), "token_acceptance": list(a)})
            except Exception as e:  # noqa: BLE001
                raise InputError(f, "draft.acceptance.a", str(e).splitlines()[0]) from None
        return Drafting(d.kind, d.tree_width), m

    def ref_path(self, ref: str, prefix: str) -> Path:
        """The file a profile reference names: a YAML path (relative to the scenario's folder) or a shipped
        profile's name (``PREFIX_NAME.yaml`` in the profiles folder)."""
        if ref.endswith((".yaml", ".yml")):
            p = Path(ref)
            if not p.is_absolute() and self.path is not None:
                p = self.path.parent / p
            return p
        return PROFILES_DIR / f"{prefix}_{ref}.yaml"

    def _load_workload(self) -> WorkloadProfile:
        p = self.ref_path(self.scenario.workload, "workload")
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
            p = self.ref_path(ref, "cost")
            if not p.is_file():
                raise InputError(self.file, f"cost_profiles[{i}]", f"cost profile {ref!r} not found ({p})")
            prof = load_profile(p)
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
        pp, dp = sc.base.pp, sc.base.dp
        if tp * pp * dp > sc.hardware.count:
            raise InputError(f, tp_field, f"tp={tp}" + (f" x pp={pp}" if pp > 1 else "") + (f" x dp={dp}" if dp > 1 else "")
                             + f" exceeds hardware.count={sc.hardware.count}")
        if pp > 1 and dp > 1:
            raise InputError(f, "base.dp", "data-parallel attention with pipeline stages is not modelled: pp or dp 1")
        if pp > self.base_model.layers:
            raise InputError(f, "base.pp", f"pp={pp} exceeds base model {self.base_model.name}'s "
                             f"{self.base_model.layers} layers (one stage holds at least one layer)")
        for role, m in (("base", self.base_model), ("small", self.small_model), ("draft", self.draft_model)):
            if m is None or (role == "draft" and self.drafting.free):
                continue
            err = tp_error(m, tp)
            if err:
                raise InputError(f, tp_field, f"{role} model: {err}")
        for fld, err in (("base.dp", data_parallel_error(self.base_model, dp)),
                         ("base.ep", expert_parallel_error(self.base_model, tp, sc.base.ep, dp))):
            if err:
                raise InputError(f, fld, err)
        err = self.small_model and expert_parallel_error(self.small_model, tp, sc.small.ep)
        if err:
            raise InputError(f, "small.ep", err)
        d = None if self.drafting.free else self.draft_model
        why = ""  # what a mixture-of-experts draft at the base's expert parallelism cannot be
        if d is not None and d.is_moe:
            why = (f" without its dp={dp} data-parallel ranks: not modelled" if dp > 1 else
                   f": {e}" if (e := expert_parallel_error(d, tp, sc.base.ep)) else "")
        if why:
            raise InputError(f, "draft.model" if sc.draft.model else "draft.kind", f"a mixture-of-experts draft "
                             f"({d.name}) runs at the base's expert parallelism, ep={sc.base.ep} over tp={tp}{why}")
        if sc.memory_fraction.base + sc.memory_fraction.small > 1.0:
            raise InputError(f, sc.memory_field, "base + small must not exceed 1")
        from simulator.cost.memory_check import check_plan

        for plan, what, length, fld, _ in self.engine_plans(hw_name, tp):
            check_plan(self, plan, what, length, fld, tp)

    def engine_plans(self, hw_name: str, tp: int, length: int | None = None):
        """The vLLM memory plan of every engine the scenario's systems start (``simulator/cost/memory_check.py``)."""
        from simulator.cost.memory_check import engine_plans

        return engine_plans(self, hw_name, tp, length)

    # ---- views -----------------------------------------------------------------------------
    def workload_note(self) -> str | None:
        """None when the workload was fitted for this scenario's base and small models; else one line saying whose
        workload it borrows and which shipped workloads match these models, if any (no silent borrowing)."""
        w = self.workload

        def norm(x) -> str:
            return str(x or "").strip().lower().rsplit("/", 1)[-1]

        def same(model, wname) -> bool:
            hf = model.hf_id or ""
            if " " in hf or not wname:  # a local cut / no HF id: nothing to compare
                return True
            return norm(wname) in {norm(hf), norm(model.name)}

        def fits(base, small) -> bool:  # a plain deployment compares its base model alone
            return same(self.base_model, base) and (self.small_model is None or same(self.small_model, small))

        if fits(w.base_model, w.small_model):
            return None
        from simulator.inputs.loading import read_yaml

        match = []
        for p in sorted(PROFILES_DIR.glob("workload_*.yaml")):
            d = read_yaml(p)
            if isinstance(d, dict) and fits(d.get("base_model"), d.get("small_model")):
                match.append(p.stem[len("workload_"):])
        ours = " + ".join(m.name for m in (self.base_model, self.small_model) if m is not None)
        return (f"workload {w.name} was fitted for {w.base_model} + {w.small_model}, not this scenario's "
                f"{ours}: its step counts, scores and acceptance are borrowed; "
                + (f"matching workload(s): {', '.join(match)}" if match else "no shipped workload matches these models"))

    def system_configs(self, systems: list[str] | None = None, gammas: list[int] | None = None,
                       thresholds: list[int] | None = None) -> list[SystemConfig]:
        """The scenario's grid of configurations; ``systems``/``gammas``/``thresholds`` override its values."""
        g = self.scenario.grid
        if systems:
            self.check_systems(systems, None, "--system")
        return expand_systems(systems or self.scenario.systems, gammas or g.gamma, thresholds or g.threshold, g.first_n)

    def deployments(self, hw_name: str, tp: int) -> dict[str, Deployment | None]:
        """{role: Deployment} of base, small and draft; a role the scenario does not have (a plain deployment's small
        model and draft) is None, and no system of the scenario runs it (``_check_systems``)."""
        hw = get_hardware(hw_name)
        params = self.cost_profile(hw_name).params(hw)
        sc = self.scenario
        m = self.roles
        draft_ep = sc.base.ep if "draft" in m and m["draft"].is_moe and not self.drafting.free else 1
        ep = {"base": sc.base.ep, "small": sc.small.ep if sc.small else 1, "draft": draft_ep}
        deps = Setup(hw, tp, m, self.drafting, ep, pp={"base": sc.base.pp}, dp={"base": sc.base.dp}).deployments(params)
        return {"small": None, "draft": None, **deps}

    def execution_for(self, hw_name: str, tp: int) -> Execution:
        """The scenario's ``execution`` as its serving engine runs it on ``hw_name`` at ``tp``: the scheduler limits
        it leaves unset are vLLM's defaults there (``Execution.for_device``; a CPU's scale with the workers)."""
        sc = self.scenario
        try:
            return sc.execution.for_device(get_hardware(hw_name), sc.serving_engine, world_size=tp * sc.base.pp)
        except ValidationError as e:  # a max_num_seqs above the budget vLLM gives this GPU by default
            msg = e.errors()[0]["msg"].removeprefix("Value error, ")
            raise InputError(self.file, "execution.max_num_seqs", f"on {hw_name}: {msg}; set "
                             "execution.max_num_batched_tokens too") from None

    def limits_line(self) -> str:
        """Each engine's scheduler limits per device of the scenario: as it sets them, else vLLM's defaults there."""
        ex = self.scenario.execution
        said = [f for f, unset in (("max_num_batched_tokens", ex.max_num_batched_tokens == "auto"),
                                   ("max_num_seqs", ex.max_num_seqs is None)) if not unset]
        per = "; ".join(f"{h} {r.max_num_batched_tokens or 'whole prefills'} / {r.max_num_seqs}"
                        for h in self.hardware_names for r in [self.execution_for(h, self.tps[0])])
        how = f"set by the scenario: {', '.join(said)}" if said else "vLLM's defaults on each device"
        return f"Scheduler limits per engine (max_num_batched_tokens / max_num_seqs; {how}): {per}"

    @property
    def roles(self) -> dict:
        """{role: ModelSpec} of the models the scenario has (base; small and draft unless a plain deployment)."""
        m = {"base": self.base_model, "small": self.small_model, "draft": self.draft_model}
        return {r: x for r, x in m.items() if x is not None}

    def to_dict(self) -> dict:
        """The scenario with every default filled in (``specsim show``)."""
        d = self.scenario.model_dump(mode="json")
        d["resolved"] = {
            "workload": self.workload.model_dump(mode="json"),
            "cost_profiles": {h: self.cost_profile(h).model_dump(mode="json") for h in self.hardware_names},
            "drafting": {"kind": self.drafting.kind, "tree_width": self.drafting.tree_width},
            "models": {r: m.model_dump(mode="json") | {"params_computed": m.params}
                       for r, m in self.roles.items()},
            "hardware": {h: get_hardware(h).model_dump(mode="json") for h in self.hardware_names},
            "execution": {h: self.execution_for(h, self.tps[0]).model_dump(mode="json") for h in self.hardware_names},
        }
        from simulator.cost.memory_check import plan_view

        d["memory_plan"] = plan_view(self)  # vLLM's start-up memory of every engine (simulator/cost/memory_plan.py)
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
    given = {k: v for k, v in (grid_overrides or {}).items() if v is not None}
    if given and isinstance(d, dict):
        d = {**d, "grid": {**(d.get("grid") or {}), **given}}
    try:
        rs = ResolvedScenario(validate_model(d, Scenario, path), path)
    except InputError as e:  # a value the command line gave is the command line's mistake, not the file's
        k = (e.field or "").removeprefix("grid.").split("[")[0].split(".")[0]
        if (e.field or "").startswith("grid.") and k in given:
            raise InputError(None, f"--{k}", f"{e.message} (scenario {path.name})") from None
        if given.get("hardware") and e.field in ("base.tp", "small.tp", "base.ep", "memory_fraction.base"):
            raise InputError(e.file, e.field, f"{e.message} (with --hardware {','.join(given['hardware'])})") from None
        raise
    rs.overrides = tuple(sorted((k, tuple(v)) for k, v in given.items()))
    return rs


def list_scenarios() -> list[Path]:
    return sorted(SCENARIOS_DIR.glob("*.yaml"))
