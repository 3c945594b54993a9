"""The latent-attention (MLA) layer's fixed cost: t_mla fitted on AIConfigurator's MLA module tables.

What the step model charges one decode layer's attention without this term (``Deployment._moe_breakdown``; dense
per-layer cost, docs/gpu-cost-model.md)::

    charge = W_attn / TP / rm / (eta_mem BW) + softmax_p(KV / (eta_kv BW),  attention FLOPs / TP / (eta_comp F))
             + t_layer + 2 t_q

(the projections' weights and the attention kernel each on its own roofline, ``roofline.gpu_split``; the
projections' FLOPs at decode batches are not counted)

W_attn: one layer's attention weights (``ModelSpec.attention_params_per_layer``: q_a, q_b, kv_a, kv_b, o) in the
weight dtype, rm / t_q the GEMM kind's streaming ratio and fixed cost per quantised GEMM (2 per attention: the
GQA count), t_layer the dense layer's whole fixed cost. An MLA module runs more kernels than a GQA attention (q_a
and kv_a norms, q_b, the two absorbed BMMs, the RoPE / cache write, the attention kernel's split-K combine), so the
measured module lies above that charge by a near-constant: ``t_mla = mla_layer_overhead_s``, one per GPU, added per
MLA layer (every decoder layer of DeepSeek-V3/R1). Subtracting the whole t_layer makes t_mla the module's excess
over a whole dense layer's fixed cost (no double counting, a lower estimate).

Data (read, never copied): ``<gpu>/mla/vllm/<newest>/mla_generation_module_perf.parquet`` of
the shared data's ``aiconfigurator-vllm-kernels`` (H100, B200, L40S: DeepSeek-V3's MLA module, 1-128 heads per GPU,
batch 1-1024, context 2-131k; vLLM 0.24's FlashAttention-MLA / FlashInfer-MLA / Triton-MLA backends). Used: bf16 KV
cache (the catalog's KV dtype), batch <= ``MAX_BATCH``, context <= ``MAX_STEP`` (decode at the loads the step model
serves; longer contexts are the attention kernel's own rate, which the KV term covers). Fitted on the ``fp8_block``
GEMM rows (DeepSeek's checkpoints); the bf16-GEMM rows are scored with the same t_mla. The A100's MLA table is the
older kernel-only layout (``generation_mla_perf``: no projections), left out. Fitted with the one fitter
(:func:`calibrate.fit.fit_cost.fit_log_times`); held out by GPU (each GPU's t_mla the median of the others').

    specsim fit mla --report reports/mla-layer --priors simulator/catalog/gpu_priors.yaml --date 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import SHARED, data_commit
from calibrate.gpu_priors.engine_fit import SAME_CHIP
from simulator.catalog.versions import folder_version
from simulator.errors import InputError

KIND = "mla_layer_overhead_s"
ROOT = SHARED / "aiconfigurator-vllm-kernels"
FOLDERS = {"h100_sxm": "h100-sxm", "b200_sxm": "b200", "l40s": "l40s"}  # AIConfigurator folder -> catalog GPU
TABLE = "mla_generation_module_perf.parquet"
MODEL = "deepseek-r1"  # the tables' shape: DeepSeek-V3's MLA (hidden 7168, 128 heads, kv_lora 512, q_lora 1536)
MAX_BATCH, MAX_STEP = 64, 16384
FIT_GEMM = "fp8_block"
GEMM_DTYPE = {"fp8_block": "fp8", "bfloat16": "bf16"}  # table gemm_type -> catalog weight dtype
PRIOR, BOUNDS = 20e-6, (1e-9, 1e-3)


def load_mla(root: Path = ROOT) -> pd.DataFrame:
    """The module rows the fit uses (module docstring), one frame over the GPUs, with the model's charge per row."""
    frames = []
    for folder, gpu in FOLDERS.items():
        paths = sorted((Path(root) / folder / "mla" / "vllm").glob(f"*/{TABLE}"), key=folder_version)
        if not paths:
            continue
        d = pd.read_parquet(paths[-1])
        need = ("gemm_type", "kv_cache_dtype", "num_heads", "batch_size", "step", "latency")
        if any(c not in d.columns for c in need):
            raise InputError(str(paths[-1]), next(c for c in need if c not in d.columns), "missing column")
        d = d[(d["kv_cache_dtype"] == "bfloat16") & d["gemm_type"].isin(GEMM_DTYPE) & (d["batch_size"] <= MAX_BATCH)
              & (d["step"] <= MAX_STEP) & (128 % d["num_heads"] == 0)]
        frames.append(pd.DataFrame({"gpu": gpu, "version": paths[-1].parent.name, "gemm": d["gemm_type"].to_numpy(str),
                                    "heads": d["num_heads"].to_numpy(int), "batch": d["batch_size"].to_numpy(int),
                                    "context": d["step"].to_numpy(int), "time_s": d["latency"].to_numpy(float) * 1e-3}))
    if not frames:
        raise InputError(str(root), None, f"no {TABLE} under <gpu>/mla/vllm/<version>/ (AIConfigurator tables)")
    f = pd.concat(frames, ignore_index=True)
    f["charge_s"] = charge(f)
    return f


