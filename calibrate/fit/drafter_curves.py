"""Acceptance priors per drafter kind from measured AL(k) curves (docs/drafters.md; ``specsim calibrate
fit-drafter-curves``).

Input: a folder of InferenceX ``golden_al_distribution`` YAML files (the shared data's
``engine-measurements/acceptance-length-vs-k/``): per file one target model and drafter,
``{model: {thinking_on|thinking_off: {k: AL}}}`` for k = 1..8, the drafter named in the header comment
``key = num_speculative_tokens (MTP|EAGLE3|DSpark level)``.
Each (file, thinking mode) is one curve of its kind: ``mtp``, ``eagle3`` or ``block`` (DSpark).

Model (:mod:`simulator.inputs.drafter_priors`): a_i = P(first i drafts accepted) from a family's shape; the level
a_1 = AL(1) - 1 is the deployment's own, the shape parameters are fitted on the other curves of the kind
(least squares of the relative AL(k) error, k = 1..8, each curve at its own AL(1)). For a block drafter (k tokens in
one pass) the drafts of a k-block may depend on k, so AL(k) - AL(k-1) is the marginal gain of a longer block, not a
survival probability of one run; the same family is fitted as an effective per-position acceptance.

Held-out check: leave one curve out within its kind, fit the shape on the rest, predict the left-out curve from its
AL(1); the error of AL(k), k = 1..8. The family is chosen by the mean over curves of that held-out max error (never
in-sample); thinking on/off as a covariate (the shape from the same mode's curves only) is reported beside.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from simulator.inputs.drafter_priors import (FAMILIES, acceptance_length, extend_with, from_acceptance_length,
                                             per_position, prior_kind)
from simulator.errors import InputError
from simulator.inputs.loading import read_yaml
from simulator.paths import REPO, SHARED_DATA

UPSTREAM = "SemiAnalysisAI/InferenceX golden_al_distribution/*.yaml @ 843c6254ff69b567f772f6a5fd97675af3d04431"
KIND_OF_LEVEL = {"mtp": "mtp", "eagle3": "eagle3", "dspark": "block"}
MODES = ("thinking_on", "thinking_off")
K = 8
_SHARED_SEEN_FROM_REPO = Path(os.path.relpath(SHARED_DATA, REPO)).as_posix()  # the third-party data folder
POINTS = (2, 3, 4)  # measured positions a deployment's /metrics gives (its k), for the held-out check from /metrics


@dataclass(frozen=True)
class Curve:
    file: str
    model: str
    kind: str  # mtp | mtp-one-step (a DeepSeek target's module: simulator.inputs.drafter_priors.prior_kind) | eagle3 | block
    mode: str  # thinking_on | thinking_off
    al: tuple[float, ...]  # AL(1..8)

    @property
    def name(self) -> str:
        return f"{self.file}:{self.mode}"


def _kind_of(path: Path, text: str) -> str:
    m = re.search(r"num_speculative_tokens \((\w+) level\)", text)
    if not m or m.group(1).lower() not in KIND_OF_LEVEL:
        raise InputError(str(path), "header", "expected the comment 'key = num_speculative_tokens (MTP|EAGLE3|DSpark "
                         "level)' naming the drafter")
    return KIND_OF_LEVEL[m.group(1).lower()]


def read_curves(folder: str | Path) -> list[Curve]:
    """Every (file, thinking mode) curve of ``folder``'s ``*.yaml``, checked: AL(k) for k = 1..8, 1 <= AL(k) <= k + 1."""
    folder = Path(folder)
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise InputError(str(folder), None, "no *.yaml acceptance-length files")
    out = []
    for p in files:
        kind = _kind_of(p, p.read_text(encoding="utf-8"))
        doc = read_yaml(p)
        if not isinstance(doc, dict) or len(doc) != 1:
            raise InputError(str(p), None, "expected one model: {model: {thinking_on|thinking_off: {k: AL}}}")
        (model, modes), = doc.items()
        if not isinstance(modes, dict) or not modes or set(modes) - set(MODES):
            raise InputError(str(p), str(model), f"expected the modes {' / '.join(MODES)}")
        for mode, al in modes.items():
            where = f"{model}.{mode}"
            if not isinstance(al, dict) or sorted(al) != list(range(1, K + 1)):
                raise InputError(str(p), where, f"expected AL for num_speculative_tokens 1..{K}")
            vals = tuple(al[k] for k in range(1, K + 1))
            for k, v in zip(range(1, K + 1), vals):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 1.0 <= v <= k + 1:
                    raise InputError(str(p), f"{where}.{k}", f"expected a number in [1, {k + 1}] (got {v!r})")
            out.append(Curve(p.name, str(model), prior_kind(kind, model_name=str(model)), mode,
                             tuple(float(v) for v in vals)))
    return out


