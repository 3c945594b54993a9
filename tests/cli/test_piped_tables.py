"""Tables read through a real pipe (stdout not a terminal, COLUMNS unset): every row on one line, every numeric
cell parses, no name split over lines (simulator.report.report_table.print_rich_table)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"-", "yes", "no", "unknown"}


def piped(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "specsim_cli", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def body(out: str) -> list[list[str]]:
    """The cells of each line between the header rule and the next blank line (cells: 2+ spaces apart)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if set(ln.strip()) == {"─"})
    rows = []
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return rows


def check_rows(rows: list[list[str]], names: set[str], n_rows: int) -> None:
    assert len(rows) == n_rows, rows  # a wrapped cell would add a continuation line
    assert len({len(r) for r in rows}) == 1, rows
    for r in rows:
        assert r[0] in names, r  # the name whole, on its row
        for cell in r[1:]:
            if cell not in WORDS:
                float(cell)  # raises on a split number such as "0.958" / "6"


def test_whatif_breakdown_piped_is_whole():
    out = piped("simulate", "whatif", "reference-a6000-qwq32b", "--system", "specreason-decode", "--system", "vanilla-base",
                "--gamma", "3", "--threshold", "5,7", "--columns", "breakdown")
    check_rows(body(out), {"vanilla-base", "specreason-decode"}, 3)
    best = [ln for ln in out.splitlines() if ln.startswith("Best: ")]
    assert len(best) == 1 and best[0].rstrip().endswith(".")  # the Best line whole on one line (grep finds it)


def test_des_table_piped_is_whole():
    out = piped("simulate", "whatif", "reference-a6000-qwq32b", "--engine", "des", "--requests", "20", "--system", "vanilla-base",
                "--system", "specreason", "--threshold", "3,5,7")
    rows = body(out)
    check_rows(rows, {"vanilla-base", "specreason"}, 4)
    assert len(rows[0]) >= 10  # p50/p90/p99 and the interval are there too


def test_capacity_piped_is_whole():
    out = piped("simulate", "capacity", "cpu-smollm2", "--system", "vanilla-base", "--system", "specreason", "--threshold", "5",
                "--qps", "1,2", "--requests", "20", "--workers", "1")
    check_rows(body(out), {"vanilla-base", "specreason t=5"}, 4)


@pytest.mark.parametrize("what", ["hardware", "scenarios", "engines"])
def test_list_piped_one_line_per_entry(what):
    out = piped("list", what)
    lines = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert lines and all(ln.split("│")[1].strip() for ln in lines)  # no continuation line (empty first cell)
