"""Importer for NVIDIA AIConfigurator's collected vLLM kernel data (``ai-dynamo/aiconfigurator``,
``aic-core/src/aiconfigurator_core/systems/data/<gpu>/``), in the source's own layout::

    <gpu>/gemm/vllm/<ver>/gemm_perf.parquet                       m, n, k, gemm_dtype, latency (ms)
    <gpu>/attention/vllm/<ver>/generation_attention_perf.parquet  batch_size, step (KV), heads, latency
    <gpu>/attention/vllm/<ver>/context_attention_perf.parquet     batch_size, isl, step (prior KV), latency
    <gpu>/comm/vllm/<ver>/custom_allreduce_perf.parquet           num_gpus, message_size (elements), backend
    <gpu>/comm/nccl/<ver>/nccl_perf.parquet                       op_name (all_reduce kept), message_size (elements)
    <gpu>/moe/vllm/<ver>/moe_perf.parquet                         num_tokens, hidden/inter size, topk, experts, tp/ep
    <gpu>/mla/vllm/<ver>/{generation,context}_mla_perf.parquet    MLA attention kernel (older layout)
    <gpu>/mla/vllm/<ver>/mla_{generation,context}_module_perf.parquet   whole MLA module of a named model
    <gpu>/mla_bmm/vllm/<ver>/mla_bmm_perf.parquet                 MLA's per-head batched matmuls

Layouts (``LAYOUTS``): each table's required and optional columns. Columns that carry no timing meaning
(``IGNORED_COLUMNS``: per-row power draw and its limit) are tolerated and dropped. The runtime columns
(framework, version, device) are absent from older tables (NCCL 2.23): they come from the version folder's
``collection_meta.yaml`` (``runtime.framework`` / ``runtime.version``) or, without one, from the folder names.
A table this importer cannot interpret -- unknown table name, a GPU folder with no catalog name
(``GPU_NAMES``), a required column missing, a column it does not know -- is skipped and named with its reason
in the provenance (``files_skipped``); the rest is imported. A known layout with a bad value (a non-numeric or
non-positive latency, an unknown all-reduce dtype) is an input error naming file, row and column.

A version folder's ``reuse.yaml`` declares that version reuses another version's table: its own tables (some
folders hold native data too) are imported; the declaration is listed in the provenance. Sliding-window attention
rows (``window_size`` > 0) are not what our models run and are skipped (counted in the provenance), as are
collectives other than all_reduce. Message sizes are elements; bytes = elements x dtype size (bf16/half 2,
int8/fp8 1). Reading parquet needs ``pyarrow``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.contracts.op_records import columns_frame, link_of, numeric_column
from simulator.catalog.hardware import data_labels
from simulator.errors import InputError

SOURCE_REPO = "ai-dynamo/aiconfigurator"
GPU_NAMES = data_labels("aiconfigurator")  # folder -> catalog GPU (hardware.yaml data_labels)
DTYPE_BYTES = {"bfloat16": 2, "half": 2, "float16": 2, "fp16": 2, "int8": 1, "fp8": 1, "float32": 4, "float": 4}
RUNTIME_COLUMNS = ("framework", "version", "device")
IGNORED_COLUMNS = {"power", "power_limit", "energy"}  # GPU power draw (W) during the timing and its cap: not time
_COMMON = ("op_name", "kernel_source", "latency")
_ATTN = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "beam_width", "attn_dtype",
         "kv_cache_dtype", "step")
_MLA = ("mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "tp_size", "step")


@dataclass(frozen=True)
class Layout:
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


LAYOUTS: dict[str, Layout] = {
    "gemm_perf": Layout(_COMMON + ("gemm_dtype", "m", "n", "k")),
    "generation_attention_perf": Layout(_COMMON + _ATTN, ("window_size",)),
    "context_attention_perf": Layout(_COMMON + _ATTN, ("window_size",)),
    "custom_allreduce_perf": Layout(_COMMON + ("allreduce_dtype", "num_gpus", "message_size", "backend")),
    "nccl_perf": Layout(_COMMON + ("nccl_dtype", "num_gpus", "message_size")),
    "moe_perf": Layout(_COMMON + ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                  "moe_tp_size", "moe_ep_size", "distribution")),
    "generation_mla_perf": Layout(_COMMON + _MLA),
    "context_mla_perf": Layout(_COMMON + _MLA),
    "mla_generation_module_perf": Layout(_COMMON + _MLA + ("model", "gemm_type"), ("architecture",)),
    "mla_context_module_perf": Layout(_COMMON + _MLA + ("model", "gemm_type"), ("architecture",)),
    "mla_bmm_perf": Layout(_COMMON + ("bmm_dtype", "num_tokens", "num_heads")),
}
NUMERIC = {"latency", "m", "n", "k", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step",
           "num_gpus", "message_size", "window_size", "beam_width", "num_tokens", "hidden_size", "inter_size", "topk",
           "num_experts", "moe_tp_size", "moe_ep_size", "tp_size"}
MS = 1e-3


class Skip(Exception):
    """A table this importer cannot interpret: skipped, named in the provenance with the reason."""


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError(str(path), None, "reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises its own error types for corrupt files
        raise InputError(str(path), None, f"not a parquet table ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def runtime(path: Path, rel: Path) -> dict[str, str]:
    """framework / version of a version folder: its ``collection_meta.yaml`` runtime, else the folder names."""
    out = {"framework": rel.parts[2], "version": rel.parts[3], "device": rel.parts[0]}
    meta = path.parent / "collection_meta.yaml"
    if meta.is_file():
        try:
            rt = (yaml.safe_load(meta.read_text(encoding="utf-8")) or {}).get("runtime") or {}
        except (yaml.YAMLError, AttributeError):
            rt = {}
        out.update({k: str(rt[k]) for k in ("framework", "version") if rt.get(k) is not None})
    return out


def _check(path: Path, df: pd.DataFrame, table: str) -> dict[str, np.ndarray]:
    """The table's numeric columns as arrays; :class:`Skip` for a layout we cannot read, InputError for a bad value."""
    layout = LAYOUTS[table]
    known = set(layout.required) | set(layout.optional) | set(RUNTIME_COLUMNS) | IGNORED_COLUMNS
    extra = [c for c in df.columns if c not in known]
    if extra:
        raise Skip(f"unknown column {extra[0]!r} (layout {table}: {', '.join(layout.required)})")
    missing = [c for c in layout.required if c not in df.columns]
    if missing:
        raise Skip(f"missing column {missing[0]!r} (layout {table})")
    cols = {c: numeric_column(df[c], str(path), c) for c in df.columns if c in NUMERIC}
    bad = ~(cols["latency"] > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(str(path), f"row {i + 1}: column latency", f"must be > 0 (got {cols['latency'][i]})")
    return cols


def _dtype_bytes(path: Path, values: pd.Series, column: str, keep: np.ndarray) -> np.ndarray:
    """Bytes per element of each row's dtype (rows not kept: nan, never an error)."""
    out = values.astype(str).map(DTYPE_BYTES).to_numpy(dtype=float)
    bad = np.isnan(out) & keep
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(str(path), f"row {i + 1}: column {column}", f"unknown dtype {values.iloc[i]!r}; known: {', '.join(DTYPE_BYTES)}")
    return out


def _columns(table: str, df: pd.DataFrame, cols: dict, path: Path, gpu: str) -> tuple[dict, np.ndarray]:
    """Record columns of one table (arrays over all its rows) and the mask of the rows kept."""
    s = lambda c: df[c].astype(str).to_numpy(dtype=object)  # noqa: E731
    keep = np.ones(len(df), dtype=bool)
    if table == "gemm_perf":
        out = {"op": "gemm", "source_op": "gemm", "tokens": cols["m"], "n": cols["n"], "k": cols["k"],
               "dtype": s("gemm_dtype")}
    elif table.endswith("attention_perf"):
        decode = table.startswith("generation")
        keep = cols.get("window_size", np.zeros(len(df))) <= 0
        out = {"op": "attn_decode" if decode else "attn_prefill", "source_op": s("op_name"),
               "batch": cols["batch_size"], "tokens": 1.0 if decode else cols["isl"], "kv_tokens": cols["step"],
               "heads": cols["num_heads"], "kv_heads": cols["num_key_value_heads"], "head_dim": cols["head_dim"],
               "dtype": s("kv_cache_dtype"), "kv_dtype": s("kv_cache_dtype")}
    elif table in ("custom_allreduce_perf", "nccl_perf"):
        nccl = table == "nccl_perf"
        dcol = "nccl_dtype" if nccl else "allreduce_dtype"
        keep = s("op_name") == "all_reduce"
        nbytes = cols["message_size"] * _dtype_bytes(path, df[dcol], dcol, keep)
        out = {"op": "allreduce", "source_op": "all_reduce", "tp": cols["num_gpus"], "num_gpus": cols["num_gpus"],
               "message_bytes": nbytes, "link": link_of(gpu),
               "backend": "nccl" if nccl else s("backend"), "dtype": s(dcol)}
    elif table == "moe_perf":
        out = {"op": "moe", "source_op": s("op_name"), "tokens": cols["num_tokens"], "hidden": cols["hidden_size"],
               "expert_intermediate": cols["inter_size"], "topk": cols["topk"], "experts": cols["num_experts"],
               "tp": cols["moe_tp_size"], "ep": cols["moe_ep_size"], "distribution": s("distribution"),
               "dtype": s("moe_dtype")}
    elif table == "mla_bmm_perf":
        out = {"op": "mla_bmm", "source_op": s("op_name"), "tokens": cols["num_tokens"], "heads": cols["num_heads"],
               "dtype": s("bmm_dtype")}
    else:  # MLA attention kernel or module
        decode = "generation" in table
        out = {"op": "mla_decode" if decode else "mla_prefill", "source_op": s("op_name"),
               "batch": cols["batch_size"], "tokens": 1.0 if decode else cols["isl"], "kv_tokens": cols["step"],
               "heads": cols["num_heads"], "tp": cols["tp_size"], "dtype": s("mla_dtype"),
               "kv_dtype": s("kv_cache_dtype")}
        if "module" in table:
            out.update(model=s("model"), gemm_dtype=s("gemm_type"))
    return out, keep


def import_table(path: Path, root: Path, skipped: dict) -> pd.DataFrame:
    """Records of one table; :class:`Skip` when its layout cannot be interpreted."""
    rel = path.relative_to(root)
    gpu_dir, table = rel.parts[0], path.stem
    if table not in LAYOUTS:
        raise Skip(f"unknown table {table!r}; known: {', '.join(LAYOUTS)}")
    if gpu_dir not in GPU_NAMES:
        raise Skip(f"GPU folder {gpu_dir!r} has no catalog name (known: {', '.join(GPU_NAMES)})")
    gpu = GPU_NAMES[gpu_dir]
    df = _read_parquet(path)
    cols = _check(path, df, table)
    rt = runtime(path, rel)
    for c in RUNTIME_COLUMNS:
        if c not in df.columns:
            df[c] = rt[c]
    out, keep = _columns(table, df, cols, path, gpu)
    out.update(source="aiconfigurator", source_file=str(rel), source_row=np.arange(1, len(df) + 1), gpu=gpu,
               device=gpu_dir, tp=out.get("tp", 1.0), version=df["version"].astype(str).to_numpy(dtype=object),
               time_s=cols["latency"] * MS)
    out.setdefault("backend", df["kernel_source"].astype(str).to_numpy(dtype=object))
    skipped[str(rel)] = int((~keep).sum())
    idx = np.flatnonzero(keep)
    return columns_frame({c: (v[idx] if np.ndim(v) else v) for c, v in out.items()}, len(idx))


def import_aiconfigurator(root: str | Path) -> tuple[pd.DataFrame, dict]:
    """All records under an AIConfigurator ``systems/data``-style folder, and their provenance
    (``files_skipped``: the tables that could not be interpreted, each with its reason)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(str(root), None, "not a folder")
    files = sorted(p for p in root.glob("*/*/*/*/*.parquet"))
    if not files:
        raise InputError(str(root), None, "no <gpu>/<op family>/<framework>/<version>/*.parquet tables")
    rows_skipped: dict[str, int] = {}
    files_skipped: dict[str, str] = {}
    parts = []
    for p in files:
        try:
            parts.append(import_table(p, root, rows_skipped))
        except Skip as e:
            files_skipped[str(p.relative_to(root))] = str(e)
    if not parts:
        raise InputError(str(root), None, "no table this importer can interpret (skipped: "
                         + "; ".join(f"{k} ({v})" for k, v in files_skipped.items()) + ")")
    df = pd.concat(parts, ignore_index=True)
    reuse = sorted(str(p.relative_to(root)) for p in root.glob("*/*/*/*/reuse.yaml"))
    prov = {"source": "aiconfigurator", "source_repo": SOURCE_REPO, "source_path": str(root),
            "licence": "Apache-2.0 (NVIDIA)", "importer": "calibrate.gpu_priors.import_aiconfigurator",
            "statistic": "latency (ms -> s), CUDA events around CUDA-graph replays",
            "files": [str(p.relative_to(root)) for p in files if str(p.relative_to(root)) not in files_skipped],
            "files_skipped": files_skipped, "reuse_declarations": reuse,
            "collection_provenance": _collection_provenance(root),
            "rows_skipped": {k: v for k, v in rows_skipped.items() if v},
            "rows_skipped_why": "sliding-window attention (window_size > 0); collectives other than all_reduce",
            "gpu_names": {k: v for k, v in GPU_NAMES.items() if (root / k).is_dir()}}
    commit = _source_commit(root)
    if commit:
        prov["source_commit"] = commit
    return df, prov


def _collection_provenance(root: Path) -> dict[str, str]:
    """Per version folder, ``collection_meta.yaml``'s provenance field (legacy | collected | local)."""
    out = {}
    for meta in sorted(root.glob("*/*/*/*/collection_meta.yaml")):
        try:
            m = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            continue
        if isinstance(m, dict) and m.get("provenance"):
            out[str(meta.parent.relative_to(root))] = str(m["provenance"])
    return out


def _source_commit(root: Path) -> str | None:
    """The source commit: ``SOURCE_COMMIT`` beside the tables, else the README's ``commit <sha>``."""
    sc = root / "SOURCE_COMMIT"
    if sc.is_file():
        m = re.search(r"\b[0-9a-f]{40}\b", sc.read_text(encoding="utf-8", errors="replace"))
        if m:
            return m.group(0)
    readme = root / "README.md"
    if readme.is_file():
        m = re.search(r"commit ([0-9a-f]{40})", readme.read_text(encoding="utf-8", errors="replace"))
        if m:
            return m.group(1)
    return None
