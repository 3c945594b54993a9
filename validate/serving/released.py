"""``specsim validate serving --released DIR``: the released `vllm bench serve` tables predicted held out.

Imports the table (:mod:`calibrate.fit.gpustack_import`), fits the engine host terms per version
(:mod:`calibrate.fit.host_fit`) on all runs but the held-out group (``gpu``: leave one GPU out; ``version``: leave
one vLLM version out), predicts the held-out runs and writes: ``heldout-<by>.csv`` (one row per run: measured,
predicted, errors), ``async-pairs-<by>.csv`` (runs differing only in async scheduling: the measured and predicted
throughput ratios, :func:`async_pairs`), ``summary-<by>-by-version.csv`` / ``summary-<by>-by-gpu.csv`` (median and
p90 |error| and bias of mean TPOT, median ITL, mean TTFT, output throughput; the fit uses the last three), the fits (``fits-<by>.json``), the skipped rows and ``report.md``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simulator.inputs.loading import write_atomic


def md_table(df: pd.DataFrame) -> str:
    """A markdown table of ``df``, floats with one decimal."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(f"{x:.1f}" if isinstance(x, float) else str(x) for x in r) + " |")
    return "\n".join(lines)


PAIR_KEYS = ("doc", "gpu", "model", "weight_dtype", "tp", "requests", "input_tokens", "concurrency")


def async_pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Runs that differ only in ``--async-scheduling`` (same doc, GPU, model, dtype, TP, prompts; the output lengths
    as the client counted them may differ by a few tokens; the first of each setting where a doc repeats one): what
    async scheduling bought, measured and predicted, as the ratio of output throughputs (on / off). The pairs test the
    host model's form (how much of the host work the overlap hides), which the per-run errors do not isolate."""
    t = table[table.in_fit].assign(doc=table.run.str.split("#").str[0])
    rows = []
    for key, d in t.groupby(list(PAIR_KEYS)):
        on, off = d[d.async_scheduling.astype(bool)], d[~d.async_scheduling.astype(bool)]
        if on.empty or off.empty:
            continue
        a, b = on.iloc[0], off.iloc[0]
        m, p = a.meas_out_tps / b.meas_out_tps, a.pred_out_tps / b.pred_out_tps
        rows.append({**dict(zip(PAIR_KEYS, key)), "version": a.version, "batch_mean": round(float(b.batch_mean)),
                     "measured on/off": m, "predicted on/off": p, "error": p / m - 1.0})
    return pd.DataFrame(rows)


def gpu_label_section(runs, out: Path, as_labelled: bool) -> list[str]:
    """The report's "Which H100" section (:mod:`validate.serving.gpu_labels`) and its two tables' CSV files."""
    from validate.serving.gpu_labels import itl_ratios, label_evidence

    ratios, evidence = itl_ratios(runs), label_evidence(runs)
    write_atomic(out / "gpu-label-itl-ratios.csv", ratios.to_csv(index=False))
    write_atomic(out / "gpu-label-evidence.csv", evidence.to_csv(index=False))
    pct = {c: (100 * evidence[c]).round(1) for c in ("itl_bias_as_labelled", "itl_bias_as_other")}
    return ["## Which H100 measured each doc\n",
            ("Every run on the GPU its doc names (--as-labelled)." if as_labelled else
             "Runs of the docs in calibrate.fit.gpustack_import.MEASURED_ON are predicted on the GPU their own "
             "decode steps show (validate/serving/gpu_labels.py); --as-labelled keeps every doc's label.") + "\n",
            "Same model and load, A100 doc / H100 doc median ITL where the median step decodes over 32k-token contexts "
            "(memory-bound: the bandwidth ratio; an H100 SXM / A100 1.64, an H100 PCIe / A100 0.98):\n",
            md_table(ratios.round(3)) if len(ratios) else "(no such pair)", "",
            "Median signed error of the predicted median ITL, random prompts of 2k tokens and more, catalog host terms, "
            "on the labelled GPU and on the other H100 (%):\n",
            md_table(evidence.assign(**pct)) if len(evidence) else "(no H100 doc)", ""]


