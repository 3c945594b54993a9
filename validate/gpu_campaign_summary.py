"""One table of the GPU campaign's held-out figures, from what ``scripts/gpu_campaign.sh analyze`` wrote.

    specsim validate gpu-summary RES/analysis        # -> RES/analysis/summary.md (+ printed)

Rows: the static-bench folds of ``calibrate fit-bench`` (``static-bench/summary.json``: every op together, the
refitted model beside the transferred and datasheet priors), then every ``specsim validate`` report folder
(``configs-*``, ``transfer-*``, ``from-*``): per-request end-to-end error of the replay over the runs the drift
check did not flag (``replay_requests.csv``). Held-out figures only; nothing here is refitted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

WHAT = {"configs": "fit on vanilla-base, vanilla-small, specreason-t0 -> the other configurations",
        "transfer": "the first pair's fit -> this pair", "from-bench": "static-bench profile -> every run",
        "from-prior": "transferred GPU prior -> every run", "from-datasheet": "datasheet-era prior -> every run"}


def _pct(x: float) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def summarize(analysis: str | Path) -> str:
    """The table's markdown (module docstring), from the analysis folder ``analysis``."""
    a = Path(analysis)
    lines = [f"# GPU campaign: held-out figures ({a})", "",
             "| what | held out | n | median APE | bias (median) | transferred prior | datasheet prior |",
             "|---|---|---|---|---|---|---|"]
    bench = a / "static-bench" / "summary.json"
    if bench.is_file():
        s = json.loads(bench.read_text(encoding="utf-8"))
        for r in (r for r in s.get("held_out", []) if r.get("op") == "all"):
            lines.append(f"| static-bench fit ({s.get('hardware')}) | {r['fold']} | {r['n']} | {_pct(r['fitted_median_ape'])} "
                         f"| {_pct(r['fitted_bias'])} | {_pct(r['transferred_prior_median_ape'])} "
                         f"| {_pct(r['datasheet_prior_median_ape'])} |")
    for d in sorted(p for p in a.iterdir() if (p / "replay_requests.csv").is_file()):
        r = pd.read_csv(d / "replay_requests.csv")
        if "drift_flag" in r:
            r = r[~r["drift_flag"].astype(bool)]
        err = r["predicted_s"] / r["measured_e2e_s"] - 1.0
        kind = next((k for k in sorted(WHAT, key=len, reverse=True) if d.name.startswith(k)), d.name)
        lines.append(f"| {WHAT.get(kind, kind)} | {d.name} | {len(r)} | {_pct(float(err.abs().median()) if len(r) else np.nan)} "
                     f"| {_pct(float(err.median()) if len(r) else np.nan)} | | |")
    return "\n".join(lines) + "\n"