def charge(f: pd.DataFrame) -> np.ndarray:
    """Seconds the step model charges each row's attention module without t_mla (module docstring), with the
    catalog's parameters of the row's GPU: the cost model's own terms (``Deployment``, ``ModelSpec``)."""
    from simulator.catalog import get_hardware, get_model
    from simulator.cost.cost_model import Deployment
    from simulator.cost.roofline import gpu_split
    from simulator.cost.cost_profile import prior_profile

    out = np.empty(len(f))
    cache = {}
    for i, r in enumerate(f.itertuples(index=False)):
        key = (r.gpu, r.gemm, r.heads)
        if key not in cache:
            hw = get_hardware(r.gpu)
            c = prior_profile(hw).params(hw)
            m = get_model(MODEL).with_dtypes(GEMM_DTYPE[r.gemm])
            tp = 128 // int(r.heads)
            dep = Deployment(m, hw, tp, c)
            kind = dep.gemm[1]
            bw = hw.memory_bandwidth_bytes_per_s
            t_w = m.attention_params_per_layer * m.bytes_per_param / tp / kind.mem_ratio.value / (c.mem_efficiency * bw)
            cache[key] = (m, hw, c, tp, t_w, c.layer_overhead_s + 2 * kind.gemm_overhead_s.value)
        m, hw, c, tp, t_w, fixed = cache[key]
        tokens = r.batch * (r.context + 1.0)
        t_kv = m.kv_bytes(tokens, tp, r.batch) / m.layers / (c.kv_efficiency * hw.memory_bandwidth_bytes_per_s)
        t_c = m.attention_flops(tokens, r.batch, r.batch) / m.layers / tp / (hw.dense_bf16_flops_per_s * c.compute_efficiency)
        out[i] = float(gpu_split(t_w, t_kv, 0.0, t_c, c.roofline_p)[0]) + fixed
    return out


def predict(f: pd.DataFrame, values: dict) -> np.ndarray:
    """Seconds per row: the charge plus the row's GPU's t_mla (``GPU.mla_layer_overhead_s``)."""
    return f["charge_s"].to_numpy(float) + f["gpu"].map(lambda g: values.get(f"{g}.{KIND}", PRIOR)).to_numpy(float)


def fit(f: pd.DataFrame):
    from calibrate.fit.log_time_fit import fit_log_times

    names = tuple(f"{g}.{KIND}" for g in sorted(set(f["gpu"])))
    y = np.log(f["time_s"].to_numpy(float))
    return fit_log_times(lambda v: predict(f, v), y, dict.fromkeys(names, PRIOR), names, names=names,
                         build=lambda v: v, bounds={KIND: BOUNDS})


def heldout(f: pd.DataFrame) -> pd.DataFrame:
    """Each GPU in turn: t_mla the median of the other GPUs' fitted values (on the ``FIT_GEMM`` rows), every row of
    the GPU scored; plus the in-sample fit (fold ``own``)."""
    fit_rows = f[f["gemm"] == FIT_GEMM].reset_index(drop=True)
    own = fit(fit_rows).values
    rows = []
    for g in sorted(set(f["gpu"])):
        others = [own[f"{x}.{KIND}"] for x in sorted(set(f["gpu"])) if x != g]
        test = f[f["gpu"] == g].copy()
        for fold, t in ((f"gpu-out:{g}", float(np.median(others))), ("own", own[f"{g}.{KIND}"])):
            x = test.assign(fold=fold, t_mla_s=t)
            x["predicted_s"] = x["charge_s"] + t
            x["error"] = x["predicted_s"] / x["time_s"] - 1.0
            rows.append(x)
    return pd.concat(rows, ignore_index=True)


