"""Accuracy model: how often a configuration answers correctly, with its uncertainty, from data.

An accuracy profile (``simulator/profiles/accuracy_<workload>.yaml``, or the file a scenario names
in ``accuracy``) holds, per (system, threshold, first_n), graded answers as counts: ``groups`` of
(correct, total), one group per problem of a mixture (weight = the problem's weight in the
dataset) or one per run of a flat sample. Nothing is guessed:

- dataset accuracy = sum_g w_g c_g / n_g / sum_g w_g (weighted mean over problems);
- uncertainty: each group's accuracy ~ Beta(c + 1/2, n - c + 1/2) (Jeffreys), the weighted mean's
  95% interval from ``DRAWS`` Monte Carlo draws (seeded per entry: reproducible);
- **speculative decoding is exact** (the target verifies every drafted token): a system with a
  draft has the accuracy of the same chain without one, for every gamma (specdecode = vanilla-base,
  specreason-decode = specreason at the same threshold/first_n). Such configurations share the
  very same draws, so their difference is exactly 0;
- vanilla systems ignore threshold and first_n; a configuration without data is *unknown*;
- the profile is valid for its ``token_budget`` and models only: a workload with another budget or
  other models gets *unknown* for everything (accuracy depends on the budget);
- ``published`` lists qualitative published statements with their source; they are shown, never
  used as numbers (no published accuracy figure is in REFERENCE.md or the issue text).

Accuracy floor (:func:`floor_status`): relative (the reference system, vanilla-base by default,
minus ``margin``) or absolute. A configuration *meets* the floor when the lower end of the 95%
interval of (its accuracy - the floor) is >= 0 (shown not worse: non-inferiority), *fails* when the
upper end is < 0 (shown worse), and is *unknown* otherwise (no data, or inconclusive).

Build the shipped profiles (``specsim fit accuracy --help``; ``SPECSIM_SHARED_DATA``: the shared data
folder, ``simulator.paths.SHARED_DATA``; the run directories are read
there and handed here as :class:`GradedRun`)::

    .venv/bin/specsim fit accuracy aggregates "$SPECSIM_SHARED_DATA"/specreason-aime-traces/per-problem-aggregates.json \\
        --workload aime_qwq32b_r1-1.5b --out simulator/profiles/accuracy_aime_qwq32b_r1-1.5b.yaml
    .venv/bin/specsim fit accuracy runs reports/cpu-workload/runs/* \\
        --workload cpu_gsm_smollm2 --out simulator/profiles/accuracy_cpu_gsm_smollm2.yaml
"""

from __future__ import annotations

from simulator.paths import PROFILES_DIR

import math
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.errors import InputError
from simulator.option_values import FIRST_N_MAX
from simulator.provenance import Provenance
from simulator.inputs.systems import REGISTRY, SystemConfig

DRAWS = 20000
CONFIDENCE = 0.95
DEFAULT_MARGIN = 0.05
REFERENCE_SYSTEM = "vanilla-base"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Group(_Strict):
    """Graded answers of one problem (or one run): ``correct`` of ``total``."""

    name: str
    weight: float = Field(default=1.0, gt=0)
    correct: int = Field(ge=0)
    total: int = Field(ge=1)

    @model_validator(mode="after")
    def _counts(self):
        if self.correct > self.total:
            raise ValueError(f"correct ({self.correct}) exceeds total ({self.total})")
        return self


class AccuracyEntry(_Strict):
    system: str
    threshold: int | None = Field(default=None, ge=0, le=10)
    first_n: int = Field(default=0, ge=0, le=FIRST_N_MAX)
    kind: str = Field(default="measured", pattern="^measured$")  # numbers come from graded answers only
    source: str
    conditions: str = ""
    groups: list[Group] = Field(min_length=1)

    @field_validator("system")
    @classmethod
    def _known(cls, v):
        if v not in REGISTRY:
            raise ValueError(f"unknown system {v!r}; known: {', '.join(REGISTRY)}")
        if REGISTRY[v].draft:
            raise ValueError(f"{v} decodes speculatively (exact): record its accuracy under the system without the draft")
        return v

    @property
    def key(self) -> tuple:
        spec = REGISTRY[self.system]
        return (self.system, self.threshold if spec.scores_steps else None, self.first_n if spec.scores_steps else 0)


class PublishedClaim(_Strict):
    text: str
    source: str


