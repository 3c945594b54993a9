"""Rendering of results DataFrames: rich table, CSV, JSON, parquet (the CLI's only output paths; which outputs a
command may write is simulator/output_contract.py's to check).

Tables show a chosen set of columns (``--columns``: a preset or a comma list); files always get every
column. No number or name is ever split over lines (:func:`print_rich_table`): piped or redirected, a
table prints at its full width; on a terminal only headers and names wrap, at spaces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.output_contract import file_format

# result column -> terminal header (units in the header; "s" = seconds per request)
TABLE_COLUMNS = {
    "hardware": "hw", "tp": "tp", "system": "system", "gamma": "γ", "threshold": "thr", "first_n": "first n",
    "latency_s": "latency s", "speedup": "speedup x", "small_step_fraction": "small step share",
    "acceptance_length": "tok per verify", "thinking_tokens": "think tok",
    "small_decode_s": "small dec s", "small_prefill_s": "small pre s", "scoring_s": "scoring s",
    "base_decode_s": "base dec s", "base_prefill_s": "base pre s", "draft_s": "draft s", "verify_s": "verify s",
    "call_overhead_s": "call overhead s", "other_s": "other s",
    "latency_p50_s": "p50 s", "latency_p90_s": "p90 s", "latency_p99_s": "p99 s", "ci_low_s": "ci lo s", "ci_high_s": "ci hi s",
}
BREAKDOWN = ["small_decode_s", "small_prefill_s", "scoring_s", "base_decode_s", "base_prefill_s", "draft_s", "verify_s",
             "call_overhead_s"]
_CONFIG = ["hardware", "tp", "system", "gamma", "threshold", "first_n", "label"]
PRESETS = {
    "summary": [*_CONFIG, "latency_s", "speedup", "small_step_fraction", "acceptance_length", "thinking_tokens",
                "latency_p50_s", "latency_p90_s", "latency_p99_s", "ci_low_s", "ci_high_s"],
    "breakdown": [*_CONFIG, "latency_s", *BREAKDOWN, "other_s"],
    "all": list(TABLE_COLUMNS),
}
COLUMNS_HELP = ("table columns: summary (default) | breakdown (latency split into its parts, which sum to it) | all | "
                "a comma list of result columns, e.g. system,gamma,latency_s,speedup (files get every column)")


def check_columns(columns: str | None, names: dict[str, str] | None = None, extra: tuple[str, ...] = (),
                  presets: tuple[str, ...] = tuple(PRESETS)) -> None:
    """A usage check before the job runs: every ``--columns`` name is a preset, a result column or a header."""
    names = TABLE_COLUMNS if names is None else names
    spec = (columns or "").strip()
    if not spec or spec in presets:
        return
    known = set(names) | set(names.values()) | set(extra)
    bad = [p.strip() for p in spec.split(",") if p.strip() and p.strip() not in known]
    if bad:
        raise InputError(None, "--columns", f"unknown column(s) {', '.join(map(repr, bad))}; choose a preset "
                         f"({', '.join(presets)}) or from {', '.join(names)}")


def with_remainder(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``other_s`` = latency − Σ breakdown when it is not ~0 anywhere (the breakdown then visibly sums up)."""
    parts = [c for c in BREAKDOWN if c in df.columns]
    if "latency_s" not in df.columns or not parts:
        return df
    rest = df["latency_s"] - df[parts].sum(axis=1)
    if (rest.abs() > 1e-6 * df["latency_s"].abs().clip(lower=1e-9)).any():
        df = df.assign(other_s=rest)
    return df


def choose_columns(df: pd.DataFrame, columns: str | None, names: dict[str, str], default: list[str]) -> list[str]:
    """``columns`` (preset name or comma list of result columns or headers) -> the df columns to show."""
    spec = (columns or "").strip()
    if not spec:
        wanted = default
    elif spec in PRESETS and names is TABLE_COLUMNS:
        wanted = PRESETS[spec]
    elif spec == "all":
        wanted = list(names)
    else:
        by_header = {v: k for k, v in names.items()}
        wanted = []
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            key = part if part in df.columns else by_header.get(part)
            if key is None:
                raise InputError(None, "--columns", f"unknown column {part!r}; choose from "
                                 f"{', '.join(c for c in df.columns)} or a preset ({', '.join(PRESETS)})")
            wanted.append(key)
    cols = [c for c in wanted if c in df.columns and not df[c].isna().all()]
    return cols or [c for c in default if c in df.columns]


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def fold_constant(df: pd.DataFrame, cols: list[str], names: dict[str, str], title: str) -> tuple[list[str], str]:
    """Configuration columns with one value in every row go to the title (narrower tables)."""
    keep, fixed = [], []
    for c in cols:
        if c in _CONFIG and c != "system" and len(df) and df[c].astype(str).nunique() == 1:
            v = _fmt(df[c].iloc[0])
            if v != "-":
                fixed.append(f"{names.get(c, c)} {v}")
        else:
            keep.append(c)
    return keep, title + (f" — {', '.join(fixed)}" if fixed else "")


