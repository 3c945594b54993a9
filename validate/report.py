"""The validation report: ``report.md``, PNG figures (matplotlib Agg) and the prediction tables
as CSV, every file written atomically (temporary file + rename)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fit.log_time_fit import PARAM_NAMES
from simulator.inputs.loading import save_figure_atomic, write_atomic
from simulator.report.plots import pyplot
from validate.validation import ValidationResult


def _scatter(ax, d: pd.DataFrame, meas: str, title: str, pre: str = "") -> None:
    m, p = d[meas].to_numpy(float), d[f"predicted_{pre}s"].to_numpy(float)
    lo, hi = d[f"pi_{pre}low_s"].to_numpy(float), d[f"pi_{pre}high_s"].to_numpy(float)
    ax.errorbar(m, p, yerr=[np.clip(p - lo, 0, None), np.clip(hi - p, 0, None)], fmt="o", ms=4, capsize=2, alpha=0.8,
                label=f"prediction, {int(round(100 * d['pi_level'].iloc[0]))}% interval")
    top = float(np.nanmax([m.max(), hi.max() if np.isfinite(hi).any() else p.max()])) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=1, label="y = x")
    ax.set_xlabel(f"measured {meas} (s)")
    ax.set_ylabel("predicted (s)")
    ax.set_title(title)
    ax.legend(fontsize=8)


def _scatter_figure(plt, res: ValidationResult, out: Path) -> str:
    """Predicted vs measured: replay end to end, and the distribution mode's requests to their first answer."""
    panels = [(res.replay, "measured_e2e_s", "replay: end-to-end", "e2e_")]
    if res.distribution is not None:
        ok = res.distribution[~res.distribution["to_answer_censored"].astype(bool)]
        panels.append((ok, "to_answer_s", "distribution mode: to first answer", ""))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, (d, meas, title, pre) in zip(axes[0], panels):
        _scatter(ax, d, meas, title, pre)
    save_figure_atomic(fig, out / "predicted_vs_measured.png")
    plt.close(fig)
    return "predicted_vs_measured.png"


def _calibration_figure(plt, cov: pd.DataFrame, out: Path) -> str:
    """Nominal vs measured coverage of the central intervals."""
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot([0, 100], [0, 100], "k--", lw=1, label="perfectly calibrated")
    for scope, g in cov.groupby("scope", sort=False):
        n = int(g["n"].max())
        ax.plot(100 * g["nominal"], 100 * g["coverage"], "o-", label=f"{scope} (n={n})")
        if n:  # binomial sd of a coverage estimate on n requests, at the nominal level
            sd = 100 * np.sqrt(g["nominal"] * (1 - g["nominal"]) / n)
            ax.fill_between(100 * g["nominal"], 100 * g["nominal"] - 2 * sd, 100 * g["nominal"] + 2 * sd,
                            color="grey", alpha=0.12)
    ax.set_xlim(40, 100)
    ax.set_ylim(0, 102)
    ax.set_xlabel("nominal interval level (%)")
    ax.set_ylabel("held-out requests inside (%)")
    ax.set_title("interval calibration (grey: ±2 binomial sd)")
    ax.legend(fontsize=8)
    save_figure_atomic(fig, out / "calibration.png")
    plt.close(fig)
    return "calibration.png"


def _error_cdf_figure(plt, res: ValidationResult, out: Path) -> str:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    series = [("replay, requests e2e", res.replay["predicted_e2e_s"] / res.replay["measured_e2e_s"] - 1),
              ("replay, requests calls", res.replay["predicted_s"] / res.replay["measured_s"] - 1),
              ("replay, single calls", res.calls["predicted_s"] / res.calls["wall_s"] - 1)]
    if res.distribution is not None:
        ok = res.distribution[~res.distribution["to_answer_censored"].astype(bool)]
        series.append(("distribution, requests", ok["predicted_s"] / ok["to_answer_s"] - 1))
    for label, e in series:
        a = np.sort(np.abs(e.to_numpy(float)))
        ax.step(a * 100, np.arange(1, len(a) + 1) / len(a), where="post", label=f"{label} (n={len(a)})")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("absolute percentage error (%)")
    ax.set_ylabel("fraction ≤ x")
    ax.axvline(5, color="grey", lw=0.8, ls=":")
    ax.legend(fontsize=8)
    ax.set_title("error CDF (held-out)")
    save_figure_atomic(fig, out / "error_cdf.png")
    plt.close(fig)
    return "error_cdf.png"


