"""Importer for LLMServingSim's layer profiles (``casys-kaist/LLMServingSim``, ``profiler/v0/perf_models``)::

    <GPU>/<org>/<model>/tp<N>/layers.csv      layer_name, input (tokens), kv_cache, tp_size, latency(ns)
    <GPU>/<org>/<model>/tp<N>/attention.csv   FlashAttention-2 prefill / decode, time_stats.attn_*.{min,...,std}

The layer modules of one transformer layer (plus embedding, final norm, LM head) of the profiler's PyTorch model
code (the folder README calls them vLLM's modules), each timed alone on one GPU's TP shard (profiler hooks, no
CUDA graph around the step).

Facts read off the data and the profiler's source (``llm_profile/profiler/`` of that repository; checked by
``tests/calibrate/test_engine_importers.py``):

- ``layers.csv``: latency in **nanoseconds** (the column says so; the profiler writes ``median ms x 1e6``);
  ``kv_cache`` is 0 in every row, so the ``attn`` module is a prefill of ``input`` tokens on an empty cache.
  Dense modules are sharded by TP (q_proj, lm_head halve from TP 1 to 2). The MoE expert modules are **not**:
  ``expert.w1`` takes the same time at TP 1, 2 and 4 (Mixtral 41.8 / 40.4 / 40.4 us at one token), and it is one
  expert's whole linear on all ``input`` tokens (Mixtral's w1 at 2048 tokens, 311 us, is Llama-3.1-8B's
  14336 x 4096 gate_proj, 316 us; the profiler's own estimate charges E/TP experts per GPU, each at its share of
  the tokens); so are the MoE models' ``act_fn``. Their records carry the unsharded expert shape with ``tp`` = 1
  (the shard the shape assumes; ``source_file`` keeps the run's TP). The router ``gate`` (a hidden x experts
  GEMM, 4096 x 8 for Mixtral, yet 43 us at one token on H100, the time of a 117 MB weight stream) times routing
  bookkeeping in PyTorch, not a GEMM the kernel model describes: its rows are skipped with that reason.
- ``attention.csv``: one ``flash_attn_varlen_func`` call (FA2, causal) on fp16 Q/K/V built by the profiler:
  ``kv_cache_size`` keys **in all**, split evenly over ``batch_size`` sequences (``kv_cache_size // batch_size``
  keys each, the query's own key included); decode has one query per sequence, prefill (batch 1) has
  ``prefill_chunk_size`` queries aligned to the end of the keys, so its prior context is
  ``kv_cache_size - prefill_chunk_size``. Decode rows with ``kv_cache_size < batch_size`` ran on empty sequences
  (a flat ~3 us whatever the shape): kept by the loader (``kv_tokens`` 0), skipped by the importer.
  ``n_q_head`` / ``n_kv_head`` are the model's; the kernel ran on ``/ TP`` of them.
- The attention time unit is not stated in the data. It is **milliseconds**: (a) a decode must read every key
  and value once, ``batch x keys x 2 x kv_heads/TP x head_dim x 2 B``, so its time is at least that over the
  GPU's bandwidth (H100 3.35e12 B/s, A6000 768e9 B/s); read as ms every one of the ~100k non-empty decode rows
  takes 3.2x that bound or more, read as us 99.6% of them would beat it (A6000 Llama-3.1-8B, one sequence of
  65536 keys: 3.28 ms against a 0.35 ms bound, 3.28 us impossible); (b) read as seconds that one layer would
  take 3.3 s, >100 s per token over 32 layers; (c) the profiler's timer converts to ms (``* 1e-3`` of the
  profiler's us, ``* 1e3`` of perf_counter's s). Repeated shapes are profiling repeats: all kept, like Vidur's.
- dtype: float16 (the layer profiler sets ``config.dtype = torch.float16``; the attention profiler builds fp16
  tensors).

GPU folders: ``H100`` -> h100-sxm, ``A6000`` -> rtx-a6000. The source does not say which H100; the data rules out
the PCIe card: Llama-3.1-8B's LM head at one token (TP 1) streams its 1.05 GB in 366 us, 2.9 TB/s, above the H100
PCIe's 2.0 TB/s.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.contracts.op_records import columns_frame, numeric_column
from simulator.catalog.hardware import data_labels
from simulator.errors import InputError

SOURCE_REPO = "casys-kaist/LLMServingSim"
GPU_NAMES = data_labels("llmservingsim")  # folder -> catalog GPU (hardware.yaml data_labels)
NS, MS = 1e-9, 1e-3
DTYPE = "float16"
# Model shapes from the models' published config.json (Hugging Face; the same figures as LLMServingSim's own
# model_config/*.json): hidden_size, intermediate_size (one expert's for MoE), num_attention_heads,
# num_key_value_heads, head_dim (hidden / heads), vocab_size, num_local_experts, num_experts_per_tok.
MODELS: dict[str, dict[str, int]] = {
    "meta-llama/Llama-3.1-8B": dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128,
                                    vocab=128256, experts=0, topk=0),
    "meta-llama/Llama-3.1-70B": dict(hidden=8192, intermediate=28672, heads=64, kv_heads=8, head_dim=128,
                                     vocab=128256, experts=0, topk=0),
    "mistralai/Mixtral-8x7B-v0.1": dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128,
                                        vocab=32000, experts=8, topk=2),
    "microsoft/Phi-mini-MoE-instruct": dict(hidden=4096, intermediate=960, heads=32, kv_heads=8, head_dim=128,
                                            vocab=32064, experts=16, topk=2),
}
LAYER_COLUMNS = ("layer_name", "input", "kv_cache", "tp_size", "latency(ns)")
# module -> op of the record contract; None: skipped (reason in SKIPPED_MODULES)
MODULE_OPS = {"embedding": "embedding", "input_layernorm": "norm", "post_layernorm": "norm",
              "final_layernorm": "norm", "q_proj": "gemm", "k_proj": "gemm", "v_proj": "gemm", "o_proj": "gemm",
              "gate_proj": "gemm", "up_proj": "gemm", "down_proj": "gemm", "lm_head": "gemm", "rope": "rope",
              "act_fn": "act", "attn": "attn_prefill", "expert.w1": "gemm", "expert.w3": "gemm", "expert.w2": "gemm",
              "gate": None}
SKIPPED_MODULES = {"gate": "MoE router: a hidden x experts GEMM timed at ~43 us (H100) at one token, i.e. routing "
                           "bookkeeping in PyTorch, not a kernel the GEMM model describes",
                   "empty_decode": "decode rows with kv_cache_size < batch_size: the profiler split the keys over the "
                                   "batch, zero keys per sequence (an empty kernel, ~3 us whatever the shape)"}
ATTN_STATS = ("min", "max", "mean", "median", "std")
LAYER_FRAME_COLUMNS = ("gpu", "model", "tp", "module", "tokens", "kv_tokens", "time_s", "source_file", "source_row")
ATTN_FRAME_COLUMNS = ("gpu", "model", "tp", "phase", "batch", "tokens", "kv_tokens", "heads", "kv_heads", "hidden",
                      "time_s", "source_file", "source_row")
ATTN_COLUMNS = tuple(f"time_stats.attn_{p}.{s}" for p in ("prefill", "decode") for s in ATTN_STATS) + (
    "n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "max_model_len", "batch_size",
    "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend")


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"not a CSV table ({str(e).splitlines()[0]})") from None
    for c in df.columns:
        if c not in columns:
            raise InputError(str(path), f"header: column {c}", "unknown column")
    for c in columns:
        if c not in df.columns:
            raise InputError(str(path), f"header: column {c}", "missing column")
    return df


class Skip(Exception):
    """A file this importer cannot interpret (a GPU it cannot name, a model without a shape table): skipped,
    named in the provenance (``files_skipped``) with the reason."""


def _run_of(path: Path, root: Path) -> dict:
    """gpu, model, tp of ``<GPU>/<org>/<model>/tp<N>/<file>``."""
    rel = path.relative_to(root)
    gpu_dir, model, tp_dir = rel.parts[0], "/".join(rel.parts[1:3]), rel.parts[3]
    if gpu_dir not in GPU_NAMES:
        raise Skip(f"GPU folder {gpu_dir!r} has no catalog name (known: {', '.join(GPU_NAMES)})")
    m = re.fullmatch(r"tp(\d+)", tp_dir)
    if not m or int(m.group(1)) < 1:
        raise InputError(str(path), None, f"folder {tp_dir!r} is not tp<N>")
    return {"gpu": GPU_NAMES[gpu_dir], "device": gpu_dir, "model": model, "tp": int(m.group(1)), "source_file": str(rel)}


def _runs(root: Path, name: str, skipped: dict | None) -> list[tuple[Path, dict]]:
    """(file, run) of every ``<GPU>/<org>/<model>/tp<N>/<name>``; files that cannot be interpreted go to
    ``skipped`` (file -> reason)."""
    if not root.is_dir():
        raise InputError(str(root), None, "not a folder")
    out = []
    for path in sorted(root.glob(f"*/*/*/tp*/{name}")):
        try:
            out.append((path, _run_of(path, root)))
        except Skip as e:
            if skipped is not None:
                skipped[str(path.relative_to(root))] = str(e)
    return out


def _positive(path: Path, values: np.ndarray, column: str, rows: np.ndarray | None = None) -> None:
    bad = ~(values > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        row = int(rows[i]) if rows is not None else i + 1
        raise InputError(str(path), f"row {row}: column {column}", f"must be > 0 (got {values[i]})")


def load_llmservingsim_layers(root: str | Path, skipped: dict | None = None) -> pd.DataFrame:
    """Every ``layers.csv`` under ``root``: gpu, model, tp, module, tokens, kv_tokens, time_s, source_file,
    source_row (1-based data row). Files of a GPU folder with no catalog name are left out (named in
    ``skipped``, file -> reason, when given)."""
    root = Path(root)
    parts = []
    for path, run in _runs(root, "layers.csv", skipped):
        df = _read_csv(path, LAYER_COLUMNS)
        num = {c: numeric_column(df[c], str(path), c) for c in ("input", "kv_cache", "tp_size", "latency(ns)")}
        _positive(path, num["latency(ns)"], "latency(ns)")
        _positive(path, num["input"], "input")
        wrong_tp = num["tp_size"] != run["tp"]
        if wrong_tp.any():
            i = int(np.flatnonzero(wrong_tp)[0])
            raise InputError(str(path), f"row {i + 1}: column tp_size", f"{num['tp_size'][i]:g} in folder tp{run['tp']}")
        parts.append(pd.DataFrame({"gpu": run["gpu"], "model": run["model"], "tp": run["tp"],
                                   "module": df["layer_name"].to_numpy(dtype=object),
                                   "tokens": num["input"].astype(int), "kv_tokens": num["kv_cache"].astype(int),
                                   "time_s": num["latency(ns)"] * NS, "source_file": run["source_file"],
                                   "source_row": np.arange(1, len(df) + 1)}))
    if not any(root.glob("*/*/*/tp*/layers.csv")):
        raise InputError(str(root), None, "no <GPU>/<org>/<model>/tp<N>/layers.csv files")
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=LAYER_FRAME_COLUMNS)


def load_llmservingsim_attention(root: str | Path, skipped: dict | None = None) -> pd.DataFrame:
    """Every ``attention.csv`` under ``root``: gpu, model, tp, phase (prefill | decode), batch, tokens (queries per
    sequence: the prefill chunk; 1 for decode), kv_tokens (keys per sequence the kernel attended over, the
    sequence's new tokens included: ``kv_cache_size // batch_size``; 0 for the empty decode rows), heads, kv_heads,
    hidden (the model's, before TP), time_s (the median, ms -> s), source_file, source_row (1-based data row).
    Files of a GPU folder with no catalog name are left out (named in ``skipped`` when given)."""
    root = Path(root)
    parts = []
    for path, run in _runs(root, "attention.csv", skipped):
        df = _read_csv(path, ATTN_COLUMNS)
        flag = df["is_prefill"].str.strip().str.lower()
        if not flag.isin(["true", "false"]).all():
            i = int(np.flatnonzero(~flag.isin(["true", "false"]).to_numpy())[0])
            raise InputError(str(path), f"row {i + 1}: column is_prefill", f"not True/False ({df['is_prefill'].iloc[i]!r})")
        prefill = (flag == "true").to_numpy()
        num = {c: numeric_column(df[c], str(path), c) for c in ("batch_size", "prefill_chunk_size", "kv_cache_size",
                                                               "n_embd", "n_q_head", "n_kv_head")}
        time = np.empty(len(df))
        for phase, sel in (("prefill", prefill), ("decode", ~prefill)):  # a row's own phase's median
            col = f"time_stats.attn_{phase}.median"
            t = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
            bad = sel & np.isnan(t)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(str(path), f"row {i + 1}: column {col}", f"not a number ({df[col].iloc[i]!r})")
            rows = np.flatnonzero(sel)
            time[rows] = t[rows]
            _positive(path, t[rows], col, rows + 1)
        parts.append(pd.DataFrame({"gpu": run["gpu"], "model": run["model"], "tp": run["tp"],
                                   "phase": np.where(prefill, "prefill", "decode"),
                                   "batch": num["batch_size"].astype(int),
                                   "tokens": np.where(prefill, num["prefill_chunk_size"], 1).astype(int),
                                   "kv_tokens": num["kv_cache_size"].astype(int) // num["batch_size"].astype(int),
                                   "heads": num["n_q_head"].astype(int),
                                   "kv_heads": num["n_kv_head"].astype(int), "hidden": num["n_embd"].astype(int),
                                   "time_s": time * MS, "source_file": run["source_file"],
                                   "source_row": np.arange(1, len(df) + 1)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ATTN_FRAME_COLUMNS)


def module_shape(module: str, shape: dict[str, int], tp: int) -> dict:
    """Record shape columns of one module of a model at TP degree ``tp`` (expert modules: unsharded, tp 1)."""
    h, d, f = shape["hidden"], shape["head_dim"], shape["intermediate"]
    q, kv = shape["heads"] // tp, max(-(-shape["kv_heads"] // tp), 1)
    expert = module.startswith("expert.") or (module == "act_fn" and shape["experts"] > 0)
    t = 1 if expert else tp
    gemm = {"q_proj": (q * d, h), "k_proj": (kv * d, h), "v_proj": (kv * d, h), "o_proj": (h, q * d),
            "gate_proj": (f // tp, h), "up_proj": (f // tp, h), "down_proj": (h, f // tp),
            "lm_head": (shape["vocab"] // tp, h), "expert.w1": (f, h), "expert.w3": (f, h), "expert.w2": (h, f)}
    out = {"tp": t, "hidden": h, "heads": shape["heads"], "kv_heads": shape["kv_heads"], "head_dim": d,
           "intermediate": f, "gated": 1}
    if module in gemm:
        out["n"], out["k"] = gemm[module]
    if shape["experts"]:
        out.update(experts=shape["experts"], topk=shape["topk"], expert_intermediate=f)
    if module == "attn":
        out.update(heads=q, kv_heads=kv, batch=1)
    return out


def _layer_records(layers: pd.DataFrame, skipped: dict) -> list[pd.DataFrame]:
    parts = []
    for (model, tp, module), g in layers.groupby(["model", "tp", "module"], sort=True):
        op = MODULE_OPS.get(module)
        if op is None:  # the router, or a module this importer does not map
            skipped[module] = skipped.get(module, 0) + len(g)
            continue
        cols = {**module_shape(module, MODELS[model], int(tp)), "op": op, "source_op": module, "model": model,
                "gpu": g["gpu"].to_numpy(dtype=object), "device": g["source_file"].str.split("/").str[0].to_numpy(dtype=object),
                "tokens": g["tokens"].to_numpy(), "source_file": g["source_file"].to_numpy(dtype=object),
                "source_row": g["source_row"].to_numpy(), "time_s": g["time_s"].to_numpy()}
        if op == "attn_prefill":
            cols["kv_tokens"] = g["kv_tokens"].to_numpy()
        parts.append(columns_frame(cols, len(g)))
    return parts


def _attention_records(att: pd.DataFrame, skipped: dict) -> list[pd.DataFrame]:
    empty = att["kv_tokens"] < att["tokens"]
    if empty.any():
        skipped["empty_decode"] = int(empty.sum())
    parts = []
    for (model, tp), g in att[~empty].groupby(["model", "tp"], sort=True):
        tp = int(tp)
        heads, kvh, hidden = g["heads"].to_numpy(), g["kv_heads"].to_numpy(), g["hidden"].to_numpy()
        decode = (g["phase"] == "decode").to_numpy()
        prior = (g["kv_tokens"] - g["tokens"]).to_numpy()  # keys before the sequence's new tokens
        parts.append(columns_frame({
            "op": np.where(decode, "attn_decode", "attn_prefill").astype(object),
            "source_op": np.where(decode, "attn_decode", "attn_prefill").astype(object), "model": model, "tp": tp,
            "gpu": g["gpu"].to_numpy(dtype=object), "device": g["source_file"].str.split("/").str[0].to_numpy(dtype=object),
            "batch": g["batch"].to_numpy(), "tokens": g["tokens"].to_numpy(), "kv_tokens": prior,
            "heads": heads // tp, "kv_heads": np.maximum(-(-kvh // tp), 1), "head_dim": hidden // heads,
            "hidden": hidden, "backend": "flash_attn_varlen", "kv_dtype": DTYPE,
            "source_file": g["source_file"].to_numpy(dtype=object), "source_row": g["source_row"].to_numpy(),
            "time_s": g["time_s"].to_numpy()}, len(g)))
    return parts


def import_llmservingsim(root: str | Path) -> tuple[pd.DataFrame, dict]:
    """Layer and attention profiles under ``root`` as op records (``records.RECORD_COLUMNS``), and provenance."""
    root = Path(root)
    files_skipped: dict[str, str] = {}
    layers = load_llmservingsim_layers(root, files_skipped)
    att = load_llmservingsim_attention(root, files_skipped)
    for frame_ in (layers, att):  # runs of a model without a shape table: skipped, named
        for f in sorted(set(frame_.loc[~frame_["model"].isin(MODELS), "source_file"])):
            files_skipped[f] = f"model has no shape table (known: {', '.join(MODELS)})"
    layers, att = layers[layers["model"].isin(MODELS)], att[att["model"].isin(MODELS)]
    skipped: dict[str, int] = {}
    parts = _layer_records(layers, skipped) + _attention_records(att, skipped)
    if not parts:
        raise InputError(str(root), None, "no layer or attention profile this importer can interpret"
                         + (f" (skipped: {'; '.join(f'{k} ({v})' for k, v in files_skipped.items())})" if files_skipped else ""))
    df = pd.concat(parts, ignore_index=True)
    df["source"], df["dtype"] = "llmservingsim", DTYPE
    df.loc[df["backend"] == "", "backend"] = "llmservingsim_profiler"
    files = sorted(set(layers["source_file"]) | set(att["source_file"]))
    prov = {"source": "llmservingsim", "source_repo": SOURCE_REPO, "source_path": str(root),
            "licence": "MIT (casys-kaist/LLMServingSim)", "importer": "calibrate.gpu_priors.import_llmservingsim",
            "statistic": "layers.csv latency(ns) (ns -> s); attention.csv time_stats.attn_*.median (ms -> s, unit "
                         "determined from the data: see the importer's docstring)",
            "files": files, "gpu_names": GPU_NAMES, "dtype": f"{DTYPE} (the profiler sets config.dtype = torch.float16)",
            "files_skipped": files_skipped, "rows_skipped": skipped,
            "modules_unknown": {k: v for k, v in skipped.items() if k not in SKIPPED_MODULES},
            "rows_skipped_why": {k: SKIPPED_MODULES.get(k, f"module {k!r} is not one this importer maps (MODULE_OPS)")
                                 for k in skipped},
            "notes": ["expert.w1/w2/w3 and the MoE models' act_fn are not TP-sharded in these profiles: records carry "
                      "the unsharded expert shape with tp 1",
                      "attention: kv_cache_size keys in all, kv_cache_size // batch_size per sequence; records' kv_tokens "
                      "= keys before the sequence's new tokens"]}
    sc = root / "SOURCE_COMMIT"
    if sc.is_file():
        m = re.search(r"\b[0-9a-f]{40}\b", sc.read_text(encoding="utf-8", errors="replace"))
        if m:
            prov["source_commit"] = m.group(0)
    return df, prov
