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

import pandas as pd

from calibrate.fit.host_fit import MIN_FIT_OUTPUT, predict_table, summary
from simulator.inputs.loading import write_atomic
from validate.serving.released import md_table

SIGMAS = (0.0, 0.5, 1.0, 1.5)


def _one(args) -> pd.DataFrame:
    run, sigma = args
    return predict_table([run], sharegpt_sigma=sigma).assign(sigma=sigma)


def sensitivity(sigmas=SIGMAS, workers: int = 2) -> pd.DataFrame:
    """One :func:`calibrate.fit.host_fit.predict_table` row per ShareGPT run (>= 16 output tokens) and spread, with
    the catalog's host terms."""
    from calibrate.fit.gpustack_import import released_runs

    runs = [r for r in released_runs()[0] if r.dataset == "sharegpt" and r.output_tokens >= MIN_FIT_OUTPUT]
    jobs = [(r, s) for s in sigmas for r in runs]
    with ProcessPoolExecutor(workers) as ex:
        t = pd.concat(list(ex.map(_one, jobs)), ignore_index=True)
    return t.assign(load=t.concurrency.map(lambda c: f"{c} users" if c else "burst"))


def summarise(t: pd.DataFrame) -> pd.DataFrame:
    """Per spread: :func:`calibrate.fit.host_fit.summary` over GPU x load groups and all runs."""
    parts = [summary(d.assign(group=d.gpu + " " + d.load), "group").assign(sigma=s) for s, d in t.groupby("sigma")]
    out = pd.concat(parts, ignore_index=True)
    return out[["group", "sigma", *[c for c in out.columns if c not in ("group", "sigma")]]].sort_values(
        ["group", "sigma"], kind="stable")


def write(out: Path, command: str, workers: int = 2) -> str:
    """Run the sensitivity and write ``sharegpt-sigma.csv`` and ``sharegpt-sigma.md`` into ``out``; the markdown."""
    t = sensitivity(workers=workers)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "sharegpt-sigma.csv", t.to_csv(index=False))
    md = ["# ShareGPT runs: sensitivity to the assumed spread of lengths", "", f"Command: `{command}`", "",
          "The released table's ShareGPT runs (>= 16 output tokens) replayed with prompt and reply lengths lognormal "
          "of spread sigma (sd of log length; 0: every request at the run's means), clipped as vLLM's ShareGPT "
          "sample is, at the runs' measured means; host terms: the engine catalog's (fitted on every run at the "
          "default spread), held fixed -- in-sample, for the spread's effect only. Median and p90 of "
          "|predicted / measured - 1| and the median signed error, %.", "", md_table(summarise(t))]
    text = "\n".join(md) + "\n"
    write_atomic(out / "sharegpt-sigma.md", text)
    return text