def _sweep_figures(plt, cfg: pd.DataFrame, out: Path) -> list[str]:
    """Latency against the threshold and speedup against gamma, where the data sweep them."""
    names = []
    for knob, ycol, fname in (("threshold", "s", "latency_vs_threshold.png"), ("gamma", "speedup", "speedup_vs_gamma.png")):
        d = cfg[cfg[knob].notna() & (cfg[knob] != 0)]
        if d[knob].nunique() < 2 or (ycol == "speedup" and d["measured_speedup"].isna().all()):
            continue
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for system, g in d.groupby("system"):
            g = g.sort_values(knob)
            if ycol == "s":
                ax.plot(g[knob], g["measured_s"], "o", label=f"{system} measured")
                ax.plot(g[knob], g["predicted_s"], "-", label=f"{system} predicted")
                ax.fill_between(g[knob].astype(float), g["pi_low_s"], g["pi_high_s"], alpha=0.2)
                ax.set_ylabel("mean request latency (s)")
            else:
                ax.plot(g[knob], g["measured_speedup"], "o", label=f"{system} measured")
                ax.plot(g[knob], g["predicted_speedup"], "-", label=f"{system} predicted")
                ax.set_ylabel("speedup over vanilla-base")
        ax.set_xlabel(knob)
        ax.legend(fontsize=8)
        save_figure_atomic(fig, out / fname)
        plt.close(fig)
        names.append(fname)
    return names


def plots(res: ValidationResult, out: Path) -> list[str]:
    """The report's figures; returns their file names."""
    plt = pyplot()
    names = [_scatter_figure(plt, res, out)]
    cov = res.figures.get("coverage_levels")
    if cov is not None and len(cov):
        names.append(_calibration_figure(plt, cov, out))
    names.append(_error_cdf_figure(plt, res, out))
    return names + _sweep_figures(plt, res.figures["configs"], out)


def _table(df: pd.DataFrame, pct: tuple[str, ...] = ("median_ape", "mean_ape", "p90_ape", "bias", "mean_bias", "coverage",
                                                     "pi_rel_width")) -> str:
    d = df.copy()
    for c in d.columns:
        if c in pct:
            d[c] = [f"{100 * v:+.1f}%" if c in ("bias", "mean_bias") and v == v else (f"{100 * v:.1f}%" if v == v else "—")
                    for v in d[c]]
        elif d[c].dtype.kind == "f":
            d[c] = [f"{v:.4g}" if v == v else "—" for v in d[c]]
    buf = io.StringIO()
    cols = list(d.columns)
    buf.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for _, row in d.iterrows():
        buf.write("| " + " | ".join(str(row[c]) for c in cols) + " |\n")
    return buf.getvalue()


def _keys_text(keys) -> str:
    """(run, request) keys grouped by run: ``runA[0, 2]; runB[1]`` (request ids without the run prefix;
    ``(whole run)`` where the request is the run, as in the SpecReason traces)."""
    if keys is None:
        return "the profile's fit runs (not among the inputs)"
    by: dict[str, list[str]] = {}
    for run, req in keys:
        req = str(req)
        local = req[len(run) + 1:] if req.startswith(f"{run}/") else ("(whole run)" if req == run or req.rsplit("/", 1)[-1] == run
                                                                       else req)
        by.setdefault(str(run), []).append(local)
    return "; ".join(f"{r}[{', '.join(v)}]" for r, v in by.items()) or "none"


