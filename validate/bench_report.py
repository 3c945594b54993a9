"""The report of ``specsim fit bench`` (:mod:`validate.bench`): ``report.md`` (held-out tables and the
command that reproduces them), ``heldout.csv`` (every held-out point), ``heldout.png`` (predicted vs measured, log-log,
per op and fold) and ``summary.json`` (provenance and the same figures); every file written atomically. Held-out
errors only: the profile's in-sample residuals stay in its ``fit:`` block and are not validation."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibrate.fit.log_time_fit import PARAM_NAMES
from simulator.inputs.loading import json_text, save_figure_atomic, write_atomic
from simulator.report.plots import pyplot
from validate.bench import PREDICTORS, BenchFitResult

LABELS = {"fitted": "fitted on the rest", "transferred_prior": "transferred prior", "datasheet_prior": "datasheet prior"}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _fold_table(errors: pd.DataFrame, fold: str) -> list[str]:
    head = "| op | points | " + " | ".join(f"{LABELS[p]}: median / p90 / bias" for p in PREDICTORS) + " |"
    out = [head, "|---|---|" + "---|" * len(PREDICTORS)]
    for r in errors[errors["fold"] == fold].itertuples():
        cells = [f"{_pct(getattr(r, f'{p}_median_ape'))} / {_pct(getattr(r, f'{p}_p90_ape'))} / "
                 f"{100 * getattr(r, f'{p}_bias'):+.1f}%" for p in PREDICTORS]
        out.append(f"| {'**all**' if r.op == 'all' else r.op} | {r.n} | " + " | ".join(cells) + " |")
    return out


def _param_table(res: BenchFitResult) -> list[str]:
    cols = [f["fold"] for f in res.fold_fits]
    out = ["| parameter | prior | " + " | ".join(cols) + " | profile (all records) |",
           "|---|---|" + "---|" * (len(cols) + 1)]
    prior = res.profile.fit["prior_values"]
    for n in PARAM_NAMES:
        p = getattr(res.profile, n)
        vals = [f"{f['values'][n]:.4g}" + ("" if n in f["fitted"] else " (prior)" if n not in f["zeroed"] else " (0)")
                for f in res.fold_fits]
        own = "–" if p is None else f"{p.value:.4g} [{p.kind}]"
        out.append(f"| `{n}` | {prior[n]:.4g} | " + " | ".join(vals) + f" | {own} |")
    return out


def report_markdown(res: BenchFitResult, command: str, profile_path: str) -> str:
    bs, fit = res.bench, res.profile.fit
    same_prior = bs.hardware.cost_prior is None
    lines = [f"# Cost model fitted to microbenchmarks: held-out validation ({bs.hardware.name})", "",
             "Reproduce:", "", "```bash", command, "```", "",
             f"Date {fit['date']}; catalog hardware `{bs.hardware.name}` ({bs.hardware.display}); engines "
             f"{res.profile.engine}. Profile (fitted on every record): `{profile_path}`.", "",
             "## Inputs", "", "| run | architecture | layers | dtype | TP | engine | records | skipped |",
             "|---|---|---|---|---|---|---|---|"]
    for r in fit["bench_runs"]:
        skipped = ", ".join(f"{v} {k}" for k, v in r["skipped"].items()) or "–"
        lines.append(f"| `{r['run']}` | {r['arch']} | {r['layers']} | {r['dtype']} | {r['tp']} | {r['engine']} "
                     f"({r['engine_version']}) | {r['records']} | {skipped} |")
    lines += ["", "## Held-out error", "",
              "Each fold refits the cost parameters (`calibrate.fit.fit_cost.fit_log_times`) on its training records only "
              "and predicts the held-out ones; the priors are scored on the same points. APE = |predicted − measured| / "
              "measured; bias = median of predicted / measured − 1.", ""]
    if same_prior:
        lines += [f"`{bs.hardware.name}` has no derived priors in `simulator/catalog/gpu_priors.yaml`: the transferred "
                  "and datasheet priors are the same figures.", ""]
    for f in res.fold_fits:
        lines += [f"### {f['fold']} ({f['fit_records']} records fitted, {f['held_out_records']} held out)", "",
                  *_fold_table(res.errors, f["fold"]), ""]
    if not res.fold_fits:
        lines += ["No fold: nothing was held out.", ""]
    lines += ["## Fitted parameters", "", "Per fold (its training records only; `(prior)`: kept at the prior, no signal or "
              "out of bounds; `(0)`: an overhead the data put at zero) and the profile fitted on every record.", "",
              *_param_table(res), ""]
    if res.notes:
        lines += ["## Notes", "", *[f"* {n}" for n in res.notes], ""]
    lines += ["## Files", "", "* `heldout.csv`: every held-out point (fold, run, op, shape, measured and the three "
              "predictions with their signed relative errors)", "* `heldout.png`: predicted vs measured, log-log, per "
              "fold (colour: op; dot: fitted on the rest; cross: datasheet prior)", "* `summary.json`: provenance, the "
              "per-fold fits and these tables", ""]
    return "\n".join(lines)


def plot_heldout(points: pd.DataFrame, path: Path) -> None:
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    folds = list(dict.fromkeys(points["fold"]))
    ncol = min(len(folds), 3)
    fig, axes = plt.subplots(-(-len(folds) // ncol), ncol, figsize=(4.6 * ncol, 4.2 * -(-len(folds) // ncol)),
                             squeeze=False)
    ops = sorted(points["op"].unique())
    colors = dict(zip(ops, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    cols = ["measured_s", "fitted_s", "datasheet_prior_s"]
    for ax, fold in zip(axes.flat, folds):
        d = points[points["fold"] == fold]
        for op in ops:
            e = d[d["op"] == op]
            ax.scatter(1e3 * e["measured_s"], 1e3 * e["fitted_s"], s=18, color=colors[op], label=f"{op} (fitted)")
            ax.scatter(1e3 * e["measured_s"], 1e3 * e["datasheet_prior_s"], s=18, marker="x", color=colors[op], alpha=0.5)
        lo, hi = 1e3 * float(d[cols].to_numpy().min()) / 1.5, 1e3 * float(d[cols].to_numpy().max()) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for k in (0.8, 1.2):
            ax.plot([lo, hi], [k * lo, k * hi], "k:", lw=0.6)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms", ylabel="predicted ms",
               title=fold)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(folds):]:
        ax.axis("off")
    fig.suptitle("held-out points: predicted vs measured (dot: fitted on the rest, x: datasheet prior; dotted: ±20%)",
                 fontsize=9)
    save_figure_atomic(fig, path)
    plt.close(fig)


def write_report(res: BenchFitResult, out: str | Path, command: str, profile_path: str) -> list[Path]:
    """Write the report folder; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fit = res.profile.fit
    summary = {"command": command, "date": fit["date"], "hardware": res.bench.hardware.name,
               "hardware_note": fit["hardware_note"], "engine": res.profile.engine, "archs": fit["archs"],
               "runs": fit["bench_runs"], "profile": profile_path,
               "profile_values": {n: getattr(res.profile, n).value for n in PARAM_NAMES if getattr(res.profile, n)},
               "folds": res.fold_fits, "held_out": res.errors.round(6).to_dict(orient="records"), "notes": res.notes}
    files = [write_atomic(out / "report.md", report_markdown(res, command, profile_path)),
             write_atomic(out / "summary.json", json_text(summary, indent=1))]
    if len(res.points):
        files.append(write_atomic(out / "heldout.csv", res.points.to_csv(index=False, float_format="%.6g")))
        plot_heldout(res.points, out / "heldout.png")
        files.append(out / "heldout.png")
    return files
