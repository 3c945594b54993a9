"""A screen of a model change on the released serving runs, in minutes (the held-out validation takes ~50).

Every released run (:func:`calibrate.fit.gpustack_import.released_runs`) predicted with the catalog as it stands --
the engine catalog's host terms fixed, nothing refitted (:func:`calibrate.fit.host_fit.predict_table`) -- and, with
``--against``, side by side with an earlier screen's table: which runs a change moves, by how much, and the medians
per GPU before and after. Not a validation (the host terms were fitted on every run); how the held-out figures
have followed it is in docs/results.md. The committed ``reports/serving-released/screen.csv`` is the catalog's own::

    specsim validate serving-screen --out /tmp/screen --against reports/serving-released/screen.csv

Output: ``screen.csv`` (one row per run: predicted and measured figures, signed errors ``err_<figure>``) and
``screen.md`` (median |error| per GPU and overall; with ``--against``, the earlier screen's on the same runs and the
runs that moved most).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from calibrate.fit.host_fit import FIGS, predict_table, summary
from simulator.errors import InputError
from simulator.inputs.loading import write_atomic
from validate.serving.released import md_table

MOVED = 15  # runs listed as the ones a change moved most


def _one(run) -> pd.DataFrame:
    return predict_table([run])


def screen(workers: int = 2, runs=None) -> pd.DataFrame:
    """One :func:`predict_table` row per released run (``runs``: these instead), the catalog's host terms."""
    from calibrate.fit.gpustack_import import released_runs

    runs = released_runs()[0] if runs is None else runs
    with ProcessPoolExecutor(workers) as ex:
        return pd.concat(list(ex.map(_one, runs)), ignore_index=True)


def read_against(path: Path) -> pd.DataFrame:
    """An earlier screen's table, checked (errors name the file and the column)."""
    if not Path(path).is_file():
        raise InputError(str(path), None, "no such file (an earlier `specsim validate serving-screen` screen.csv)")
    try:
        t = pd.read_csv(path)
    except (ValueError, pd.errors.ParserError) as e:
        raise InputError(str(path), None, f"not a CSV table ({e})") from None
    for c in ("run", "gpu", "in_fit", *[f"err_{f}" for f in FIGS]):
        if c not in t.columns:
            raise InputError(str(path), c, "missing column (a screen.csv of `specsim validate serving-screen`)")
    return t


def compare(now: pd.DataFrame, before: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per GPU and overall: runs and median |error| % of each figure before and now, on the runs both hold; the runs
    whose |TPOT error| moved most, with each figure's error before and now)."""
    errs = [f"err_{f}" for f in FIGS]
    m = now.merge(before[["run", *errs]], on="run", suffixes=("", "_before"))
    was = m.drop(columns=errs).rename(columns={f"{e}_before": e for e in errs})
    a, b = summary(was, "gpu").set_index("gpu"), summary(m, "gpu").set_index("gpu")  # fitted runs (in_fit) only
    per_gpu = pd.DataFrame({"runs": b["runs"]}, index=b.index)
    for f in FIGS:
        per_gpu[f"{f} before %"], per_gpu[f"{f} now %"] = a[f"{f} median |err| %"], b[f"{f} median |err| %"]
    m = m[m.in_fit].assign(moved=(m["err_tpot_ms"].abs() - m["err_tpot_ms_before"].abs()).abs())
    cols = ["run", "gpu", "model", *[c for f in FIGS for c in (f"err_{f}_before", f"err_{f}")]]
    return per_gpu.reset_index(), m.sort_values("moved", ascending=False).head(MOVED)[cols]


def write(out: Path, command: str, against: Path | None = None, workers: int = 2, runs=None) -> str:
    """Screen the runs and write ``screen.csv`` and ``screen.md`` into ``out``; the markdown."""
    before = read_against(against) if against is not None else None  # a bad file fails before minutes of replay
    t = screen(workers, runs)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Released serving runs: a screen with the catalog as it stands", "", f"Command: `{command}`", "",
          "Every released run predicted with the engine catalog's host terms fixed (fitted on every run: not a "
          "held-out figure; validate/serving/screen.py). Median / p90 |error| and bias per GPU, runs with >= 16 "
          "output tokens:", "", md_table(summary(t, "gpu").round(1))]
    if before is not None:
        per_gpu, moved = compare(t, before)
        md += ["", f"Against `{against}` (the same runs), median |error| %:", "", md_table(per_gpu.round(1)), "",
               f"The {MOVED} runs whose |TPOT error| moved most (signed errors, before and now):", "",
               md_table(moved.round(3))]
    text = "\n".join(md) + "\n"
    write_atomic(out / "screen.csv", t.to_csv(index=False, float_format="%.6g"))
    write_atomic(out / "screen.md", text)
    return text
