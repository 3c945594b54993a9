"""Acceptance extrapolation: per-position acceptance measured at small gamma predicts larger gamma.

Input, per gamma g: a_i(g) = P(first i drafts accepted) for i = 1..g and the drafts (verify iterations) it was
measured on -- from

- run directories (``steps.jsonl``: ``spec_accepted_per_pos[i] / spec_drafted_per_pos[0]``, read through
  ``calibrate.contracts.trace_schema.check_run_dir``);
- the speculative-decoding study's ``result.json`` (``acceptance.<draft>.per_gamma``);
- a vLLM server's ``/metrics`` text or its ``SpecDecoding metrics:`` log lines (``calibrate.contracts.spec_metrics``).

Every input becomes :class:`Measurement` records that pass :func:`check_measurement` -- the one place the rules
live (gamma >= 1, drafts a whole number >= 1, ``len(a) == gamma``, finite, a_i in [0, 1], a_1 >= a_2 >= ...) --
and are pooled per gamma by :func:`pool` (weighted by drafts).

Two predictors fitted on the gammas in ``fit`` (pooled over them, weighted by iterations):

- **per-position**: conditional rates c_i = a_i / a_{i-1} for every position the fit gammas reach; beyond
  them the last conditional rate repeats (the rule ``WorkloadProfile.acceptance_per_position`` applies);
- **i.i.d.**: one alpha = sum accepted / sum attempted over all positions (Leviathan et al.), a_i = alpha^i.

Each predicts E[M](g) = 1 + sum_{i<=g} a_i for the held-out gammas (requested and not fitted); the error is
against the measured E[M](g). The per-position a_1..a_8 are written as a draft acceptance (``draft.acceptance``
of a scenario: a, kind, source), checked by the scenario's own model before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from calibrate.contracts.spec_metrics import Data, Measurement, check_measurement, is_number, pool  # the acceptance contract
from simulator.errors import InputError


def from_study(path: str | Path, draft: str) -> Data:
    """{gamma: (a_1..a_gamma, iterations)} of one draft of ``specsim study specdecode``'s result.json."""
    path = Path(path)
    try:
        acc = json.loads(path.read_text())["acceptance"]
        per_gamma = acc[draft]["per_gamma"] if draft in acc else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(str(path), "acceptance", f"not a specdecode study result ({e.__class__.__name__})") from None
    if per_gamma is None:
        raise InputError(str(path), f"acceptance.{draft}", f"no such draft; known: {', '.join(acc)}")
    where = f"acceptance.{draft}.per_gamma"
    if not isinstance(per_gamma, dict) or not per_gamma:
        raise InputError(str(path), where, "expected a mapping {gamma: {a, iterations}} with one entry or more")
    out = []
    for key, v in per_gamma.items():
        if not isinstance(v, dict):
            raise InputError(str(path), f"{where}.{key}", f"expected a mapping with a and iterations (got {v!r})")
        gamma = int(key) if key.strip().lstrip("-").isdigit() else key
        out.append(Measurement(str(path), gamma, v.get("a"), v.get("iterations"),
                               f"{where}.{key}", f"{where}.{key}.a", f"{where}.{key}.iterations"))
    return pool(out)