def print_rich_table(t, stderr: bool = False, console=None) -> None:
    """Print a rich table so that no cell is cut inside a word: each column is at least as wide as its longest
    word (numbers and names never wrap); piped or redirected (not a terminal) with COLUMNS unset, at the
    table's full width (no wrapping at all); on a terminal or at a set COLUMNS, wider columns wrap at spaces and
    a table wider than that runs past it rather than split a value. ``console``: print there."""
    import os

    from rich.console import Console
    from rich.text import Text

    for col in t.columns:
        text = [c.plain if isinstance(c, Text) else str(c) for c in (col.header, *col.cells)]
        longest = max((Text(w).cell_len for c in text for w in c.split()), default=1)
        col.min_width = max(col.min_width or 0, longest)
    con = console or Console(stderr=stderr)
    need = con.measure(t, options=con.options.update_width(100_000))
    full = not con.is_terminal and not os.environ.get("COLUMNS")
    con.width = need.maximum if full else max(con.width, need.minimum)
    con.print(t, crop=False)  # rich may lay a narrowed table out wider than the width: never cut it


def print_line(text: str) -> None:
    """A line of prose under a table (stdout): like the tables, one line when piped with COLUMNS unset (grep
    finds it whole), else wrapped at spaces to the terminal's width or COLUMNS."""
    import os

    from rich.console import Console

    con = Console()
    con.print(text, markup=False, highlight=False, soft_wrap=not con.is_terminal and not os.environ.get("COLUMNS"))


def print_table(df: pd.DataFrame, title: str, cols: list[str], names: dict[str, str], caption: str | None = None) -> None:
    """A rich table of ``cols`` (:func:`print_rich_table`: values never split)."""
    from rich import box
    from rich.table import Table

    cols, title = fold_constant(df, cols, names, title)
    t = Table(title=title, caption=caption, show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False)
    for c in cols:  # headers on two lines (what / unit): narrow columns without wrapping values
        head = names.get(c, c)
        if " " in head and len(head) > 6:
            head = "\n".join(head.rsplit(" ", 1))
        t.add_column(head, justify="left" if c in ("hardware", "system", "label") else "right")
    for row in df[cols].itertuples(index=False):
        t.add_row(*(_fmt(v) for v in row))
    print_rich_table(t)


def render_table(df: pd.DataFrame, title: str, columns: str | None = None) -> None:
    df = with_remainder(df)
    cols = choose_columns(df, columns, TABLE_COLUMNS, PRESETS["summary"])
    if (columns or "").strip() == "breakdown":  # parts that are zero in every row say nothing here
        cols = [c for c in cols if c not in BREAKDOWN or (df[c].abs() > 0).any()]
    caption = None
    if all(c in cols for c in BREAKDOWN if c in df.columns and (df[c].abs() > 0).any()):
        caption = ("breakdown, seconds per request: the parts shown" + (" + other s" if "other_s" in cols else "")
                   + " sum to latency s (parts zero in every row left out)")
    print_table(df, title, cols, TABLE_COLUMNS, caption)


def write_output(df: pd.DataFrame, fmt: str, out: Path | None, title: str, meta: dict, columns: str | None = None) -> None:
    """Print (table) or write the results: CSV, JSON (meta + rows) or parquet (rows, meta in the schema's metadata),
    the file's format as :func:`simulator.output_contract.file_format` says."""
    if fmt == "table":
        render_table(df, title, columns)
        if out is not None and file_format(fmt, out) != "csv":
            write_output(df, file_format(fmt, out), out, title, meta)
        elif out is not None:
            _atomic_write(out, df.to_csv(index=False))
            wrote(out, f"{len(df)} rows, all {len(df.columns)} columns, CSV")
        return
    if fmt == "parquet":
        if out is None:
            raise InputError(None, "--format", "parquet is written to a file only: give --out NAME.parquet")
        write_parquet(df, out, meta)
        wrote(out, f"{len(df)} rows, all {len(df.columns)} columns, parquet")
        return
    if fmt == "csv":
        text = df.to_csv(index=False)
    else:
        text = json.dumps({"meta": meta, "results": json.loads(df.to_json(orient="records"))}, indent=1)
    if out is None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        _atomic_write(out, text)
        wrote(out, f"{len(df)} rows, {fmt.upper()}")


