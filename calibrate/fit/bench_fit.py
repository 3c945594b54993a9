"""Fit the cost model to microbenchmark run directories (its held-out validation: :mod:`validate.bench`).

Input: run directories of ``specsim measure static-bench`` / ``microbench`` (``run.json`` + ``microbench.jsonl``
or ``.jsonl.gz``, checked by :func:`calibrate.contracts.trace_schema.check_run_dir`). ``run.json`` names the architecture
(a catalog entry), its depth (a cut model keeps the catalog's shape with fewer layers), the dtype, the engine
and the detected hardware (:func:`simulator.catalog.hardware.catalog_hardware`).

Prediction of a record: the cost model's one pass formula, :meth:`simulator.cost.cost_model.Deployment.pass_time`,
over the batch aggregates of each pass the op ran (B identical sequences: what
:meth:`~simulator.cost.cost_model.Deployment.batch_forward_time` does for one pass). The adapter, per op:

    decode / draft   n passes j = 0..n-1; each: B sequences, 1 new token at context c + j, 1 logit row each
    prefill / score  1 pass: B sequences, n new tokens on c cached ones
    verify           1 pass: B sequences, n = gamma + 1 new tokens on c cached ones
    logit rows       what the engine computes: static-bench keeps the last 1 (prefill / score) or gamma + 1
                     (verify) positions' logits (``logits_to_keep``); microbench's torch engine every new
                     position's (a HF forward without ``logits_to_keep``); vLLM 1 (max_tokens 1)
    call overhead    t_call on vLLM prefill / score / verify records (each is one ``generate`` call); torch
                     ops and vLLM decode differences (t(n+1) - t(1)) are bare passes: no t_call

(n = ``new_tokens``, c = ``cached_tokens``, B = ``batch``.) A static-bench decode record is the median per-step
time of steps at contexts c + 3 .. c + 3 + steps: costed at c (the KV difference is < 1% of a pass's bytes).
``draft`` records (microbench ``--draft``) are skipped: run.json does not name the draft's architecture.

Fit: :func:`calibrate.fit.log_time_fit.fit_log_times` (the one fitter) around the hardware's prior
(:func:`simulator.cost.cost_profile.prior_profile`): :func:`fit_records` on any subset of the records (a held-out
fold's training records), :func:`fit_profile` on all of them, with provenance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fit.fit_cost import CostFit, build_profile
from calibrate.fit.log_time_fit import PARAM_NAMES, LogFit, fit_log_times
from simulator.cost.setup import Setup
from simulator.catalog import HardwareSpec, ModelSpec, get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams, CostProfile, prior_profile
from simulator.errors import InputError

GENERATE_OPS = ("decode", "draft")  # n tokens generated: n passes
PASS_OPS = ("prefill", "score", "verify")  # one pass over n new tokens
RECORD_COLUMNS = ["run_id", "arch", "model_key", "engine", "op", "batch", "new_tokens", "cached_tokens", "gamma", "wall_s"]
DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0, "bf16": 2.0, "fp16": 2.0}
MIN_FIT_RECORDS = 3  # fewer records than this leave nothing to fit


# ---- loading ---------------------------------------------------------------------------------------
@dataclass
class BenchRun:
    """One run directory: where, what ran (catalog architecture, depth, dtype, TP), on which engine and hardware."""

    path: str
    run_id: str
    arch: str
    layers: int
    dtype: str
    tp: int
    engine: str
    engine_version: str
    hardware: str | None  # catalog name (None: the detected GPU has no catalog entry)
    detected: dict
    records: int = 0
    skipped: dict = field(default_factory=dict)

    @property
    def model_key(self) -> str:
        return f"{self.arch}/{self.layers}l/{self.dtype}/tp{self.tp}"


@dataclass
class BenchSet:
    """Every kept record of the inputs (one row each), the runs and the cost-model deployments they ran."""

    records: pd.DataFrame  # RECORD_COLUMNS
    runs: list[BenchRun]
    hardware: HardwareSpec
    models: dict[str, tuple[ModelSpec, int]]  # model_key -> (catalog model at the run's depth and dtype, TP)

    @property
    def archs(self) -> list[str]:
        return sorted({r.arch for r in self.runs})


def _arch_of(meta: dict, where: str) -> tuple[str, int | None]:
    """Catalog architecture and depth of a run's base model: static-bench writes ``arch``/``layers``; microbench
    ``--arch`` a dummy folder ``dummy-NAME-Nl``; a real folder is matched to a catalog name or hf_id."""
    from simulator.catalog.models import catalog_name_of_folder

    base = (meta.get("models") or {}).get("base")
    if not isinstance(base, dict):
        raise InputError(where, "models.base", "expected the base model's description")
    if base.get("arch"):
        return str(base["arch"]), base.get("layers")
    if base.get("catalog_name"):
        return str(base["catalog_name"]), base.get("num_layers")
    tail = Path(str(base.get("path", ""))).name
    if m := re.fullmatch(r"dummy-(.+)-(\d+)l", tail):
        return m.group(1), int(m.group(2))
    if name := catalog_name_of_folder(tail):
        return name, base.get("num_layers")
    raise InputError(where, "models.base", f"cannot tell the catalog architecture of {tail or base!r} "
                                           "(expected arch, a dummy-NAME-Nl folder or a catalog model's folder)")


def bench_model(arch: str, layers: int | None, dtype: str, where: str) -> ModelSpec:
    """The catalog model at the run's depth (a cut model: same shape, fewer layers) and dtype bytes."""
    m = get_model(arch, where, "models.base.arch")
    if dtype not in DTYPE_BYTES:
        raise InputError(where, "dtype", f"expected one of {', '.join(DTYPE_BYTES)} (got {dtype!r})")
    layers = m.layers if layers is None else layers
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise InputError(where, "models.base.layers", f"expected an integer >= 1 (got {layers!r})")
    if layers != m.layers:
        m = m.cut(layers, name=f"{arch}-{layers}l")
    if DTYPE_BYTES[dtype] != m.bytes_per_param:
        b = DTYPE_BYTES[dtype]
        m = m.model_copy(update={"bytes_per_param": b, "kv_bytes_per_element": b, "head_bytes_per_param": None,
                                 "name": f"{m.name}-{dtype}"})
    return m


