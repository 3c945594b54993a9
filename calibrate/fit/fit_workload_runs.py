"""Fit a :class:`~simulator.inputs.workload.WorkloadProfile` from the runner's own run directories.

``specsim fit workload RUNDIR... --out W.yaml [--prior W0.yaml] [--form empirical|parametric]``.
Every field comes from the runs when they can identify it, else from the prior profile (or a
generic prior), and ``provenance.method`` says which is which. Per field:

- ``steps_per_request.base`` / ``.small``: N_X, steps to the end when every step comes from model
  X. From *vanilla* chains of that model (vanilla-base and specdecode runs are base chains,
  vanilla-small runs small chains). A request that ended on an answer or EOS is an event; one
  stopped by the token budget (or max_steps) is right-censored at its step count. Estimator:
  Kaplan-Meier + geometric tail (``calibrate.fit.fit_workload.steps_km_with_geometric_tail``), or with
  ``--form parametric`` the censored-geometric MLE mean = (sum of observed counts) / events.
  With no vanilla base chain, the mixed SpecReason chains stand in for N_base (as the third-party
  fit does) and ``small`` is omitted. **Every request censored** (no answer before the budget, as
  in short CPU campaigns): N is only bounded below; the profile gets a point mass at
  K = ceil(B / shortest step) + 1, so the budget always binds first -- exact at this budget B,
  not evidence about larger ones (the method says so).
- ``verbosity``: E[N_small] / E[N_base] when both are fitted from events, else 1.0 (prior).
- ``step_tokens.small``: every small-model step (SpecReason proposals, vanilla-small steps);
  ``step_tokens.base``: every base-model step (vanilla-base, specdecode, SpecReason
  regenerations). Runs recorded before ``run.json options.budget_rule`` existed capped a request's
  last step at the remaining budget; for those, the last step of a budget-stopped request is left
  out (its length is the budget's, not the model's). Current runs check the budget between steps
  (the reference code's rule and the simulator's), so every step counts.
  Empirical on [1, step_max_tokens], or lognormal (MLE on log length) with ``--form parametric``.
- ``scores``: every greedy/mean score of a proposed step (the score does not depend on the
  threshold, so runs at every threshold pool), empirical pmf + 0.5 pseudo-count per score.
- ``token_acceptance``: a_i = sum accepted_i / sum drafted_i over every verification of the
  specdecode / specreason-decode runs (per-position counts, ``spec_*_per_pos``), pooled over
  gamma, then made non-increasing (running minimum); binomial stderr per position in the method.
- ``prompt_tokens``: median of the requests' first-step context (the prompt in base tokens);
  ``judge_template_tokens``: median of (scoring prompt - context - proposed step);
  ``answer_tokens`` 0 (the runner has no separate answer phase); ``token_budget`` and
  ``max_step_tokens`` from ``run.json`` (must agree across runs).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.fit.fit_workload import (SCORE_PSEUDO_COUNT, acceptance_prior, repo_relative, score_pmf,
                                        steps_km_with_geometric_tail)
from simulator.errors import InputError
from simulator.inputs.systems import spec_of
from simulator.inputs.workload import WorkloadProfile

EVENT_STOPS = ("answer", "eos")
MAX_STEPS_POINT_MASS = 4096


@dataclass
class RunData:
    """One run directory, read and schema-checked."""

    path: Path
    meta: dict
    steps: pd.DataFrame
    requests: pd.DataFrame

    @property
    def system(self) -> str:
        return str(self.meta["system"])


def read_run(path: str | Path) -> RunData:
    from calibrate.contracts.trace_schema import check_run_dir

    p = Path(path)
    if not (p / "run.json").is_file():
        raise InputError(str(p), "run.json", "not a run directory (run.json missing)")
    recs = check_run_dir(p)
    import json

    meta = json.loads((p / "run.json").read_text(encoding="utf-8"))
    steps, reqs = pd.DataFrame(recs.get("step", [])), pd.DataFrame(recs.get("request", []))
    if reqs.empty:
        raise InputError(str(p / "requests.jsonl"), None, "no finished requests")
    done = set(reqs["request_id"])
    steps = steps[steps["request_id"].isin(done)].sort_values(["request_id", "step_index"]).reset_index(drop=True)
    return RunData(p, meta, steps, reqs)


# ---- pieces ------------------------------------------------------------------------------------
@dataclass
class Part:
    """One fitted field: its YAML value, whether data or a prior produced it, and how."""

    value: object
    fitted: bool
    how: str


def _budget_cut_last_steps(run: RunData) -> pd.Series:
    """True for each request's last step when the request stopped on the budget and the run capped
    that step at the remaining budget (runs recorded before ``options.budget_rule`` existed)."""
    if run.meta.get("options", {}).get("budget_rule") == "checked_between_steps":
        return pd.Series(False, index=run.steps.index)
    last = run.steps.groupby("request_id")["step_index"].transform("max") == run.steps["step_index"]
    budget_stopped = run.steps["request_id"].map(run.requests.set_index("request_id")["stop_reason"]) == "budget"
    return last & budget_stopped


def _step_lengths(runs: list[RunData], who: str) -> np.ndarray:
    out = []
    for r in runs:
        if r.steps.empty:
            continue
        keep = ~_budget_cut_last_steps(r)
        s = r.steps[keep]
        if who == "small":
            if spec_of(r.system).chain == "small":
                out.append(s["small_tokens"].to_numpy())
            elif spec_of(r.system).scores_steps:
                out.append(s.loc[s["small_tokens"] > 0, "small_tokens"].to_numpy())
        else:
            if spec_of(r.system).chain == "base":
                out.append(s["base_tokens"].to_numpy())
            elif spec_of(r.system).scores_steps:
                out.append(s.loc[s["proposer"] == "base", "base_tokens"].to_numpy())
    return np.concatenate(out) if out else np.array([], dtype=np.int64)


def _length_dist(lengths: np.ndarray, cap: int, form: str) -> dict:
    v = np.clip(lengths.astype(np.int64), 1, cap)
    if form == "parametric":
        logs = np.log(v.astype(float))
        sigma = float(logs.std(ddof=1)) if len(v) > 1 else 0.0
        return {"kind": "lognormal", "median": float(f"{math.exp(logs.mean()):.6g}"),
                "sigma": float(f"{max(sigma, 1e-3):.6g}"), "min": 1, "max": cap}
    uniq, counts = np.unique(v, return_counts=True)
    return {"kind": "empirical", "values": uniq.tolist(), "weights": counts.astype(float).tolist()}


def _chains(runs: list[RunData], chain: str) -> pd.DataFrame:
    """Step counts and stops of the runs whose systems write their chain as ``chain`` (``simulator.inputs.systems``)."""
    rows = [r.requests[["num_steps", "stop_reason"]] for r in runs if spec_of(r.system).chain == chain]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["num_steps", "stop_reason"])


def _step_count_dist(chains: pd.DataFrame, form: str, budget: int, shortest_step: int) -> tuple[dict, str, float | None]:
    """(distribution, method text, mean steps if identified else None)."""
    n = chains["num_steps"].astype(np.int64).to_numpy()
    event = chains["stop_reason"].isin(EVENT_STOPS).to_numpy()
    if not event.any():
        k = min(math.ceil(budget / max(shortest_step, 1)) + 1, MAX_STEPS_POINT_MASS)
        return ({"kind": "constant", "value": int(k)},
                f"all {len(n)} requests censored (no answer/EOS before the {budget}-token budget; observed "
                f"{n.min()}-{n.max()} steps): N bounded below only, set to a point mass at {k} = "
                f"ceil({budget}/{shortest_step})+1 so the budget binds first -- exact at this budget, no "
                f"evidence about larger ones", None)
    if form == "parametric":
        mean = float(n.sum() / event.sum())
        top = int(max(n.max(), math.ceil(mean * 20)))
        return ({"kind": "geometric", "mean": float(f"{mean:.6g}"), "min": 1, "max": top},
                f"censored-geometric MLE mean {mean:.2f} steps ({int(event.sum())} events, "
                f"{int((~event).sum())} censored)", mean)
    dist, info = steps_km_with_geometric_tail(n, event)
    return (dist, f"Kaplan-Meier ({info['events']} events, {info['censored']} censored) + geometric tail "
                  f"(censored MLE mean {info['geometric_mle_mean_steps']:.2f}) for leftover mass "
                  f"{info['km_leftover_mass']:.3f}", info["mean_steps"])


def _acceptance(runs: list[RunData]) -> tuple[list[float], str] | None:
    drafted: dict[int, int] = {}
    accepted: dict[int, int] = {}
    for r in runs:
        if not spec_of(r.system).draft or r.steps.empty:
            continue
        for d, a in zip(r.steps["spec_drafted_per_pos"], r.steps["spec_accepted_per_pos"]):
            for i, x in enumerate(d or []):
                drafted[i] = drafted.get(i, 0) + int(x)
            for i, x in enumerate(a or []):
                accepted[i] = accepted.get(i, 0) + int(x)
    if not drafted or drafted.get(0, 0) == 0:
        return None
    raw, se = [], []
    for i in range(max(drafted) + 1):
        n = drafted.get(i, 0)
        if n == 0:
            break
        p = accepted.get(i, 0) / n
        raw.append(p)
        se.append(math.sqrt(max(p * (1 - p), 0.0) / n))
    mono = np.minimum.accumulate(np.asarray(raw))
    a = [float(f"{x:.6g}") for x in mono[:16]]
    text = (f"a_i = accepted_i/drafted_i over {drafted[0]} verifications (positions 1..{len(a)}): "
            + ", ".join(f"{x:.3f}±{s:.3f}" for x, s in zip(raw, se))
            + ("" if np.allclose(mono, raw) else " (running minimum applied)"))
    return a, text


def _median_int(values) -> int | None:
    v = [x for x in values if x is not None and x == x]
    return int(round(float(np.median(v)))) if v else None


def _common(runs: list[RunData], key: str, get) -> int:
    vals = {get(r.meta) for r in runs}
    if len(vals) != 1:
        raise InputError(None, key, f"runs disagree on {key} ({sorted(vals)}): fit runs of one budget/step cap together")
    return int(vals.pop())


# ---- fit ---------------------------------------------------------------------------------------
@dataclass
class WorkloadFit:
    profile: WorkloadProfile
    parts: dict[str, Part] = field(default_factory=dict)


def select_run_requests(run: RunData, ids) -> RunData:
    """``run`` with only the requests whose ``request_id`` (compared as text) is in ``ids``, and their steps.
    An id the run does not hold is an error (a typo would silently fit on less)."""
    want = {str(i) for i in ids}
    have = set(run.requests["request_id"].astype(str))
    missing = sorted(want - have)
    if missing:
        raise InputError(str(run.path / "requests.jsonl"), None,
                         f"request id(s) {', '.join(missing[:5])} not among the run's finished requests")
    reqs = run.requests[run.requests["request_id"].astype(str).isin(want)].reset_index(drop=True)
    steps = run.steps
    if not steps.empty:
        steps = steps[steps["request_id"].astype(str).isin(want)].reset_index(drop=True)
    return RunData(run.path, run.meta, steps, reqs)


def _runs_to_fit(paths: list[str | Path], requests: dict | None) -> tuple[list[RunData], str]:
    """The run directories ``paths``, read, with the request filter applied; and the filter's note for the method."""
    runs = [read_run(p) for p in paths]
    if requests is None:
        return runs, ""
    keep = {Path(k).resolve(): v for k, v in requests.items()}
    unknown = sorted(str(k) for k in keep if k not in {r.path.resolve() for r in runs})
    if unknown:
        raise InputError(None, "requests", f"request filter names run(s) not among the inputs: {', '.join(unknown)}")
    runs = [select_run_requests(r, keep[r.path.resolve()]) if r.path.resolve() in keep else r for r in runs]
    runs = [r for r in runs if len(r.requests)]
    if not runs:
        raise InputError(None, "requests", "the request filter leaves no request to fit on")
    return runs, f" (request filter: {len(keep)} run(s) restricted)"


