"""The measured op-record contract: one row per measured kernel/op point, ours, whatever the source.

A record file is a CSV (``RECORD_COLUMNS``, in this order) with a YAML sidecar ``<file>.provenance.yaml``
(source repository, commit, path, licence, importer, date, row counts). Units are suffixes; a
column that does not apply to an op is empty. Per-GPU shard shapes (after tensor parallelism) are
what the kernel ran on. ``op`` is one of ``OPS``:

- ``gemm``: y[m, n] = x[m, k] W[k, n] (bf16), m = ``tokens``;
- ``norm`` | ``rope`` | ``act`` | ``add`` | ``embedding``: elementwise / row ops over ``tokens`` rows of
  the model's shard (``hidden``, ``heads``, ``kv_heads``, ``head_dim``, ``intermediate``, ``tp``);
- ``attn_decode``: one layer's decode attention, ``batch`` sequences x 1 query token on ``kv_tokens``
  cached tokens each, ``heads`` / ``kv_heads`` on this GPU;
- ``attn_prefill``: one layer's prefill attention, ``batch`` x ``tokens`` new tokens on ``kv_tokens`` prior;
- ``allreduce``: one all-reduce of ``message_bytes`` over ``num_gpus`` GPUs (``link``: nvlink | pcie).
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.errors import InputError

SCHEMA_VERSION = 1
OPS = ("gemm", "norm", "rope", "act", "add", "embedding", "attn_decode", "attn_prefill", "allreduce")
# column -> (type, unit / meaning)
RECORD_COLUMNS: dict[str, tuple[str, str]] = {
    "source": ("str", "importer: vidur | aiconfigurator"),
    "source_file": ("str", "file the point came from, relative to the imported folder"),
    "source_row": ("int", "1-based data row in that file"),
    "gpu": ("str", "catalog hardware name (a100-80gb, a40, l40s, ...)"),
    "device": ("str", "the source's device / folder name"),
    "op": ("str", "one of OPS"),
    "source_op": ("str", "the source's own op name"),
    "model": ("str", "model the shapes come from (Vidur), empty for synthetic shapes"),
    "tp": ("int", "tensor-parallel degree the shard shapes assume (1 when not applicable)"),
    "tokens": ("int", "tokens in the pass (GEMM m; prefill new tokens per sequence)"),
    "n": ("int", "GEMM output features (shard)"),
    "k": ("int", "GEMM input features (shard)"),
    "batch": ("int", "sequences (attention)"),
    "kv_tokens": ("int", "tokens already in the KV cache per sequence (attention)"),
    "heads": ("int", "query heads on this GPU (attention) or the model's (row ops)"),
    "kv_heads": ("int", "KV heads on this GPU (attention) or the model's (row ops)"),
    "head_dim": ("int", "head dimension"),
    "hidden": ("int", "model hidden size (row ops)"),
    "intermediate": ("int", "model MLP intermediate size (row ops)"),
    "gated": ("int", "1: gated MLP (SwiGLU), 0: plain"),
    "message_bytes": ("float", "all-reduce payload in bytes (bf16)"),
    "num_gpus": ("int", "GPUs in the all-reduce"),
    "link": ("str", "nvlink | pcie (all-reduce)"),
    "backend": ("str", "kernel source / collective backend (vllm_graph, nccl, vllm_flash_attn, ...)"),
    "dtype": ("str", "compute dtype (bfloat16, fp16, fp8, ...)"),
    "version": ("str", "engine / library version of the measurement"),
    "time_s": ("float", "measured time of one op in seconds (the source's median, or its single latency)"),
}
INT_COLUMNS = [c for c, (t, _) in RECORD_COLUMNS.items() if t == "int"]
FLOAT_COLUMNS = [c for c, (t, _) in RECORD_COLUMNS.items() if t == "float"]


def empty_row() -> dict:
    return {c: (np.nan if t != "str" else "") for c, (t, _) in RECORD_COLUMNS.items()}


def frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(RECORD_COLUMNS))
    for c in INT_COLUMNS:
        df[c] = pd.to_numeric(df[c]).astype("Int64")
    for c in FLOAT_COLUMNS:
        df[c] = pd.to_numeric(df[c]).astype(float)
    return df


def _atomic(path: Path, text: str) -> tuple[Path, str]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path, tmp


def sidecar_path(path: str | Path) -> Path:
    return Path(str(path) + ".provenance.yaml")


def write_records(df: pd.DataFrame, path: str | Path, provenance: dict) -> Path:
    """Write the records CSV and its provenance sidecar; both appear together or not at all
    (temporary files in the target folder, renamed once both are complete)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"schema_version": SCHEMA_VERSION, "date": _dt.date.today().isoformat(), **provenance,
            "rows": int(len(df)), "rows_per_op": {k: int(v) for k, v in df["op"].value_counts().sort_index().items()},
            "columns": {c: f"{t}: {u}" for c, (t, u) in RECORD_COLUMNS.items()}}
    pending = [_atomic(path, df.to_csv(index=False)),
               _atomic(sidecar_path(path), yaml.safe_dump(meta, sort_keys=False, width=120))]
    for final, tmp in pending:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    return path


def read_records(path: str | Path) -> pd.DataFrame:
    """Read a records CSV written by :func:`write_records`, checking the contract."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), None, "file not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as e:
        raise InputError(str(path), None, f"not a records CSV ({str(e).splitlines()[0]})") from None
    unknown = [c for c in df.columns if c not in RECORD_COLUMNS]
    if unknown:
        raise InputError(str(path), f"header: column {unknown[0]}", "unknown column")
    missing = [c for c in RECORD_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(str(path), f"header: column {missing[0]}", "missing column")
    for c in INT_COLUMNS + FLOAT_COLUMNS:
        num = pd.to_numeric(df[c].where(df[c] != "", None), errors="coerce")
        bad = num.isna() & (df[c] != "")
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(str(path), f"row {i + 1}: column {c}", f"not a number ({df[c].iloc[i]!r})")
        df[c] = num.astype("Int64") if c in INT_COLUMNS else num.astype(float)
    bad_op = ~df["op"].isin(OPS)
    if bad_op.any():
        i = int(np.flatnonzero(bad_op.to_numpy())[0])
        raise InputError(str(path), f"row {i + 1}: column op", f"unknown op {df['op'].iloc[i]!r}; known: {', '.join(OPS)}")
    t = df["time_s"]
    if t.isna().any() or (t <= 0).any():
        i = int(np.flatnonzero((t.isna() | (t <= 0)).to_numpy())[0])
        raise InputError(str(path), f"row {i + 1}: column time_s", "must be a positive number of seconds")
    return df


def numeric_column(raw: pd.Series, file: str, column: str, row_offset: int = 1) -> np.ndarray:
    """A source column as floats; a non-numeric or missing cell is an InputError naming its row."""
    num = pd.to_numeric(raw, errors="coerce")
    bad = num.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(file, f"row {i + row_offset}: column {column}", f"not a number ({raw.iloc[i]!r})")
    return num.to_numpy(dtype=float)