def predict(family: str, params, curve: Curve) -> np.ndarray:
    """AL(1..8) of ``curve``'s deployment from its AL(1) and a shape."""
    return acceptance_length(per_position(family, curve.al[0] - 1.0, params, K))


def _loss(family, params, curves) -> float:
    return float(sum(np.sum((predict(family, params, c) / np.asarray(c.al) - 1.0) ** 2) for c in curves))


STARTS = ((1.0, 1.0), (2.0, -1.0), (0.0, 0.0), (3.0, 2.0))


def fit_shape(family: str, curves: list[Curve]) -> list[float]:
    """Shape parameters of ``family`` minimising the squared relative AL error over ``curves`` (each at its AL(1))."""
    n = FAMILIES[family]
    best = None
    for x0 in STARTS:
        r = minimize(lambda th: _loss(family, th, curves), np.asarray(x0[:n]), method="Nelder-Mead",
                     options={"xatol": 1e-7, "fatol": 1e-12, "maxiter": 4000})
        if best is None or r.fun < best.fun:
            best = r
    return [float(x) for x in best.x]


def held_out(curves: list[Curve], family: str, by_mode: bool = False) -> dict[str, np.ndarray]:
    """{curve name: |relative AL(k) error|, k = 1..8} with the shape fitted on the other curves of its kind (and of
    its thinking mode when ``by_mode``, where the kind has another curve of that mode)."""
    out = {}
    for c in curves:
        rest = [o for o in curves if o is not c and o.kind == c.kind]
        if by_mode and any(o.mode == c.mode for o in rest):
            rest = [o for o in rest if o.mode == c.mode]
        if not rest:
            continue
        out[c.name] = np.abs(predict(family, fit_shape(family, rest), c) / np.asarray(c.al) - 1.0)
    return out


def measured_points(curve: Curve, m: int) -> list[float]:
    """The a_1..a_m a deployment's ``/metrics`` would give at m drafts, from the curve: AL(i) - AL(i-1), clipped to
    [0, 1] and non-increasing (one run's counters are; the curves' points are separate runs)."""
    a = np.clip(from_acceptance_length(curve.al)[:m], 0.0, 1.0)
    return [float(x) for x in np.minimum.accumulate(a)]


def held_out_from_points(curves: list[Curve], family: str, m: int) -> dict[str, np.ndarray]:
    """As :func:`held_out`, the level being the left-out curve's own a_1..a_m (:func:`measured_points`) and the
    positions beyond m the shape fitted on the other curves of its kind (:func:`simulator.inputs.drafter_priors.extend_with`)."""
    out = {}
    for c in curves:
        rest = [o for o in curves if o is not c and o.kind == c.kind]
        if rest:
            a = extend_with(measured_points(c, m), family, fit_shape(family, rest), K)
            out[c.name] = np.abs(acceptance_length(a) / np.asarray(c.al) - 1.0)
    return out


def monotone_floor(al) -> float:
    """The least max relative error any non-decreasing AL(k) can reach on a measured curve (in sample, whatever its
    shape): a dip from AL(i) to a lower AL(j), i < j, forces one of them off by (AL(i) - AL(j)) / (AL(i) + AL(j)) at
    best; 0 for a curve that never falls. The curves' own noise, a floor under every held-out figure."""
    a = np.asarray(al, dtype=float)
    best = np.maximum.accumulate(a)  # the highest value at or before each k
    return float(np.max((best - a) / (best + a)))