def _drift_section(res: ValidationResult) -> list[str]:
    """Speed factors of the held-out runs against the fit runs' range, the policy, coverage by flag."""
    d, f = res.drift_runs, res.figures
    if d is None or d.empty:
        return []
    flagged = res.flagged_runs
    policy = {"flag": "`--drift flag`: flagged runs stay in every figure above, and the command exits 2 (the bar "
                      "is not judged on runs unlike the fit runs)",
              "exclude": "`--drift exclude`: flagged runs are left out of every figure above and of the bar: "
                         + (", ".join(res.drift_excluded) or "none")}[res.drift_policy]
    lines = ["## Drift: held-out runs against the fit runs' speed", "",
             "Speed factor per call kind = median measured / predicted over the run's calls, with its 90% interval; "
             "`*`: the interval lies outside the range the fit runs span (widened to the 90% predictive of a new "
             "run's offset). Explained by: catalog hardware and TP whose memory bandwidth gives the run's decode "
             "factor at a plausible efficiency (first-order roofline, docs/validation.md).", "",
             f"**{len(flagged)} of {len(d)} held-out runs flagged**" + (f": {', '.join(flagged)}" if flagged else "")
             + f". Policy {policy}.", "", f"Intervals: {res.interval_statement}", "",
             "| fold | run | flagged | scope | speed factors per kind [90%] | explained by |", "|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append(f"| {r.fold} | {r.run_key} | {'**yes**' if r.drift_flag else 'no'} | {r.drift_scope} | "
                     f"{r.factors} | {r.explained_by or '—'} |")
    lines.append("")
    for key, label in (("replay_by_drift", "Replay end-to-end"), ("distribution_by_drift", "Distribution mode")):
        if key in f:
            lines += [f"{label}, unflagged (like the fit runs) and flagged (other batch) runs apart:", "",
                      _table(f[key]), ""]
    return lines


def _folds_section(res: ValidationResult) -> list[str]:
    """What each fold fitted on what, and its requests as (run, request) keys."""
    lines = ["## What was fitted on what", "",
             "| fold | cost profile fitted on runs | predicted runs | " + " | ".join(PARAM_NAMES) + " |",
             "|---|---|---|" + "---|" * len(PARAM_NAMES)]
    for fold in res.folds:
        vals = []
        for n in PARAM_NAMES:
            p = getattr(fold.profile, n)
            if p is None:
                vals.append("catalog prior")
                continue
            se = f" ± {p.stderr:.2g}" if p.stderr else ""
            vals.append(f"{p.value:.4g}{se} ({p.kind})")
        fit = ", ".join(fold.fit_runs) + (" (their fit requests only, below)" if fold.unit == "requests" else "")
        test = ", ".join(fold.test_runs) + (" (held-out requests only, below)" if fold.unit == "requests" else "")
        lines.append(f"| {fold.name} | {fit} | {test} | " + " | ".join(vals) + " |")
    lines += ["", "Requests per fold, as (run, request) keys (a fold never predicts a request it was fitted on):", "",
              "| fold | held out | fit requests | predicted requests |", "|---|---|---|---|"]
    for fold in res.folds:
        n_fit = "" if fold.fit_requests is None else f"{len(fold.fit_requests)}: "
        n_test = "" if fold.test_requests is None else f"{len(fold.test_requests)}: "
        lines.append(f"| {fold.name} | {fold.unit} | {n_fit}{_keys_text(fold.fit_requests)} | "
                     f"{n_test}{_keys_text(fold.test_requests)} |")
    return lines


