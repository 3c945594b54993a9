"""The measured op-record contract: one row per measured kernel/op point, ours, whatever the source.

A record file is a CSV (``RECORD_COLUMNS``, in this order) with a YAML sidecar ``<file>.provenance.yaml``
(source repository, commit, path, licence, importer, date, row counts). Units are suffixes; a
column that does not apply to an op is empty. Per-GPU shard shapes (after tensor parallelism) are
what the kernel ran on. ``op`` is one of ``OPS``:

- ``gemm``: y[m, n] = x[m, k] W[k, n], m = ``tokens`` (``dtype`` the weight/compute dtype: bfloat16, fp8, ...);
- ``norm`` | ``rope`` | ``act`` | ``add`` | ``embedding``: elementwise / row ops over ``tokens`` rows of
  the model's shard (``hidden``, ``heads``, ``kv_heads``, ``head_dim``, ``intermediate``, ``tp``);
- ``attn_decode``: one layer's decode attention, ``batch`` sequences x 1 query token on ``kv_tokens``
  cached tokens each, ``heads`` / ``kv_heads`` on this GPU (``dtype`` = the KV-cache dtype);
- ``attn_prefill``: one layer's prefill attention, ``batch`` x ``tokens`` new tokens on ``kv_tokens`` prior;
- ``allreduce``: one all-reduce of ``message_bytes`` over ``num_gpus`` GPUs (``link``: nvlink | pcie | internode);
- ``moe``: one mixture-of-experts layer's routed experts as the engine's fused MoE kernel runs them (the expert
  GEMMs, in AIConfigurator's words): ``tokens`` tokens of ``hidden`` features routed to ``topk`` of ``experts``
  experts of ``expert_intermediate`` features each, sharded ``tp`` ways inside an expert and ``ep`` ways over the
  experts, tokens spread over the experts as ``distribution`` says (balanced | power_law_<alpha>);
- ``mla_decode`` | ``mla_prefill``: DeepSeek-style multi-head latent attention, decode (``batch`` x 1 token on
  ``kv_tokens``) or prefill (``batch`` x ``tokens`` on ``kv_tokens`` prior), ``heads`` query heads on this GPU,
  ``kv_dtype`` the latent cache's dtype. ``source_op`` says the scope: ``generation_mla`` / ``context_mla`` time the
  attention kernel alone, ``mla_generation_module`` / ``mla_context_module`` the whole MLA module of ``model``
  (projections with ``gemm_dtype`` weights, norms, RoPE, attention);
- ``mla_bmm``: MLA's per-head batched matmuls around decode attention (``source_op`` mla_gen_pre / mla_gen_post:
  before / after the attention kernel) over ``tokens`` tokens and ``heads`` heads.

``DENSE_OPS`` are the ops the kernel model (``kernel_model.OpArrays``) times; fits, validation and the transfer
use only those rows (``fit.fit_rows``). The other ops are carried for analysis and later models.

``gpu`` is a catalog hardware name (``simulator/catalog/hardware.yaml``) or one of ``NON_CATALOG_GPUS`` (measured
GPUs without a catalog entry yet: their rows are kept, nothing that needs a datasheet uses them).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.errors import InputError

SCHEMA_VERSION = 2  # 2: ops moe, mla_decode, mla_prefill, mla_bmm and their columns
DENSE_OPS = ("gemm", "norm", "rope", "act", "add", "embedding", "attn_decode", "attn_prefill", "allreduce")
OPS = DENSE_OPS + ("moe", "mla_decode", "mla_prefill", "mla_bmm")
# measured GPUs the catalog has no entry for (yet): name -> what it is
NON_CATALOG_GPUS = {"b200": "NVIDIA B200 (AIConfigurator b200_sxm)",
                    "gh200": "NVIDIA GH200 Grace Hopper (LLM-Inference-Bench)"}
# column -> (type, unit / meaning)
RECORD_COLUMNS: dict[str, tuple[str, str]] = {
    "source": ("str", "importer: vidur | aiconfigurator | llmservingsim"),
    "source_file": ("str", "file the point came from, relative to the imported folder"),
    "source_row": ("int", "1-based data row in that file"),
    "gpu": ("str", "catalog hardware name (a100-80gb, a40, l40s, ...) or one of NON_CATALOG_GPUS"),
    "device": ("str", "the source's device / folder name"),
    "op": ("str", "one of OPS"),
    "source_op": ("str", "the source's own op name"),
    "model": ("str", "model the shapes come from (HF id), empty for synthetic shapes"),
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
    "experts": ("int", "MoE: routed experts in the layer (the model's, before EP)"),
    "topk": ("int", "MoE: experts each token is routed to"),
    "expert_intermediate": ("int", "MoE: one expert's intermediate size (before TP)"),
    "ep": ("int", "MoE: expert-parallel degree (experts spread over ep GPUs)"),
    "distribution": ("str", "MoE: how tokens spread over the experts (balanced | power_law_<alpha>)"),
    "message_bytes": ("float", "all-reduce payload in bytes (bf16)"),
    "num_gpus": ("int", "GPUs in the all-reduce"),
    "link": ("str", "nvlink | pcie (all-reduce)"),
    "backend": ("str", "kernel source / collective backend (vllm_graph, nccl, vllm_flash_attn, ...)"),
    "dtype": ("str", "compute dtype (bfloat16, fp16, fp8, ...); attention: the KV-cache dtype"),
    "kv_dtype": ("str", "KV-cache dtype (attention, MLA)"),
    "gemm_dtype": ("str", "dtype of the projection GEMMs inside a measured module (MLA module tables)"),
    "version": ("str", "engine / library version of the measurement"),
    "time_s": ("float", "measured time of one op in seconds (the source's median, or its single latency)"),
}
INT_COLUMNS = [c for c, (t, _) in RECORD_COLUMNS.items() if t == "int"]
FLOAT_COLUMNS = [c for c, (t, _) in RECORD_COLUMNS.items() if t == "float"]


def link_of(gpu: str) -> str:
    """A GPU's link inside one node for all-reduce records: the catalog's interconnect (nvlink | pcie); nvlink for
    the non-catalog GPUs (SXM / superchip parts)."""
    from simulator.catalog import hardware_catalog

    h = hardware_catalog().get(gpu)
    return h.interconnect if h is not None and h.interconnect in ("nvlink", "pcie") else "nvlink"


def empty_row() -> dict:
    return {c: (np.nan if t != "str" else "") for c, (t, _) in RECORD_COLUMNS.items()}


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    for c in INT_COLUMNS:
        df[c] = pd.to_numeric(df[c]).astype("Int64")
    for c in FLOAT_COLUMNS:
        df[c] = pd.to_numeric(df[c]).astype(float)
    return df


def frame(rows: list[dict]) -> pd.DataFrame:
    return _typed(pd.DataFrame(rows, columns=list(RECORD_COLUMNS)))


def columns_frame(columns: dict, n: int) -> pd.DataFrame:
    """A records frame of ``n`` rows from column arrays or scalars (broadcast), the absent columns empty:
    :func:`frame` for tables of millions of rows, where a dict per row would not fit."""
    unknown = [c for c in columns if c not in RECORD_COLUMNS]
    if unknown:
        raise ValueError(f"not a record column: {unknown[0]}")
    data = {}
    for c, (t, _) in RECORD_COLUMNS.items():
        v = columns.get(c, "" if t == "str" else np.nan)
        data[c] = np.full(n, v, dtype=object if t == "str" else float) if np.ndim(v) == 0 else np.asarray(v)
    return _typed(pd.DataFrame(data))


def _atomic(path: Path, write) -> tuple[Path, str]:
    from simulator.inputs.loading import temp_beside

    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            write(fh)
    except BaseException:
        os.unlink(tmp)
        raise
    return path, tmp


def sidecar_path(path: str | Path) -> Path:
    return Path(str(path) + ".provenance.yaml")


def write_table(df: pd.DataFrame, path: str | Path, meta: dict) -> Path:
    """Write a CSV and its provenance sidecar ``meta``; both appear together or not at all
    (temporary files in the target folder, renamed once both are complete)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = [_atomic(path, lambda fh: df.to_csv(fh, index=False))]
    try:
        pending.append(_atomic(sidecar_path(path), lambda fh: fh.write(yaml.safe_dump(meta, sort_keys=False, width=120))))
    except BaseException:
        os.unlink(pending[0][1])
        raise
    for final, tmp in pending:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    return path


def write_records(df: pd.DataFrame, path: str | Path, provenance: dict) -> Path:
    """Write the records CSV and its provenance sidecar (:func:`write_table`), with row counts and the contract."""
    meta = {"schema_version": SCHEMA_VERSION, "date": _dt.date.today().isoformat(), **provenance,
            "rows": int(len(df)), "rows_per_op": {k: int(v) for k, v in df["op"].value_counts().sort_index().items()},
            "columns": {c: f"{t}: {u}" for c, (t, u) in RECORD_COLUMNS.items()}}
    return write_table(df, path, meta)


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
        bad = (num.isna() | ~np.isfinite(num.astype(float))) & (df[c] != "")
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            why = "not a number" if pd.isna(num.iloc[i]) else "not finite"
            raise InputError(str(path), f"row {i + 1}: column {c}", f"{why} ({df[c].iloc[i]!r})")
        if (num < 0).any():  # every numeric column is a size, a count or a time
            i = int(np.flatnonzero((num < 0).to_numpy())[0])
            raise InputError(str(path), f"row {i + 1}: column {c}", f"expected a value >= 0 ({df[c].iloc[i]!r})")
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
