"""vLLM's Triton attention against FlashAttention at prefill: the slowdown of the kernel vLLM runs for models with
attention sinks on GPUs older than Hopper, measured on AIConfigurator's context-attention tables.

Why: FlashAttention 2 (the kernel vLLM runs on Ampere and Ada) has no attention sinks; for a model with them
(gpt-oss) vLLM picks its Triton unified-attention backend there (Hopper and Blackwell run FlashAttention 3 /
FlashInfer kernels that take sinks). The step model prices attention FLOPs at the GPU's compute efficiency, which was
fitted on FlashAttention passes; the Triton kernel's prefill runs slower, and a long-prompt workload's time is then
mostly attention (``simulator.catalog.attention_kernels``, docs/gpu-cost-model.md).

Data (read, never copied): every ``<gpu>/attention/vllm/<version>/context_attention_perf.parquet`` of the shared
data's ``aiconfigurator-vllm-kernels`` that holds both a FlashAttention source (``vllm_flash_attn*``) and
``vllm_triton_attn`` rows. Pairs: the same batch, prompt length, heads, KV heads, head dimension and window; used:
full attention (window 0) and prompts of at least ``MIN_ISL`` tokens, where the kernel is compute-bound and its time is
what the step model's attention term prices (shorter prompts run in microseconds, inside the per-layer fixed cost).

    ratio = median over pairs of (Triton latency / FlashAttention latency)

with its spread (quartiles) and the standard error of the median of the log ratios (1.2533 sd / sqrt(n)).

    specsim fit attention --out simulator/catalog/attention_kernels.yaml --date 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import SHARED, data_commit
from simulator.errors import InputError

ROOT = SHARED / "aiconfigurator-vllm-kernels"
TABLE = "context_attention_perf.parquet"
TRITON = "vllm_triton_attn"
FLASH_PREFIX = "vllm_flash_attn"
MIN_ISL = 1024
SHAPE = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size"]
NEED = ("kernel_source", "latency", *SHAPE)


def _table_pairs(path: Path) -> pd.DataFrame:
    """Matched (FlashAttention, Triton) latencies of one context-attention table; empty without both sources."""
    d = pd.read_parquet(path)
    if "window_size" not in d.columns:
        d = d.assign(window_size=0)
    missing = [c for c in NEED if c not in d.columns]
    if missing:
        raise InputError(str(path), missing[0], "missing column (an AIConfigurator context-attention table)")
    src = d["kernel_source"].astype(str)
    tri = d[src == TRITON].groupby(SHAPE)["latency"].median().rename("triton")
    fla = d[src.str.startswith(FLASH_PREFIX)].groupby(SHAPE)["latency"].median().rename("flash")
    if tri.empty or fla.empty:
        return pd.DataFrame()
    j = pd.concat([fla, tri], axis=1).dropna().reset_index()
    j = j[(j["window_size"] == 0) & (j["isl"] >= MIN_ISL) & (j["flash"] > 0) & (j["triton"] > 0)]
    gpu, version = path.parts[-5], path.parts[-2]
    kv = d["kv_cache_dtype"].astype(str) if "kv_cache_dtype" in d.columns else pd.Series("?", index=d.index)
    flash = ", ".join(f"{s} {'/'.join(sorted(kv[src == s].unique()))} KV" for s in sorted(src.unique())
                      if s.startswith(FLASH_PREFIX) or s == TRITON)
    return j.assign(gpu=gpu, version=version, flash_source=flash, ratio=j["triton"] / j["flash"])


def load_pairs(root: Path = ROOT) -> pd.DataFrame:
    """Every table's matched pairs (module docstring), one frame."""
    paths = sorted(Path(root).glob(f"*/attention/vllm/*/{TABLE}"))
    if not paths:
        raise InputError(str(root), None, f"no <gpu>/attention/vllm/<version>/{TABLE} (AIConfigurator tables)")
    frames = [p for p in (_table_pairs(x) for x in paths) if len(p)]
    if not frames:
        raise InputError(str(root), None, f"no table holds both {FLASH_PREFIX}* and {TRITON} context-attention rows")
    return pd.concat(frames, ignore_index=True)


