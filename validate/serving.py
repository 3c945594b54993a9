"""Serving-model validation: measured concurrent runs (``specsim calibrate serve-run``) against
the serving simulator (``simulator.serving``), request by request and run by run.

Prediction = trace replay through the serving simulator: the same arrivals (open loop: the
measured arrival instants via ``ReplayArrivals``; closed loop: the same N users with no think
time, so the simulator decides when each request is sent, as the real users did) and each
request's plan built from its measured token counts (one base-engine call: prompt tokens not
served from the prefix cache as new tokens, generated tokens as output). Only time is predicted.

Compared per request: latency and TTFT (median / p90 APE, bias = median signed error); per
run: throughput (requests/s over first arrival -> last completion, output tokens/s) and the
time-weighted batch size (engine steps weighted by their duration; the simulator's engine
timeline likewise).

Held-out discipline: two predictions are made for every run,

- ``profile``: the cost profile as given (fitted on single-request runs only), so every run is
  out of sample;
- ``profile+step-fit`` (with ``fit_levels``): ``mem_efficiency``, ``compute_efficiency`` and
  ``step_overhead_s`` re-fitted by robust least squares on the *engine steps* of the fit levels
  only (each step's measured wall time against ``T_pass`` of its batch aggregates); the runs of
  those levels are in-sample and reported as such, never as validation.

The headline (and ``--max-median-ape``) is the held-out median APE of request latency.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from simulator.errors import InputError

FIT_PARAMS = ("mem_efficiency", "compute_efficiency", "step_overhead_s", "seq_overhead_s")
SEQ_OVERHEAD_START = 1e-3  # start for a profile fitted before seq_overhead_s existed (value 0)
MEMORY_FRACTION = (0.3, 0.5)  # scenarios/cpu-smollm2.yaml's split; KV never binds at these batch sizes


@dataclass
class ServingRun:
    path: Path
    label: str  # the arrival level (closed-N | poisson-R), prefixed "SYSTEM/" for whole-system runs
    mode: str  # closed | poisson
    users: int  # closed loop: N; open loop: 0
    rate_per_s: float  # open loop: offered rate; closed: nan
    requests: pd.DataFrame
    steps: pd.DataFrame  # engine steps; column ``engine``: base (serve_steps.jsonl) or small (serve_small_steps.jsonl)
    meta: dict
    level: str = ""  # the arrival level alone
    system: str = "vanilla-base"
    calls: pd.DataFrame | None = None  # whole-system runs (serve-systems): every engine call, in order

    def matches(self, name: str) -> bool:
        """``--fit-levels`` names a level (every system's run at it) or one system's run (SYSTEM/LEVEL)."""
        return name in (self.label, self.level)


def load_run(path: str | Path) -> ServingRun:
    from calibrate.serving_run import load_serving_run

    d = load_serving_run(path)
    meta = d["run"][0]
    arr = meta["options"].get("arrivals")
    where = str(Path(path) / "run.json")
    if not isinstance(arr, dict) or arr.get("mode") not in ("closed", "poisson"):
        raise InputError(where, "options.arrivals", "expected {mode: closed|poisson, ...}")
    req = pd.DataFrame(d["serve_request"]).sort_values("request_id").reset_index(drop=True)
    if list(req.request_id) != list(range(len(req))):
        raise InputError(str(Path(path) / "serve_requests.jsonl"), "request_id", "expected request ids 0..n-1, once each")
    st = pd.DataFrame(d["serve_step"]).assign(engine="base")
    if d.get("serve_small_step"):
        st = pd.concat([st, pd.DataFrame(d["serve_small_step"]).assign(engine="small")], ignore_index=True)
    mode = arr["mode"]
    users = int(arr.get("users", 0)) if mode == "closed" else 0
    rate = float(arr.get("rate_per_s", np.nan)) if mode == "poisson" else np.nan
    level = meta["options"].get("label", Path(path).name)
    calls = None
    if d.get("serve_call"):
        calls = pd.DataFrame(d["serve_call"]).sort_values(["request_id", "call_index"]).reset_index(drop=True)
        missing = sorted(set(req.request_id) - set(calls.request_id))
        if missing:
            raise InputError(str(Path(path) / "serve_calls.jsonl"), "request_id", f"request {missing[0]} has no calls")
    system = meta.get("system") or "vanilla-base"
    label = f"{system}/{level}" if calls is not None else level
    return ServingRun(Path(path), label, mode, users, rate, req, st, meta, level, system, calls)


# ---- prediction -----------------------------------------------------------------------------------
def replay_plans(req: pd.DataFrame):
    """One base-engine call per measured request (its own token counts)."""
    from simulator.request_model import BASE, Call, RequestPlan

    plans = []
    for r in req.itertuples():
        new = int(r.prompt_tokens - r.cached_tokens)
        # a cross-request prefix hit cannot be represented (the simulator caches per request): count it as new
        call = Call(BASE, int(r.prompt_tokens) if r.cached_tokens else new, 0, int(r.output_tokens))
        plans.append(RequestPlan([call], int(r.output_tokens), int(r.output_tokens), 1, 0, "length"))
    return plans


def replay_system_plans(calls: pd.DataFrame, requests: pd.DataFrame):
    """Whole-system runs: each request's measured calls in order, on their engines, with the measured
    prompt / cached / output tokens (block-granular prefix-cache hits included: they are measured)."""
    from simulator.request_model import BASE, SMALL, Call, RequestPlan

    plans = []
    by_req = {rid: d for rid, d in calls.groupby("request_id", sort=True)}
    for r in requests.itertuples():
        d = by_req[r.request_id]
        # a hit on a request's first call of an engine (another request's prompt blocks) cannot be held by the
        # simulator, which caches a request's prefix for its own calls only: that call prefills its whole prompt
        cs = [Call(SMALL if c.engine == "small" else BASE, int(c.prompt_tokens - c.cached_tokens), int(c.cached_tokens),
                   int(c.output_tokens)) for c in d.itertuples()]
        gen = d[d.op == "generate"]
        plans.append(RequestPlan(cs, int(gen.output_tokens.sum()), int(d.output_tokens.sum()), len(gen),
                                 int((gen.engine == "small").sum()), "replay"))
    return plans


def _workload():
    from simulator.workload import WorkloadProfile

    # only the token bounds matter to a replica serving replayed plans
    return WorkloadProfile.model_validate({
        "name": "serving-replay", "dataset": "replay", "base_model": "smollm2-135m", "small_model": "smollm2-135m-cut6",
        "provenance": {"kind": "prior", "source": "validate/serving.py (replayed plans)"},
        "prompt_tokens": 1, "answer_tokens": 0, "judge_template_tokens": 1, "token_budget": 4096, "max_step_tokens": 4096,
        "steps_per_request": {"base": {"kind": "geometric", "mean": 1, "min": 1, "max": 1}}, "verbosity": 1.0,
        "step_tokens": {"small": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64},
                        "base": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64}},
        "scores": [0.1] * 10, "token_acceptance": [0.5]})


def deployments(params, setup) -> dict:
    from simulator.cost_model import Deployment

    return {role: Deployment(m, setup.hardware, setup.tp, params) for role, m in setup.models.items()}


def predict_run(run: ServingRun, params, setup):
    """(per-request table: measured and predicted, serving result of the simulator)."""
    from simulator.serving.arrivals import ClosedLoopUsers, ReplayArrivals
    from simulator.serving.replica import simulate_serving
    from simulator.systems import SystemConfig

    if run.calls is not None:
        plans = replay_system_plans(run.calls, run.requests)
        cfg = SystemConfig(system="specreason", threshold=min(10, int(round(run.meta.get("threshold") or 0)))) \
            if run.system == "specreason" else SystemConfig(system=run.system)
    else:
        plans, cfg = replay_plans(run.requests), SystemConfig(system="vanilla-base")
    if run.mode == "closed":
        arrivals = ClosedLoopUsers(run.users, 0.0)
    else:
        arrivals = ReplayArrivals(tuple(float(t) for t in run.requests.arrival_s), run.label)
    res = simulate_serving(cfg, deployments(params, setup), _workload(), arrivals,
                           len(plans), seed=0, memory_fraction=MEMORY_FRACTION, plans=plans)
    sim = res.requests.set_index("request")
    t = run.requests[["request_id", "prompt_tokens", "output_tokens", "latency_s", "ttft_s"]].copy()
    t["pred_latency_s"] = sim.loc[t.request_id, "latency_s"].to_numpy()
    t["pred_ttft_s"] = sim.loc[t.request_id, "ttft_s"].to_numpy()
    return t, res


def measured_run_figures(run: ServingRun) -> dict:
    r, s = run.requests, run.steps[run.steps.engine == "base"]
    span = float(r.done_s.max() - r.arrival_s.min())
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(s.running, weights=s.duration_s)), "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median())}


def predicted_run_figures(res) -> dict:
    r = res.requests
    span = float(r.done_at.max() - r.arrival_at.min())
    tl = res.timeline[res.timeline.engine == "base"]
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(tl.batch, weights=tl.duration_s)), "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median())}


# ---- the step fit (held-out levels only) -----------------------------------------------------------
def step_aggregates(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per step: N = sum n, KV = sum (c+n), A = sum n (c+(n+1)/2), L = requests (one logit row each)."""
    n = [np.asarray(x, float) for x in steps.new_tokens]
    c = [np.asarray(x, float) for x in steps.context_tokens]
    eng = steps["engine"].to_numpy() if "engine" in steps else np.full(len(steps), "base")
    return {"N": np.array([a.sum() for a in n]), "KV": np.array([(a + b).sum() for a, b in zip(n, c)]),
            "A": np.array([(a * (b + (a + 1.0) / 2.0)).sum() for a, b in zip(n, c)]),
            "L": steps.running.to_numpy(float), "t": steps.duration_s.to_numpy(float), "engine": eng}


def _step_times(params, setup, agg) -> np.ndarray:
    """Each step's pass time on its own engine's deployment (base or small model)."""
    from simulator.serving.pass_cost import PassCost

    deps = deployments(params, setup)
    out = np.empty(len(agg["N"]))
    for role in np.unique(agg["engine"]):
        m = agg["engine"] == role
        out[m] = PassCost(deps[role]).times(agg["N"][m], agg["KV"][m], agg["A"][m], agg["L"][m])
    return out


def fit_step_params(steps: pd.DataFrame, params, setup) -> tuple[object, dict]:
    """Re-fit ``FIT_PARAMS`` on measured engine-step times with the cost model's one fitter
    (``calibrate.fit_cost.fit_log_times``: soft-L1 on log time, bounds, identifiability; a parameter the
    steps cannot pin stays at the profile's value, with the reason).

    Returns (new CostParams, fit facts: values, relative stderrs, kept-at-prior reasons, residual figures)."""
    from calibrate.fit_cost import PARAM_NAMES, fit_log_times

    agg = step_aggregates(steps)
    y = np.log(agg["t"])
    start = {n: float(getattr(params, n)) for n in PARAM_NAMES}
    start["seq_overhead_s"] = start["seq_overhead_s"] or SEQ_OVERHEAD_START
    f = fit_log_times(lambda p: _step_times(p, setup, agg), y, start, FIT_PARAMS)
    new = replace(params, **{k: float(f.values[k]) for k in FIT_PARAMS})
    facts = {"steps": len(y), "values": {k: float(f"{f.values[k]:.4g}") for k in FIT_PARAMS},
             "rel_stderr": {k: float(f"{f.stderr[k] / f.values[k]:.3g}") if k in f.stderr else float("inf") for k in FIT_PARAMS},
             "kept_at_prior": {k: f.fixed[k] for k in FIT_PARAMS if k in f.fixed and k not in f.zeroed},
             "zeroed": {k: f.fixed[k] for k in f.zeroed},
             "prior_dominated": {k: round(v, 3) for k, v in f.prior_dominated.items()},
             "median_abs_log_residual": float(np.median(np.abs(f.log_residual)))}
    return new, facts


# ---- the whole validation ---------------------------------------------------------------------------
@dataclass
class ServingValidation:
    per_request: pd.DataFrame  # run, label, model, role, request rows
    per_run: pd.DataFrame
    steps: pd.DataFrame  # decode-only step times by batch size, measured vs predicted
    fit: dict | None
    headline: dict
    runs: list[ServingRun]


def _errors(d: pd.DataFrame, pred: str, meas: str) -> dict:
    from validate.metrics import summarize

    s = summarize(d[pred], d[meas])
    return {"n": s["n"], "median_ape": s["median_ape"], "p90_ape": s["p90_ape"], "bias": s["bias"]}


def validate_serving(run_dirs: list[str | Path], profile_path: str | Path, fit_levels: list[str] | None = None) -> ServingValidation:
    from simulator.cost_model import CostProfile
    from simulator.loading import load_yaml_model
    from validate.replay import setup_from_profile

    if not run_dirs:
        raise InputError(None, "RUNDIR", "give at least one serve-run directory")
    profile = load_yaml_model(profile_path, CostProfile)
    setup = setup_from_profile(profile)
    runs = [load_run(p) for p in run_dirs]
    params = profile.params(setup.hardware)
    labels = {r.label for r in runs} | {r.level for r in runs}
    models = {"profile": (params, set())}
    fit = None
    if fit_levels:
        unknown = [f for f in fit_levels if f not in labels]
        if unknown:
            raise InputError(None, "--fit-levels", f"no run labelled {unknown[0]!r} (have: {', '.join(sorted(labels))})")
        fitted = {r.label for r in runs if any(r.matches(f) for f in fit_levels)}
        if len(fitted) == len({r.label for r in runs}):
            raise InputError(None, "--fit-levels", "every run is a fit run: nothing held out to validate on "
                                                   "(in-sample error is not validation)")
        fit_steps = pd.concat([r.steps for r in runs if r.label in fitted], ignore_index=True)
        p2, fit = fit_step_params(fit_steps, params, setup)
        fit["levels"] = list(fit_levels)
        fit["runs"] = [str(r.path) for r in runs if r.label in fitted]
        fit["engines"] = sorted(set(fit_steps.engine))
        models["profile+step-fit"] = (p2, fitted)
    rows, runrows, steprows = [], [], []
    for r in runs:
        meas = measured_run_figures(r)
        runrows.append({"run": str(r.path), "label": r.label, "system": r.system, "level": r.level, "mode": r.mode,
                        "users": r.users, "rate_per_s": r.rate_per_s, "model": "measured", "role": "measured",
                        "n": len(r.requests), "latency_mean_s": float(r.requests.latency_s.mean()), **meas})
        dec = r.steps[(r.steps.prefill_requests == 0) & (r.steps.engine == "base")]
        for name, (p, fitted) in models.items():
            role = "fit (in-sample)" if r.label in fitted else "held out"
            t, res = predict_run(r, p, setup)
            t.insert(0, "run", str(r.path))
            t.insert(1, "label", r.label)
            t.insert(2, "model", name)
            t.insert(3, "role", role)
            rows.append(t)
            runrows.append({"run": str(r.path), "label": r.label, "system": r.system, "level": r.level, "mode": r.mode,
                            "users": r.users, "rate_per_s": r.rate_per_s, "model": name, "role": role, "n": len(t),
                            "latency_mean_s": float(t.pred_latency_s.mean()), **predicted_run_figures(res),
                            **{f"latency_{k}": v for k, v in _errors(t, "pred_latency_s", "latency_s").items() if k != "n"},
                            **{f"ttft_{k}": v for k, v in _errors(t, "pred_ttft_s", "ttft_s").items() if k != "n"}})
            if len(dec):
                pt = _step_times(p, setup, step_aggregates(dec))
                steprows.append(pd.DataFrame({"run": str(r.path), "label": r.label, "model": name, "role": role,
                                              "batch": dec.running.to_numpy(), "measured_s": dec.duration_s.to_numpy(),
                                              "predicted_s": pt}))
    per_request = pd.concat(rows, ignore_index=True)
    best = "profile+step-fit" if fit else "profile"
    held = per_request[(per_request.model == best) & (per_request.role == "held out")]
    headline = {"model": best, **{f"latency_{k}": v for k, v in _errors(held, "pred_latency_s", "latency_s").items()},
                **{f"ttft_{k}": v for k, v in _errors(held, "pred_ttft_s", "ttft_s").items() if k != "n"}}
    return ServingValidation(per_request, pd.DataFrame(runrows), pd.concat(steprows, ignore_index=True) if steprows
                             else pd.DataFrame(), fit, headline, runs)


# ---- report -------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _spct(x: float) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:+.1f}%"


def _level_key(label: str) -> tuple:
    system, _, level = label.rpartition("/")
    kind, _, v = level.partition("-")
    return (system, kind != "closed", float(v) if v.replace(".", "", 1).isdigit() else 0.0)


def plots(v: ServingValidation, out: Path) -> list[str]:
    from validate.report import _plt, _save_png

    plt = _plt()
    pr = v.per_run
    names = []
    models = [m for m in pr.model.unique() if m != "measured"]
    style = {"measured": dict(marker="o", color="k", ls="none", ms=7), "profile": dict(marker="s", ls="--", color="tab:blue"),
             "profile+step-fit": dict(marker="^", ls="-", color="tab:orange")}
    systems = list(dict.fromkeys(pr.system))
    colors = dict(zip(systems, ("tab:blue", "tab:green", "tab:red", "tab:purple")))
    for fname, cols, ylabels in (
        ("latency_vs_concurrency.png", ("latency_p50_s", "ttft_p50_s"), ("median latency (s)", "median TTFT (s)")),
        ("throughput_vs_concurrency.png", ("throughput_rps", "output_tok_per_s"), ("throughput (requests/s)", "output tokens/s")),
    ):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, col, yl in zip(axes, cols, ylabels):
            for sysname in systems:
                ps = pr[pr.system == sysname]
                closed, pois = ps[ps["mode"] == "closed"], ps[ps["mode"] == "poisson"]
                tag = f"{sysname} " if len(systems) > 1 else ""
                for m in ["measured", *models]:
                    st = dict(style.get(m, {}))
                    if len(systems) > 1:
                        st["color"] = colors[sysname] if m != "measured" else st.get("color", "k")
                        if m == "measured":
                            st.update(mfc=colors[sysname], color=colors[sysname])
                    d = closed[closed.model == m].groupby("users")[col].median()
                    if len(d):
                        ax.plot(d.index, d.values, label=f"{tag}{m} (closed loop)", **st)
                    dp = pois[pois.model == m]
                    if len(dp):
                        g = dp.groupby("rate_per_s")
                        # open loop: placed at the measured time-weighted batch size of the run
                        xb = pois[pois.model == "measured"].groupby("rate_per_s")["batch_mean"].median()
                        ax.plot(xb.loc[list(g.groups)].values, g[col].median().values, ls="none", mfc="none",
                                marker=st.get("marker", "x"), color=st.get("color", "grey"),
                                ms=9, label=f"{tag}{m} (Poisson, at measured mean batch)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("closed-loop users / Poisson: measured mean batch")
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=6)
        _save_png(fig, out / fname)
        plt.close(fig)
        names.append(fname)
    sp = speedup_table(v)
    if len(sp):
        fig, ax = plt.subplots(figsize=(5.5, 4.2))
        for m in ["measured", *models]:
            d = sp[(sp.model == m) & (sp["mode"] == "closed")].groupby("users")["speedup"].median()
            if len(d):
                ax.plot(d.index, d.values, label=m, **style.get(m, {}))
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("closed-loop users")
        ax.set_ylabel(f"speedup over {sp.baseline.iloc[0]} (mean latency ratio)")
        ax.set_title(f"{sp.system.iloc[0]} under load")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        _save_png(fig, out / "speedup_vs_concurrency.png")
        plt.close(fig)
        names.append("speedup_vs_concurrency.png")
    if len(v.steps):
        fig, ax = plt.subplots(figsize=(5.5, 4.2))
        for m in ["measured", *models]:
            d = v.steps[v.steps.model == (models[0] if m == "measured" else m)]
            g = d.groupby("batch")["measured_s" if m == "measured" else "predicted_s"].median() * 1000
            ax.plot(g.index, g.values, label=m, **style.get(m, {}))
        ax.set_xlabel("batch size (decode-only steps)")
        ax.set_ylabel("median step time (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        _save_png(fig, out / "step_time_vs_batch.png")
        plt.close(fig)
        names.append("step_time_vs_batch.png")
    return names


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


def write_report(v: ServingValidation, out: str | Path, command: str, profile_path: str | Path, bar: float | None) -> Path:
    from simulator.loading import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figs = plots(v, out)
    write_atomic(out / "per_request.csv", v.per_request.to_csv(index=False))
    write_atomic(out / "per_run.csv", v.per_run.to_csv(index=False))
    h = v.headline
    L = ["# Serving-model validation against real vLLM (concurrent requests)", "",
         f"Command: `{command}`", "", f"Cost profile: `{profile_path}`", ""]
    L += [f"**Headline** ({h['model']}, held-out requests only, n={h['latency_n']}): latency median APE "
          f"{_pct(h['latency_median_ape'])}, p90 {_pct(h['latency_p90_ape'])}, bias {_spct(h['latency_bias'])}; "
          f"TTFT median APE {_pct(h['ttft_median_ape'])}, p90 {_pct(h['ttft_p90_ape'])}, bias {_spct(h['ttft_bias'])}."
          + (f" Bar: {_pct(bar)}." if bar is not None else ""), ""]
    if v.fit:
        f = v.fit
        L += ["## Step fit (batch scaling)", "",
              f"Fitted on the {f['steps']} engine steps of levels {', '.join(f['levels'])} only; those runs are "
              "marked *fit (in-sample)* below and excluded from the headline.", "",
              "| parameter | value | relative stderr |", "|---|---|---|"]
        L += [f"| `{k}` | {f['values'][k]:.4g} | "
              + (f"{f['rel_stderr'][k]:.3g} |" if np.isfinite(f["rel_stderr"][k]) else
                 f"kept at the profile's value: {f['kept_at_prior'].get(k, 'not pinned')} |")
              for k in FIT_PARAMS]
        L += ["", f"Median |log residual| of the fit steps: {f['median_abs_log_residual']:.3f}.", ""]
    L += ["## Per run", "",
          "| run | model | role | n | median latency meas/pred (s) | latency median APE | p90 APE | bias | "
          "TTFT median APE | TTFT bias | req/s meas/pred | out tok/s meas/pred | mean batch meas/pred |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pr = v.per_run
    for run in sorted(pr.run.unique(), key=lambda r: (_level_key(pr[pr.run == r].label.iloc[0]), r)):
        d = pr[pr.run == run]
        m = d[d.model == "measured"].iloc[0]
        for _, p in d[d.model != "measured"].iterrows():
            folder = Path(run).parents[1].name if "/" in p.label else Path(run).parent.name
            L.append(f"| {folder}/{p.label} | {p.model} | {p.role} | {p.n} | "
                     f"{m.latency_p50_s:.2f} / {p.latency_p50_s:.2f} | {_pct(p.latency_median_ape)} | "
                     f"{_pct(p.latency_p90_ape)} | {_spct(p.latency_bias)} | {_pct(p.ttft_median_ape)} | "
                     f"{_spct(p.ttft_bias)} | {m.throughput_rps:.3f} / {p.throughput_rps:.3f} | "
                     f"{m.output_tok_per_s:.1f} / {p.output_tok_per_s:.1f} | {m.batch_mean:.2f} / {p.batch_mean:.2f} |")
    # per level, held out, all repeats pooled
    L += ["", "## Per concurrency level (held-out requests, repeats pooled)", "",
          "| level | model | n | latency median APE | p90 APE | bias | TTFT median APE | TTFT bias |", "|---|---|---|---|---|---|---|---|"]
    q = v.per_request
    for (label, model), d in sorted(q[q.role == "held out"].groupby(["label", "model"]), key=lambda kv: (_level_key(kv[0][0]), kv[0][1])):
        e, t = _errors(d, "pred_latency_s", "latency_s"), _errors(d, "pred_ttft_s", "ttft_s")
        L.append(f"| {label} | {model} | {e['n']} | {_pct(e['median_ape'])} | {_pct(e['p90_ape'])} | {_spct(e['bias'])} | "
                 f"{_pct(t['median_ape'])} | {_spct(t['bias'])} |")
    sp = speedup_table(v)
    if len(sp):
        L += ["", f"## Speedup of {sp.system.iloc[0]} over {sp.baseline.iloc[0]} under load (mean latency ratio, "
              "median over repeats)", "", "| level | measured | " + " | ".join(m for m in v.per_run.model.unique()
                                                                     if m != "measured") + " |",
              "|---|---|" + "---|" * (v.per_run.model.nunique() - 1)]
        piv = sp.groupby(["level", "model"])["speedup"].median().unstack("model")
        for lv in sorted(piv.index, key=_level_key):
            L.append(f"| {lv} | " + " | ".join(f"{piv.loc[lv, m]:.3f}" if m in piv and np.isfinite(piv.loc[lv, m]) else "n/a"
                                               for m in ["measured", *[m for m in v.per_run.model.unique() if m != "measured"]])
                     + " |")
        write_atomic(out / "speedup.csv", sp.to_csv(index=False))
    L += ["", "## Figures", ""] + [f"![{n}]({n})" for n in figs]
    L += ["", "## Provenance", "", "| run | created | engine | hardware | loadavg before → after | wall s | run command |",
          "|---|---|---|---|---|---|---|"]
    for r in v.runs:
        o = r.meta["options"]
        L.append(f"| {r.path} | {r.meta['created_at']} | {r.meta['engine']} {r.meta['engine_version']} | "
                 f"{r.meta['hardware'].get('cpu_model')} x{r.meta['hardware'].get('cpu_count')} | "
                 f"{o.get('loadavg_before', [None])[:1]} → {o.get('loadavg_after', [None])[:1]} | {o.get('wall_s')} | "
                 f"`{r.meta['command']}` |")
    r0 = v.runs[0]
    models = ", ".join(f"{role} {Path(m.get('path', '?')).name} ({m.get('num_layers')} layers)" for role, m in r0.meta["models"].items())
    if any(r.calls is not None for r in v.runs):
        L += ["", f"Models: {models}; dtype {r0.meta['dtype']}, seed {r0.meta['seed']}, greedy. Whole-system runs "
              "(`specsim calibrate serve-systems`): every request runs the runner's orchestrator (steps up to a blank "
              "line, scoring, acceptance, budget checked between steps) with the small and base engines colocated; "
              "each request's measured calls are replayed through the serving simulator.", ""]
    else:
        L += ["", f"Models: {models}; dtype {r0.meta['dtype']}, seed {r0.meta['seed']}, greedy, EOS ignored, output "
              "length per request fixed by the seed.", ""]
    write_atomic(out / "report.md", "\n".join(L) + "\n")
    write_atomic(out / "summary.json", json.dumps({"command": command, "headline": h, "fit": v.fit,
                                                   "per_run": json.loads(v.per_run.to_json(orient="records"))}, indent=1))
    return out / "report.md"


# ---- CLI -----------------------------------------------------------------------------------------------
def register(app) -> None:
    """Add ``specsim validate-serving`` to the main app."""
    import typer

    @app.command("validate-serving")
    def validate_serving_cmd(
        run_dirs: list[Path] = typer.Argument(..., help="serve-run directories (specsim calibrate serve-run)"),
        profile: Path = typer.Option(..., "--profile", help="cost profile YAML (fitted; its fit.setup names the models)"),
        report: Path = typer.Option(..., "--report", help="report folder"),
        fit_levels: Optional[str] = typer.Option(None, "--fit-levels",
                                                 help="re-fit the step-time parameters on these levels only, e.g. closed-1,closed-2"),
        max_median_ape: Optional[float] = typer.Option(None, "--max-median-ape", help="exit 1 above this held-out latency median APE"),
    ) -> None:
        """Predict measured concurrent runs with the serving simulator (trace replay); report errors and figures."""
        if max_median_ape is not None and not max_median_ape > 0:
            raise InputError(None, "--max-median-ape", f"must be > 0 (got {max_median_ape})")
        levels = [x.strip() for x in fit_levels.split(",") if x.strip()] if fit_levels else None
        v = validate_serving(run_dirs, profile, levels)
        command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        path = write_report(v, report, command, profile, max_median_ape)
        h = v.headline
        typer.echo(f"held out ({h['model']}, n={h['latency_n']}): latency median APE {_pct(h['latency_median_ape'])} "
                   f"p90 {_pct(h['latency_p90_ape'])} bias {_spct(h['latency_bias'])}; TTFT median APE "
                   f"{_pct(h['ttft_median_ape'])}; report {path}")
        if max_median_ape is not None and h["latency_median_ape"] > max_median_ape:
            typer.echo(f"FAIL: held-out latency median APE {_pct(h['latency_median_ape'])} > {_pct(max_median_ape)}", err=True)
            raise typer.Exit(1)