def from_runs(run_dirs) -> Data:
    """{gamma: (a_i, drafts)} pooled over the speculative calls of run directories.

    Per call (a step record): gamma = ``spec_gamma``, drafts n = ``spec_drafted_per_pos[0]`` (verify steps that
    drafted), a_i = ``spec_accepted_per_pos[i-1] / n`` -- a draft shorter than i counts as not accepted at i, as
    vLLM counts. The drafted counts are checked by the same rules (``spec_drafted_per_pos[i-1] / n`` is a share
    that cannot grow with position). Calls that drafted nothing are skipped."""
    from calibrate.contracts.trace_schema import check_run_dir, record_file

    accepted = []
    for d in run_dirs:
        records = check_run_dir(d)
        f = str(record_file(d, "steps.jsonl") or Path(d) / "steps.jsonl")
        for k, s in enumerate(records.get("step", [])):
            dr, ac = s.get("spec_drafted_per_pos") or [], s.get("spec_accepted_per_pos") or []
            if not any(dr) and not any(ac):
                continue
            gamma, n = s.get("spec_gamma", len(dr)), (dr[0] if dr else 0)
            scale = n if is_number(n) and n > 0 else 1

            def share(name, counts):
                return Measurement(f, gamma, [c / scale if is_number(c) else c for c in counts], n, f"step {k}: spec_gamma",
                                   f"step {k}: {name} / spec_drafted_per_pos[0]", f"step {k}: spec_drafted_per_pos[0]")

            check_measurement(share("spec_drafted_per_pos", dr))  # drafted at i cannot exceed drafted at i - 1
            accepted.append(share("spec_accepted_per_pos", ac))
    if not accepted:
        raise InputError(str(run_dirs[0]) if run_dirs else None, "steps.jsonl",
                         "no speculative calls (spec_drafted_per_pos) in these runs")
    return pool(accepted)


def load(runs=None, study=None, draft="ngram", metrics=None, metrics_before=None, labels=None,
         logs=None) -> tuple[Data, str]:
    """(data, source) from exactly one kind of input: run directories, a study, /metrics scrapes or vLLM logs."""
    given = [k for k, v in (("run directories", runs), ("--study", study), ("--metrics", metrics), ("--log", logs)) if v]
    if len(given) != 1:
        raise InputError(None, "inputs", "give exactly one of: run directories, --study, --metrics, --log "
                         f"(got {', '.join(given) or 'none'})")
    if metrics_before and not metrics:
        raise InputError(None, "--metrics-before", "needs --metrics (the later scrape of the same server)")
    if labels and not metrics:
        raise InputError(None, "--metrics-label", "selects /metrics series: needs --metrics")
    if study:
        return from_study(study, draft), f"{study} draft {draft}"
    if runs:
        return from_runs(runs), ", ".join(str(r) for r in runs)
    from calibrate.contracts.spec_metrics import from_logs, from_prometheus

    if metrics:
        src = ", ".join(str(p) for p in metrics)
        if metrics_before:
            src += " minus " + ", ".join(str(p) for p in metrics_before)
        return from_prometheus(metrics, metrics_before, labels), f"vLLM /metrics {src}"
    return from_logs(logs), "vLLM SpecDecoding metrics log " + ", ".join(str(p) for p in logs)


def fit(data: Data, fit_gammas) -> dict:
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
    """a_1..a_gamma: the fitted conditional rates, beyond them the last one repeated or, with the model's
    ``drafter_kind`` (eagle3 / mtp / block), the kind prior's shape (``simulator.inputs.drafter_priors.extend``)."""
    c = list(model["conditional"])
    if model.get("drafter_kind") and gamma > len(c):
        from simulator.inputs.drafter_priors import extend

        return np.asarray(extend(np.cumprod(c), model["drafter_kind"], gamma))
    while len(c) < gamma:
        c.append(c[-1])
    return np.cumprod(c[:gamma])


def iid(model: dict, gamma: int) -> np.ndarray:
    return model["alpha"] ** np.arange(1, gamma + 1, dtype=float)


def evaluate(data: Data, model: dict, predict_gammas) -> list[dict]:
    """Predicted vs measured E[M] at each requested gamma that was measured, both predictors.

    ``held_out`` is False for a gamma the model was fitted on (an in-sample check, not a prediction)."""
    rows = []
    for g in predict_gammas:
        if g not in data:
            continue
        meas = 1.0 + float(data[g][0].sum())
        pp, ii = 1.0 + float(per_position(model, g).sum()), 1.0 + float(iid(model, g).sum())
        rows.append({"gamma": g, "held_out": g not in model["fit_gammas"], "measured_E": meas,
                     "per_position_E": pp, "iid_E": ii, "per_position_err": pp / meas - 1.0, "iid_err": ii / meas - 1.0})
    return rows


