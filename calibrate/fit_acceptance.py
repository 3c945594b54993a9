"""Acceptance extrapolation (issue 17): per-position acceptance measured at small gamma predicts larger gamma.

Input, per gamma g: a_i(g) = P(first i drafts accepted) for i = 1..g and the iterations it was measured on --
from run directories (``steps.jsonl``: ``spec_accepted_per_pos[i] / spec_drafted_per_pos[i]``, read through
``calibrate.trace_schema.check_run_dir``) or from the speculative-decoding study's ``result.json``
(``acceptance.<draft>.per_gamma``).

Two predictors fitted on the gammas in ``fit`` (pooled over them, weighted by iterations):

- **per-position**: conditional rates c_i = a_i / a_{i-1} for every position the fit gammas reach; beyond
  them the last conditional rate repeats (the rule ``WorkloadProfile.acceptance_per_position`` applies);
- **i.i.d.**: one alpha = sum accepted / sum attempted over all positions (Leviathan et al.), a_i = alpha^i.

Each predicts E[M](g) = 1 + sum_{i<=g} a_i for the held-out gammas; the error is against the measured E[M](g).
The per-position a_1..a_8 are written as a draft acceptance (``draft.acceptance`` of a scenario: a, kind, source).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator.errors import InputError


def from_study(path: str | Path, draft: str) -> dict[int, tuple[np.ndarray, int]]:
    """{gamma: (a_1..a_gamma, iterations)} of one draft of ``specsim study specdecode``'s result.json."""
    path = Path(path)
    try:
        acc = json.loads(path.read_text())["acceptance"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise InputError(str(path), "acceptance", f"not a specdecode study result ({e.__class__.__name__})") from None
    if draft not in acc:
        raise InputError(str(path), f"acceptance.{draft}", f"no such draft; known: {', '.join(acc)}")
    return {int(g): (np.asarray(v["a"], float), int(v["iterations"])) for g, v in acc[draft]["per_gamma"].items()}


def from_runs(run_dirs) -> dict[int, tuple[np.ndarray, int]]:
    """{gamma: (a_i, iterations)} pooled over the speculative calls of run directories (one gamma per run)."""
    from calibrate.trace_schema import check_run_dir

    out: dict[int, list[np.ndarray]] = {}
    for d in run_dirs:
        recs = check_run_dir(d)
        for s in recs.get("step", []):
            dr, ac = s.get("spec_drafted_per_pos"), s.get("spec_accepted_per_pos")
            if not dr:
                continue
            g = len(dr)
            cur = out.setdefault(g, [np.zeros(g), np.zeros(g)])
            cur[0] += np.asarray(dr, float)
            cur[1] += np.asarray(ac, float)
    if not out:
        raise InputError(str(run_dirs[0]) if run_dirs else None, "steps.jsonl",
                         "no speculative calls (spec_drafted_per_pos) in these runs")
    return {g: (np.where(dr > 0, ac / np.maximum(dr, 1), 0.0), int(dr[0])) for g, (dr, ac) in out.items()}


def fit(data: dict[int, tuple[np.ndarray, int]], fit_gammas) -> dict:
    """Per-position conditional rates and the i.i.d. alpha from the gammas in ``fit_gammas``."""
    fg = [g for g in fit_gammas if g in data]
    if not fg:
        raise InputError(None, "fit_gammas", f"no measurements at gamma {list(fit_gammas)} (have {sorted(data)})")
    depth = max(fg)
    num, den = np.zeros(depth), np.zeros(depth)  # accepted at i / attempted at i (= reached position i)
    for g in fg:
        a, n = data[g]
        prev = np.r_[1.0, a[:-1]]
        num[:g] += n * a
        den[:g] += n * prev
    cond = np.where(den > 0, num / np.maximum(den, 1e-300), 0.0)
    alpha = float(num.sum() / den.sum()) if den.sum() > 0 else 0.0
    return {"conditional": cond, "alpha": alpha, "fit_gammas": fg}


def per_position(model: dict, gamma: int) -> np.ndarray:
    c = list(model["conditional"])
    while len(c) < gamma:
        c.append(c[-1])
    return np.cumprod(c[:gamma])


def iid(model: dict, gamma: int) -> np.ndarray:
    return model["alpha"] ** np.arange(1, gamma + 1, dtype=float)


def evaluate(data, model: dict, predict_gammas) -> list[dict]:
    """Predicted vs measured E[M] at each held-out gamma, both predictors."""
    rows = []
    for g in predict_gammas:
        if g not in data:
            continue
        meas = 1.0 + float(data[g][0].sum())
        pp, ii = 1.0 + float(per_position(model, g).sum()), 1.0 + float(iid(model, g).sum())
        rows.append({"gamma": g, "measured_E": meas, "per_position_E": pp, "iid_E": ii,
                     "per_position_err": pp / meas - 1.0, "iid_err": ii / meas - 1.0})
    return rows


def acceptance_yaml(model: dict, source: str, positions: int = 8) -> str:
    a = [round(float(x), 6) for x in per_position(model, positions)]
    return (f"# per-position acceptance fitted by `specsim calibrate fit-acceptance` (gamma {model['fit_gammas']}; "
            f"positions beyond them repeat the last conditional rate)\n"
            f"a: {a}\nkind: fitted\nsource: {json.dumps(source)}\n")