def summary(curves: list[Curve], errors: dict[str, np.ndarray]) -> dict[str, tuple[float, float, int]]:
    """{kind: (mean over curves of the max error, max error, curves)}."""
    res = {}
    for kind in sorted({c.kind for c in curves}):
        e = [errors[c.name].max() for c in curves if c.kind == kind and c.name in errors]
        if e:
            res[kind] = (float(np.mean(e)), float(np.max(e)), len(e))
    return res


def choose_family(curves: list[Curve], families=tuple(FAMILIES)) -> tuple[str, dict]:
    """(family, {family: held-out errors}): the family with the lowest mean held-out max error over all curves."""
    errs = {f: held_out(curves, f) for f in families}
    score = {f: float(np.mean([e.max() for e in errs[f].values()])) for f in families}
    return min(families, key=lambda f: score[f]), errs


def fit_report(folder: str | Path, date: str) -> tuple[dict, str]:
    """(priors document, markdown report) from the curves in ``folder``."""
    curves = read_curves(folder)
    family, errs = choose_family(curves)
    by_mode = held_out(curves, family, by_mode=True)
    doc = {"source": f"{folder} ({UPSTREAM}); fitted {date} by specsim fit drafter-curves",
           "family_choice": "lowest mean held-out (leave one curve out within its kind) max AL(k) error, k = 1..8",
           "kinds": {}}
    s = summary(curves, errs[family])
    for kind in sorted({c.kind for c in curves}):
        mine = [c for c in curves if c.kind == kind]
        doc["kinds"][kind] = {
            "family": family, "params": [round(x, 6) for x in fit_shape(family, mine)],
            "curves": [c.name for c in mine],
            "held_out_max_error": round(s[kind][1], 4) if kind in s else None,
            "held_out_mean_max_error": round(s[kind][0], 4) if kind in s else None,
        }
    lines = [f"Held-out AL(k) error, k = 1..{K}, leave one curve out within its kind (level: the curve's own AL(1); "
             "shape: the other curves of its kind). Mean over curves of the max error / max error, percent.", "",
             "| family | " + " | ".join(sorted(s)) + " |", "|---|" + "---|" * len(s)]
    for f in FAMILIES:
        sf = summary(curves, errs[f])
        lines.append(f"| {f}{' (chosen)' if f == family else ''} | "
                     + " | ".join(f"{100 * sf[k][0]:.1f} / {100 * sf[k][1]:.1f}" for k in sorted(s)) + " |")
    sm = summary(curves, by_mode)
    lines.append(f"| {family}, shape per thinking mode | "
                 + " | ".join(f"{100 * sm[k][0]:.1f} / {100 * sm[k][1]:.1f}" for k in sorted(s)) + " |")
    for m in POINTS:
        sp = summary(curves, held_out_from_points(curves, family, m))
        doc.setdefault("held_out_from_metrics", {})[f"a_1..a_{m}"] = {
            k: {"mean_max_error": round(sp[k][0], 4), "max_error": round(sp[k][1], 4)} for k in sorted(sp)}
        lines.append(f"| {family}, level: the deployment's a_1..a_{m} (/metrics at k = {m}) | "
                     + " | ".join(f"{100 * sp[k][0]:.1f} / {100 * sp[k][1]:.1f}" for k in sorted(s)) + " |")
    lines += ["", f"Per curve ({family}, level from AL(1)): held-out max error over k = 1..{K}, percent, and the k "
              f"where it occurs (the measured values stay in {_SHARED_SEEN_FROM_REPO}).", "",
              "| kind | curve | max error | at k | floor of any non-decreasing AL(k) |", "|---|---|---|---|---|"]
    for c in curves:
        e = errs[family][c.name]
        lines.append(f"| {c.kind} | {c.name} | {100 * e.max():.1f} | {int(e.argmax()) + 1} | "
                     f"{100 * monotone_floor(c.al):.1f} |")
    return doc, "\n".join(lines) + "\n"