def fit_folds(runs: list, holdouts: list[str], fit_all: bool, workers: int | None = None,
              fold=None) -> tuple[dict, dict | None]:
    """({by: (held-out table, {value: fitted terms})}, the fit on every run or None): every fold of every hold-out
    and the fit on all runs as tasks of one pool of ``workers`` processes (``Workers``; 1: this process), the
    folds training on the most runs started first. Each task is a function of its arguments: the result does not
    depend on ``workers``. ``fold``: the task (default ``calibrate.fit.host_fit.holdout_fold``; a module-level
    function of the same signature)."""
    from calibrate.fit.host_fit import holdout_fold, holdout_values, joined_folds
    from simulator.studies.capacity.parallel import Workers

    fold = fold or holdout_fold

    tasks = [(runs, by, v) for by in holdouts for v in holdout_values(runs, by)]
    tasks += [(runs, None, None)] if fit_all else []
    trained = [sum(by is None or getattr(r, by) != v for r in runs) for _, by, v in tasks]
    with Workers(workers) as pool:
        parts = pool.map(fold, tasks, cost=lambda j: trained[j])
    by_fold = {by: joined_folds([p for (_, b, _), p in zip(tasks, parts) if b == by], holdout_values(runs, by))
               for by in holdouts}
    return by_fold, (parts[-1][1] if fit_all else None)


def validate_released(folder: Path, holdouts: list[str], out: Path, command: str,
                      catalog: Path | None = None, date: str | None = None, as_labelled: bool = False,
                      workers: int | None = None) -> dict:
    """Held-out tables for each of ``holdouts``; with ``catalog``, also the fit on every run written there.
    ``as_labelled``: every run on the GPU its doc names (:data:`calibrate.fit.gpustack_import.MEASURED_ON`);
    ``workers``: processes for the fits (:func:`fit_folds`; default: one per CPU). Returns {by: overall summary row}."""
    from calibrate.fit.gpustack_import import released_runs
    from calibrate.fit.host_fit import summary, write_catalog

    runs, skipped = released_runs(folder, as_labelled)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "skipped.csv", pd.DataFrame(sorted(skipped.items()), columns=["reason", "rows"]).to_csv(index=False))
    lines = [f"# Released serving tables, held out\n\nCommand: `{command}`\n\nData: `{folder}`; {len(runs)} vLLM runs "
             f"predicted, skipped: " + "; ".join(f"{k}: {v}" for k, v in sorted(skipped.items())) + "\n",
             "Figures: median and p90 of |predicted / measured - 1| and the median signed error (bias), in %, over "
             "runs whose requests produce >= 16 tokens (the fitted rows), of mean TPOT, median ITL, mean TTFT and "
             "output throughput. Host terms fitted per version on median ITL, mean TTFT and output throughput "
             "(calibrate/fit/host_fit.py: t_seq, the API server's serial share t_fe and concurrent latency t_lat, "
             "async overlap); mean TPOT is reported, not fitted.\n"]
    lines += gpu_label_section(runs, out, as_labelled)
    head = {}
    folds, fitted = fit_folds(runs, holdouts, catalog is not None, workers)
    for by in holdouts:
        table, fits = folds[by]
        write_atomic(out / f"heldout-{by}.csv", table.to_csv(index=False))
        write_atomic(out / f"fits-{by}.json", json.dumps(fits, indent=1, sort_keys=True))
        lines.append(f"## Held out by {by}\n")
        for g in ("version", "gpu", "dataset"):
            s = summary(table, g)
            write_atomic(out / f"summary-{by}-by-{g}.csv", s.to_csv(index=False))
            lines += [f"Per {g}:\n", md_table(s), ""]
            if g == "version":
                head[by] = s[s[g] == "all"].iloc[0].to_dict()
        pairs = async_pairs(table)
        if not pairs.empty:
            write_atomic(out / f"async-pairs-{by}.csv", pairs.to_csv(index=False))
            shown = pairs.drop(columns=["doc", "requests", "concurrency"]).assign(
                **{c: pairs[c].map("{:.3f}".format) for c in ("measured on/off", "predicted on/off")},
                error=(100 * pairs["error"]).map("{:+.1f}%".format))
            lines += ["Async scheduling on / off, the same run otherwise (output throughput ratio):\n", md_table(shown), ""]
    if catalog is not None:
        write_atomic(out / "fits-all.json", json.dumps(fitted, indent=1, sort_keys=True))
        write_catalog(fitted, catalog, f"{folder.name}/serving_benchmarks.csv via `{command}`", date or "",
                      drop=tuple(sorted({r.version for r in runs} - set(fitted))))
        lines += ["## Fit on every run (written to the engine catalog)\n", "```", json.dumps(fitted, indent=1), "```"]
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    return head
