"""How far to trust a serving prediction, from the released runs' held-out errors: the catalog file
``simulator/catalog/serving_accuracy.yaml`` (read by :mod:`simulator.catalog.serving_accuracy`, quoted by every
capacity table and report).

Reads a released serving report folder's ``heldout-gpu.csv`` (``specsim validate serving --released ... --holdout
gpu,version``: each run predicted with host terms fitted without its GPU) and writes, per GPU and pooled over GPUs,
per regime (:func:`validate.serving.regimes.regime`) and over all regimes: the fitted runs' count and, per figure
(TPOT, ITL, TTFT, output throughput), the median and p90 of |error| and the median signed error (bias), in percent
(:func:`calibrate.fit.host_fit.summary`, the report's own summary); from ``heldout-version.csv`` the same pooled
over every run, each predicted without its version's runs (``versions_held_out``). Nothing is refitted; the file is
derived, so a refit that changes the report changes it (a test compares the two).

    specsim validate serving-accuracy reports/serving-released --out simulator/catalog/serving_accuracy.yaml --force
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.catalog.serving_accuracy import FIGURES, POOLED

HEADER = ("# Held-out error of plain vLLM serving predictions, by GPU and regime\n"
          "# (simulator/catalog/serving_accuracy.py; derived from a released serving report,\n"
          "# validate/serving/accuracy.py). Regenerate, do not edit by hand:\n")


def _cells(s: pd.DataFrame, key: str) -> dict:
    """One summary row (``key``) as ``{runs, figure: {median, p90, bias}}`` (percent, 3 significant digits)."""
    r = s.set_index("key").loc[key]
    out = {"runs": int(r["runs"])}
    for f in FIGURES:
        out[f] = {"median": float(f"{r[f'{f} median |err| %']:.3g}"), "p90": float(f"{r[f'{f} p90 |err| %']:.3g}"),
                  "bias": float(f"{r[f'{f} bias %']:.3g}")}
    return out


def _read(report: Path, fold: str) -> pd.DataFrame:
    """``report``'s ``heldout-<fold>.csv``, checked, with each run's regime."""
    from simulator.errors import InputError
    from validate.serving.regimes import regime

    f = Path(report) / f"heldout-{fold}.csv"
    if not f.is_file():
        raise InputError(str(f), None, "a released serving report's held-out table (specsim validate serving "
                         f"--released ... --holdout {fold})")
    h = pd.read_csv(f, dtype={"version": str})  # "0.10" is a version, not 0.1
    need = {"gpu", "version", "in_fit", "concurrency", "dataset", "input_tokens", "output_tokens",
            *(f"err_{x}" for x in FIGURES)}
    missing = sorted(need - set(h.columns))
    if missing:
        raise InputError(str(f), None, f"columns missing: {', '.join(missing)}")
    return h.assign(regime=h.apply(regime, axis=1))


def _groups(h: pd.DataFrame, by: str) -> dict:
    """{group: {regime: cells}} per ``by`` value and pooled (:data:`POOLED`), "all" first, then the regimes."""
    from calibrate.fit.host_fit import summary
    from validate.serving.regimes import REGIMES

    parts = [h.assign(g=h[by].astype(str)), h.assign(g=POOLED)]
    both = pd.concat(parts + [p.assign(regime="all") for p in parts])
    both["key"] = both["g"] + " | " + both["regime"]
    s = summary(both, "key")
    versions = both[both["in_fit"]].groupby("key")["version"].agg(lambda v: sorted(set(v)))
    out: dict = {}
    for key in s["key"]:
        if key == "all":
            continue
        g, reg = key.split(" | ", 1)
        out.setdefault(g, {})[reg] = {**_cells(s, key), "versions": list(versions[key])}
    order = ["all", *REGIMES]
    return {g: {r: out[g][r] for r in sorted(out[g], key=order.index)}
            for g in sorted(out, key=lambda g: (g == POOLED, g))}


def accuracy_doc(report: Path, command: str, date: str) -> dict:
    """The catalog document of ``report``'s ``heldout-gpu.csv`` (per GPU) and ``heldout-version.csv`` (pooled over the
    runs, each predicted without its version's: what a version no run measured can expect) (module docstring)."""
    h, hv = _read(report, "gpu"), _read(report, "version")
    fitted = h[h["in_fit"]]
    source = (f"{Path(report).as_posix()}/heldout-gpu.csv and heldout-version.csv (each run predicted with host terms "
              "fitted without its GPU's, or its version's, runs)")
    return {"provenance": {"kind": "derived", "source": source,
                           "command": command, "date": date,
                           "engine_versions": sorted({str(v) for v in fitted["version"]})},
            "gpus": _groups(h, "gpu"),
            "versions_held_out": _groups(hv, "version")[POOLED]}


def write(report: Path, out: Path, command: str, date: str) -> str:
    """Write the catalog file ``out`` from ``report``; returns its text."""
    import yaml

    from simulator.inputs.loading import write_atomic

    text = HEADER + f"#   {command}\n" + yaml.safe_dump(accuracy_doc(report, command, date), sort_keys=False, width=120,
                                                                       default_flow_style=None)
    write_atomic(Path(out), text)
    return text
