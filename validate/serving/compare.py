"""The whole validation: load the runs, optionally fit the step parameters on the fit levels, predict every
run with each model, and tabulate per request, per run and per decode step against the measurements."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError

from .client import client_steps, fit_client
from .fit import step_times, fit_step_params, step_aggregates
from .load import ServingRun, load_run
from .predict import acceptance_from_runs, measured_run_figures, predict_run, predicted_run_figures

log = logging.getLogger(__name__)


@dataclass
class ServingValidation:
    per_request: pd.DataFrame  # run, label, model, role, request rows
    per_run: pd.DataFrame
    steps: pd.DataFrame  # decode-only step times by batch size, measured vs predicted
    fit: dict | None
    headline: dict
    runs: list[ServingRun]


def error_figures(d: pd.DataFrame, pred: str, meas: str) -> dict:
    """n, median and p90 absolute percentage error and bias of ``pred`` against ``meas``."""
    from validate.metrics import summarize

    s = summarize(d[pred], d[meas])
    return {"n": s["n"], "median_ape": s["median_ape"], "p90_ape": s["p90_ape"], "bias": s["bias"]}


ACCEPTANCE_MODEL = "+acceptance-fit"  # suffix of the model that also predicts acceptance (speculative runs)


def _step_fit_model(runs: list[ServingRun], fit_levels: list[str], labels: set, params, setup) -> tuple:
    """The step parameters re-fitted on the plain runs ``fit_levels`` names: (parameters, fitted labels, fit record)."""
    unknown = [f for f in fit_levels if f not in labels]
    if unknown:
        raise InputError(None, "--fit-levels", f"no run labelled {unknown[0]!r} (have: {', '.join(sorted(labels))})")
    spec_named = [r.label for r in runs if r.gamma and r.label in fit_levels]
    if spec_named:
        raise InputError(None, "--fit-levels", f"{spec_named[0]} is a speculative run: its steps hold the draft's "
                                               "proposals too, not one pass of the base model (fit on plain runs)")
    # a level name picks the plain runs at that level (speculative steps are never step-fit data)
    fitted = {r.label for r in runs if not r.gamma and any(r.matches(f) for f in fit_levels)}
    if len(fitted) == len({r.label for r in runs}):
        raise InputError(None, "--fit-levels", "every run is a fit run: nothing held out to validate on "
                                               "(in-sample error is not validation)")
    # `vllm bench serve` runs: the steps a one-user run implies (validate.serving.client)
    fit_runs = [r for r in runs if r.label in fitted]
    if all(r.client_side for r in fit_runs):
        p2, fit = fit_client(fit_runs, params, setup)
        fit_steps = pd.concat([client_steps(r) for r in fit_runs], ignore_index=True)
    else:
        fit_steps = pd.concat([client_steps(r) for r in fit_runs], ignore_index=True)
        p2, fit = fit_step_params(fit_steps, params, setup)
    fit["levels"] = list(fit_levels)
    fit["runs"] = [str(r.path) for r in runs if r.label in fitted]
    fit["engines"] = sorted(set(fit_steps.engine))
    log.info("step fit on %d engine steps of %d runs (%s): %s%s", fit["steps"], len(fit["runs"]), ", ".join(fit_levels),
             ", ".join(f"{k} {v:.4g}" for k, v in fit["values"].items()),
             "".join(f"; {k} kept at the profile's value ({why})" for k, why in fit["kept_at_prior"].items()))
    return p2, fitted, fit


def _acceptance(runs: list[ServingRun], acceptance_levels: list[str], labels: set) -> tuple[dict, list[ServingRun]]:
    """Per-position acceptance measured on the speculative runs ``acceptance_levels`` names, one per (gamma, draft)
    of every speculative run: (acceptance, the runs it is measured on)."""
    unknown = [f for f in acceptance_levels if f not in labels]
    if unknown:
        raise InputError(None, "--acceptance-levels", f"no run labelled {unknown[0]!r} (have: {', '.join(sorted(labels))})")
    acc_runs = [r for r in runs if r.gamma and any(r.matches(f) for f in acceptance_levels)]
    if not acc_runs:
        raise InputError(None, "--acceptance-levels", "names no speculative run (serve-run --draft --gamma)")
    acceptance = acceptance_from_runs(acc_runs)
    missing = sorted({(r.gamma, r.draft) for r in runs if r.gamma} - set(acceptance))
    if missing:
        raise InputError(None, "--acceptance-levels", f"no acceptance run for gamma {missing[0][0]}"
                                                      + (f" with draft {missing[0][1]}" if missing[0][1] else ""))
    log.info("acceptance from %s: %s", ", ".join(acceptance_levels),
             "; ".join(f"gamma {g} {d}: a = {[round(x, 3) for x in v['a']]} ({v['iterations']} iterations)"
                       for (g, d), v in sorted(acceptance.items())))
    return acceptance, acc_runs


def _run_row(r: ServingRun, model: str, role: str, n: int, latency_mean_s: float) -> dict:
    return {"run": str(r.path), "label": r.label, "system": r.system, "level": r.level, "mode": r.mode,
            "users": r.users, "rate_per_s": r.rate_per_s, "model": model, "role": role, "n": n,
            "latency_mean_s": latency_mean_s}


def _replay_run(r: ServingRun, models: dict, setup, acceptance: dict | None) -> tuple[list, list, list]:
    """One run measured and predicted by every model: (per-request tables, per-run rows, decode-step tables)."""
    rows, steprows = [], []
    runrows = [{**_run_row(r, "measured", "measured", len(r.requests), float(r.requests.latency_s.mean())),
                **measured_run_figures(r)}]
    dec = r.steps[(r.steps.prefill_requests == 0) & (r.steps.engine == "base")]
    runrows[-1].update(_measured_tpot(r))
    for name, (p, fitted) in models.items():
        acc = None
        if name.endswith(ACCEPTANCE_MODEL):
            if not r.gamma:
                continue  # the same prediction as the model it extends
            acc = acceptance[(r.gamma, r.draft)]["a"]
        role = "fit (in-sample)" if r.label in fitted else "held out"
        log.debug("predicting %s with %s (%s)", r.path, name, role)
        t, res = predict_run(r, p, setup, acc)
        t.insert(0, "run", str(r.path))
        t.insert(1, "label", r.label)
        t.insert(2, "model", name)
        t.insert(3, "role", role)
        rows.append(t)
        runrows.append({**_run_row(r, name, role, len(t), float(t.pred_latency_s.mean())),
                        **predicted_run_figures(res, r.calls is None),
                        **{f"latency_{k}": v for k, v in error_figures(t, "pred_latency_s", "latency_s").items() if k != "n"},
                        **{f"ttft_{k}": v for k, v in error_figures(t, "pred_ttft_s", "ttft_s").items() if k != "n"},
                        **_tpot_figures(t)})
        if len(dec) and not r.gamma and not name.endswith(ACCEPTANCE_MODEL):
            # (a speculative step also runs the draft's proposals: its time is not one pass of the base model)
            pt = step_times(p, setup, step_aggregates(dec))
            steprows.append(pd.DataFrame({"run": str(r.path), "label": r.label, "model": name, "role": role,
                                          "batch": dec.running.to_numpy(), "measured_s": dec.duration_s.to_numpy(),
                                          "predicted_s": pt}))
    return rows, runrows, steprows


def _headline(per_request: pd.DataFrame, per_run: pd.DataFrame, runs: list[ServingRun], best: str,
              acceptance: dict | None) -> dict:
    """The held-out errors of the best model (``best``; speculative runs with its acceptance-fitted variant)."""
    held = per_request[(per_request.model == best) & (per_request.role == "held out")]
    headline = {"model": best, **{f"latency_{k}": v for k, v in error_figures(held, "pred_latency_s", "latency_s").items()},
                **{f"ttft_{k}": v for k, v in error_figures(held, "pred_ttft_s", "ttft_s").items() if k != "n"}}
    spec_runs = {r.label for r in runs if r.gamma}
    if spec_runs:
        name = best + ACCEPTANCE_MODEL if acceptance else best
        h = per_request[(per_request.model == name) & (per_request.role == "held out") & per_request.label.isin(spec_runs)]
        if len(h):
            headline["speculative"] = {"model": name, **{f"latency_{k}": v for k, v in error_figures(h, "pred_latency_s", "latency_s").items()},
                                       **{f"tpot_{k}": v for k, v in error_figures(h.dropna(subset=["tpot_s"]), "pred_tpot_s", "tpot_s").items() if k != "n"},
                                       **{f"accept_len_{k}": v for k, v in error_figures(h.dropna(subset=["accept_len", "pred_accept_len"]), "pred_accept_len", "accept_len").items() if k != "n"}}
    itl = _itl_errors(per_run, spec_runs, best + ACCEPTANCE_MODEL if acceptance else best, best)
    if itl:
        headline["itl"] = itl
    bench = bench_errors(per_run, {r.label for r in runs if r.client_side}, best)
    if bench:
        headline["bench"] = bench
    if acceptance:
        headline["acceptance"] = {f"{g}" + (f" {d}" if d else ""): v for (g, d), v in sorted(acceptance.items())}
    return headline


def validate_serving(run_dirs: list[str | Path], profile_path: str | Path, fit_levels: list[str] | None = None,
                     acceptance_levels: list[str] | None = None, allow_implausible: bool = False) -> ServingValidation:
    """Replay every run with the profile, the profile with its step parameters re-fitted on ``fit_levels``,
    and -- for speculative runs, with ``acceptance_levels`` -- the best of those with per-position acceptance
    measured on the named runs only (each gamma from its own runs) instead of each request's own. A profile with a
    parameter outside its physical range is refused as ``validate runs`` refuses it, unless ``allow_implausible``."""
    from simulator.cost.cost_profile import load_profile
    from validate.replay import setup_from_profile
    from validate.validation import check_plausible

    if not run_dirs:
        raise InputError(None, "RUNDIR", "give at least one serve-run directory")
    profile = load_profile(profile_path)
    for note in check_plausible(profile, str(profile_path), "", allow_implausible):
        log.warning("WARNING: %s", note)
    setup = setup_from_profile(profile)
    runs = [load_run(p) for p in run_dirs]
    params = profile.params(setup.hardware)
    labels = {r.label for r in runs} | {r.level for r in runs}
    models = {"profile": (params, set())}
    fit = None
    acceptance = None
    if fit_levels:
        p2, fitted, fit = _step_fit_model(runs, fit_levels, labels, params, setup)
        models["profile+step-fit"] = (p2, fitted)
    if acceptance_levels:
        acceptance, acc_runs = _acceptance(runs, acceptance_levels, labels)
        base_name = "profile+step-fit" if fit else "profile"
        p_best, fitted_best = models[base_name]
        models[base_name + ACCEPTANCE_MODEL] = (p_best, fitted_best | {r.label for r in acc_runs})
    log.info("replaying %d runs (%d requests) with %s", len(runs), sum(len(r.requests) for r in runs), ", ".join(models))
    rows, runrows, steprows = [], [], []
    for r in runs:
        a, b, c = _replay_run(r, models, setup, acceptance)
        rows += a
        runrows += b
        steprows += c
    per_request = pd.concat(rows, ignore_index=True)
    best = "profile+step-fit" if fit else "profile"
    headline = _headline(per_request, pd.DataFrame(runrows), runs, best, acceptance)
    return ServingValidation(per_request, pd.DataFrame(runrows), pd.concat(steprows, ignore_index=True) if steprows
                             else pd.DataFrame(), fit, headline, runs)


def _itl_errors(per_run: pd.DataFrame, spec_labels: set, spec_model: str, plain_model: str) -> dict:
    """Held-out one-engine runs: median over runs of |pred/meas - 1| of the run's mean and p99 ITL (speculative
    runs with ``spec_model``, plain ones with ``plain_model``), and the runs' median bias."""
    if "itl_mean_ms" not in per_run:
        return {}
    meas = per_run[per_run.model == "measured"].set_index("run")
    pred = per_run[(per_run.role == "held out") & per_run.itl_mean_ms.notna()]
    pred = pred[pred.model == np.where(pred.label.isin(spec_labels), spec_model, plain_model)]
    pred = pred[pred.run.isin(meas.index[meas.itl_mean_ms.notna()])]
    if not len(pred):
        return {}
    out = {"model": f"{plain_model} / {spec_model}", "runs": int(len(pred))}
    for k in ("itl_mean_ms", "itl_p99_ms"):
        rel = pred[k].to_numpy() / meas.loc[pred.run, k].to_numpy() - 1.0
        out[f"{k[:-3]}_median_ape"] = float(np.median(np.abs(rel)))
        out[f"{k[:-3]}_bias"] = float(np.median(rel))
    return out


