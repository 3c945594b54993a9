"""The round-two GPU campaign's kernel plan and the model's prediction of every point, made before the device call
(``specsim measure kernel-plan``; the device runs ``calibrate/measure/gpu_kernel_bench.py`` on the plan).

Points (:func:`make_plan`):

- ``gemm`` and ``gemm_fp8`` (per-tensor scales; the 32B shape also per-row / per-column): the linear layers of the
  released dense shapes (:data:`DENSE`: QKV, O, gate-up, down at TP 1) at m = :data:`M_GRID` tokens;
- ``grouped``: one MoE layer's routed experts (:data:`MOE`: Qwen3-30B-A3B, DeepSeek-V3's layer) at
  :data:`MOE_TOKENS` tokens, balanced routing;
- ``memory``: the device's memory as the driver reports it, one CUDA graph's reserve, a profile pass at 8192 tokens;
- grid ``moe-fp8``: ``grouped_fp8``, the same layers with e4m3 experts and activations quantised per pass, each beside
  its bf16 ``grouped`` twin (priced by the MoE fit's form at one byte per weight and the GPU's FP8 rate).

Predictions (:func:`predict`), the catalog's parameters for the GPU (``prior_profile``), each through the rule the
simulator prices it with:

- a GEMM of kernel kind K (bf16, or W8A8 FP8 where the GPU has FP8 cores: ``simulator.catalog.quant_gemm``):
  ``t_q + t_kernel + softmax_p((n k b_K + 2 (m k + m n)) / (eta_mem rm BW), 2 m n k / (eta_comp rc F_K))``
  (:func:`calibrate.gpu_priors.quant_fit.kernel_time`, the quantised GEMM fit's own form; t_kernel = t_layer / 10,
  the per-kernel share of the per-layer cost);
- a routed-expert layer: the MoE fit's form with the catalog's MoE terms (:func:`calibrate.gpu_priors.moe_fit.predict`);
- memory: the catalog's device memory as the driver reports it (``HardwareSpec``), the rest unpredicted (measured to
  set the KV plan's terms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# dense shapes (TP 1): hidden, query heads, KV heads, head dim, MLP intermediate (published config.json values)
DENSE = {"qwen3-8b": (4096, 32, 8, 128, 12288), "qwen3-32b": (5120, 64, 8, 128, 25600)}
# MoE layers: hidden, expert intermediate, experts, top-k
MOE = {"qwen3-30b-a3b": (2048, 768, 128, 8), "deepseek-v3": (7168, 2048, 256, 8)}
M_GRID = (1, 8, 32, 128, 512, 2048, 8192, 16384)
MOE_TOKENS = (1, 4, 16, 64, 256)
ROWWISE_MODEL = "qwen3-32b"
MEMORY_POINT = {"hidden": 5120, "inter": 25600, "tokens": 8192, "graph_batch": 256}


GRIDS = ("round2", "moe-fp8")


def linears(hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int) -> dict[str, tuple[int, int]]:
    """{linear: (n, k)} of one dense layer at TP 1 (gated MLP: gate and up fused)."""
    return {"qkv": ((heads + 2 * kv_heads) * head_dim, hidden), "o": (hidden, heads * head_dim),
            "gate_up": (2 * inter, hidden), "down": (hidden, inter)}


MOE_FP8_TOKENS = (1, 4, 16, 64, 256, 1024)


def make_plan(repeats: int = 5, max_seconds: float = 300.0, tiny: bool = False, grid: str = "round2") -> dict:
    """The plan JSON (module docstring). ``tiny``: small shapes that a CPU dry run times in seconds. ``grid``:
    ``round2`` (the round's plan) or ``moe-fp8`` (the grouped MoE layers with e4m3 experts, each beside its bf16 twin
    in the same call, at :data:`MOE_FP8_TOKENS` tokens)."""
    if grid not in GRIDS:
        raise ValueError(f"grid: one of {', '.join(GRIDS)} (got {grid!r})")
    pts = _moe_fp8_points(tiny) if grid == "moe-fp8" else _round2_points(tiny)
    for j, p in enumerate(pts):
        p["id"] = j
    return {"points": pts, "repeats": repeats, "max_seconds": max_seconds, "allow_cpu": tiny, "grid": grid,
            "bench": "calibrate/measure/gpu_kernel_bench.py"}


def _moe_fp8_points(tiny: bool) -> list[dict]:
    pts = []
    for model, (h, i, e, k) in MOE.items():
        for t in ((1, 4) if tiny else MOE_FP8_TOKENS):
            for op in ("grouped", "grouped_fp8"):
                pts.append({"op": op, "model": model, "tokens": t, "hidden": 64 if tiny else h,
                            "inter": 32 if tiny else i, "experts": 8 if tiny else e, "topk": 2 if tiny else k})
    return pts


def _round2_points(tiny: bool) -> list[dict]:
    pts = []
    grid = (1, 8, 64) if tiny else M_GRID
    for model, shape in DENSE.items():
        sh = (64, 4, 2, 16, 128) if tiny else shape
        for lin, (n, k) in linears(*sh).items():
            for m in grid:
                pts.append({"op": "gemm", "model": model, "linear": lin, "m": m, "n": n, "k": k})
                pts.append({"op": "gemm_fp8", "scales": "tensor", "model": model, "linear": lin, "m": m, "n": n, "k": k})
                if model == ROWWISE_MODEL:
                    pts.append({"op": "gemm_fp8", "scales": "rowwise", "model": model, "linear": lin, "m": m, "n": n,
                                "k": k})
    for model, (h, i, e, k) in MOE.items():
        for t in ((1, 4) if tiny else MOE_TOKENS):
            pts.append({"op": "grouped", "model": model, "tokens": t, "hidden": 64 if tiny else h,
                        "inter": 32 if tiny else i, "experts": 8 if tiny else e, "topk": 2 if tiny else k})
    if not tiny:
        pts.append({"op": "memory", **MEMORY_POINT})
    return pts


def _gemm_predictions(d: pd.DataFrame, gpu: str) -> np.ndarray:
    from calibrate.gpu_priors.kernel_model import KERNELS_PER_LAYER
    from calibrate.gpu_priors.quant_fit import kernel_time
    from simulator.catalog import get_hardware
    from simulator.catalog.quant_gemm import gemm_kind
    from simulator.cost.cost_profile import prior_profile

    hw = get_hardware(gpu)
    c = prior_profile(hw).params(hw)
    out = np.full(len(d), np.nan)
    for dtype, bytes_w in (("bf16", 2.0), ("fp8", 1.0)):
        sel = (d["op"] == ("gemm" if dtype == "bf16" else "gemm_fp8")).to_numpy()
        if not sel.any():
            continue
        _, kind = gemm_kind(dtype, hw)
        peak = kind.peak
        em = c.mem_efficiency * kind.mem_ratio.value
        ec = c.compute_efficiency * kind.compute_ratio.value
        t0 = kind.gemm_overhead_s.value + c.layer_overhead_s / KERNELS_PER_LAYER
        out[sel] = kernel_time(d[sel], gpu, bytes_w, peak, em, ec, t0)
    return out


def _moe_predictions(d: pd.DataFrame, gpu: str) -> np.ndarray:
    from calibrate.gpu_priors import moe_fit

    sel = d["op"].isin(["grouped", "grouped_fp8"]).to_numpy()
    out = np.full(len(d), np.nan)
    if not sel.any():
        return out
    g = d[sel]
    fp8 = (g["op"] == "grouped_fp8").to_numpy()
    f = pd.DataFrame({"gpu": gpu, "tokens": g["tokens"].to_numpy(float), "hidden": g["hidden"].to_numpy(float),
                      "inter": g["inter"].to_numpy(float), "experts": g["experts"].to_numpy(float),
                      "topk": g["topk"].to_numpy(float), "tp": 1.0, "ep": 1.0, "distribution": "balanced",
                      "mats": 3.0, "bytes_per_weight": np.where(fp8, 1.0, 2.0), "rate": np.where(fp8, "fp8", "bf16"),
                      "dtype": np.where(fp8, "fp8_block", "bfloat16"), "source": "aic"})
    f = moe_fit.with_layer_shape(f)
    out[sel] = moe_fit.predict(f, moe_fit.catalog_values(gpu))
    return out


def predict(plan: dict, gpu: str) -> pd.DataFrame:
    """One row per point: the plan's fields and ``predicted_s`` (NaN where the model predicts no time: memory points;
    their ``predicted_total_bytes`` is the catalog's memory as the driver reports it)."""
    from simulator.catalog import get_hardware

    d = pd.DataFrame(plan["points"])
    pred = _gemm_predictions(d, gpu)
    moe = _moe_predictions(d, gpu)
    d["predicted_s"] = np.where(np.isnan(pred), moe, pred)
    d["gpu"] = gpu
    if (d["op"] == "memory").any():
        d.loc[d["op"] == "memory", "predicted_total_bytes"] = float(get_hardware(gpu).reported_memory_bytes)
    return d


