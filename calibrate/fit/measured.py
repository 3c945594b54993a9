"""Measured engine calls: loaders of call tables from every supported source, run keys and hold-out rules.

A *call table* (``CALL_COLUMNS``, the contract in :mod:`calibrate.contracts.call_table`) has one row per measured
engine call; a :class:`MeasuredSet` adds the per-request measurements (``REQUEST_COLUMNS``) and where they came from.
Loaders:

- :func:`calls_from_specreason`: the shared SpecReason per-step traces (``calibrate.fit.import_specreason``);
- :func:`calls_from_run_dir`: the runner's run directories (``calibrate.contracts.trace_schema``);
- :func:`load_measured`: any mix of those paths (one kind per call).

Runs are keyed by their full id (:func:`run_key`, :func:`run_dir_key`); :func:`resolve_run_names` and
:func:`parse_run_rule` turn user-given names and rules into keys (an ambiguous name is an input error).
The fit on these tables is :mod:`calibrate.fit.fit_cost`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.contracts.call_table import CALL_COLUMNS, REQUEST_COLUMNS
from calibrate.contracts.trace_rules import DURATION_ABS_TOL, DURATION_REL_TOL
from calibrate.contracts.trace_schema import MAX_DURATION_S
from simulator.errors import InputError
from simulator.inputs.systems import spec_of


# ---- loaders -------------------------------------------------------------------------------------
def _label(system: str, threshold, gamma) -> str:
    parts = [system]
    if gamma:
        parts.append(f"g={int(gamma)}")
    if threshold is not None and threshold == threshold:
        parts.append(f"t={threshold:g}")
    return " ".join(parts)


def calls_from_specreason(steps: pd.DataFrame, prompt_tokens: int, judge_template_tokens: int,
                          threshold: float = 7.0, source: str = "") -> pd.DataFrame:
    """Calls of the SpecReason per-step traces (importer's canonical step table).

    Token accounting (not recorded by the source; prefix caching on, one request at a time):
    small call: new = the previous kept step (the prompt on step 0), cached = the rest of the
    CoT; scoring call: new = small step + judge template, cached = prompt + CoT; base call:
    new = 1 (the CoT is cached by the scoring call), cached = prompt + CoT. Skipped scoring
    calls (time 0) are dropped.
    """
    rows = []
    label = _label("specreason", threshold, None)
    for run, d in steps.groupby("run_id", sort=False):
        prev_kept = None
        for s in d.itertuples(index=False):
            ctx = prompt_tokens + int(s.context_tokens_before)
            common = {"source": source, "run_id": str(run), "request_id": str(run), "config": label,
                      "system": "specreason", "threshold": threshold, "gamma": 0, "step_index": int(s.step_index),
                      "spec_gamma": 0, "spec_iterations": 0}
            new_small = ctx if prev_kept is None else max(int(prev_kept), 1)
            rows.append({**common, "role": "small", "op": "small_generate", "new_tokens": new_small,
                         "cached_tokens": ctx - new_small, "output_tokens": max(int(s.small_tokens), 1),
                         "wall_s": float(s.small_call_s)})
            if not s.scoring_skipped:
                rows.append({**common, "role": "base", "op": "score",
                             "new_tokens": int(s.small_tokens) + judge_template_tokens, "cached_tokens": ctx,
                             "output_tokens": 1, "wall_s": float(s.scoring_call_s)})
            if s.base_tokens is not pd.NA and not pd.isna(s.base_tokens):
                rows.append({**common, "role": "base", "op": "base_generate", "new_tokens": 1, "cached_tokens": ctx,
                             "output_tokens": max(int(s.base_tokens), 1), "wall_s": float(s.base_call_s)})
            prev_kept = s.kept_tokens
    return pd.DataFrame(rows, columns=CALL_COLUMNS)


def calls_from_run_dir(run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """Calls of one runner run directory (``run.json`` + ``steps.jsonl``), validated by the schema."""
    from calibrate.contracts.trace_schema import check_run_dir

    run_dir = Path(run_dir)
    recs = check_run_dir(run_dir)
    meta = recs["run"][0]
    steps = recs.get("step", [])
    if not steps:
        raise InputError(str(run_dir / "steps.jsonl"), None, "no step records")
    system, thr, gamma = meta["system"], meta["threshold"], meta["gamma"]
    label = _label(system, thr if spec_of(system).scores_steps else None, gamma)
    rows = []
    prev: dict[int, int] = {}
    for s in sorted(steps, key=lambda r: (r["request_id"], r["step_index"])):
        rid = s["request_id"]
        key = run_dir_key(run_dir)
        common = {"source": str(run_dir), "run_id": key, "request_id": f"{key}/{rid}",
                  "config": label, "system": system, "threshold": thr if spec_of(system).scores_steps else np.nan,
                  "gamma": gamma, "step_index": s["step_index"], "spec_gamma": 0, "spec_iterations": 0}
        ctx = s["context_tokens"]
        if s["small_tokens"] > 0 and s["small_time_s"] > 0:
            new = ctx if rid not in prev else max(prev[rid], 1)
            rows.append({**common, "role": "small", "op": "small_generate", "new_tokens": min(new, ctx) or 1,
                         "cached_tokens": max(ctx - new, 0), "output_tokens": s["small_tokens"], "wall_s": s["small_time_s"]})
        if s["score_time_s"] > 0:
            rows.append({**common, "role": "base", "op": "score", "new_tokens": max(s["score_new_tokens"], 1),
                         "cached_tokens": s["score_cached_tokens"], "output_tokens": 1, "wall_s": s["score_time_s"]})
        if s["base_tokens"] > 0 and s["base_time_s"] > 0:
            new = max(s["base_prompt_tokens"] - s["base_cached_tokens"], 1)
            row = {**common, "role": "base", "op": "base_generate", "new_tokens": new,
                   "cached_tokens": s["base_cached_tokens"], "output_tokens": s["base_tokens"], "wall_s": s["base_time_s"]}
            if s["spec_gamma"] > 0 and s["spec_drafted_per_pos"]:
                row.update(op="spec_generate", spec_gamma=s["spec_gamma"],
                           spec_iterations=max(int(s["spec_drafted_per_pos"][0]), 1))
            rows.append(row)
        prev[rid] = s["kept_tokens"]
    return pd.DataFrame(rows, columns=CALL_COLUMNS), meta


# ---- measured sets: calls + per-request measurements from any supported input --------------------


def run_content_hash(records) -> str:
    """A run's identity: sha256 (16 hex digits) of its requests and steps, whatever it is called. ``records``: the
    run's step and request records (dicts) or a step table, without the run's name (the same run under another name
    or in another file hashes the same)."""
    import hashlib
    import json

    if isinstance(records, pd.DataFrame):
        text = records.to_csv(index=False, float_format="%.9g")
    else:
        text = "\n".join(json.dumps(r, sort_keys=True, default=str) for r in records)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# fields of the SpecReason step table that name the run rather than describe it
_NAME_COLUMNS = ("run_id", "repeat_id")


@dataclass
class MeasuredSet:
    """Everything validation and fitting read from measured inputs (one documented contract)."""

    calls: pd.DataFrame      # CALL_COLUMNS
    requests: pd.DataFrame   # REQUEST_COLUMNS
    inputs: list[str]
    kind: str                # "specreason" | "run_dir"
    hint: dict               # hardware / tp / models / engine suggested by the inputs
    steps: pd.DataFrame | None = None  # SpecReason canonical steps (for the workload fit)
    trace: object = None     # SpecReasonTrace when kind == "specreason"

    def select_runs(self, keys: set[str]) -> "MeasuredSet":
        """The runs ``keys`` (full keys, or unique tails of them: ``resolve_run_names``)."""
        keys = {k or n for n, k in resolve_run_names(keys, self.run_keys).items()}
        c = self.calls[self.calls["run_id"].map(run_key).isin(keys)].reset_index(drop=True)
        r = self.requests[self.requests["run_key"].isin(keys)].reset_index(drop=True)
        s = None if self.steps is None else self.steps[self.steps["run_id"].map(run_key).isin(keys)].reset_index(drop=True)
        return MeasuredSet(c, r, self.inputs, self.kind, self.hint, s, self.trace)

    @property
    def run_keys(self) -> list[str]:
        return list(dict.fromkeys(self.requests["run_key"]))


def run_key(run_id: str) -> str:
    """A run's key: its full id (SpecReason traces: the ``run`` field, ``results/60/3``; run
    directories: :func:`run_dir_key`). Never shortened: ``a/7/0`` and ``b/3/0`` are two runs."""
    return str(run_id).strip().rstrip("/")


def run_dir_key(path: str | Path) -> str:
    """A run directory's key: its path relative to the working directory (absolute when outside it), POSIX."""
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()