BENCH_FIGURES = (("ttft_p50_s", "TTFT p50"), ("tpot_median_s", "TPOT p50"), ("itl_p50_ms", "ITL p50"),
                 ("itl_p99_ms", "ITL p99"), ("output_tok_per_s", "output tok/s"))


def bench_errors(per_run: pd.DataFrame, bench_labels: set, model: str) -> dict:
    """`vllm bench serve` runs held out under ``model``: per figure of vLLM's summary (TTFT p50, TPOT p50, ITL
    p50/p99, output throughput), the median over runs of |pred/meas - 1| and the median signed error."""
    if not bench_labels or "itl_p50_ms" not in per_run:
        return {}
    meas = per_run[per_run.model == "measured"].set_index("run")
    pred = per_run[(per_run.model == model) & (per_run.role == "held out") & per_run.label.isin(bench_labels)]
    if not len(pred):
        return {}
    out = {"model": model, "runs": int(len(pred))}
    for k, _ in BENCH_FIGURES:
        rel = pred[k].to_numpy(float) / meas.loc[pred.run, k].to_numpy(float) - 1.0
        rel = rel[np.isfinite(rel)]
        out[f"{k}_median_ape"] = float(np.median(np.abs(rel))) if len(rel) else float("nan")
        out[f"{k}_bias"] = float(np.median(rel)) if len(rel) else float("nan")
    return out