def _from_prior(prior: WorkloadProfile | None, key: str, why: str) -> Part:
    """A field the runs cannot identify: the prior profile's (or the generic prior's), with why."""
    if prior is not None:
        return Part(None, False, f"{key}: from prior {prior.name} ({why})")
    return Part(None, False, f"{key}: generic prior ({why})")


def _step_token_parts(runs: list[RunData], cap: int, form: str, prior) -> tuple[dict[str, Part], dict[str, int]]:
    """``step_tokens.small`` / ``.base``, and the shortest step of each model's chains (the most steps the budget
    allows is ceil(B / shortest))."""
    parts: dict[str, Part] = {}
    lengths = {w: _step_lengths(runs, w) for w in ("small", "base")}
    for w in ("small", "base"):
        if len(lengths[w]):
            parts[f"step_tokens.{w}"] = Part(_length_dist(lengths[w], cap, form), True,
                                             f"step_tokens.{w}: {len(lengths[w])} steps, {form}")
        else:
            parts[f"step_tokens.{w}"] = _from_prior(prior, f"step_tokens.{w}", f"no {w}-model steps in the runs")
    shortest = {w: int(max(v.min(), 1)) if len(v) else 1 for w, v in lengths.items()}
    return parts, shortest


def _step_count_parts(runs: list[RunData], form: str, budget: int, shortest: dict[str, int], prior) -> dict[str, Part]:
    """``steps_per_request.base`` (vanilla base chains, else the mixed SpecReason chains), ``.small`` (vanilla small
    chains, when base ones exist) and ``verbosity`` (their means' ratio when both are identified)."""
    parts: dict[str, Part] = {}
    base_chains = _chains(runs, "base")
    mixed = False
    if base_chains.empty:
        base_chains, mixed = _chains(runs, "speculative"), True
    means: dict[str, float | None] = {}
    if base_chains.empty:
        parts["steps_per_request.base"] = _from_prior(prior, "steps_per_request.base", "no base or SpecReason chains")
        means["base"] = None
    else:
        d, how, means["base"] = _step_count_dist(base_chains, form, budget,
                                                 min(shortest.values()) if mixed else shortest["base"])
        src = "mixed SpecReason chains (no vanilla base runs)" if mixed else "vanilla base chains"
        parts["steps_per_request.base"] = Part(d, True, f"steps_per_request.base from {len(base_chains)} {src}: {how}")
    small_chains = _chains(runs, "small")
    if small_chains.empty or mixed:
        means["small"] = None
    else:
        d, how, means["small"] = _step_count_dist(small_chains, form, budget, shortest["small"])
        parts["steps_per_request.small"] = Part(d, True, f"steps_per_request.small from {len(small_chains)} vanilla "
                                                         f"small chains: {how}")
    if means.get("base") and means.get("small"):
        v = means["small"] / means["base"]
        parts["verbosity"] = Part(float(f"{v:.4g}"), True, f"verbosity = E[N_small]/E[N_base] = {v:.3f}")
    else:
        parts["verbosity"] = Part(prior.verbosity if prior else 1.0, False,
                                  "verbosity: " + (f"from prior {prior.name}" if prior else "1.0 prior")
                                  + " (needs step counts of both models from answered vanilla chains)")
    return parts