def report(data: Data, model: dict, rows: list[dict], predict_gammas) -> str:
    """The fit, then measured vs predicted E[M] per gamma (held-out or fitted), then the held-out median errors."""
    lines = ["measured: " + ", ".join(f"gamma {g} ({n} drafts)" for g, (_, n) in data.items()),
             f"fit on gamma {model['fit_gammas']}: alpha (i.i.d.) = {model['alpha']:.4f}, conditional per position = "
             + ", ".join(f"{c:.4f}" for c in model["conditional"]),
             "gamma  role      measured E[M]  per-position E[M] (err)  i.i.d. E[M] (err)"]
    for r in rows:
        role = "held-out" if r["held_out"] else "fitted"
        lines.append(f"{r['gamma']:>5}  {role:<8}  {r['measured_E']:>13.3f}  {r['per_position_E']:>8.3f} "
                     f"({100 * r['per_position_err']:+6.1f}%)       {r['iid_E']:>8.3f} ({100 * r['iid_err']:+6.1f}%)")
    missing = [g for g in predict_gammas if g not in data]
    if missing:
        lines.append(f"not measured (nothing to compare): gamma {', '.join(map(str, missing))}")
    held = [r for r in rows if r["held_out"]]
    if held:
        pp = sorted(abs(r["per_position_err"]) for r in held)[len(held) // 2]
        ii = sorted(abs(r["iid_err"]) for r in held)[len(held) // 2]
        lines.append(f"median |error| over {len(held)} held-out gammas: per-position {100 * pp:.1f}%, i.i.d. {100 * ii:.1f}%")
    else:
        lines.append("no held-out gamma: every measured gamma asked for was fitted")
    return "\n".join(lines)


def acceptance_yaml(model: dict, source: str, positions: int = 8) -> str:
    """``draft.acceptance`` of a scenario (a, kind: fitted, source), checked by the scenario's own model."""
    beyond = (f"follow the {model['drafter_kind']} prior's shape (docs/drafters.md)" if model.get("drafter_kind")
              else "repeat the last conditional rate")
    return draft_acceptance_yaml(per_position(model, positions), "fitted", source,
                                 f"per-position acceptance fitted by `specsim fit acceptance` (gamma "
                                 f"{model['fit_gammas']}; positions beyond them {beyond})")


def draft_acceptance_yaml(a, kind: str, source: str, comment: str) -> str:
    """The YAML of a scenario's ``draft.acceptance``; validated by ``simulator.inputs.scenario.AcceptancePrior`` first."""
    from simulator.inputs.loading import validate_model
    from simulator.inputs.scenario import AcceptancePrior

    prior = validate_model({"a": [round(float(x), 6) for x in a], "kind": kind, "source": source},
                           AcceptancePrior, "draft.acceptance (to write)")
    return f"# {comment}\na: {prior.a}\nkind: {prior.kind}\nsource: {json.dumps(prior.source)}\n"


def measured_yaml(data: Data, gamma: int | None, source: str) -> str:
    """The measured a_1..a_gamma as a scenario's ``draft.acceptance`` (kind: measured)."""
    if gamma is None and len(data) > 1:
        raise InputError(None, "--gamma", f"several gammas measured ({', '.join(map(str, data))}): choose one")
    g = gamma if gamma is not None else next(iter(data))
    if g not in data:
        raise InputError(None, "--gamma", f"no measurement at gamma {g} (have {', '.join(map(str, data))})")
    a, n = data[g]
    return draft_acceptance_yaml(a, "measured", f"{source} (gamma {g}, {n} drafts)",
                                 f"per-position acceptance measured by vLLM at gamma {g} (`specsim measure spec-metrics`)")