def _tpot_figures(t: pd.DataFrame) -> dict:
    d = t.dropna(subset=["tpot_s"])
    out = {"tpot_median_s": float(d.pred_tpot_s.median()) if len(d) else float("nan")}
    out.update({f"tpot_{k}": v for k, v in error_figures(d, "pred_tpot_s", "tpot_s").items() if k != "n"} if len(d) else {})
    if "pred_accept_len" in t:
        out["accept_len_mean"] = float(t.pred_accept_len.mean())  # requests without a verification: skipped
    return out


def _measured_tpot(r: ServingRun) -> dict:
    """Measured median TPOT of a run and, speculative runs, its mean acceptance length (per_run's measured row)."""
    from .predict import accept_lengths, measured_spec_cum

    req = r.requests
    n1 = (req.output_tokens - 1).where(req.output_tokens > 1)
    out = {"tpot_median_s": float(((req.latency_s - req.ttft_s) / n1).median())}
    if r.gamma and r.client_spec is not None:
        out["accept_len_mean"] = 1.0 + float(np.sum(r.client_spec[1]))
    elif r.gamma:
        out["accept_len_mean"] = float(np.nanmean(accept_lengths(measured_spec_cum(r, reconcile=False), req.request_id)))
    return out



def speedup_table(v: ServingValidation, baseline: str = "vanilla-base") -> pd.DataFrame:
    """Per (system, level, model, repeat): mean latency of ``baseline`` at the same level and repeat
    folder over the system's (measured, and predicted by each model); empty without both."""
    pr = v.per_run.assign(rep=[str(Path(r).parent.parent) for r in v.per_run.run])
    base = pr[pr.system == baseline].set_index(["rep", "level", "model"])["latency_mean_s"]
    rows = []
    for _, r in pr[pr.system != baseline].iterrows():
        key = (r.rep, r.level, r.model)
        if key in base.index:
            rows.append({"system": r.system, "baseline": baseline, "level": r.level, "mode": r["mode"], "users": r.users,
                         "model": r.model, "rep": r.rep, "speedup": float(base.loc[key]) / r.latency_mean_s})
    return pd.DataFrame(rows)