def _score_and_prompt_parts(runs: list[RunData], prior) -> dict[str, Part]:
    """``scores``, ``token_acceptance``, ``prompt_tokens`` and ``judge_template_tokens``."""
    parts: dict[str, Part] = {}
    scored = [r.steps.loc[r.steps["score"].notna(), "score"] for r in runs
              if spec_of(r.system).scores_steps and not r.steps.empty]
    scores = pd.concat(scored).to_numpy(dtype=float) if scored else np.array([])
    if len(scores):
        parts["scores"] = Part(score_pmf(scores), True, f"scores: {len(scores)} scored proposals, empirical pmf "
                                                        f"+ {SCORE_PSEUDO_COUNT} pseudo-count per score")
    else:
        parts["scores"] = _from_prior(prior, "scores", "no scored steps")

    acc = _acceptance(runs)
    parts["token_acceptance"] = (Part(acc[0], True, f"token_acceptance: {acc[1]}") if acc else
                                 _from_prior(prior, "token_acceptance", "no speculative-decoding runs"))

    prompts = [r.steps.loc[r.steps["step_index"] == 0, "context_tokens"] for r in runs if not r.steps.empty]
    p = _median_int(pd.concat(prompts)) if prompts else None
    parts["prompt_tokens"] = (Part(p, True, "prompt_tokens: median first-step context") if p else
                              _from_prior(prior, "prompt_tokens", "no steps"))
    judge = []
    for r in runs:
        if spec_of(r.system).scores_steps and not r.steps.empty:
            s = r.steps[r.steps["score"].notna()]
            judge.extend((s["score_new_tokens"] + s["score_cached_tokens"] - s["context_tokens"] - s["small_tokens"]).tolist())
    j = _median_int(judge)
    parts["judge_template_tokens"] = (Part(max(j, 1), True, "judge_template_tokens: median scoring prompt - context - step")
                                      if j is not None else _from_prior(prior, "judge_template_tokens", "no scoring calls"))
    return parts


