"""Machine drift: is a held-out run as fast as the fit runs, and if not, what would explain it?

Per held-out run r and call kind o, the *speed factor* is how much slower (> 1) or faster (< 1)
the run's calls are than the fitted cost model predicts on the fit profile:

    f_{r,o} = exp(m_{r,o}),   m_{r,o} = median_i log(measured_i / predicted_i) over the run's calls of kind o

with a 90% interval exp(m ± z·se), se = 1.2533 · 1.4826 · MAD / sqrt(n) (the standard error of a
median under a normal model, the scale estimated robustly by the MAD).

The *fit range* of kind o is what the fit runs span: [min, max] of their offsets o_1..o_n
(``fit.per_op[o].run_offsets`` of the fold's profile), widened to the 90% predictive interval of a
new run's offset (``validate.replay.offset_predictives``: with 2-4 fit runs the observed span alone
would flag ordinary run-to-run spread). A run is *flagged* when, for some kind, its whole factor
interval lies outside the fit range: it is unlike the fit runs (later, another machine, other load).

For a flagged run:

- **scope**: ``global`` when every judged kind moved the same way (the machine or its load),
  ``base model`` / ``small model`` when only that model's kinds moved (score, base_generate and
  spec_generate are base-model calls; small_generate the small model's), else ``mixed``;
- **hardware fingerprint**: decode is memory-bound, so a call's time per token scales as
  1 / (bandwidth · efficiency · TP). The run's decode factor f (base_generate, else spec_generate,
  else small_generate; score calls are prefill-bound) implies, on catalog hardware h at TP t,

      eff_h,t = eff_fit · B_fit · TP_fit / (f · B_h · t)

  (B: memory bandwidth, eff_fit: the profile's fitted ``mem_efficiency``). A (h, t) *explains* the
  run when eff_h,t is plausible (``PLAUSIBLE_EFF``) and the base model's weights fit in t GPUs'
  memory. First-order: TP scaling assumed linear, the small model's share of the GPUs ignored.

Batches: the fit runs' batch is where they came from (SpecReason traces: the input path; run
directories: run.json's hardware and date). With one batch the between-batch (machine, load)
variance cannot be estimated, and the intervals are conditional on "same machine and load as the
fit runs" (:func:`interval_statement`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

LEVEL = 0.90
Z90 = 1.6448536269514722
PLAUSIBLE_EFF = (0.35, 0.95)        # achieved / datasheet memory bandwidth a tuned engine reaches
TP_CANDIDATES = (1, 2, 4, 8)
BASE_KINDS = ("score", "base_generate", "spec_generate")
SMALL_KINDS = ("small_generate",)
DECODE_ORDER = ("base_generate", "spec_generate", "small_generate")
POLICIES = ("flag", "exclude")


# ---- per-run speed factors ---------------------------------------------------------------------------
def _median_se(x: np.ndarray) -> float:
    n = len(x)
    if n < 2:
        return float("inf")
    mad = float(np.median(np.abs(x - np.median(x))))
    return 1.2533 * 1.4826 * mad / np.sqrt(n)


def speed_factors(calls: pd.DataFrame) -> pd.DataFrame:
    """Per (run, call kind) of replayed calls (``run_id``, ``op``, ``wall_s``, ``predicted_s``): n, the
    log offset and its se, the factor and its 90% interval."""
    c = calls[(calls["wall_s"] > 0) & (calls["predicted_s"] > 0)]
    rows = []
    for (run, op), d in c.groupby(["run_id", "op"], sort=True):
        lr = np.log(d["wall_s"].to_numpy(float) / d["predicted_s"].to_numpy(float))
        m, se = float(np.median(lr)), _median_se(lr)
        rows.append({"run_key": str(run), "op": str(op), "calls": len(lr), "log_offset": m, "log_se": se,
                     "factor": float(np.exp(m)), "factor_low": float(np.exp(m - Z90 * se)),
                     "factor_high": float(np.exp(m + Z90 * se))})
    return pd.DataFrame(rows, columns=["run_key", "op", "calls", "log_offset", "log_se", "factor", "factor_low",
                                       "factor_high"])


def fit_ranges(profile) -> dict[str, dict]:
    """Per call kind of the profile's fit: the fit runs' offset span and the widened range (module docstring)."""
    from validate.replay import noise_model

    noise, _ = noise_model(profile, offsets="in_sample")
    out = {}
    for op, e in ((profile.fit or {}).get("per_op") or {}).items():
        offs = np.asarray(list((e.get("run_offsets") or {}).values()), dtype=float) if op != "all" else np.array([])
        if not len(offs):
            continue
        lo, hi = float(offs.min()), float(offs.max())
        if op in noise and noise[op].offset.dof is not None:
            plo, phi = noise[op].offset.interval(LEVEL)
            lo, hi = min(lo, plo), max(hi, phi)
        out[op] = {"fit_runs": len(offs), "span_low": float(np.exp(offs.min())), "span_high": float(np.exp(offs.max())),
                   "range_low": float(np.exp(lo)), "range_high": float(np.exp(hi))}
    return out


def flag_runs(factors: pd.DataFrame, ranges: dict[str, dict]) -> pd.DataFrame:
    """``factors`` with the fit range per kind and ``outside`` (-1 slower-side below, +1 above, 0 inside,
    NaN when the fit has no runs of that kind)."""
    f = factors.copy()
    f["range_low"] = f["op"].map(lambda o: ranges.get(o, {}).get("range_low", np.nan))
    f["range_high"] = f["op"].map(lambda o: ranges.get(o, {}).get("range_high", np.nan))
    f["outside"] = np.where(f["range_low"].isna(), np.nan,
                            np.where(f["factor_low"] > f["range_high"], 1.0,
                                     np.where(f["factor_high"] < f["range_low"], -1.0, 0.0)))
    return f


def scope_of(kinds: pd.DataFrame) -> str:
    """``global`` / ``base model`` / ``small model`` / ``mixed`` / ``none`` for one run's flagged kinds."""
    judged = kinds[kinds["outside"].notna()]
    out = judged[judged["outside"] != 0]
    if out.empty:
        return "none"
    if len(out) == len(judged) and out["outside"].nunique() == 1:
        return "global (all call kinds)" if len(judged) > 1 else f"{out['op'].iloc[0]} (the only kind)"
    ops = set(out["op"])
    if ops <= set(BASE_KINDS):
        return "base model only (" + ", ".join(sorted(ops)) + ")"
    if ops <= set(SMALL_KINDS):
        return "small model only"
    inside = sorted(set(judged["op"]) - ops)
    return "kinds " + ", ".join(sorted(ops)) + (f" (not {', '.join(inside)})" if inside else "")