def fit_ratio(pairs: pd.DataFrame) -> dict:
    """The Triton / FlashAttention prefill ratio with its spread and evidence by prompt-length band."""
    lr = np.log(pairs["ratio"].to_numpy(float))
    n = len(lr)
    med = float(np.exp(np.median(lr)))
    se = float(med * 1.2533 * lr.std(ddof=1) / np.sqrt(n)) if n > 1 else None
    bands = pd.cut(pairs["isl"], [MIN_ISL - 1, 4096, 16384, np.inf], labels=["1k-4k", "4k-16k", ">16k"])
    evidence = [{"isl": str(b), "pairs": int(len(g)), "median": round(float(g["ratio"].median()), 3),
                 "p25": round(float(g["ratio"].quantile(0.25)), 3), "p75": round(float(g["ratio"].quantile(0.75)), 3)}
                for b, g in pairs.groupby(bands, observed=True)]
    tables = sorted({f"{r.gpu} vLLM {r.version} ({r.flash_source})" for r in pairs.itertuples()})
    return {"value": med, "stderr": se, "pairs": n, "p25": float(pairs["ratio"].quantile(0.25)),
            "p75": float(pairs["ratio"].quantile(0.75)), "tables": tables, "evidence": evidence,
            "head_dims": sorted(int(x) for x in pairs["head_dim"].unique())}


def catalog_doc(fit: dict, command: str, date: str | None) -> dict:
    """The YAML document of ``simulator/catalog/attention_kernels.yaml``."""
    src = (f"AIConfigurator vLLM context-attention tables, {', '.join(fit['tables'])}: median of Triton / FlashAttention "
           f"latency over {fit['pairs']} matched shapes (full attention, prompts >= {MIN_ISL} tokens, head dims "
           f"{', '.join(map(str, fit['head_dims']))}; quartiles {fit['p25']:.2f}-{fit['p75']:.2f})")
    return {"provenance": {"kind": "fitted", "source": f"aiconfigurator-vllm-kernels (commit {data_commit(ROOT)})",
                           "command": command, "date": date or "undated",
                           "method": "calibrate.gpu_priors.attention_fit (median of matched latency ratios)"},
            "triton_prefill_ratio": {"value": round(fit["value"], 4), "kind": "calibrated", "source": src,
                                     "stderr": None if fit["stderr"] is None else round(fit["stderr"], 4)},
            "evidence": fit["evidence"]}


def fit_and_write(root: Path, out: Path | None, command: str, date: str | None) -> str:
    """Fit the ratio (``specsim fit attention``); with ``out`` write the catalog file. Returns a summary."""
    import yaml

    from simulator.inputs.loading import write_atomic

    fit = fit_ratio(load_pairs(root))
    doc = catalog_doc(fit, command, date)
    head = ("# Attention kernels that price differently from FlashAttention (simulator/catalog/attention_kernels.py,\n"
            "# docs/gpu-cost-model.md). Regenerate (do not edit by hand):\n"
            "#   specsim fit attention --out simulator/catalog/attention_kernels.yaml --date YYYY-MM-DD\n")
    if out is not None:
        write_atomic(out, head + yaml.safe_dump(doc, sort_keys=False, width=120))
    lines = [f"Triton / FlashAttention prefill ratio {fit['value']:.3f} (stderr {fit['stderr'] or 0:.3f}; "
             f"quartiles {fit['p25']:.2f}-{fit['p75']:.2f}; {fit['pairs']} pairs)"]
    lines += [f"  prompts {e['isl']}: {e['pairs']} pairs, median {e['median']:.2f} ({e['p25']:.2f}-{e['p75']:.2f})"
              for e in fit["evidence"]]
    return "\n".join(lines + [f"  tables: {t}" for t in fit["tables"]])