def _generic_prior(cap: int) -> dict:
    """What a field takes when the runs cannot identify it and no prior profile is given."""
    return {"steps_per_request.base": {"kind": "geometric", "mean": 6, "min": 1, "max": 60},
            "step_tokens.small": {"kind": "lognormal", "median": min(24, cap), "sigma": 0.6, "min": 1, "max": cap},
            "step_tokens.base": {"kind": "lognormal", "median": min(24, cap), "sigma": 0.5, "min": 1, "max": cap},
            "scores": [0.1] * 10, "token_acceptance": acceptance_prior(), "prompt_tokens": 120,
            "judge_template_tokens": 70}


def _value(parts: dict[str, Part], key: str, prior: WorkloadProfile | None, cap: int):
    """A field's YAML value: fitted, else the prior profile's, else the generic prior's."""
    part = parts[key]
    if part.fitted or part.value is not None:
        return part.value
    if prior is not None:
        obj = prior
        for k in key.split("."):
            obj = getattr(obj, k)
        return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj
    return _generic_prior(cap)[key]


def _provenance(runs: list[RunData], parts: dict[str, Part], form: str, filtered: str, date: str | None,
                models: dict[str, str]) -> dict:
    """The profile's provenance: the runs, and which fields they fitted and which are priors (``method``)."""
    engines = sorted({f"{r.meta.get('engine')}-{r.meta.get('engine_version')}" for r in runs})
    hw = runs[0].meta.get("hardware", {})
    fitted = sorted(k for k, v in parts.items() if v.fitted)
    from_prior_keys = sorted(k for k, v in parts.items() if not v.fitted)
    method = (f"calibrate.fit.fit_workload_runs ({form}) on {len(runs)} run(s) ({', '.join(sorted({r.system for r in runs}))}), "
              f"{sum(len(r.requests) for r in runs)} requests{filtered}. FITTED: " + "; ".join(parts[k].how for k in fitted)
              + ". PRIOR: " + ("; ".join(parts[k].how for k in from_prior_keys) if from_prior_keys else "none")
              + ". answer_tokens 0 (no separate answer phase in the runner).")
    return {
        "kind": "fitted" if fitted else "prior",
        "source": ", ".join(repo_relative(r.path) for r in runs),
        "method": method,
        "date": date or _dt.date.today().isoformat(),
        "hardware": f"{hw.get('cpu_model') or hw.get('gpu_name') or '?'} (run.json hardware; token counts do not depend on it)",
        "engine": ", ".join(engines),
        "models": sorted(set(models.values())),
        "seed": ",".join(str(s) for s in sorted({r.meta.get("seed") for r in runs})),
    }


