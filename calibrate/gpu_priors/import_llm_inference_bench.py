"""Importer for LLM-Inference-Bench's whole offline-batch runs (``argonne-lcf/LLM-Inference-Bench``,
``Plots/All_results.csv``; paper arXiv 2411.00136).

One row per run: ``Hardware``, ``Num of Hardware`` (GPUs = TP degree), ``Framework`` (vLLM, TensorRT-LLM,
llama.cpp, Deepspeed-MII, ...), ``Model`` (HF id), ``Input Output Length`` (input = output length), ``Batch Size``,
``Latency`` (s, end to end: one prefill of the batch, then output-length decode steps), ``Throughput``.

Facts read off the data (checked by ``tests/calibrate/test_engine_importers.py``):

- **Throughput counts input and output tokens**: ``Throughput = batch x (input + output) / Latency`` in every row
  but one group (ratio 2.000 to 1e-5 against ``batch x output / Latency``), not output tokens per second as the
  folder's README says (the GH200 TensorRT-LLM Mistral-7B row: 128 + 128 tokens in 0.688 s gives 371.9 = the
  table's value; output only would be 186). ``THROUGHPUT_COUNTS`` records it; ``throughput_tok_s`` is kept as given.
- **Inconsistent rows**: llama.cpp at batch > 1 (1161 rows) has ``Throughput = (input + output) / Latency``, the
  batch not counted, and a latency *below* the same configuration's batch-1 latency in every one of them (0.49-0.88x;
  A100 Llama-2-7B, 128 tokens: 2.33 s at "batch" 16 against 4.34 s at batch 1): its "batch" is not concurrent
  sequences. ``load_llm_inference_bench``
  flags them (``consistent`` False, ``throughput_counts`` says which formula the row matches);
  ``import_llm_inference_bench`` drops them and counts them in the provenance.
- Repeated configurations (57, vLLM on MI250) are repeat runs: both kept.

GPU names (``gpu``; "" for hardware the catalog has no entry for, rows kept):

- ``Nvidia A100 GPU`` -> ``a100-40gb``. Neither the folder's README nor the repository states the memory size; the
  data does: vLLM Llama-2-70B (138 GB of fp16 weights) at TP 4 on these A100s starves for KV cache (batch 16 at
  2048 tokens takes 424 s against 69 s at batch 1; batch 32 only at 128 tokens; no batch 64), while the 80 GB H100s
  at TP 4 run every batch to 64 smoothly: 4 x 40 GB leaves ~6 GB for the KV cache, 4 x 80 GB would leave ~150 GB.
- ``Nvidia H100 GPU`` -> ``h100-sxm``: the batch-1 TensorRT-LLM Llama-2-7B run takes 6.57 ms per output token
  (prefill included) on one GPU, below the 6.74 ms an H100 PCIe (2.0 TB/s) needs to stream 13.5 GB of weights.
- ``Nvidia GH200 GPU`` -> ``gh200`` (``records.NON_CATALOG_GPUS``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog.hardware import data_labels
from simulator.errors import InputError

SOURCE_REPO = "argonne-lcf/LLM-Inference-Bench"
SOURCE_PATH = "Plots/All_results.csv"
LICENCE = "BSD-3-Clause (Copyright (c) 2024, UChicago Argonne, LLC)"
SOURCE_COLUMNS = ("Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency",
                  "Throughput")
GPU_NAMES = data_labels("llm_inference_bench")  # Hardware -> catalog GPU (hardware.yaml data_labels)
THROUGHPUT_COUNTS = "batch x (input + output) / latency"
RATIO_TOLERANCE = 1e-3
# column -> (type, unit / meaning): the table the importer writes
BENCH_COLUMNS: dict[str, tuple[str, str]] = {
    "hardware": ("str", "the source's Hardware"),
    "gpu": ("str", "catalog hardware name, a NON_CATALOG_GPUS name (gh200), or empty (not an NVIDIA GPU we name)"),
    "tp": ("int", "GPUs (the source's Num of Hardware = TP degree)"),
    "framework": ("str", "engine (vLLM, TensorRT-LLM, llama.cpp, Deepspeed-MII, ...)"),
    "model_id": ("str", "Hugging Face model id"),
    "input_tokens": ("int", "prompt tokens per sequence (= the source's Input Output Length)"),
    "output_tokens": ("int", "generated tokens per sequence (= the source's Input Output Length)"),
    "batch": ("int", "sequences in the offline batch"),
    "latency_s": ("float", "end-to-end time of the batch: one prefill, then output_tokens decode steps"),
    "throughput_tok_s": ("float", "the source's Throughput, as given: batch x (input + output) / latency"),
    "throughput_counts": ("str", "which formula the row's Throughput matches (batch x (input + output) / latency | "
                                 "(input + output) / latency | neither)"),
    "consistent": ("bool", "Throughput matches batch x (input + output) / latency"),
    "source_row": ("int", "1-based data row of All_results.csv"),
}


def _ints(df: pd.DataFrame, path: Path, column: str) -> np.ndarray:
    num = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    bad = ~(num > 0) | (num != np.round(num))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(str(path), f"row {i + 1}: column {column}", f"not a positive integer ({df[column].iloc[i]!r})")
    return num.astype(int)


def _positive(df: pd.DataFrame, path: Path, column: str) -> np.ndarray:
    num = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    bad = ~(num > 0) | ~np.isfinite(num)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(str(path), f"row {i + 1}: column {column}", f"not a positive number ({df[column].iloc[i]!r})")
    return num


def load_llm_inference_bench(path: str | Path) -> pd.DataFrame:
    """Every row of ``All_results.csv`` with our names and units (``BENCH_COLUMNS``), inconsistent rows flagged."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), None, "file not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"not a CSV table ({str(e).splitlines()[0]})") from None
    for c in df.columns:
        if c not in SOURCE_COLUMNS:
            raise InputError(str(path), f"header: column {c}", "unknown column")
    for c in SOURCE_COLUMNS:
        if c not in df.columns:
            raise InputError(str(path), f"header: column {c}", "missing column")
    tp, length, batch = (_ints(df, path, c) for c in ("Num of Hardware", "Input Output Length", "Batch Size"))
    latency, thr = _positive(df, path, "Latency"), _positive(df, path, "Throughput")
    tokens = thr * latency
    full, one = tokens / (batch * 2 * length), tokens / (2 * length)
    counts = np.where(np.abs(full - 1) <= RATIO_TOLERANCE, THROUGHPUT_COUNTS,
                      np.where(np.abs(one - 1) <= RATIO_TOLERANCE, "(input + output) / latency", "neither"))
    hardware = df["Hardware"].str.strip()
    return pd.DataFrame({
        "hardware": hardware.to_numpy(dtype=object), "gpu": hardware.map(GPU_NAMES).fillna("").to_numpy(dtype=object),
        "tp": tp, "framework": df["Framework"].str.strip().to_numpy(dtype=object),
        "model_id": df["Model"].str.strip().to_numpy(dtype=object), "input_tokens": length, "output_tokens": length,
        "batch": batch, "latency_s": latency, "throughput_tok_s": thr, "throughput_counts": counts.astype(object),
        "consistent": counts == THROUGHPUT_COUNTS, "source_row": np.arange(1, len(df) + 1)})