def suffix_match(name: str, key: str) -> bool:
    """``name`` and ``key`` name the same run up to a leading path: equal, or one ends with ``/`` + the other."""
    return name == key or key.endswith("/" + name) or name.endswith("/" + key)


def resolve_run_names(names, known: list[str], what: str = "runs") -> dict[str, str | None]:
    """Each run name -> the input key it names (exact, else the unique key matching it up to a leading
    path: ``0`` -> ``results/60/0``), or None when no input run matches. A name matching several input
    runs is an InputError: which run it meant cannot be told."""
    out: dict[str, str | None] = {}
    for name in (str(n).strip().rstrip("/") for n in names):
        if name in known:
            out[name] = name
            continue
        hits = [k for k in known if suffix_match(name, k)]
        if len(hits) > 1:
            raise InputError(None, what, f"run {name!r} is ambiguous: it matches input runs {', '.join(hits[:4])}"
                                         f"{' ...' if len(hits) > 4 else ''}; name runs by their full key")
        out[name] = hits[0] if hits else None
    return out


SPECREASON_HINT = {"hardware": "a100-80gb", "tp": 2, "base_model": "qwq-32b", "small_model": "r1-distill-qwen-1.5b",
                   "engine": "vllm-0.8.2",
                   "hardware_note": "hardware not stated by the source; the recipe says 2x RTX A6000 but the measured "
                                    "per-token times are below that roofline (docs/workload-fit.md), so the fit assumes "
                                    "2x A100-80GB SXM (TP=2); the A6000 alternative is reported in fit.hardware_alternatives"}