def load_run(path: str | Path) -> tuple[BenchRun, pd.DataFrame]:
    """One run directory, validated by the trace schema; its microbench records as a table."""
    from simulator.catalog.hardware import catalog_hardware
    from calibrate.fit.measured import run_dir_key
    from calibrate.contracts.trace_schema import check_run_dir, jsonl_lines, record_file

    path = Path(path)
    if not path.is_dir():
        raise InputError(str(path), None, "not found (expected a microbenchmark run directory)")
    recs = check_run_dir(path)
    meta, manifest = recs["run"][0], str(path / "run.json")
    rec_file = record_file(path, "microbench.jsonl")
    if not recs.get("microbench"):
        raise InputError(str(rec_file or path / "microbench.jsonl"), None, "no microbench records")
    arch, layers = _arch_of(meta, manifest)
    model, hw = bench_model(arch, layers, str(meta["dtype"]), manifest), meta.get("hardware") or {}
    run = BenchRun(path=str(path), run_id=run_dir_key(path), arch=arch, layers=model.layers, dtype=str(meta["dtype"]),
                   tp=max(int(meta["tensor_parallel"]), 1), engine=str(meta["engine"]),
                   engine_version=str(meta["engine_version"]), hardware=catalog_hardware(hw.get("gpu_name"), hw.get("device")),
                   detected=hw)
    lines = [i for i, ln in enumerate(jsonl_lines(rec_file), 1) if ln.strip()]
    rows = []
    for line, r in zip(lines, recs["microbench"]):
        where = f"{rec_file}:{line}"
        if r["op"] not in (*GENERATE_OPS, *PASS_OPS):
            raise InputError(where, "op", f"expected one of {', '.join((*GENERATE_OPS, *PASS_OPS))} (got {r['op']!r})")
        for f, lo in (("batch", 1), ("new_tokens", 1), ("cached_tokens", 0), ("gamma", 0)):
            if r[f] < lo:
                raise InputError(where, f, f"expected an integer >= {lo} (got {r[f]})")
        why = ("draft model (run.json does not name its architecture)" if r["model"] != "base" else
               "no positive time" if not r["wall_time_s"] > 0 else None)
        if why:
            run.skipped[why] = run.skipped.get(why, 0) + 1
            continue
        rows.append({"run_id": run.run_id, "arch": arch, "model_key": run.model_key, "engine": run.engine,
                     **{k: r[k] for k in ("op", "batch", "new_tokens", "cached_tokens", "gamma")},
                     "wall_s": float(r["wall_time_s"])})
    run.records = len(rows)
    return run, pd.DataFrame(rows, columns=RECORD_COLUMNS)


def load_bench(paths, hardware: str | None = None) -> BenchSet:
    """Every run directory of ``paths`` on one catalog hardware (``hardware`` overrides run.json's)."""
    if not paths:
        raise InputError(None, "RUN_DIR", "give at least one microbenchmark run directory")
    runs, frames = [], []
    for p in paths:
        run, df = load_run(p)
        if run.run_id in {r.run_id for r in runs}:
            raise InputError(str(p), None, "given twice")
        runs.append(run)
        frames.append(df)
    if hardware:
        hw = get_hardware(hardware, None, "--hardware")
    else:
        names = {r.hardware for r in runs}
        if None in names:
            bad = next(r for r in runs if r.hardware is None)
            raise InputError(str(Path(bad.path) / "run.json"), "hardware.gpu_name",
                             f"no catalog entry for GPU {bad.detected.get('gpu_name')!r}; give --hardware NAME")
        if len(names) > 1:
            raise InputError(None, "RUN_DIR", f"runs on different hardware ({', '.join(sorted(names))}): fit each "
                                              "hardware separately or give --hardware")
        hw = get_hardware(names.pop(), None, "--hardware")
    records = pd.concat(frames, ignore_index=True)
    if len(records) < MIN_FIT_RECORDS:
        raise InputError(None, "RUN_DIR", f"nothing left to fit: {len(records)} usable records (need >= {MIN_FIT_RECORDS})")
    models = {r.model_key: (bench_model(r.arch, r.layers, r.dtype, r.path), r.tp) for r in runs}
    return BenchSet(records, runs, hw, models)


