"""How far to trust a serving prediction, from the released runs' held-out errors: the catalog file
``simulator/catalog/serving_accuracy.yaml`` (read by :mod:`simulator.catalog.serving_accuracy`, quoted by every
capacity table and report).

Reads a released serving report folder's ``heldout-gpu.csv`` (``specsim validate serving --released ... --holdout
gpu``: each run predicted with host terms fitted without its GPU) and writes, per GPU and pooled over GPUs, per regime
(:func:`validate.serving.regimes.regime`) and over all regimes: the fitted runs' count and, per figure (TPOT, ITL,
TTFT, output throughput), the median and p90 of |error| and the median signed error (bias), in percent
(:func:`calibrate.fit.host_fit.summary`, the report's own summary). Nothing is refitted; the file is derived, so a
refit that changes the report changes it (a test compares the two).

    specsim validate serving-accuracy reports/serving-released --out simulator/catalog/serving_accuracy.yaml --force
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.catalog.serving_accuracy import FIGURES, POOLED

HEADER = ("# Held-out error of plain vLLM serving predictions, by GPU and regime (simulator/catalog/serving_accuracy.py;\n"
          "# derived from a released serving report, validate/serving/accuracy.py). Regenerate, do not edit by hand:\n")


def _cells(s: pd.DataFrame, key: str) -> dict:
    """One summary row (``key``) as ``{runs, figure: {median, p90, bias}}`` (percent, 3 significant digits)."""
    r = s.set_index("key").loc[key]
    out = {"runs": int(r["runs"])}
    for f in FIGURES:
        out[f] = {"median": float(f"{r[f'{f} median |err| %']:.3g}"), "p90": float(f"{r[f'{f} p90 |err| %']:.3g}"),
                  "bias": float(f"{r[f'{f} bias %']:.3g}")}
    return out


def accuracy_doc(report: Path, command: str, date: str) -> dict:
    """The catalog document of ``report``'s ``heldout-gpu.csv`` (module docstring)."""
    from calibrate.fit.host_fit import summary
    from simulator.errors import InputError
    from validate.serving.regimes import REGIMES, regime

    f = Path(report) / "heldout-gpu.csv"
    if not f.is_file():
        raise InputError(str(f), None, "a released serving report's held-out table (specsim validate serving "
                         "--released ... --holdout gpu)")
    h = pd.read_csv(f, dtype={"version": str})  # "0.10" is a version, not 0.1
    need = {"gpu", "version", "in_fit", "concurrency", "dataset", "input_tokens", "output_tokens",
            *(f"err_{x}" for x in FIGURES)}
    missing = sorted(need - set(h.columns))
    if missing:
        raise InputError(str(f), None, f"columns missing: {', '.join(missing)}")
    h = h.assign(regime=h.apply(regime, axis=1))
    parts = [h.assign(g=h["gpu"]), h.assign(g=POOLED)]
    both = pd.concat(parts + [p.assign(regime="all") for p in parts])
    both["key"] = both["g"] + " | " + both["regime"]
    s = summary(both, "key")
    versions = both[both["in_fit"]].groupby("key")["version"].agg(lambda v: sorted(set(v)))
    gpus: dict = {}
    for key in s["key"]:
        if key == "all":
            continue
        g, reg = key.split(" | ", 1)
        gpus.setdefault(g, {})[reg] = {**_cells(s, key), "versions": list(versions[key])}
    fitted = h[h["in_fit"]]
    order = ["all", *REGIMES]
    return {"provenance": {"kind": "derived", "source": f"{f.as_posix()} (held out by GPU: each run predicted with host "
                                                        "terms fitted without its GPU's runs)",
                           "command": command, "date": date,
                           "engine_versions": sorted({str(v) for v in fitted["version"]})},
            "gpus": {g: {r: gpus[g][r] for r in sorted(gpus[g], key=order.index)}
                     for g in sorted(gpus, key=lambda g: (g == POOLED, g))}}


def write(report: Path, out: Path, command: str, date: str) -> str:
    """Write the catalog file ``out`` from ``report``; returns its text."""
    import yaml

    from simulator.inputs.loading import write_atomic

    text = HEADER + f"#   {command}\n" + yaml.safe_dump(accuracy_doc(report, command, date), sort_keys=False, width=120,
                                                                       default_flow_style=None)
    write_atomic(Path(out), text)
    return text