class AccuracyProfile(_Strict):
    name: str
    dataset: str
    base_model: str
    small_model: str
    token_budget: int = Field(ge=1)
    provenance: Provenance
    entries: list[AccuracyEntry] = Field(default_factory=list)
    published: list[PublishedClaim] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self):
        seen = set()
        for i, e in enumerate(self.entries):
            if e.key in seen:
                raise ValueError(f"entries[{i}]: a second entry for {e.key}")
            seen.add(e.key)
        return self


@dataclass(frozen=True)
class Estimate:
    """Accuracy of one configuration: point estimate, 95% interval, where it comes from."""

    mean: float
    low: float
    high: float
    entry: tuple  # the key of the data it comes from (shared by exact equivalents)
    source: str
    n: int

    def text(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def data_key(cfg: SystemConfig) -> tuple:
    """The (system, threshold, first_n) whose data give ``cfg``'s accuracy: speculative decoding is
    exact, so a drafted system maps to the same chain without the draft; vanilla chains drop the knobs."""
    spec = REGISTRY[cfg.system]
    system = cfg.system
    if spec.draft:
        plain = [s for s in REGISTRY.values() if s.chain == spec.chain and not s.draft]
        system = plain[0].name if plain else cfg.system
    if REGISTRY[system].scores_steps:
        return (system, cfg.threshold, cfg.first_n)
    return (system, None, 0)


class AccuracyModel:
    """Lookups and posterior draws over one profile (``None``: everything unknown)."""

    def __init__(self, profile: AccuracyProfile | None, unknown_reason: str = "no accuracy profile"):
        self.profile = profile
        self.unknown_reason = unknown_reason
        self.entries = {e.key: e for e in profile.entries} if profile else {}

    @cached_property
    def _draws(self) -> dict:
        return {}

    def draws(self, key: tuple) -> np.ndarray | None:
        e = self.entries.get(key)
        if e is None:
            return None
        if key not in self._draws:
            rng = np.random.default_rng(zlib.crc32(repr(key).encode()))
            w = np.array([g.weight for g in e.groups])
            p = np.stack([rng.beta(g.correct + 0.5, g.total - g.correct + 0.5, DRAWS) for g in e.groups])
            self._draws[key] = (w[:, None] * p).sum(0) / w.sum()
        return self._draws[key]

    def estimate(self, cfg: SystemConfig) -> Estimate | None:
        key = data_key(cfg)
        e = self.entries.get(key)
        if e is None:
            return None
        d = self.draws(key)
        w = np.array([g.weight for g in e.groups])
        mean = float((w * np.array([g.correct / g.total for g in e.groups])).sum() / w.sum())
        a = (1 - CONFIDENCE) / 2
        lo, hi = np.quantile(d, [a, 1 - a])
        # Jeffreys' interval excludes 0 at 0 correct (and 1 at all correct): the usual fix extends it to the estimate
        return Estimate(mean, float(min(lo, mean)), float(max(hi, mean)), key, e.source, sum(g.total for g in e.groups))

    def reason(self, cfg: SystemConfig) -> str:
        if self.profile is None:
            return self.unknown_reason
        k = data_key(cfg)
        return f"no graded answers for {k[0]}" + (f" t={k[1]} first_n={k[2]}" if k[1] is not None else "") + \
            f" in {self.profile.name}"


@dataclass(frozen=True)
class Floor:
    """``relative``: the reference system's accuracy - margin; ``absolute``: ``value``; ``none``."""

    kind: str = "relative"
    margin: float = DEFAULT_MARGIN
    value: float = 0.0
    reference: str = REFERENCE_SYSTEM

    def describe(self) -> str:
        if self.kind == "none":
            return "no accuracy floor"
        if self.kind == "absolute":
            return f"accuracy >= {self.value:g} (shown by the lower end of its 95% interval)"
        return (f"accuracy not worse than {self.reference} by more than {self.margin:g} "
                f"(lower end of the 95% interval of the difference >= -{self.margin:g})")


def parse_floor(text: str | None, margin: float | None = None) -> Floor:
    """``--accuracy-floor``: ``vanilla-base`` (default, relative with ``--accuracy-margin``), a number in
    [0, 1] (absolute), or ``none``."""
    m = DEFAULT_MARGIN if margin is None else margin
    if not (isinstance(m, (int, float)) and math.isfinite(m) and 0 <= m <= 1):
        raise InputError(None, "--accuracy-margin", f"must be a number in [0, 1] (got {margin})")
    t = (text or REFERENCE_SYSTEM).strip().lower()
    if t == "none":
        return Floor("none")
    if t in REGISTRY:
        if REGISTRY[t].draft:
            raise InputError(None, "--accuracy-floor", f"{t} has its target's accuracy; name {data_key(SystemConfig(system=t))[0]}")
        return Floor("relative", m, reference=t)
    try:
        v = float(t)
    except ValueError:
        raise InputError(None, "--accuracy-floor", f"expected a system (e.g. vanilla-base), a number in [0, 1] or none (got {text!r})") from None
    if not (math.isfinite(v) and 0 <= v <= 1):
        raise InputError(None, "--accuracy-floor", f"an absolute floor must lie in [0, 1] (got {text!r})")
    return Floor("absolute", value=v)


def floor_status(model: AccuracyModel, cfg: SystemConfig, floor: Floor) -> tuple[str, str]:
    """(``meets`` | ``fails`` | ``unknown``, why) for one configuration (module docstring)."""
    if floor.kind == "none":
        return "meets", "no floor"
    a = (1 - CONFIDENCE) / 2
    key = data_key(cfg)
    if floor.kind == "relative":
        ref_key = data_key(SystemConfig(system=floor.reference))
        if key == ref_key:
            return "meets", f"same accuracy as {floor.reference} (speculative decoding is exact)" if cfg.system != floor.reference else "is the reference"
        dc, dr = model.draws(key), model.draws(ref_key)
        if dc is None:
            return "unknown", model.reason(cfg)
        if dr is None:
            return "unknown", f"{floor.reference} accuracy unknown ({model.reason(SystemConfig(system=floor.reference))})"
        lo, hi = np.quantile(dc - dr, [a, 1 - a]) + floor.margin
        what = f"difference to {floor.reference} [{lo - floor.margin:+.3f}, {hi - floor.margin:+.3f}] vs margin -{floor.margin:g}"
    else:
        dc = model.draws(key)
        if dc is None:
            return "unknown", model.reason(cfg)
        lo, hi = np.quantile(dc, [a, 1 - a]) - floor.value
        what = f"accuracy interval [{lo + floor.value:.3f}, {hi + floor.value:.3f}] vs floor {floor.value:g}"
    if lo >= 0:
        return "meets", what
    if hi < 0:
        return "fails", what
    return "unknown", "inconclusive: " + what


def searched(model: AccuracyModel, cfg: SystemConfig, floor: Floor) -> tuple[bool, str, str]:
    """Whether ``specsim report`` searches a configuration's capacity, as (searched, floor verdict, why): one
    that meets the floor is; so is one whose own accuracy is measured while the floor's reference system has
    none (the floor cannot be judged): it gets a capacity and a place on the Pareto plot but is never
    recommended. One that fails the floor, is inconclusive against it, or has no graded answers of its own is
    not."""
    status, why = floor_status(model, cfg, floor)
    unjudged = (status == "unknown" and floor.kind == "relative" and model.estimate(cfg) is not None
                and model.estimate(SystemConfig(system=floor.reference)) is None)
    return status == "meets" or unjudged, status, why


def excluded_text(model: AccuracyModel, configs: list[SystemConfig], floor: Floor) -> list[str]:
    """What a report says of the configurations it did not search: one line per reason, naming them."""
    groups: dict = {}
    for c in configs:
        _, status, why = searched(model, c, floor)
        groups.setdefault((status, why), []).append(c.label)
    return [f"{', '.join(labels)}: accuracy {st} ({why}); not searched" for (st, why), labels in groups.items()]


def add_accuracy(df, model: AccuracyModel, floor: Floor):
    """Accuracy columns (``accuracy``, ``accuracy_lo``, ``accuracy_hi``: NaN = unknown) and the floor's
    verdict (``accuracy_floor``: meets | fails | unknown, ``accuracy_why``) per configuration (rows with
    ``system``, ``gamma``, ``threshold``, ``first_n``): the one rule of whatif, capacity and report."""
    import pandas as pd

    df = df.copy()
    est, stat, why = [], [], []
    for r in df.itertuples():
        cfg = SystemConfig(system=r.system, gamma=None if pd.isna(r.gamma) else int(r.gamma),
                           threshold=None if pd.isna(r.threshold) else int(r.threshold), first_n=int(r.first_n))
        est.append(model.estimate(cfg))
        s, w = floor_status(model, cfg, floor)
        stat.append(s)
        why.append(w)
    df["accuracy"] = [e.mean if e else np.nan for e in est]
    df["accuracy_lo"] = [e.low if e else np.nan for e in est]
    df["accuracy_hi"] = [e.high if e else np.nan for e in est]
    df["accuracy_floor"] = stat
    df["accuracy_why"] = why
    return df


# ---- loading ---------------------------------------------------------------------------------------
def load_accuracy_profile(path: str | Path) -> AccuracyProfile:
    from simulator.inputs.loading import load_yaml_model

    return load_yaml_model(path, AccuracyProfile)


def model_for_workload(workload, ref: str | Path | None = None, scenario_file: str | None = None) -> AccuracyModel:
    """The accuracy model of a scenario: ``ref`` (a path, or a profile name in simulator/profiles/), else
    ``accuracy_<workload name>.yaml`` when shipped, else unknown. A named profile for other models is an
    input error; one for another token budget gives unknown (accuracy depends on the budget)."""
    if ref is None:
        p = PROFILES_DIR / f"accuracy_{workload.name}.yaml"
        if not p.is_file():
            return AccuracyModel(None, f"no accuracy profile for workload {workload.name}")
    else:
        p = Path(ref) if str(ref).endswith((".yaml", ".yml")) else PROFILES_DIR / f"accuracy_{ref}.yaml"
        if not p.is_absolute() and str(ref).endswith((".yaml", ".yml")) and scenario_file:
            p = Path(scenario_file).parent / p
        if not p.is_file():
            raise InputError(scenario_file, "accuracy", f"accuracy profile {str(ref)!r} not found ({p})")
    prof = load_accuracy_profile(p)
    for f in ("base_model", "small_model"):
        if getattr(prof, f) != getattr(workload, f):
            raise InputError(str(p), f, f"{getattr(prof, f)!r} does not match the workload's {getattr(workload, f)!r}")
    if prof.token_budget != workload.token_budget:
        return AccuracyModel(None, f"{prof.name} was graded at a {prof.token_budget}-token budget, the workload "
                                   f"uses {workload.token_budget}")
    return AccuracyModel(prof)


def scenario_accuracy(rs) -> AccuracyModel:
    """The accuracy model of a resolved scenario (its optional ``accuracy`` field)."""
    return model_for_workload(rs.workload, getattr(rs.scenario, "accuracy", None), rs.file)


# ---- building profiles from data -----------------------------------------------------------------
def from_aggregates(path: str | Path, workload) -> AccuracyProfile:
    """The SpecReason runs' per-problem accuracies (threshold 7, first_n 0) -> one specreason entry,
    one group per problem of the workload's mixture (its weights); counts = round(accuracy x completed_runs)."""
    import json

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(str(p), None, f"cannot read JSON ({e})") from None
    cfg = data.get("config", {}) if isinstance(data, dict) else {}
    per = data.get("per_problem") if isinstance(data, dict) else None
    if not isinstance(per, dict) or not per:
        raise InputError(str(p), "per_problem", "expected a mapping problem id -> aggregates")
    weights = {pr.name: pr.weight for pr in (workload.problems or [])}
    groups = []
    for pid, v in per.items():
        if weights and pid not in weights:
            continue
        acc, n = (v or {}).get("accuracy"), (v or {}).get("completed_runs")
        if not isinstance(n, int) or n < 1 or not isinstance(acc, (int, float)) or not 0 <= acc <= 1:
            raise InputError(str(p), f"per_problem.{pid}.accuracy", f"expected accuracy in [0, 1] and completed_runs >= 1 (got {acc!r}, {n!r})")
        c = round(acc * n)
        if abs(c - acc * n) > 1e-6:
            raise InputError(str(p), f"per_problem.{pid}.accuracy", f"{acc} x {n} runs is not a whole number of correct runs")
        groups.append({"name": str(pid), "weight": weights.get(pid, 1.0), "correct": int(c), "total": n})
    if weights and {g["name"] for g in groups} != set(weights):
        raise InputError(str(p), "per_problem", f"problems {sorted(set(weights) - {g['name'] for g in groups})} of the workload are missing")
    thr, fn, budget = cfg.get("score_threshold"), cfg.get("first_n_steps_base_model", 0), cfg.get("token_budget")
    return AccuracyProfile.model_validate({
        "name": f"accuracy_{workload.name}", "dataset": workload.dataset, "base_model": workload.base_model,
        "small_model": workload.small_model, "token_budget": int(budget),
        "provenance": {"kind": "measured", "source": f"{p} ({data.get('source', '')})",
                       "method": "graded answers per problem (the runs' `accuracy` x `completed_runs`); dataset accuracy = "
                                 "weighted mean over the workload's problems, Jeffreys beta per problem"},
        "entries": [{"system": "specreason", "threshold": int(thr), "first_n": int(fn), "source": str(p),
                     "conditions": f"score {cfg.get('score_method')}, budget {budget}, k={cfg.get('k')} runs per problem, "
                                   "vLLM 0.8.2, temperature 0.6 top_p 0.95", "groups": groups}],
        "published": [{"text": "SpecReason: 1.4-3.0x lower latency than vanilla base with equal or better accuracy "
                               "(AIME 2024, MATH500, GPQA Diamond; pass@1 over 16 samples). Qualitative: no accuracy figure "
                               "is stated, so none is used as a number.",
                       "source": "../shared/REFERENCE.md section 1 (Pan et al. 2025, SpecReason)"}],
    })


@dataclass(frozen=True)
class GradedRun:
    """One run's graded answers as plain data (``calibrate/fit/accuracy_profile.py`` reads run directories
    into these): its source (the run directory; its name names the group), system, run metadata
    (``run.json``: ``budget_tokens``, ``threshold``, ``gamma``, ``first_n``, ``dataset``, ``sampling``) and
    the count of correct answers among its graded requests (``graded`` 0: no graded answers)."""

    source: str
    system: str
    meta: dict
    correct: int
    graded: int


def from_graded_runs(runs: list[GradedRun], workload) -> AccuracyProfile:
    """The runner's graded answers (requests.jsonl ``correct``) of runs at the workload's budget: one entry
    per (system, threshold, first_n) of the plain chains (drafted runs count for their plain chain: exact),
    one group per run (weight = its graded requests)."""
    entries: dict[tuple, dict] = {}
    used, skipped = [], []
    for r in runs:
        path = r.source
        if int(r.meta.get("budget_tokens", -1)) != workload.token_budget:
            skipped.append(f"{path} (budget {r.meta.get('budget_tokens')})")
            continue
        thr = r.meta.get("threshold")
        cfg = SystemConfig(system=r.system, gamma=r.meta.get("gamma") or None if REGISTRY[r.system].draft else None,
                           threshold=int(thr) if REGISTRY[r.system].scores_steps else None,
                           first_n=int(r.meta.get("first_n") or 0) if REGISTRY[r.system].scores_steps else 0)
        key = data_key(cfg)
        if not r.graded:
            skipped.append(f"{path} (no graded answers)")
            continue
        e = entries.setdefault(key, {"system": key[0], "threshold": key[1], "first_n": key[2], "source": [], "groups": [],
                                     "conditions": f"{r.meta.get('dataset')}, budget {workload.token_budget}, "
                                                   f"temperature {r.meta.get('sampling', {}).get('temperature')}"})
        e["source"].append(str(path) + (f" ({r.system}, exact)" if REGISTRY[r.system].draft else ""))
        e["groups"].append({"name": Path(path).name, "weight": float(r.graded), "correct": int(r.correct),
                            "total": int(r.graded)})
        used.append(str(path))
    if not entries:
        raise InputError(None, "runs", f"no run at the workload's {workload.token_budget}-token budget with graded answers")
    for e in entries.values():
        e["source"] = ", ".join(e["source"])
    return AccuracyProfile.model_validate({
        "name": f"accuracy_{workload.name}", "dataset": workload.dataset, "base_model": workload.base_model,
        "small_model": workload.small_model, "token_budget": workload.token_budget,
        "provenance": {"kind": "measured", "source": ", ".join(used),
                       "method": "runner's graded answers (requests.jsonl `correct`, calibrate/measure/answer.py: numeric compare); "
                                 "one group per run; Jeffreys beta per group" + (f"; not used: {'; '.join(skipped)}" if skipped else "")},
        "entries": list(entries.values()),
    })


def profile_yaml(profile: AccuracyProfile, command: str) -> str:
    import yaml

    head = ("# Accuracy profile (simulator/inputs/accuracy.py): graded answers as counts, with provenance.\n"
            f"# Regenerate (do not edit by hand):\n#   {command}\n")
    return head + yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False, width=120,
                                 default_flow_style=None)


def accuracy_text(accuracy: float, why: str) -> str:
    """A recommended configuration's accuracy in a Best line (whatif, capacity): its value and why it meets the
    floor, or, where no graded answers give it, "not measured" with why the floor holds anyway."""
    if math.isfinite(accuracy):
        return f"accuracy {accuracy:.3f} ({why})"
    return f"accuracy not measured, floor met: {why}"
