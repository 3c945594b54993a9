"""Importer for Vidur's profiling layout (``microsoft/vidur``, ``data/profiling/``).

Layout read (the shared copy flattens the repository's folders the same way)::

    compute/<gpu>/<org>/<model>/mlp.csv     per-layer op times (ms) vs num_tokens x TP, model shape columns
    network/<setup>/all_reduce.csv           all-reduce time (ms) vs size (bytes) and num_workers

Each ``time_stats.<op>.median`` becomes one record (``records.RECORD_COLUMNS``) with the shard shape
the op ran on: Vidur profiles one layer's linear ops of a TP shard on a single GPU
(QKV: n = (h_q + 2 h_kv) d / TP, k = H; O: n = H, k = h_q d / TP; gate+up: n = (1+gated) F / TP,
k = H; down: n = H, k = F / TP). Repeated (num_tokens, TP) rows are profiling repeats: all kept.
Multi-node all-reduce rows (devices_per_node < num_workers) are kept with link ``internode``; single-node rows
get the GPU's own link (``records.link_of``: nvlink, or pcie for a PCIe card).
An all-reduce row's GPU is its setup folder's prefix, the same names as ``compute/<gpu>``
(``a100_dgx`` -> a100 -> a100-80gb, ``h100_pairwise_nvlink`` -> h100 -> h100-sxm); a setup whose prefix is
not in ``GPU_NAMES`` is an input error naming the file (a GPU we cannot name cannot be fitted).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibrate.contracts.op_records import empty_row, frame, link_of, numeric_column
from simulator.catalog.hardware import data_labels
from simulator.errors import InputError

SOURCE_REPO = "microsoft/vidur"
GPU_NAMES = data_labels("vidur")  # folder -> catalog GPU (hardware.yaml data_labels)
# Vidur op -> our op kind
OP_KIND = {"emb": "embedding", "input_layernorm": "norm", "attn_pre_proj": "gemm", "attn_rope": "rope",
           "attn_post_proj": "gemm", "post_attention_layernorm": "norm", "mlp_up_proj": "gemm", "mlp_act": "act",
           "mlp_down_proj": "gemm", "add": "add"}
OPTIONAL_OPS = {"post_attention_layernorm"}  # phi-2: attention and MLP in parallel from one norm
STATS = ("min", "max", "mean", "median", "std")
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                 "num_tokens", "num_tensor_parallel_workers")
NETWORK_COLUMNS = ("", "Unnamed: 0", "rank", "num_workers", "size", "collective", "devices_per_node",
                   "max_devices_per_node") + tuple(f"time_stats.all_reduce.{s}" for s in STATS)
MS = 1e-3


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"not a CSV table ({str(e).splitlines()[0]})") from None


def _check_header(path: Path, columns, known: set[str]) -> None:
    for c in columns:
        if c not in known:
            raise InputError(str(path), f"header: column {c}", "unknown column")


def gemm_shape(op: str, h: int, heads: int, kv_heads: int, ffn: int, gated: bool, tp: int) -> tuple[int, int]:
    """(n, k) of one TP shard of a layer's linear op."""
    d = h // heads
    kv = max(-(-kv_heads // tp), 1)
    if op == "attn_pre_proj":
        return (heads // tp + 2 * kv) * d, h
    if op == "attn_post_proj":
        return h, heads * d // tp
    if op == "mlp_up_proj":
        return (2 if gated else 1) * ffn // tp, h
    if op == "mlp_down_proj":
        return h, ffn // tp
    raise ValueError(op)


def import_mlp_csv(path: Path, root: Path) -> list[dict]:
    """Records of one ``compute/<gpu>/<org>/<model>/mlp.csv``."""
    rel = path.relative_to(root)
    gpu_dir, model = rel.parts[1], "/".join(rel.parts[2:4])
    df = _read_csv(path)
    known = set(SHAPE_COLUMNS) | {f"time_stats.{op}.{s}" for op in OP_KIND for s in STATS}
    _check_header(path, df.columns, known)
    for c in SHAPE_COLUMNS:
        if c not in df.columns:
            raise InputError(str(path), f"header: column {c}", "missing column")
    ops = [op for op in OP_KIND if f"time_stats.{op}.median" in df.columns]
    missing = [op for op in OP_KIND if op not in ops and op not in OPTIONAL_OPS]
    if missing:
        raise InputError(str(path), f"header: column time_stats.{missing[0]}.median", f"missing op {missing[0]!r}")
    shape = {c: numeric_column(df[c].replace({"True": "1", "False": "0"}), str(path), c)
             for c in SHAPE_COLUMNS}
    for c in df.columns:  # every statistic must be a number, not only the median we use
        if c.startswith("time_stats."):
            numeric_column(df[c], str(path), c)
    times = {op: numeric_column(df[f"time_stats.{op}.median"], str(path), f"time_stats.{op}.median") for op in ops}
    rows = []
    gpu = GPU_NAMES.get(gpu_dir, gpu_dir)
    for i in range(len(df)):
        h, heads, kvh = int(shape["n_embd"][i]), int(shape["n_head"][i]), int(shape["n_kv_head"][i])
        ffn, gated, tp = int(shape["n_expanded_embd"][i]), bool(shape["use_gated_mlp"][i]), int(shape["num_tensor_parallel_workers"][i])
        base = {**empty_row(), "source": "vidur", "source_file": str(rel), "source_row": i + 1, "gpu": gpu,
                "device": gpu_dir, "model": model, "tp": tp, "tokens": int(shape["num_tokens"][i]), "heads": heads,
                "kv_heads": kvh, "head_dim": h // heads, "hidden": h, "intermediate": ffn, "gated": int(gated),
                "backend": "vidur_profiler", "dtype": "float16"}
        for op in ops:
            t = times[op][i]
            if not t > 0:
                raise InputError(str(path), f"row {i + 1}: column time_stats.{op}.median", f"must be > 0 (got {t})")
            r = {**base, "op": OP_KIND[op], "source_op": op, "time_s": t * MS}
            if OP_KIND[op] == "gemm":
                r["n"], r["k"] = gemm_shape(op, h, heads, kvh, ffn, gated, tp)
            rows.append(r)
    return rows


def network_gpu(path: Path, setup: str) -> str:
    """Catalog name of the GPU of a ``network/<setup>`` folder: its prefix before the first ``_``."""
    prefix = setup.split("_", 1)[0]
    if prefix not in GPU_NAMES:
        raise InputError(str(path), None, f"network setup {setup!r}: unknown GPU prefix {prefix!r} "
                                          f"(known: {', '.join(sorted(GPU_NAMES))})")
    return GPU_NAMES[prefix]


def import_allreduce_csv(path: Path, root: Path) -> list[dict]:
    """Records of one ``network/<setup>/all_reduce.csv``."""
    rel = path.relative_to(root)
    gpu = network_gpu(path, rel.parts[1])
    df = _read_csv(path)
    _check_header(path, df.columns, set(NETWORK_COLUMNS))
    for c in ("num_workers", "size", "time_stats.all_reduce.median", "devices_per_node"):
        if c not in df.columns:
            raise InputError(str(path), f"header: column {c}", "missing column")
    n = numeric_column(df["num_workers"], str(path), "num_workers")
    size = numeric_column(df["size"], str(path), "size")
    per_node = numeric_column(df["devices_per_node"], str(path), "devices_per_node")
    t = numeric_column(df["time_stats.all_reduce.median"], str(path), "time_stats.all_reduce.median")
    node_link = link_of(gpu)
    rows = []
    for i in range(len(df)):
        if not t[i] > 0:
            raise InputError(str(path), f"row {i + 1}: column time_stats.all_reduce.median", f"must be > 0 (got {t[i]})")
        link = node_link if per_node[i] >= n[i] else "internode"
        rows.append({**empty_row(), "source": "vidur", "source_file": str(rel), "source_row": i + 1, "gpu": gpu,
                     "device": rel.parts[1], "op": "allreduce", "source_op": "all_reduce", "tp": int(n[i]),
                     "message_bytes": size[i], "num_gpus": int(n[i]), "link": link, "backend": "nccl",
                     "dtype": "float16", "time_s": t[i] * MS})
    return rows


def import_vidur(root: str | Path) -> tuple[pd.DataFrame, dict]:
    """All records under a Vidur ``data/profiling``-style folder, and their provenance."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(str(root), None, "not a folder")
    mlp = sorted(root.glob("compute/*/*/*/mlp.csv"))
    net = sorted(root.glob("network/*/all_reduce.csv"))
    if not mlp and not net:
        raise InputError(str(root), None, "no compute/<gpu>/<org>/<model>/mlp.csv or network/<setup>/all_reduce.csv files")
    rows: list[dict] = []
    for p in mlp:
        rows += import_mlp_csv(p, root)
    for p in net:
        rows += import_allreduce_csv(p, root)
    prov = {"source": "vidur", "source_repo": SOURCE_REPO, "source_path": str(root),
            "licence": "MIT (Copyright (c) Microsoft Corporation)", "importer": "calibrate.gpu_priors.import_vidur",
            "statistic": "time_stats.<op>.median (ms -> s)", "files": [str(p.relative_to(root)) for p in mlp + net]}
    readme = root / "README.md"
    if readme.is_file():
        prov["source_readme"] = str(readme)
        for line in readme.read_text(encoding="utf-8", errors="replace").splitlines():
            if "commit" in line:
                import re
                m = re.search(r"commit ([0-9a-f]{40})", line)
                if m:
                    prov["source_commit"] = m.group(1)
                    break
    return frame(rows), prov