def _prediction_sections(f: dict, lv: int) -> list[str]:
    """Interval calibration, trace replay and (where run) the distribution mode, at interval level ``lv`` %."""
    lines = ["## Interval calibration", "",
             f"Share of held-out requests inside their central interval at each nominal level (`--level` sets the "
             f"one in the tables below: {lv}%); calibration.png plots it. With n requests a coverage estimate has a "
             "binomial sd of sqrt(p(1-p)/n).", "", _table(f["coverage_levels"].assign(
                 nominal=[f"{100 * v:g}%" for v in f["coverage_levels"]["nominal"]])), ""]
    lines += ["## Trace replay (cost model alone, the runs' own steps)", "",
              f"{lv}% intervals: a new run's log offset per call kind from the Student-t predictive of the fit runs' "
              "offsets (mean, sd·sqrt(1+1/n), n-1 dof) plus iid within-run residuals per call; `pi_rel_width` = "
              "median (high - low) / prediction.", "",
              "Per request, end-to-end (measured = recorded request time, incl. calls the model does not know; "
              "predicted = the modelled calls times the fit runs' end-to-end / calls ratio, its spread between runs in "
              "the interval: see the notes):", "",
              _table(f["replay_e2e"]), "", "Per request, modelled calls only (measured = sum of the same calls' times):", "",
              _table(f["replay_calls"]), "", "Per call kind:", "", _table(f["replay_per_op"].drop(columns=["coverage", "pi_rel_width"])), "",
              "Per run (end-to-end):", "", _table(f["replay_per_run"]), ""]
    if "distribution" in f:
        lines += ["## Distribution mode (workload distributions + cost model, analytic mean, DES interval)", "",
                  f"{lv}% intervals: the DES's simulated requests, every simulated call times exp(run offset + "
                  "within-run residual) drawn as in replay (one offset per simulated request and call kind), so "
                  "they hold the workload's spread and the cost model's uncertainty.", "",
                  "Per request (measured = modelled calls up to the first answer; censored requests left out):", "",
                  _table(f["distribution"]), "", "Means per configuration:", "", _table(f["distribution_means"]), ""]
    return lines


def markdown(res: ValidationResult, images: list[str], command: str, bar: float | None, target: str,
             value: float) -> str:
    """report.md's text: inputs, folds, the bar's verdict, the prediction tables, drift, and what the model leaves
    out."""
    f = res.figures
    lines = ["# Validation report", "", f"Command: `{command}`", "",
             f"Inputs: {', '.join(res.inputs)}  ", f"Cost profile: `{res.profile_path}` "
             f"({res.setup.hardware.name}, TP={res.setup.tp}, models {', '.join(m.name for m in res.setup.models.values())})  ",
             f"Hold-out rule: `{res.rule}`", ""]
    lines += _folds_section(res)
    lines += ["", f"Distribution mode workload: {res.workload_source or 'not run'}", ""]
    if bar is not None:
        verdict = "PASS" if value <= bar else "FAIL"
        lines += [f"**Bar**: median APE ({target}) {100 * value:.2f}% vs max {100 * bar:.2f}% → **{verdict}**", ""]
    lv = int(round(100 * float(res.replay["pi_level"].iloc[0]))) if "pi_level" in res.replay.columns and len(res.replay) else 90
    lines += _prediction_sections(f, lv)
    lines += _drift_section(res)
    lines += ["## Per configuration (replay)", "", _table(f["configs"]), ""]
    r = res.replay
    extra = (r["measured_e2e_s"] - r["measured_s"]).sum() / r["measured_e2e_s"].sum()
    lines += ["## Not explained by the model", "",
              f"- {100 * extra:.1f}% of the measured end-to-end time lies outside the modelled engine calls "
              "(SpecReason traces: the fork's answer-verification calls; runner: orchestration).", ""]
    lines += [f"- {n}" for n in res.notes]
    lines += ["", "## Figures", ""] + [f"![{n}]({n})" for n in images] + [""]
    return "\n".join(lines)


def write_report(res: ValidationResult, out: str | Path, command: str, bar: float | None, target: str) -> Path:
    from validate.validation import headline

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = plots(res, out)
    write_atomic(out / "replay_requests.csv", res.replay.to_csv(index=False))
    write_atomic(out / "replay_calls.csv", res.calls.to_csv(index=False))
    if res.distribution is not None:
        write_atomic(out / "distribution_requests.csv", res.distribution.to_csv(index=False))
    value = headline(res, target)
    write_atomic(out / "report.md", markdown(res, images, command, bar, target, value))
    return out / "report.md"