# Physical bounds on measured durations: every duration finite, >= 0 and under a day (the trace contract's
# MAX_DURATION_S); the calls of a step no longer than the step, the steps of a run no longer than the run, within the
# timers' tolerance (calibrate.contracts.trace_rules, which checks run directories by the same rule).
def _bad_duration(values: np.ndarray, allow_nan: bool) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    bad = ~np.isfinite(v) | (v < 0) | (v > MAX_DURATION_S)
    return bad & ~np.isnan(v) if allow_nan else bad


def _longer(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    return np.asarray(part, float) > np.asarray(whole, float) * (1 + DURATION_REL_TOL) + DURATION_ABS_TOL


def check_specreason_durations(path: str, steps: pd.DataFrame, requests: pd.DataFrame) -> None:
    """Bounds of the SpecReason traces' durations (InputError naming run and step; one line, exit 2)."""
    calls = ("small_call_s", "scoring_call_s", "base_call_s")  # verify_call_s: the importer's step_s - these
    for col in (*calls, "step_s"):
        if col not in steps.columns:
            continue
        bad = _bad_duration(steps[col], allow_nan=col == "base_call_s")
        if bad.any():
            r = steps[bad].iloc[0]
            raise InputError(path, f"run {r['run_id']} step {int(r['step_index'])}: {col}",
                             f"a finite duration in [0, {MAX_DURATION_S:g}] s (got {float(r[col])!r})")
    total = sum(steps[c].fillna(0.0).to_numpy(float) for c in calls if c in steps.columns)
    for col in (*calls, "calls of the step"):
        v = total if col == "calls of the step" else steps[col].fillna(0.0).to_numpy(float) if col in steps.columns else None
        if v is None:
            continue
        bad = _longer(v, steps["step_s"].to_numpy(float))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            r = steps.iloc[i]
            raise InputError(path, f"run {r['run_id']} step {int(r['step_index'])}: {col.replace(' ', '_') if col in calls else col}",
                             f"no longer than the step's step_time {r['step_s']:.4g} s (got {v[i]:.4g} s)")
    if "total_s" in requests.columns:
        per_run = steps.groupby("run_id", sort=False)["step_s"].sum()
        for run, tot in requests.set_index("run_id")["total_s"].items():
            if tot == tot and run in per_run.index and _longer(per_run[run], tot):
                raise InputError(path, f"run {run}: step_time", f"steps summing to no more than the run's recorded "
                                                                f"{tot:.4g} s (got {per_run[run]:.4g} s)")


def _specreason_set(path: Path, prompt_tokens: int, judge_tokens: int) -> MeasuredSet:
    from calibrate.fit.import_specreason import import_specreason, steps_upto_answer

    trace = import_specreason(path)
    check_specreason_durations(str(path), trace.steps, trace.requests)
    calls = calls_from_specreason(trace.steps, prompt_tokens, judge_tokens, trace.threshold, source=str(path))
    st = trace.steps
    upto = steps_upto_answer(trace)
    call_s = st["small_call_s"] + st["scoring_call_s"] + st["base_call_s"].fillna(0.0)
    per = pd.DataFrame({"run_id": st["run_id"], "call_s": call_s, "step_s": st["step_s"],
                        "small": st["kept_by"] == "small"}).groupby("run_id", sort=False)
    ua = (upto["small_call_s"] + upto["scoring_call_s"] + upto["base_call_s"].fillna(0.0)).groupby(upto["run_id"]).sum()
    cens = trace.requests.set_index("run_id")["censored"]
    content = {run: run_content_hash(d.drop(columns=[c for c in _NAME_COLUMNS if c in d.columns]).reset_index(drop=True))
               for run, d in st.groupby("run_id", sort=False)}
    rows = []
    for run, d in per:
        rows.append({"source": str(path), "run_id": run, "run_key": run_key(run), "request_id": run,
                     "config": _label("specreason", trace.threshold, None), "system": "specreason",
                     "threshold": trace.threshold, "gamma": 0, "measured_s": float(d["call_s"].sum()),
                     "measured_e2e_s": float(d["step_s"].sum()), "to_answer_s": float(ua.get(run, np.nan)),
                     "to_answer_censored": bool(cens[run]), "steps": len(d),
                     "small_step_fraction": float(d["small"].mean()), "acceptance_length": np.nan,
                     "run_hash": content[run]})
    return MeasuredSet(calls, pd.DataFrame(rows, columns=REQUEST_COLUMNS), [str(path)], "specreason",
                       dict(SPECREASON_HINT), steps=upto, trace=trace)


def _hint_from_manifest(meta: dict) -> dict:
    from simulator.catalog.hardware import catalog_hardware

    hw = meta.get("hardware", {})
    hardware = catalog_hardware(hw.get("gpu_name"), hw.get("device"))
    hint = {"hardware": hardware, "tp": int(meta.get("tensor_parallel", 1)), "engine":
            f"{meta.get('engine')}-{meta.get('engine_version')}", "hardware_note": f"run.json hardware: {hw}"}
    from simulator.catalog.models import catalog_name_of_folder

    models = dict(meta.get("models") or {})
    if isinstance(models.get("base"), dict) and isinstance(models["base"].get("draft"), dict):
        models["draft"] = models["base"]["draft"]  # the base engine's draft (speculative runs)
    for role, info in models.items():
        hint[f"{role}_model"] = info.get("catalog_name") or catalog_name_of_folder(info.get("path", ""))
    return hint


def _run_dir_set(path: Path) -> MeasuredSet:
    from calibrate.contracts.trace_schema import check_run_dir

    calls, meta = calls_from_run_dir(path)
    recs = check_run_dir(path)
    key = run_dir_key(path)
    steps = pd.DataFrame(recs.get("step", []))
    content = run_content_hash([*recs.get("request", []), *recs.get("step", [])])
    rows = []
    for r in recs.get("request", []):
        d = steps[steps["request_id"] == r["request_id"]]
        iters = sum(int(p[0]) for p in d["spec_drafted_per_pos"] if p) if len(d) else 0
        calls_s = r["small_time_s"] + r["score_time_s"] + r["base_time_s"]
        rows.append({"source": str(path), "run_id": key, "run_key": key,
                     "request_id": f"{key}/{r['request_id']}",
                     "config": calls["config"].iloc[0] if len(calls) else meta["system"], "system": r["system"],
                     "threshold": meta["threshold"] if spec_of(r["system"]).scores_steps else np.nan, "gamma": meta["gamma"],
                     "measured_s": calls_s, "measured_e2e_s": r["latency_s"], "to_answer_s": calls_s,
                     "to_answer_censored": r["stop_reason"] == "max_steps", "steps": r["num_steps"],
                     "small_step_fraction": r["num_small_steps"] / max(r["num_steps"], 1),
                     "acceptance_length": 1.0 + r["spec_accepted_tokens"] / iters if iters else np.nan,
                     "run_hash": content})
    if not rows:
        raise InputError(str(path / "requests.jsonl"), None, "no finished requests")
    return MeasuredSet(calls, pd.DataFrame(rows, columns=REQUEST_COLUMNS), [str(path)], "run_dir",
                       _hint_from_manifest(meta))


def load_measured(paths: list[str | Path], prompt_tokens: int | None = None,
                  judge_tokens: int | None = None) -> MeasuredSet:
    """Runner run directories (``run.json`` inside) or SpecReason JSONL (file or directory)."""
    if not paths:
        raise InputError(None, "inputs", "give at least one run directory or trace file")
    if prompt_tokens is None or judge_tokens is None:
        from simulator.inputs.workload import load_workload
        from simulator.inputs.scenario import PROFILES_DIR

        w = load_workload(PROFILES_DIR / "workload_aime60_qwq32b_r1-1.5b.yaml")
        prompt_tokens = w.prompt_tokens if prompt_tokens is None else prompt_tokens
        judge_tokens = w.judge_template_tokens if judge_tokens is None else judge_tokens
    sets = []
    for p in map(Path, paths):
        if not p.exists():
            raise InputError(str(p), None, "not found")
        sets.append(_run_dir_set(p) if (p / "run.json").is_file() else _specreason_set(p, prompt_tokens, judge_tokens))
    kinds = {s.kind for s in sets}
    if len(kinds) > 1:
        raise InputError(None, "inputs", "mixing SpecReason traces and runner run directories in one call is not supported")
    calls = pd.concat([s.calls for s in sets], ignore_index=True)
    req = pd.concat([s.requests for s in sets], ignore_index=True)
    seen: dict[str, str] = {}
    for s in sets:
        for k in s.run_keys:
            if k in seen:
                raise InputError(None, "inputs", f"run key {k!r} occurs twice: in {seen[k]} and in {s.inputs[0]}; "
                                                 "a run's key must be unique")
            seen[k] = s.inputs[0]
    same = req.drop_duplicates("run_key").groupby("run_hash")["run_key"].apply(list)
    same = same[same.map(len) > 1]
    if len(same):
        a, b = same.iloc[0][:2]
        raise InputError(None, "inputs", f"runs {a!r} and {b!r} have the same content (requests and steps): one run "
                                         "under two names; give it once")
    steps = pd.concat([s.steps for s in sets], ignore_index=True) if sets[0].steps is not None else None
    return MeasuredSet(calls, req, [i for s in sets for i in s.inputs], sets[0].kind, _merged_hint(sets), steps,
                       _merged_trace(sets))


def _merged_trace(sets: list[MeasuredSet]):
    """SpecReason traces given as several files (dev and hold-out apart): one trace of all their runs, so the
    workload can be refitted on the fit runs whichever file holds them. None for run directories, or when the
    files ran different thresholds (one workload fit would mix them)."""
    traces = [s.trace for s in sets]
    if len(traces) == 1 or any(t is None for t in traces):
        return traces[0] if len(traces) == 1 else None
    if len({t.threshold for t in traces}) > 1:
        return None
    from collections import Counter

    from calibrate.fit.import_specreason import SpecReasonTrace

    return SpecReasonTrace(steps=pd.concat([t.steps for t in traces], ignore_index=True),
                           requests=pd.concat([t.requests for t in traces], ignore_index=True),
                           issues=sum((Counter(t.issues) for t in traces), Counter()),
                           sources=[p for t in traces for p in t.sources], threshold=traces[0].threshold)


HINT_FACTS = ("hardware", "tp", "base_model", "small_model", "draft_model")


def _merged_hint(sets: list[MeasuredSet]) -> dict:
    """The inputs' setup: each fact from the first input that knows it (a vanilla-base run names no small
    model); two inputs that state a fact differently cannot be fitted as one setup."""
    hint = dict(sets[0].hint)
    for key in HINT_FACTS:
        said = [(s.inputs[0], s.hint.get(key)) for s in sets if s.hint.get(key) is not None]
        if not said:
            continue
        hint[key] = said[0][1]
        other = next(((src, v) for src, v in said if v != said[0][1]), None)
        if other is not None:
            raise InputError(other[0], key, f"{other[1]!r} here but {said[0][1]!r} in {said[0][0]}: "
                                            "inputs of one fit or validation must share their setup")
    return hint


def parse_run_rule(text: str, known: list[str]) -> set[str]:
    """'0-3', '4,6,7' or names -> run keys; every name must name exactly one input run (a full key, or
    a unique tail of one: ``3`` for ``results/60/3``, see :func:`resolve_run_names`)."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "-" in part[1:] and all(x.strip().isdigit() for x in part.split("-", 1)):
            a, b = (int(x) for x in part.split("-", 1))
            names += [str(i) for i in range(a, b + 1)]
        else:
            names.append(part)
    res = resolve_run_names(names, known)
    missing = sorted(n for n, k in res.items() if k is None)
    if missing or not names:
        raise InputError(None, "runs", f"unknown run(s) {missing or text!r}; known: {', '.join(known)}")
    return {k for k in res.values() if k is not None}