# ---- prediction --------------------------------------------------------------------------------------
class BenchPredictor:
    """Seconds of every record of a table through ``Deployment.pass_time`` (module docstring: the adapter).
    The pass aggregates are fixed at construction; ``predict(params)`` only re-evaluates the pass formula."""

    def __init__(self, records: pd.DataFrame, models: dict[str, tuple[ModelSpec, int]], hardware: HardwareSpec):
        self.models, self.hardware, self.n = models, hardware, len(records)
        gen = records["op"].isin(GENERATE_OPS).to_numpy()
        n = records["new_tokens"].to_numpy(float)
        steps = np.where(gen, n, 1).astype(np.int64)
        self.record = np.repeat(np.arange(self.n), steps)
        j = np.arange(steps.sum()) - np.repeat(np.cumsum(steps) - steps, steps)  # pass index within its record
        b, g = records["batch"].to_numpy(float)[self.record], gen[self.record]
        tok = np.where(g, 1.0, n[self.record])  # new tokens per sequence in this pass
        ctx = records["cached_tokens"].to_numpy(float)[self.record] + np.where(g, j, 0)
        engine, op = records["engine"].to_numpy()[self.record], records["op"].to_numpy()[self.record]
        every = (engine == "torch") | ((engine == "torch-static") & (op == "verify"))
        rows = np.where(g | ~every, 1.0, tok)  # logit rows per sequence (module docstring)
        self.agg = (b * tok, b * (ctx + tok), b * tok * (ctx + (tok + 1.0) / 2.0), b * rows, b)
        self.calls = (~gen & ~records["engine"].str.startswith("torch").to_numpy()).astype(float)
        keys = records["model_key"].to_numpy()[self.record]
        self.groups = {k: np.flatnonzero(keys == k) for k in np.unique(keys)}

    def predict(self, params: CostParams) -> np.ndarray:
        t = np.empty(len(self.record))
        for key, idx in self.groups.items():
            model, tp = self.models[key]
            t[idx] = Deployment(model, self.hardware, tp, params).pass_time(*(a[idx] for a in self.agg))
        return np.bincount(self.record, t, minlength=self.n) + self.calls * params.call_overhead_s


def prior_values(hardware: HardwareSpec) -> dict[str, float]:
    p = prior_profile(hardware).params(hardware)
    return {n: float(getattr(p, n)) for n in PARAM_NAMES}


def fit_records(bs: BenchSet, records: pd.DataFrame) -> LogFit:
    """The named parameters fitted to ``records`` (log times, :func:`fit_log_times`) around the hardware's prior."""
    pred = BenchPredictor(records, bs.models, bs.hardware)
    return fit_log_times(pred.predict, np.log(records["wall_s"].to_numpy(float)), prior_values(bs.hardware))


# ---- the profile ---------------------------------------------------------------------------------------------
def fit_profile(bs: BenchSet, *, command: str, name: str | None = None, date: str | None = None) -> CostProfile:
    """The profile fitted on every record, with provenance (:func:`calibrate.fit.fit_cost.build_profile`)."""
    lf = fit_records(bs, bs.records)
    res = bs.records.copy()
    res["predicted_s"] = np.exp(lf.log_residual + np.log(res["wall_s"].to_numpy(float)))
    res["log_residual"] = lf.log_residual
    fit = CostFit(values=lf.values, stderr=lf.stderr, fitted=lf.fitted, fixed=lf.fixed, prior=prior_values(bs.hardware),
                  residuals=res, correlation=lf.correlation, zeroed=lf.zeroed, prior_dominated=lf.prior_dominated)
    engines = sorted({f"{r.engine} ({r.engine_version})" for r in bs.runs})
    setup = Setup(bs.hardware, min(r.tp for r in bs.runs), {k: m for k, (m, _) in bs.models.items()})
    note = "; ".join(f"{r.run_id}: {r.detected.get('gpu_name') or r.detected.get('cpu_model')}" for r in bs.runs)
    inputs = [f"microbench records: {r.arch}, {r.layers} layers, {r.dtype}, TP={r.tp}" for r in bs.runs]
    prof = build_profile(fit, setup, name=name or f"{bs.hardware.name}-{bs.runs[0].engine}-bench-fitted",
                         engine=", ".join(engines), inputs=inputs, runs=[r.run_id for r in bs.runs],
                         hardware_note=f"run.json hardware: {note}", date=date, command=command)
    bench = [{"run": r.run_id, "arch": r.arch, "layers": r.layers, "dtype": r.dtype, "tp": r.tp, "engine": r.engine,
              "engine_version": r.engine_version, "records": r.records, "skipped": r.skipped} for r in bs.runs]
    return prof.model_copy(update={"fit": {**prof.fit, "bench_runs": bench, "archs": bs.archs}})