def summarize(h: pd.DataFrame) -> pd.DataFrame:
    g = h.assign(ae=h["error"].abs()).groupby(["fold", "gpu", "gemm"])
    return g.agg(points=("ae", "size"), t_mla_us=("t_mla_s", lambda x: float(x.iloc[0]) * 1e6),
                 median_ape=("ae", "median"), p90_ape=("ae", lambda x: float(np.quantile(x, 0.9))),
                 bias=("error", "median")).reset_index()


def catalog_priors(values: dict, gpus: list[str], fitted: list[str]) -> dict[str, dict]:
    """t_mla for every catalog GPU: fitted where its module table is, else a same-chip GPU's, else the median of the
    fitted GPUs."""
    from calibrate.gpu_priors.engine_report import prior_entry

    src = "MLA module fit (calibrate.gpu_priors.mla_fit, docs/moe.md): AIConfigurator vLLM MLA generation-module tables"
    out = {}
    for g in gpus:
        chip = SAME_CHIP.get(g)
        if g in fitted:
            out[g] = {KIND: prior_entry(values[f"{g}.{KIND}"], "calibrated", src)}
        elif chip in fitted:
            out[g] = {KIND: prior_entry(values[f"{chip}.{KIND}"], "transferred", f"same chip as {chip}: {src}")}
        else:
            med = float(np.median([values[f"{x}.{KIND}"] for x in fitted]))
            out[g] = {KIND: prior_entry(med, "transferred", f"median of the fitted GPUs ({', '.join(fitted)}): {src}")}
    return out


def fit_and_report(data: Path, report: Path, priors: Path | None, date: str | None, command: str) -> str:
    """Fit t_mla per GPU, held out by GPU -> REPORT/report.md + heldout.csv; with ``priors`` merge the fitted values
    into that catalog file. Returns the report's text (``specsim fit mla``)."""
    from calibrate.gpu_priors.engine_report import merge_priors_file
    from simulator.catalog import hardware_catalog
    from simulator.inputs.loading import write_atomic

    f = load_mla(data)
    h = heldout(f)
    s = summarize(h)
    own = h[h["fold"] == "own"].groupby("gpu")["t_mla_s"].first()
    lines = [f"# MLA module fixed cost t_mla, held out by GPU ({date or 'undated'})", "", f"Command: `{command}`", "",
             "Model and data: `calibrate/gpu_priors/mla_fit.py` (docstring), docs/moe.md. AIConfigurator commit "
             f"{data_commit(ROOT)}; tables: " + ", ".join(f"{g} vLLM {v}" for g, v in f.groupby("gpu")["version"].first().items())
             + f"; {len(f)} rows (bf16 KV, batch <= {MAX_BATCH}, context <= {MAX_STEP}); fitted on `{FIT_GEMM}` rows.", "",
             "| fold | gpu | GEMM | points | t_mla (us) | median APE | p90 APE | bias |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.fold} | {r.gpu} | {r.gemm} | {r.points} | {r.t_mla_us:.1f} | {r.median_ape:.1%} | {r.p90_ape:.1%} | "
              f"{r.bias:+.1%} |" for r in s.itertuples()]
    text = "\n".join(lines) + "\n"
    report.mkdir(parents=True, exist_ok=True)
    write_atomic(report / "report.md", text)
    write_atomic(report / "heldout.csv", h.drop(columns=["version"]).to_csv(index=False, float_format="%.5g"))
    if priors:
        gpus = [g for g, hw in hardware_catalog().items() if hw.interconnect != "none"]
        values = {f"{g}.{KIND}": float(v) for g, v in own.items()}
        merge_priors_file(priors, catalog_priors(values, gpus, sorted(own.index)), command, evidence="mla_layer_fit",
                          says="# Then the MLA module fit adds mla_layer_overhead_s (do not edit by hand):",
                          marks=("mla_fit", "fit-mla", "fit mla", "MLA module"))
    return text
