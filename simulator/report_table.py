"""Rendering of results DataFrames: rich table, CSV, JSON (the CLI's only output paths)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

TABLE_COLUMNS = {
    "hardware": "hw", "tp": "tp", "system": "system", "gamma": "γ", "threshold": "thr", "first_n": "n0",
    "latency_s": "latency s", "speedup": "speedup", "small_step_fraction": "small frac",
    "acceptance_length": "acc len", "thinking_tokens": "think tok", "small_decode_s": "small dec",
    "scoring_s": "scoring", "base_decode_s": "base dec", "draft_s": "draft", "verify_s": "verify",
    "call_overhead_s": "calls", "latency_p90_s": "p90 s", "latency_p99_s": "p99 s", "ci_low_s": "ci lo", "ci_high_s": "ci hi",
}


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return "-"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def render_table(df: pd.DataFrame, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    cols = [c for c in TABLE_COLUMNS if c in df.columns]
    for c in cols:
        t.add_column(TABLE_COLUMNS[c], justify="left" if c in ("hardware", "system") else "right")
    for row in df[cols].itertuples(index=False):
        t.add_row(*(_fmt(v) for v in row))
    Console(width=max(160, 12 * len(cols))).print(t)


def write_output(df: pd.DataFrame, fmt: str, out: Path | None, title: str, meta: dict) -> None:
    if fmt == "table":
        render_table(df, title)
        if out is not None:
            _atomic_write(out, df.to_csv(index=False))
        return
    if fmt == "csv":
        text = df.to_csv(index=False)
    else:
        text = json.dumps({"meta": meta, "results": json.loads(df.to_json(orient="records"))}, indent=1)
    if out is None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        _atomic_write(out, text)


def _atomic_write(path: Path, text: str) -> None:
    """Write next to the target then rename: an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
