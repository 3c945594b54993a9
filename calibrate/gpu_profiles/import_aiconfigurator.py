"""Importer for NVIDIA AIConfigurator's collected vLLM kernel data (``ai-dynamo/aiconfigurator``,
``aic-core/src/aiconfigurator_core/systems/data/<gpu>/``), in the source's own layout::

    <gpu>/gemm/vllm/<ver>/gemm_perf.parquet                       m, n, k, gemm_dtype, latency (ms)
    <gpu>/attention/vllm/<ver>/generation_attention_perf.parquet  batch_size, step (KV), heads, latency
    <gpu>/attention/vllm/<ver>/context_attention_perf.parquet     batch_size, isl, step (prior KV), latency
    <gpu>/comm/vllm/<ver>/custom_allreduce_perf.parquet           num_gpus, message_size (elements), backend
    <gpu>/comm/nccl/<ver>/nccl_perf.parquet                       op_name (all_reduce kept), message_size (elements)

A version folder holding only ``reuse.yaml`` points at another version's table: nothing new to read
(the donor's rows are imported under the donor's version). Sliding-window attention rows
(``window_size`` > 0) are not what our models run and are skipped (counted in the provenance).
Message sizes are elements; bytes = elements x dtype size (bf16/half 2, int8/fp8 1).
Reading parquet needs ``pyarrow``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_profiles.records import empty_row, frame, numeric_column
from simulator.errors import InputError

SOURCE_REPO = "ai-dynamo/aiconfigurator"
GPU_NAMES = {"a100_sxm": "a100-80gb", "l40s": "l40s", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "a40": "a40"}
PCIE_GPUS = {"l40s", "a40", "rtx-a6000"}
DTYPE_BYTES = {"bfloat16": 2, "half": 2, "float16": 2, "fp16": 2, "int8": 1, "fp8": 1, "float32": 4, "float": 4}
_COMMON = ("framework", "version", "device", "op_name", "kernel_source", "latency")
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # table -> (required columns, optional columns)
    "gemm_perf": (_COMMON + ("gemm_dtype", "m", "n", "k"), ()),
    "generation_attention_perf": (_COMMON + ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                             "beam_width", "attn_dtype", "kv_cache_dtype", "step"), ("window_size",)),
    "context_attention_perf": (_COMMON + ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                          "beam_width", "attn_dtype", "kv_cache_dtype", "step"), ("window_size",)),
    "custom_allreduce_perf": (_COMMON + ("allreduce_dtype", "num_gpus", "message_size", "backend"), ()),
    "nccl_perf": (_COMMON + ("nccl_dtype", "num_gpus", "message_size"), ()),
}
MS = 1e-3


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError(str(path), None, "reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises its own error types for corrupt files
        raise InputError(str(path), None, f"not a parquet table ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def _check(path: Path, df: pd.DataFrame, table: str) -> dict[str, np.ndarray]:
    required, optional = TABLES[table]
    for c in df.columns:
        if c not in required and c not in optional:
            raise InputError(str(path), f"header: column {c}", "unknown column")
    for c in required:
        if c not in df.columns:
            raise InputError(str(path), f"header: column {c}", "missing column")
    numeric = [c for c in required + optional if c in df.columns and c in
               ("latency", "m", "n", "k", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step",
                "num_gpus", "message_size", "window_size", "beam_width")]
    cols = {c: numeric_column(df[c], str(path), c) for c in numeric}
    bad = ~(cols["latency"] > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(str(path), f"row {i + 1}: column latency", f"must be > 0 (got {cols['latency'][i]})")
    return cols


def _dtype_bytes(path: Path, values: pd.Series, column: str) -> np.ndarray:
    out = values.astype(str).map(DTYPE_BYTES)
    if out.isna().any():
        i = int(np.flatnonzero(out.isna().to_numpy())[0])
        raise InputError(str(path), f"row {i + 1}: column {column}", f"unknown dtype {values.iloc[i]!r}; known: {', '.join(DTYPE_BYTES)}")
    return out.to_numpy(dtype=float)


def import_table(path: Path, root: Path, skipped: dict) -> list[dict]:
    rel = path.relative_to(root)
    gpu_dir, table = rel.parts[0], path.stem
    if table not in TABLES:
        raise InputError(str(path), None, f"unknown table {table!r}; known: {', '.join(TABLES)}")
    df = _read_parquet(path)
    cols = _check(path, df, table)
    gpu = GPU_NAMES.get(gpu_dir, gpu_dir.replace("_", "-"))
    s = lambda c: df[c].astype(str).to_numpy()  # noqa: E731
    base = {**empty_row(), "source": "aiconfigurator", "source_file": str(rel), "gpu": gpu, "device": gpu_dir,
            "model": "", "tp": 1}
    version, kernel, t = s("version"), s("kernel_source"), cols["latency"] * MS
    rows = []
    if table == "gemm_perf":
        dt = s("gemm_dtype")
        for i in range(len(df)):
            rows.append({**base, "source_row": i + 1, "op": "gemm", "source_op": "gemm", "tokens": int(cols["m"][i]),
                         "n": int(cols["n"][i]), "k": int(cols["k"][i]), "backend": kernel[i], "dtype": dt[i],
                         "version": version[i], "time_s": t[i]})
    elif table.endswith("attention_perf"):
        decode = table.startswith("generation")
        kv_dt = s("kv_cache_dtype")
        window = cols.get("window_size", np.zeros(len(df)))
        skipped[str(rel)] = int((window > 0).sum())
        for i in np.flatnonzero(window <= 0):
            rows.append({**base, "source_row": int(i) + 1, "op": "attn_decode" if decode else "attn_prefill",
                         "source_op": str(df["op_name"].iloc[i]), "batch": int(cols["batch_size"][i]),
                         "tokens": 1 if decode else int(cols["isl"][i]), "kv_tokens": int(cols["step"][i]),
                         "heads": int(cols["num_heads"][i]), "kv_heads": int(cols["num_key_value_heads"][i]),
                         "head_dim": int(cols["head_dim"][i]), "backend": kernel[i], "dtype": kv_dt[i],
                         "version": version[i], "time_s": t[i]})
    else:
        nccl = table == "nccl_perf"
        dcol = "nccl_dtype" if nccl else "allreduce_dtype"
        nbytes = cols["message_size"] * _dtype_bytes(path, df[dcol], dcol)
        backend = np.full(len(df), "nccl") if nccl else s("backend")
        keep = s("op_name") == "all_reduce"
        skipped[str(rel)] = int((~keep).sum())
        link = "pcie" if gpu in PCIE_GPUS else "nvlink"
        for i in np.flatnonzero(keep):
            rows.append({**base, "source_row": int(i) + 1, "op": "allreduce", "source_op": "all_reduce",
                         "tp": int(cols["num_gpus"][i]), "num_gpus": int(cols["num_gpus"][i]),
                         "message_bytes": float(nbytes[i]), "link": link, "backend": backend[i],
                         "dtype": str(df[dcol].iloc[i]), "version": version[i], "time_s": t[i]})
    return rows


def import_aiconfigurator(root: str | Path) -> tuple[pd.DataFrame, dict]:
    """All records under an AIConfigurator ``systems/data``-style folder, and their provenance."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(str(root), None, "not a folder")
    files = sorted(p for p in root.glob("*/*/*/*/*.parquet"))
    if not files:
        raise InputError(str(root), None, "no <gpu>/{gemm,attention,comm}/<framework>/<version>/*.parquet tables")
    skipped: dict[str, int] = {}
    rows: list[dict] = []
    for p in files:
        rows += import_table(p, root, skipped)
    reuse = sorted(str(p.relative_to(root)) for p in root.glob("*/*/*/*/reuse.yaml"))
    prov = {"source": "aiconfigurator", "source_repo": SOURCE_REPO, "source_path": str(root),
            "licence": "Apache-2.0 (NVIDIA)", "importer": "calibrate.gpu_profiles.import_aiconfigurator",
            "statistic": "latency (ms -> s), CUDA events around CUDA-graph replays",
            "files": [str(p.relative_to(root)) for p in files], "reuse_declarations": reuse,
            "rows_skipped": {k: v for k, v in skipped.items() if v},
            "rows_skipped_why": "sliding-window attention (window_size > 0); collectives other than all_reduce"}
    readme = root / "README.md"
    if readme.is_file():
        import re

        m = re.search(r"commit ([0-9a-f]{40})", readme.read_text(encoding="utf-8", errors="replace"))
        if m:
            prov["source_commit"] = m.group(1)
    return frame(rows), prov
