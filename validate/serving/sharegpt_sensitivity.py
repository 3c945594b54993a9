"""How much the released-table predictions depend on the assumed spread of ShareGPT's lengths.

ShareGPT's prompt and reply lengths are not in the shared data, so their spread is an assumption
(:data:`simulator.engines.serving.bench_workload.SHAREGPT_SIGMA`). This replays the released table's ShareGPT runs
(:func:`calibrate.fit.gpustack_import.dataset_of`) at several spreads -- 0 is every request at the run's mean
lengths, what the predictions did before -- with the engine catalog's host terms held fixed (the fit on every run,
so the figures isolate the spread; they are not held-out figures), and writes the median |error| and bias per GPU
and per load (burst / closed loop)::

    specsim validate sharegpt-spread --out reports/serving-released --force   (~10 min on 2 cores)

Output: ``sharegpt-sigma.csv`` (one row per run and spread) and ``sharegpt-sigma.md``.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fit.host_fit import FIGS, MIN_FIT_OUTPUT
from simulator.inputs.loading import write_atomic

SIGMAS = (0.0, 0.5, 1.0, 1.5)


def _one(args):
    from calibrate.fit.released_predict import measured_figures, predict_released

    run, sigma = args
    p, m = predict_released(run, sharegpt_sigma=sigma), measured_figures(run)
    row = {"run": run.key, "gpu": run.gpu, "model": run.model, "tp": run.tp, "version": run.version,
           "load": "burst" if run.concurrency is None else f"{run.concurrency} users", "sigma": sigma,
           "batch_mean": p["batch_mean"]}
    for f in FIGS:
        row[f"meas_{f}"], row[f"pred_{f}"], row[f"err_{f}"] = m[f], p[f], p[f] / m[f] - 1.0
    return row


def sensitivity(sigmas=SIGMAS, workers: int = 2) -> pd.DataFrame:
    from calibrate.fit.gpustack_import import released_runs

    runs = [r for r in released_runs()[0] if r.dataset == "sharegpt" and r.output_tokens >= MIN_FIT_OUTPUT]
    jobs = [(r, s) for s in sigmas for r in runs]
    with ProcessPoolExecutor(workers) as ex:
        return pd.DataFrame(list(ex.map(_one, jobs)))


def summarise(t: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (sigma, group), g in [((s, "all"), t[t.sigma == s]) for s in sorted(t.sigma.unique())] + \
            [((s, k), g) for (s, k), g in t.groupby(["sigma", t.gpu + " " + t.load])]:
        row = {"group": group, "sigma": sigma, "runs": len(g)}
        for f in FIGS:
            e = g[f"err_{f}"].to_numpy()
            row[f"{f} median |err| %"] = round(100 * float(np.median(np.abs(e))), 1)
            row[f"{f} bias %"] = round(100 * float(np.median(e)), 1)
        out.append(row)
    return pd.DataFrame(out).sort_values(["group", "sigma"], kind="stable")


def write(out: Path, command: str, workers: int = 2) -> str:
    """Run the sensitivity and write ``sharegpt-sigma.csv`` and ``sharegpt-sigma.md`` into ``out``; the markdown."""
    t = sensitivity(workers=workers)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "sharegpt-sigma.csv", t.to_csv(index=False))
    s = summarise(t)
    cols = list(s.columns)
    md = ["# ShareGPT runs: sensitivity to the assumed spread of lengths", "", f"Command: `{command}`", "",
          "The released table's ShareGPT runs (>= 16 output tokens) replayed with prompt and reply lengths lognormal "
          "of spread sigma (sd of log length; 0: every request at the run's means), clipped as vLLM's ShareGPT "
          "sample is, at the runs' measured means; host terms: the engine catalog's (fitted on every run at the "
          "default spread), held fixed -- in-sample, for the spread's effect only. Median |predicted / measured - 1| "
          "and median signed error, %.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(v) for v in r) + " |" for r in s.itertuples(index=False)]
    text = "\n".join(md) + "\n"
    write_atomic(out / "sharegpt-sigma.md", text)
    return text