def hardware_fingerprint(factor: float, setup, mem_efficiency: float, role: str = "base") -> list[dict]:
    """Catalog (hardware, TP) whose bandwidth would give the run's decode ``factor`` at a plausible
    efficiency (module docstring), most plausible first (efficiency nearest the fit's)."""
    from simulator.catalog import hardware_catalog

    ref_bw = setup.hardware.memory_bandwidth_bytes_per_s * setup.tp
    model = setup.models[role]
    weights = (model.published_params or model.params) * model.bytes_per_param
    out = []
    for name, h in hardware_catalog().items():
        for tp in TP_CANDIDATES:
            eff = mem_efficiency * ref_bw / (factor * h.memory_bandwidth_bytes_per_s * tp)
            fits = weights / tp < 0.9 * h.memory_bytes
            if fits and PLAUSIBLE_EFF[0] <= eff <= PLAUSIBLE_EFF[1]:
                out.append({"hardware": name, "tp": tp, "mem_efficiency": round(float(eff), 3)})
    return sorted(out, key=lambda r: (abs(np.log(r["mem_efficiency"] / mem_efficiency)), r["tp"]))


def decode_factor(kinds: pd.DataFrame) -> tuple[str, float] | None:
    by = kinds.set_index("op")["factor"]
    for op in DECODE_ORDER:
        if op in by.index:
            return op, float(by[op])
    return None


def summarize_runs(flagged: pd.DataFrame, setup, profile) -> pd.DataFrame:
    """One row per run: flagged, scope, the decode factor and the hardware that would explain it."""
    eff = float(profile.mem_efficiency.value)
    rows = []
    for run, k in flagged.groupby("run_key", sort=False):
        scope = scope_of(k)
        flag = scope != "none"
        dec = decode_factor(k)
        expl = ""
        if flag and dec is not None:
            role = "small" if dec[0] == "small_generate" else "base"
            cands = hardware_fingerprint(dec[1], setup, eff, role)
            expl = "; ".join(f"{c['hardware']} TP={c['tp']} (eff {c['mem_efficiency']:.2f})" for c in cands[:4]) or \
                "no catalog hardware at a plausible efficiency"
        rows.append({"run_key": run, "drift_flag": flag, "drift_scope": scope,
                     "factors": ", ".join(f"{r.op} {r.factor:.2f} [{r.factor_low:.2f}-{r.factor_high:.2f}]"
                                          + ("*" if r.outside and r.outside == r.outside else "")
                                          for r in k.itertuples()),
                     "explained_by": expl})
    return pd.DataFrame(rows, columns=["run_key", "drift_flag", "drift_scope", "factors", "explained_by"])