def fit_workload_from_runs(paths: list[str | Path], *, prior: WorkloadProfile | None = None, form: str = "empirical",
                           name: str | None = None, date: str | None = None,
                           requests: dict | None = None) -> WorkloadFit:
    """Fit the workload on the run directories ``paths``. ``requests`` (optional) restricts the fit to
    some requests: ``{run_path: ids}`` keeps, for each run listed, only the requests whose
    ``request_id`` is in ``ids`` (the runs not listed keep all theirs; a run left with no request is
    dropped). Held-out validation uses it to fit on one fold's requests only."""
    if form not in ("empirical", "parametric"):
        raise InputError(None, "--form", f"expected empirical or parametric (got {form!r})")
    if not paths:
        raise InputError(None, "inputs", "give at least one run directory")
    runs, filtered = _runs_to_fit(paths, requests)
    budget = _common(runs, "budget_tokens", lambda m: m["budget_tokens"])
    cap = _common(runs, "step_max_tokens", lambda m: m["sampling"]["step_max_tokens"])
    parts, shortest = _step_token_parts(runs, cap, form, prior)
    parts.update(_step_count_parts(runs, form, budget, shortest, prior))
    parts.update(_score_and_prompt_parts(runs, prior))

    def value(key: str):
        return _value(parts, key, prior, cap)

    models = {role: Path(str(info.get("path", "?"))).name for r in runs for role, info in (r.meta.get("models") or {}).items()}
    steps = {"base": value("steps_per_request.base")}
    if "steps_per_request.small" in parts:
        steps["small"] = parts["steps_per_request.small"].value
    data = {
        "name": name or f"runs_{models.get('base', models.get('small', 'model'))}",
        "dataset": ", ".join(sorted({str(r.meta.get("dataset")) for r in runs})),
        "base_model": models.get("base", models.get("small", "?")),
        "small_model": models.get("small", "?"),
        "provenance": _provenance(runs, parts, form, filtered, date, models),
        "prompt_tokens": value("prompt_tokens"),
        "answer_tokens": 0,
        "judge_template_tokens": value("judge_template_tokens"),
        "token_budget": budget,
        "max_step_tokens": cap,
        "steps_per_request": steps,
        "verbosity": parts["verbosity"].value,
        "step_tokens": {"small": value("step_tokens.small"), "base": value("step_tokens.base")},
        "scores": value("scores"),
        "token_acceptance": value("token_acceptance"),
    }
    try:
        profile = WorkloadProfile.model_validate(data)
    except Exception as e:  # a prior that does not fit this budget/step cap
        raise InputError(None, "workload", f"fitted profile is invalid: {str(e).splitlines()[-1]}") from None
    return WorkloadFit(profile, parts)


def workload_yaml(profile: WorkloadProfile, command: str) -> str:
    header = ("# Workload profile fitted from runner run directories (calibrate.fit.fit_workload_runs).\n"
              "# provenance.method names what the runs fitted and what is a prior. Regenerate (do not edit by hand):\n"
              f"#   {command}\n")
    return header + yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False,
                                   default_flow_style=None, width=120, allow_unicode=True)