def read_records(folder) -> list[dict]:
    """Every record of the run folders under ``folder`` (``*/records.jsonl``, any depth); a bad line is an
    InputError naming its file and line (:func:`simulator.inputs.loading.iter_jsonl`)."""
    from pathlib import Path

    from simulator.inputs.loading import iter_jsonl

    out = []
    for f in sorted(Path(folder).rglob("records.jsonl")):
        out += [r for _, r in iter_jsonl(f.read_text(encoding="utf-8").splitlines(), str(f))]
    return out


def compare(predicted: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """The measured points (``records.jsonl`` of a run) beside their predictions, by point id: ``measured_s``,
    ``predicted_s``, ``error`` = predicted / measured - 1 (timed points only; memory points carry their figures)."""
    m = pd.DataFrame([r for r in records if "time_s" in r and "id" in r])
    if m.empty:
        return pd.DataFrame(columns=["id", "op", "measured_s", "predicted_s", "error"])
    keep = [c for c in ("id", "impl") if c in m.columns]
    t = predicted.merge(m[keep + ["time_s"]].rename(columns={"time_s": "measured_s"}), on="id", how="inner")
    t["error"] = t["predicted_s"] / t["measured_s"] - 1.0
    return t


def _kind(t: pd.DataFrame) -> pd.Series:
    """Each point's op, with its FP8 scaling where it has one (``gemm_fp8 (tensor)``)."""
    sc = t["scales"] if "scales" in t else pd.Series(np.nan, index=t.index)
    return t["op"].where(sc.isna(), t["op"] + " (" + sc.astype(str) + ")")


def summary(t: pd.DataFrame) -> pd.DataFrame:
    """Per op (and FP8 scales): points, median and p90 |error|, median signed error."""
    g = t.assign(kind=_kind(t), ae=t["error"].abs()).groupby("kind")
    return g.agg(points=("ae", "size"), median_ape=("ae", "median"), p90_ape=("ae", lambda x: float(np.quantile(x, 0.9))),
                 bias=("error", "median")).reset_index()


def fp8_ratios(t: pd.DataFrame) -> pd.DataFrame:
    """Measured FP8 time over the bf16 time of the same shape: GEMMs per FP8 scaling and m (the median over the
    planned linear shapes), grouped MoE layers per model and tokens (``scales``: ``moe``; ``m``: tokens); 0.5 = FP8 at
    twice bf16's rate, the FP8 tensor cores' peak ratio; the prediction's ratio beside it."""
    cols = ["scales", "m", "shapes", "measured_ratio", "predicted_ratio"]
    parts = []
    for bf_op, f8_op, keys, group in (("gemm", "gemm_fp8", ["model", "linear", "m", "n", "k"], ["scales", "m"]),
                                      ("grouped", "grouped_fp8", ["model", "tokens", "hidden", "inter", "experts", "topk"],
                                       ["model", "tokens"])):
        if not {bf_op, f8_op} <= set(t["op"]) or not set(keys) <= set(t.columns):
            continue
        bf = t[t["op"] == bf_op].set_index(keys)[["measured_s", "predicted_s"]]
        f8 = t[t["op"] == f8_op].join(bf, on=keys, rsuffix="_bf16").dropna(subset=["measured_s_bf16"])
        f8 = f8.assign(measured_ratio=f8["measured_s"] / f8["measured_s_bf16"],
                       predicted_ratio=f8["predicted_s"] / f8["predicted_s_bf16"])
        r = f8.groupby(group).agg(shapes=("measured_ratio", "size"), measured_ratio=("measured_ratio", "median"),
                                  predicted_ratio=("predicted_ratio", "median")).reset_index()
        if f8_op == "grouped_fp8":
            r = r.assign(scales="moe " + r["model"], m=r["tokens"]).drop(columns=["model", "tokens"])
        parts.append(r[cols])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def level_by_size(t: pd.DataFrame) -> pd.DataFrame:
    """Measured / predicted time per op (and FP8 scaling) and size (m for GEMMs, tokens for MoE layers): the median
    over the shapes of that size -- where in the size range a kind runs slower (> 1) or faster than predicted."""
    if t.empty:
        return pd.DataFrame(columns=["kind", "size", "shapes", "measured / predicted"])
    size = t["m"] if "m" in t else pd.Series(np.nan, index=t.index)
    if "tokens" in t:
        size = size.fillna(t["tokens"])
    d = t.assign(kind=_kind(t), size=size,
                 r=t["measured_s"] / t["predicted_s"]).dropna(subset=["r", "size"])
    return (d.groupby(["kind", "size"]).agg(shapes=("r", "size"), ratio=("r", "median")).reset_index()
            .rename(columns={"ratio": "measured / predicted"}))