# ---- batches and the interval statement -----------------------------------------------------------------
def batch_of(ms, run: str) -> str:
    """Where a run came from: run.json hardware + date for run directories, the input path otherwise."""
    r = ms.requests[ms.requests["run_key"] == run]
    src = str(r["source"].iloc[0]) if len(r) else "?"
    if ms.kind != "run_dir":
        return src
    try:
        meta = json.loads((Path(src) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return src
    hw = meta.get("hardware") or {}
    return f"{hw.get('gpu_name') or hw.get('device') or hw.get('cpu') or '?'} {str(meta.get('created_at', ''))[:10]}"


def interval_statement(fit_batches: set[str], between_batch: str | None = None) -> str:
    if between_batch:
        return (f"The intervals are for a run of a new batch (another machine, load or day): a between-batch term, its "
                f"spread from the batches in {between_batch}, is added to the fit runs' run-to-run spread "
                "(validate.batch); runs flagged for drift are inside that claim.")
    if len(fit_batches) <= 1:
        return ("The fit runs form one batch (one machine and period): the spread between batches or machines "
                "cannot be estimated from them, so the 90% intervals are conditional on the same machine and load "
                "as the fit runs. Runs flagged for drift are outside that condition; their coverage is reported "
                "separately (--batch-spread gives intervals for a new batch).")
    return (f"The fit runs come from {len(fit_batches)} batches; the interval model pools their run offsets "
            "without a separate between-batch term (not yet hierarchical), so intervals for a new machine may "
            "still be too narrow.")


# ---- the per-problem aggregates (no per-call records) ------------------------------------------------------
def trace_aggregates(trace, runs=None) -> dict:
    """The per-step traces reduced to the aggregates' shape (``per_problem`` -> ``averages``: means over
    runs), one entry per run (key: its position) -- to measure :func:`aggregate_speed_factors`' own
    error against the per-call factors of the same runs."""
    out = {}
    for i, (run, d) in enumerate(trace.steps.groupby("run_id", sort=True)):
        if runs is not None and run not in runs:
            continue
        base = d[d["kept_by"] == "base"]
        out[str(i)] = {"run": run, "averages": {
            "total_steps": float(len(d)), "rejected_steps": float(len(base)),
            "small_tokens_accepted": float(d.loc[d["kept_by"] == "small", "small_tokens"].sum()),
            "small_tokens_rejected": float(base["small_tokens"].sum()),
            "base_tokens": float(base["base_tokens"].astype(float).sum()), "total_tokens": float(d["kept_tokens"].sum()),
            "small_model_time_s": float(d["small_call_s"].sum()), "eval_time_s": float(d["scoring_call_s"].sum()),
            "base_model_time_s": float(base["base_call_s"].sum())}}
    return {"per_problem": out}


def aggregate_speed_factors(aggregates: str | Path | dict, profile, setup, prompt_tokens: int = 120,
                            judge_tokens: int = 70) -> pd.DataFrame:
    """Speed factors per call kind for per-problem aggregates (mean times and tokens per run, no per-call
    records): the mean run's calls are rebuilt as ``steps`` small calls of the mean small step, ``steps``
    scoring calls and ``rejected_steps`` base calls of the mean base step, each at the mean context
    (half the run's tokens), and predicted with the profile; factor = measured / predicted time per kind.
    No interval: the aggregates hold no spread."""
    from calibrate.fit.fit_cost import CallPredictor
    from calibrate.contracts.call_table import CALL_COLUMNS

    data = aggregates if isinstance(aggregates, dict) else json.loads(Path(aggregates).read_text(encoding="utf-8"))
    params = profile.params(setup.hardware)
    rows = []
    for pid, p in sorted(data["per_problem"].items(), key=lambda kv: int(kv[0])):
        a = p["averages"]
        steps, rej = float(a["total_steps"]), float(a["rejected_steps"])
        small_tok = (a["small_tokens_accepted"] + a["small_tokens_rejected"]) / max(steps, 1)
        base_tok = a["base_tokens"] / max(rej, 1)
        ctx = prompt_tokens + a["total_tokens"] / 2
        calls = [("small", "small_generate", max(small_tok, 1), max(small_tok, 1), ctx, a["small_model_time_s"], steps),
                 ("base", "score", small_tok + judge_tokens, 1, ctx, a["eval_time_s"], steps),
                 ("base", "base_generate", 1, max(base_tok, 1), ctx, a["base_model_time_s"], rej)]
        table = pd.DataFrame([{**{c: 0 for c in CALL_COLUMNS}, "run_id": f"problem-{pid}", "request_id": pid,
                               "role": role, "op": op, "new_tokens": int(round(new)), "cached_tokens": int(round(cached)),
                               "output_tokens": int(round(out)), "wall_s": 1.0}
                              for role, op, new, out, cached, _, _ in calls])
        pred = CallPredictor(table, setup).predict(params)
        for (role, op, _, out, _, measured_s, n), pr in zip(calls, pred):
            if n <= 0:
                continue
            rows.append({"problem": int(pid), "op": op, "calls": round(n, 1), "tokens_per_call": round(out, 1),
                         "measured_s": measured_s, "predicted_s": float(pr * n), "factor": measured_s / float(pr * n),
                         "measured_ms_per_token": 1e3 * measured_s / (n * out) if op != "score" else np.nan})
    return pd.DataFrame(rows)


def method_check(traces: str, profile, setup) -> pd.DataFrame:
    """Per run of the per-step ``traces`` and call kind: the aggregate method's factor (the run reduced to
    its totals) against the per-call factor (median over its calls); ``error`` = their ratio - 1."""
    from calibrate.fit.measured import load_measured
    from calibrate.fit.import_specreason import import_specreason
    from validate.replay import replay_calls

    trace = import_specreason(traces)
    agg = aggregate_speed_factors(trace_aggregates(trace), profile, setup)
    runs = {k: v["run"] for k, v in trace_aggregates(trace)["per_problem"].items()}
    agg["run_key"] = agg["problem"].astype(str).map(runs)
    per_call = speed_factors(replay_calls(load_measured([traces]), profile, setup))
    m = agg.merge(per_call[["run_key", "op", "factor"]], on=["run_key", "op"], suffixes=("_aggregate", "_per_call"))
    m["error"] = m["factor_aggregate"] / m["factor_per_call"] - 1
    return m[["run_key", "op", "factor_aggregate", "factor_per_call", "error"]]


def drift_report(aggregates: str, profile_path: str, traces: str | None = None) -> str:
    """What ``specsim validate drift`` prints: the aggregates' speed factors against the profile, flagged against its
    fit range, with the hardware that would explain them; with ``traces`` (per-step traces), the aggregate method's
    error on their runs first."""
    from simulator.cost.cost_profile import load_profile
    from simulator.errors import InputError
    from validate.replay import setup_from_profile

    profile = load_profile(profile_path)
    setup = setup_from_profile(profile)
    try:
        agg = aggregate_speed_factors(aggregates, profile, setup)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(str(aggregates), None, f"not a per-problem aggregates file ({type(e).__name__}: {e})") from None
    ranges = fit_ranges(profile)
    out = []
    if traces:
        out += [method_check(traces, profile, setup).to_string(index=False, float_format=lambda v: f"{v:.3f}"), ""]
    f = agg.rename(columns={"problem": "run_key"}).assign(factor_low=agg["factor"], factor_high=agg["factor"])
    f = flag_runs(f, ranges)
    summary = summarize_runs(f, setup, profile)
    with pd.option_context("display.width", 200):
        out += [f"profile {profile_path}: fit runs {', '.join(map(str, profile.fit.get('runs', [])))}; fit range per kind "
                + "; ".join(f"{op} {r['range_low']:.2f}-{r['range_high']:.2f}" for op, r in ranges.items()),
                f[["run_key", "op", "calls", "tokens_per_call", "measured_ms_per_token", "measured_s", "predicted_s",
                   "factor", "outside"]].to_string(index=False, float_format=lambda v: f"{v:.3g}"),
                "", summary.drop(columns=["factors"]).to_string(index=False)]
    return "\n".join(out)
