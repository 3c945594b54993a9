"""One table of the GPU campaign's held-out figures (issue 15), from what ``scripts/gpu_campaign.sh analyze`` wrote.

    python -m validate.gpu_campaign_summary RES/analysis        # -> RES/analysis/summary.md (+ printed)

Rows: the static-bench folds of ``calibrate fit-bench`` (``static-bench/summary.json``: every op together, the
refitted model beside the transferred and datasheet priors), then every ``specsim validate`` report folder
(``configs-*``, ``transfer-*``, ``from-*``): per-request end-to-end error of the replay over the runs the drift
check did not flag (``replay_requests.csv``). Held-out figures only; nothing here is refitted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.loading import write_atomic

WHAT = {"configs": "fit on vanilla-base, vanilla-small, specreason-t0 -> the other configurations",
        "transfer": "the first pair's fit -> this pair", "from-bench": "static-bench profile -> every run",
        "from-prior": "transferred GPU prior -> every run", "from-datasheet": "datasheet-era prior -> every run"}


def _pct(x: float) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def summarize(analysis: str | Path) -> str:
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(f"error: {args[0] if args else 'ANALYSIS'}: expected the analysis folder of scripts/gpu_campaign.sh "
              "analyze", file=sys.stderr)
        return 2
    text = summarize(args[0])
    write_atomic(Path(args[0]) / "summary.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