def wrote(path: Path | str, what: str = "") -> None:
    """The final line of a job: what was written where (stderr, so stdout stays the data)."""
    import sys

    print(f"wrote {path}" + (f" ({what})" if what else ""), file=sys.stderr)


def write_parquet(df: pd.DataFrame, path: Path, meta: dict) -> None:
    """``df`` as parquet at ``path``, atomically; ``meta`` (JSON) in the file's key-value metadata under ``specsim``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simulator.inputs.loading import replace_atomic

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"specsim": json.dumps(meta, default=str).encode()})
    replace_atomic(path, lambda tmp: pq.write_table(table, tmp))


def _atomic_write(path: Path, text: str) -> None:
    """Write next to the target then rename: an interrupted run never leaves half a file (simulator.inputs.loading)."""
    from simulator.inputs.loading import write_atomic

    write_atomic(path, text)


# capacity result column -> terminal header; "GPU" becomes the device kind for CPU replicas
CAPACITY_COLUMNS = {
    "rank": "rank", "label": "configuration", "hardware": "hw", "tp": "tp", "rate_qps": "offered req/s", "users": "users",
    "max_qps": "max req/s", "max_qps_lo": "95% lo", "max_qps_hi": "95% hi", "converged": "converged",
    "standing": "standing", "qps_per_gpu": "req/s per GPU", "latency_mean_s": "mean s", "latency_p99_s": "p99 s",
    "ttft_mean_s": "TTFT s", "queue_delay_mean_s": "queue s", "goodput_qps": "goodput req/s", "slo_met": "SLO met",
    "base_batch_mean": "base batch", "small_batch_mean": "small batch", "base_utilization": "base util",
    "small_utilization": "small util", "base_kv_occupancy_max": "base KV max", "cost_per_1000_requests": "cost/1000 req",
    "replicas": "replicas", "replicas_lo": "replicas at 95% lo", "gpus": "GPUs", "gpus_lo": "GPUs at 95% lo",
    "window_throughput_qps": "thr req/s", "throughput_ratio": "thr/offered",
    "queue_growth": "queue growth", "window_latencies": "window/latency", "sustain_tol": "tol",
    "latency_drift": "drift x", "evaluations": "sims",
}
CAPACITY_PRESETS = {
    "summary": ["rank", "label", "hardware", "tp", "rate_qps", "users", "max_qps", "max_qps_lo", "max_qps_hi", "converged",
                "standing", "qps_per_gpu", "latency_p99_s", "goodput_qps", "slo_met", "cost_per_1000_requests", "replicas",
                "replicas_lo", "gpus", "gpus_lo", "window_throughput_qps", "throughput_ratio", "queue_growth",
                "latency_drift", "evaluations"],
    "all": list(CAPACITY_COLUMNS),
}
from simulator.engines.serving.metrics import DRIFT_LIMIT  # noqa: E402  (the rule lives there)


def render_capacity(df: pd.DataFrame, title: str, columns: str | None = None, currency: str = "USD") -> None:
    names = dict(CAPACITY_COLUMNS, cost_per_1000_requests=f"cost/1000 req {currency}")
    if "hardware" in df.columns and len(df) and (df["hardware"].astype(str) == "cpu").all():
        names.update(qps_per_gpu="req/s per CPU host", gpus="CPU hosts", gpus_lo="CPU hosts at 95% lo")
    spec = (columns or "").strip()
    default = CAPACITY_PRESETS["summary"]
    cols = choose_columns(df, None if spec in ("", "summary") else ("all" if spec == "all" else spec), names, default)
    notes = ["thr req/s: completed while requests arrive, at the rate shown; thr/offered >= 1 - tol to count as "
             "sustained" if "window_throughput_qps" in cols else "",
             "goodput req/s: within the SLO, per second of the whole run (fill and drain included, as vLLM's "
             "--goodput)" if "goodput_qps" in cols else "",
             f"drift x: last / second quarter of arrivals' latency (<= {DRIFT_LIMIT:g} to count as sustained)"
             if "latency_drift" in cols else "", "sims: simulations the search ran" if "evaluations" in cols else ""]
    notes = [n for n in notes if n]
    print_table(df, title, cols, names, caption="; ".join(notes) + ". See specsim simulate capacity --help." if notes else None)


BEST_GAMMA_COLUMNS = {"hardware": "hw", "tp": "tp", "system": "system", "threshold": "t", "users": "users", "best_gamma": "best γ",
                      "tied_gammas": "γ within 5%", "median_tpot_ms": "TPOT ms", "output_tok_per_s": "output tok/s",
                      "request_per_s": "req/s", "speedup_vs_gamma0": "x vs γ=0", "rule_gamma": "rule γ",
                      "adaptive_gamma_mean": "adaptive mean γ", "adaptive_tpot_ms": "adaptive TPOT ms",
                      "adaptive_tok_per_s": "adaptive tok/s", "adaptive_vs_best": "adaptive / best"}


def render_best_gamma(df: pd.DataFrame, title: str) -> None:
    cols = [c for c in BEST_GAMMA_COLUMNS if c in df.columns]
    print_table(df, title, cols, BEST_GAMMA_COLUMNS,
                caption="best γ: highest output throughput at that closed-loop user count (same seed for every γ); "
                        "TPOT: median time per output token; rule γ: the per-iteration expected-goodput rule at the "
                        "level's mean batch (simulator/engines/gamma_choice.py); adaptive: γ re-chosen by that rule at every "
                        "engine iteration from the running batch (up to the largest γ), its throughput / the best fixed γ's.")


def _dur(s: float) -> str:
    if s != s:
        return "?"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


class job:
    """Say what a long job is doing while it runs (stderr): after ``after_s`` seconds a line saying what runs
    (a spinner with the elapsed time on a terminal), and ``done in N s`` at the end -- so no job is silent for
    minutes, and a quick job or an input error prints nothing extra. Off a terminal (a log, a pipe, a test) the
    line waits at least ``QUIET_S``: the spinner on a terminal is erased, a printed line is not, and a loaded
    machine can take several seconds to read a command's inputs and refuse them."""

    QUIET_S = 15.0

    def __init__(self, what: str, after_s: float = 2.0):
        self.what, self.after_s = what, after_s

    def _announce(self) -> None:
        import sys

        self.announced = True
        if self.console.is_terminal:
            self.status = self.console.status(f"{self.what} ...")
            self.status.__enter__()
        else:
            print(f"{self.what} ...", file=sys.stderr, flush=True)

    def __enter__(self):
        import threading
        import time

        from rich.console import Console

        self.t0 = time.perf_counter()
        self.console = Console(stderr=True)
        self.status, self.announced = None, False
        wait = self.after_s if self.console.is_terminal else max(self.after_s, self.QUIET_S)
        self.timer = threading.Timer(wait, self._announce)
        self.timer.daemon = True
        self.timer.start()
        return self

    def progress(self, done: int, total: int, row: dict | None = None, unit: str = "done") -> None:
        """One unit of ``total`` finished: the spinner's text on a terminal, else one line (stderr) with the
        elapsed time and an ETA of this stage from its mean time per unit so far (units differ in cost: a rough
        figure). A stage ends when done == total; the next one's clock starts there."""
        import sys
        import time

        now = time.perf_counter()
        t0 = getattr(self, "_stage_t0", self.t0)
        eta = (now - t0) / done * (total - done) if done else float("nan")
        what = f" (last: {row['label']})" if row and "label" in row else ""
        text = (f"{self.what.split(':')[0]}: {done}/{total} {unit}, {_dur(now - self.t0)} elapsed, "
                f"ETA ~{_dur(eta)} for this stage{what}")
        if done == total:
            self._stage_t0 = now
        if self.status is not None:
            self.status.update(text)
        elif done == total or time.perf_counter() - getattr(self, "_last", -1e9) >= self.every_s:
            self._last = time.perf_counter()
            print(text, file=sys.stderr, flush=True)
            self.announced = True

    every_s = 5.0  # at most one progress line per this many seconds off a terminal (the last always)

    def __exit__(self, et, ev, tb):
        import sys
        import time

        self.timer.cancel()
        if self.status is not None:
            self.status.__exit__(et, ev, tb)
        if et is None and self.announced:
            print(f"{self.what}: done in {time.perf_counter() - self.t0:.1f} s", file=sys.stderr, flush=True)
        return False
