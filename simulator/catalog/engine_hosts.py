"""Host costs of serving engines by engine and version (``engine_hosts.yaml``).

What the CPU side of an engine costs, per version (the GPU-side terms -- efficiencies, per-layer overhead, the
step's shape -- stay per GPU in ``gpu_priors.yaml``):

- ``step_overhead_s`` t_step: per engine step (scheduling, input preparation, output processing), optional: absent,
  the GPU's own prior (measured at batch 1 under CUDA graphs) stands;
- ``seq_overhead_s`` t_seq: per running sequence per step (its slot in the input tensors, sampling bookkeeping,
  detokenising and streaming its token);
- ``tp_step_overhead_s`` t_tp (optional: absent, 0): per engine step per tensor-parallel worker beyond the first:
  at TP > 1 vLLM's multiprocess executor broadcasts each step to its worker processes and gathers the sampled
  tokens back (TP = 1 runs the model in the engine process); host work, so async scheduling overlaps it like t_step;
- ``call_overhead_s`` t_call: a request's latency before the engine sees it (the API server's HTTP handling,
  tokenising, the hop to the engine process; the first token's detokenising and streaming), paid by every request at
  once;
- ``front_end_serial_s`` t_fe (<= t_call, optional: absent, all of t_call): the part of t_call the one API-server
  process's CPU spends on a request, so requests arriving together pass it t_fe apart (``Execution.front_end``
  "serial", as the released runs predict `vllm serve`);
- ``front_end_first_share`` s (optional: absent, 0): the share of t_fe the front end spends on a request as it
  arrives (HTTP parsing, validation), the rest after it (tokenised, handed to the engine): one first-in first-out
  loop (vLLM's asyncio API server) runs a request's second stage behind the first stage of every request that came
  before it, so a burst's requests reach the engine after most of the burst has been parsed (s = 0: one stage, the
  requests pass one by one);
- ``front_end_token_s`` t_tok (optional: absent, 0): the same process's CPU per output token it streams
  (detokenising, the response chunk, the HTTP write), paid in turn with the calls' t_fe: each engine round's tokens
  reach their clients once the front end has streamed them, before any call still waiting for its turn. No fitted
  version carries it: the released runs do not support it (docs/serving-model.md, "Host costs by engine version");
- ``async_overlap`` o: the share of the host work H = t_step + (TP - 1) t_tp + S t_seq that async scheduling (vLLM
  ``--async-scheduling``: the scheduler prepares step k+1 while the GPU runs step k) runs beside the GPU. A step of an
  engine with ``async_scheduling: true`` costs ``max(G, o H) + (1 - o) H`` where G is the GPU's time
  (:func:`simulator.cost.roofline.step_time`): the overlapped host work is hidden while the GPU is the slower side,
  and paces the engine when the host is; without async scheduling ``G + H``.

:class:`ServingEngine` names an engine (scenario field ``serving_engine``); :func:`host_terms` gives its terms, the
version's own entry or the fitted version that stands for it (:func:`simulator.catalog.versions.nearest_version`).

Async scheduling: a :class:`ServingEngine` that does not say (``async_scheduling: None``) runs as its version does by
default: vLLM turns it on by default from :data:`ASYNC_DEFAULT_FROM` (0.14: vllm-project/vllm PR 27614, "async
scheduling on by default", roadmap Q4 2025); older versions need ``--async-scheduling``."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from simulator.catalog.hardware import PriorParam
from simulator.catalog.versions import nearest_version, version_key
from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

HOSTS_PATH = CATALOG_DIR / "engine_hosts.yaml"
ASYNC_DEFAULT_FROM = {"vllm": (0, 14)}  # the first version whose `vllm serve` runs async scheduling by default


class HostTerms(BaseModel):
    """A deployment's own host terms (seconds; shares 0 to 1), replacing its catalog entry's where given: e.g. its front
    end's costs measured on its own host (``specsim measure serve-bench`` levels, ``specsim fit front-end-cpu``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step_overhead_s: float | None = Field(default=None, ge=0.0, le=10.0)
    seq_overhead_s: float | None = Field(default=None, ge=0.0, le=1.0)
    tp_step_overhead_s: float | None = Field(default=None, ge=0.0, le=1.0)
    call_overhead_s: float | None = Field(default=None, ge=0.0, le=60.0)
    front_end_serial_s: float | None = Field(default=None, ge=0.0, le=60.0)
    front_end_first_share: float | None = Field(default=None, ge=0.0, le=1.0)
    front_end_token_s: float | None = Field(default=None, ge=0.0, le=1.0)
    async_overlap: float | None = Field(default=None, ge=0.0, le=1.0)

    def given(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


# the host terms a version's entry carries beside its async overlap, in HostTerms' order (the one list of them)
HOST_TERMS = tuple(k for k in HostTerms.model_fields if k != "async_overlap")


class ServingEngine(BaseModel):
    """Which serving engine runs the models: its name, version (None: the newest fitted), whether async
    scheduling is on (vLLM ``--async-scheduling``; None: the version's default, :func:`async_on`) and, optionally, the
    deployment's own host terms (``host``: :class:`HostTerms`, in place of the catalog entry's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "vllm"
    version: str | None = None
    async_scheduling: bool | None = None
    host: HostTerms | None = None


class EngineVersion(BaseModel):
    """One fitted engine version's host terms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    step_overhead_s: PriorParam | None = None
    seq_overhead_s: PriorParam
    tp_step_overhead_s: PriorParam | None = None
    call_overhead_s: PriorParam
    front_end_serial_s: PriorParam | None = None
    front_end_first_share: PriorParam | None = None
    front_end_token_s: PriorParam | None = None
    async_overlap: PriorParam
    fit: dict | None = None  # held-out errors of the fit that wrote it

    @model_validator(mode="after")
    def _shares(self) -> "EngineVersion":
        for name in ("front_end_first_share", "async_overlap"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v.value <= 1.0:
                raise ValueError(f"{name} is a share: expected 0 to 1 (got {v.value})")
        return self


class _Hosts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provenance: dict = Field(default_factory=dict)
    engines: dict[str, list[EngineVersion]]


def _key(version: str) -> tuple[int, ...]:
    """A catalog entry's version as numbers, errors naming the catalog."""
    return version_key(version, str(HOSTS_PATH))


@lru_cache(maxsize=1)
def engine_hosts() -> dict[str, list[EngineVersion]]:
    """{engine: its fitted versions, oldest first}."""
    raw = read_yaml(HOSTS_PATH)
    try:
        hosts = TypeAdapter(_Hosts).validate_python(raw)
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(HOSTS_PATH), e) from None
    return {k: sorted(v, key=lambda e: _key(e.version)) for k, v in hosts.engines.items()}


def engine_version(engine: ServingEngine, field: str = "serving_engine") -> EngineVersion:
    """The catalog entry for ``engine``: its version's own, else the fitted version that stands for it
    (:func:`simulator.catalog.versions.nearest_version`, the rule the fitter's held-out folds use; None: the newest
    fitted). A version older than every fitted one is refused: nothing measured describes it."""
    cat = engine_hosts()
    if engine.name not in cat:
        raise InputError(None, f"{field}.name", f"no host costs for engine {engine.name!r}; known: {', '.join(cat)}")
    versions = cat[engine.name]
    if engine.version is None:
        return versions[-1]
    want = version_key(engine.version, None, f"{field}.version")
    if want < _key(versions[0].version):
        raise InputError(None, f"{field}.version", f"{engine.name} {engine.version} is older than every fitted version "
                         f"({', '.join(v.version for v in versions)})")
    by_version = {v.version: v for v in versions}
    return by_version[nearest_version(engine.version, by_version, None, f"{field}.version")]


def running_version(engine: ServingEngine) -> str:
    """The version ``engine`` runs: as stated, else its newest fitted (the catalog entry a stated version takes may be
    older: :func:`engine_version`)."""
    return engine.version if engine.version is not None else engine_version(engine).version


def async_on(engine: ServingEngine, version: str) -> bool:
    """Whether ``engine`` (its catalog entry: ``version``) runs async scheduling: as stated, else the version's
    default (on from :data:`ASYNC_DEFAULT_FROM`; an engine without that entry: off)."""
    if engine.async_scheduling is not None:
        return engine.async_scheduling
    first = ASYNC_DEFAULT_FROM.get(engine.name)
    return first is not None and version_key(engine.version or version) >= first


# `vllm serve`'s scheduler limits when the command line sets neither (vLLM's EngineArgs batch defaults for the API
# server): V1 engines give a GPU reporting >= 70 GiB 8192 tokens per step and 1024 sequences, every other GPU 2048 and
# 256; from 0.9 an A100 takes the small pair whatever its memory (vllm-project/vllm PR 17885: a large budget cut an
# A100's throughput); a CPU takes 2048 and 128 per worker (vLLM 0.30's CPU branch). The V0 engine (before 0.8)
# prefilled whole prompts (chunked prefill off below 32k-token contexts) and ran 256 sequences.
LARGE_DEVICE_BYTES = 70 * 2**30
V1_FROM, A100_SMALL_FROM = (0, 8), (0, 9)


def batch_defaults(engine: ServingEngine | None, hardware, world_size: int = 1) -> tuple[int | None, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` of ``engine``'s version (None: the newest fitted) picks on
    ``hardware`` (a ``HardwareSpec``) when neither is set; tokens None: no chunked prefill (V0). ``world_size``: the
    engine's workers (TP x PP), which scale a CPU's defaults."""
    engine = engine or ServingEngine()
    version = version_key(running_version(engine))
    if version < V1_FROM:
        return None, 256
    if hardware.name == "cpu":
        return 2048 * world_size, 128 * world_size
    a100 = version >= A100_SMALL_FROM and ("a100" in hardware.name or "a100" in hardware.display.lower())
    if hardware.reported_memory_bytes >= LARGE_DEVICE_BYTES and not a100:
        return 8192, 1024
    return 2048, 256


def host_terms(engine: ServingEngine, gpu_step: PriorParam | None = None,
               host: dict | None = None) -> dict[str, PriorParam]:
    """The cost profile's host terms for ``engine``: ``step_overhead_s``, ``seq_overhead_s``, ``call_overhead_s``,
    ``front_end_serial_s`` (where the version has one) and ``async_overlap`` (the version's o where the engine runs
    async scheduling, else 0); where async scheduling is the version's default (``async_scheduling`` unset), also
    ``async_overlap_non_eagle`` = 0: vLLM turns async scheduling on by default only for engines without a
    speculator or with EAGLE / MTP-style drafting, not with a separate draft model or CPU prompt lookup
    (``CostParams.speculating_with``).
    ``gpu_step``: the GPU's own t_step (used where the version has none); the engine's own ``host`` terms replace the
    catalog's, and ``host``: explicit values (a fitter's trial point) replace both, same names."""
    ev = engine_version(engine)
    host = host or {}
    stated = engine.host.given() if engine.host is not None else {}
    terms: dict[str, PriorParam] = {}
    for name in HostTerms.model_fields:
        p = getattr(ev, name) if name != "step_overhead_s" or ev.step_overhead_s else gpu_step
        if name in stated:
            p = PriorParam(value=float(stated[name]), kind="prior", source="stated by the scenario (serving_engine.host)")
        if name in host:
            p = PriorParam(value=float(host[name]), kind="prior", source="explicit host terms (fit trial)")
        if p is not None:
            terms[name] = p
    label = f"{engine.name} {ev.version} host costs (simulator/catalog/engine_hosts.yaml)"
    out = {name: p if name in stated else PriorParam(value=p.value, kind=p.kind, source=f"{label}: {p.source}",
                                                     stderr=p.stderr) for name, p in terms.items()}
    if not async_on(engine, ev.version):
        out["async_overlap"] = PriorParam(value=0.0, kind="prior", source=f"{label}: async scheduling off")
    if engine.async_scheduling is None:  # the version's default: vLLM leaves async off for a draft model, prompt lookup
        out["async_overlap_non_eagle"] = PriorParam(
            value=0.0, kind="prior", source=f"{label}: async scheduling off by default with a separate draft model or "
            "prompt lookup (vLLM enables it by default only without a speculator or with EAGLE / MTP-style drafting)")
    return out