def import_llm_inference_bench(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """The consistent rows of ``All_results.csv`` (``BENCH_COLUMNS``) and their provenance; the dropped rows are
    counted per framework and reason."""
    path = Path(path)
    df = load_llm_inference_bench(path)
    bad = df[~df["consistent"]]
    dropped = {f"{fw}: Throughput = {how}": int(n)
               for (fw, how), n in bad.groupby(["framework", "throughput_counts"]).size().items()}
    key = ["hardware", "tp", "framework", "model_id", "input_tokens", "batch"]
    prov = {"source": "llm-inference-bench", "source_repo": SOURCE_REPO, "source_path": str(path),
            "source_file": SOURCE_PATH, "licence": LICENCE, "importer": "calibrate.gpu_priors.import_llm_inference_bench",
            "paper": "arXiv 2411.00136", "throughput_counts": THROUGHPUT_COUNTS,
            "throughput_note": "Throughput counts input + output tokens (not output tokens only, as the folder README says)",
            "gpu_names": GPU_NAMES, "rows_in_source": int(len(df)), "rows_dropped": dropped,
            "rows_dropped_why": "Throughput does not count the batch, and latency at batch > 1 is below batch 1's: "
                                "the row's batch is not concurrent sequences (llama.cpp)",
            "repeated_configurations": int(df.duplicated(key).sum()),
            "repeated_configurations_kept": "repeat runs of one configuration: all kept"}
    commit = _source_commit(path.parent)
    if commit:
        prov["source_commit"] = commit
    return df[df["consistent"]].reset_index(drop=True), prov


def _source_commit(folder: Path) -> str | None:
    sc = folder / "SOURCE_COMMIT"
    if sc.is_file():
        m = re.search(r"\b[0-9a-f]{40}\b", sc.read_text(encoding="utf-8", errors="replace"))
        if m:
            return m.group(0)
    return None
