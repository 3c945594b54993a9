"""The engine-level GPU step model: the cost model's one pass formula fitted on what engines measure.

Kernel tables time one operator at a time, eagerly; an engine replays CUDA graphs, samples, schedules. This
module fits :meth:`simulator.cost.cost_model.Deployment.pass_time` (no other formula) on engine-level evidence in
the shared data's ``engine-measurements`` and scores it on held-out folds. Sources (each an *observation
group*; the engine versions differ, so each source has its own fixed costs):

``lss``     LLMServingSim's vLLM layer modules timed one by one (H100, RTX A6000; eager, PyTorch profiler): one
            layer's non-attention modules summed, 1-2048 tokens at no cached context. They pin the step's
            *shape* in its token count (soft roofline p, the GEMV->GEMM jump j, eta_comp) and the weight
            streaming efficiency eta_mem. Their fixed cost per layer pass is the eager launch cost of ~10 modules
            (``lss-<gpu>.step_overhead_s``): a nuisance of this source, never transferred to an engine step.
``lib``     LLM-Inference-Bench's whole offline vLLM runs (A100, H100, GH200; vLLM ~0.5, CUDA graphs): latency of
            one batch of B sequences, L prompt tokens then L output tokens. Predicted as prefill passes then L-1
            decode steps at their growing context. Pins eta_mem, t_layer (models of 32 and 80 layers, TP 1-4),
            eta_kv (KV streaming at batch 64 x 4k context), and this engine version's own t_step and t_seq.
``v1``      vLLM V1 batch-1 speculative decoding on an H100 (vllm-project/vllm#20780; Llama-3.1-8B): the plain TPOT and
            one speculative iteration (TPOT x acceptance length) of EAGLE-1 / EAGLE-3 heads at k = 2..7 =
            k head passes + one verification pass of k+1 tokens. Pins today's t_step under CUDA graphs, the
            head pass's fixed cost (``v1.draft_step_overhead_s``) and the verification's growth with k.
``ours``    our own GPU campaign (``reports/gpu-campaign-<gpu>/run-*/records.jsonl``, written by
            ``calibrate/measure/gpu_step_bench.py`` on a lent H100 / H200): whole decoder steps of three models (1.5B, 8B,
            32B) replayed as CUDA graphs and timed by CUDA events (no host time): decode at batch 1-256 and
            context 1k-16k, prefill passes, a 1-layer draft head. Pins eta_kv and eta_comp on these GPUs and the
            step's growth with batch and context; the bench's own fixed costs (``ours.step_overhead_s``, the graph's
            per-pass cost, and ``ours.layer_overhead_s``, its ~15 unfused kernels per layer where vLLM fuses to ~9)
            are this source's nuisances, never transferred to an engine. Its verification passes are never fitted:
            they are scored held out (:func:`heldout`).

Parameters: the step's shape (``roofline_p``, ``multi_token_penalty``, ``kv_mem_efficiency``) is shared by all
GPUs; ``<gpu>.mem_efficiency``, ``<gpu>.compute_efficiency``, ``<gpu>.layer_overhead_s`` (CUDA graph, per
layer) per GPU; ``<source>.step_overhead_s`` / ``seq_overhead_s`` per engine version. The one fitter
(:func:`calibrate.fit.fit_cost.fit_log_times`) gives the posterior mode around stated priors.

Held-out folds (:func:`heldout`): leave one GPU out (its per-GPU parameters transferred: the median of the
fitted GPUs' fractions and per-layer cost), leave one source out (every shared parameter frozen at the other
sources' fit; only the left-out source's own engine offsets are fitted on its rows: what is scored is the
shape and the efficiencies), and extrapolation within a source (LIB: fit length <= 512 and batch <= 16,
predict the rest; v1: fit k <= 4, predict k >= 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import (EFFICIENCY_BOUNDS, ENGINE, PER_GPU, PRIORS, SHAPE, SHARED, Obs,
                                                    load_ours_verify, params_for, predict_ours)
from simulator.catalog import get_hardware, get_model
from simulator.catalog.hardware import data_labels, same_chip
from simulator.catalog.versions import folder_version
from simulator.cost.cost_model import Deployment

# ---- the weight stream, from kernel tables ----------------------------------------------------------------
# Whole steps cannot separate eta_mem from the fixed costs (a bigger model has both more bytes and more layers),
# so each GPU's weight-streaming efficiency comes from AIConfigurator's GEMM tables, timed as CUDA-graph replays
# (no launch cost): one-token to 8-token GEMMs of >= 1M weights, t = t_gemm + bytes / (eta_mem BW); eta_mem is
# the asymptotic rate of a large weight stream, the per-GEMM tail t_gemm goes into the per-layer cost.
KERNEL_GPUS = data_labels("aiconfigurator")  # folder -> catalog GPU; folders without GEMM tables are skipped
# Same chip, other memory (the stream fraction transfers): GPU -> the kernel-profiled GPU it takes it from
SAME_CHIP = same_chip()  # hardware.yaml same_chip_as


@lru_cache(maxsize=4)
def _gemm_tables(root: Path | None = None) -> tuple:
    """(folder, catalog GPU, newest table path, its bf16/fp16 rows) of every kernel-profiled GPU with GEMM tables; read
    once (the stream and compute fractions both come from them; callers filter, never modify the frames)."""
    root = root or SHARED / "aiconfigurator-vllm-kernels"
    out = []
    for folder, gpu in KERNEL_GPUS.items():
        files = sorted((root / folder / "gemm" / "vllm").glob("*/gemm_perf.parquet"), key=folder_version)
        if not files:
            continue
        d = pd.read_parquet(files[-1])
        out.append((folder, gpu, files[-1], d[d["gemm_dtype"].astype(str).str.contains("bfloat16|float16")]))
    return tuple(out)


def kernel_stream_efficiency(root: Path | None = None) -> dict[str, dict]:
    """Per kernel-profiled GPU: eta_mem, the per-GEMM tail, rows and fit error (newest vLLM version's table)."""
    from scipy.optimize import least_squares

    out = {}
    for folder, gpu, file, d in _gemm_tables(root):
        d = d[(d["m"] <= 8) & (d["n"] * d["k"] >= 1e6)]
        b = 2.0 * (d["m"] * d["k"] + d["n"] * d["k"] + d["m"] * d["n"]).to_numpy(float)
        t = d["latency"].to_numpy(float) * 1e-3
        bw = get_hardware(gpu).memory_bandwidth_bytes_per_s
        r = least_squares(lambda x: np.log(x[0] * 1e-6 + b / (x[1] * bw)) - np.log(t), [3.0, 0.8],
                          bounds=([0.0, 0.05], [50.0, 1.0]), loss="soft_l1", f_scale=0.05)
        e = np.abs(np.exp(r.fun) - 1)
        out[gpu] = {"mem_efficiency": round(float(r.x[1]), 4), "gemm_tail_s": float(f"{r.x[0] * 1e-6:.3g}"),
                    "rows": int(len(d)), "median_ape": round(float(np.median(e)), 4),
                    "source": f"AIConfigurator {folder}/gemm/vllm/{file.parent.name}/gemm_perf.parquet: bf16 GEMMs, "
                              f"m <= 8, n k >= 1M ({len(d)} rows, CUDA-graph replays), t = t_gemm + bytes/(eta BW)"}
    return out


# ---- the GEMM compute fraction, from the same tables ------------------------------------------------------
# An engine's eta_comp is below its GEMM kernels' (a whole pass also runs attention, norms, activations and the
# sampler at the compute-bound sizes), but by a ratio that the GPUs with both an engine fit and a GEMM table share
# (0.67-0.86: docs/gpu-cost-model.md). A GPU with a GEMM table and no engine measurement above the ridge (B200) takes
# its own kernels' fraction times that ratio, not the other GPUs' engine fraction: Blackwell's bf16 GEMMs reach less
# of its datasheet peak (0.69) than Hopper's (0.81).
COMPUTE_BOUND_GEMM = {"min_m": 1024, "min_nk": 4096}


def kernel_compute_efficiency(root: Path | None = None) -> dict[str, dict]:
    """Per kernel-profiled GPU: the median fraction of its datasheet bf16 F that its compute-bound GEMMs reach
    (m >= 1024 tokens, n and k >= 4096: well above every catalog GPU's ridge), newest vLLM version's table."""
    out = {}
    lo = COMPUTE_BOUND_GEMM
    for folder, gpu, file, d in _gemm_tables(root):
        d = d[(d["m"] >= lo["min_m"]) & (d["n"] >= lo["min_nk"]) & (d["k"] >= lo["min_nk"])]
        if d.empty:
            continue
        f = get_hardware(gpu).dense_bf16_flops_per_s
        eff = 2.0 * d["m"] * d["n"] * d["k"] / (d["latency"].to_numpy(float) * 1e-3) / f
        out[gpu] = {"compute_efficiency": round(float(np.median(eff)), 4), "rows": int(len(d)),
                    "source": f"AIConfigurator {folder}/gemm/vllm/{file.parent.name}/gemm_perf.parquet: median of "
                              f"{len(d)} bf16 GEMMs with m >= {lo['min_m']}, n, k >= {lo['min_nk']} (CUDA-graph "
                              f"replays) = {float(np.median(eff)):.3f} of the datasheet F"}
    return out


def kernel_chip(gpu: str, kernel: dict[str, dict]) -> str | None:
    """The kernel-profiled GPU whose tables speak for ``gpu``: itself, or the same chip (hardware.yaml)."""
    return gpu if gpu in kernel else SAME_CHIP.get(gpu) if SAME_CHIP.get(gpu) in kernel else None


def engine_to_kernel_ratios(engine: dict[str, float], kernel: dict[str, dict]) -> dict[str, float]:
    """{engine-fitted GPU: its engine eta_comp / its chip's GEMM-kernel fraction} for the GPUs that have both."""
    return {g: e / kernel[c]["compute_efficiency"] for g, e in engine.items() if (c := kernel_chip(g, kernel))}


def stream_efficiency_for(gpu: str, kernel: dict[str, dict]) -> tuple[float, str, str] | None:
    """(eta_mem, kind, source) of a GPU: its own kernel fit, a same-chip GPU's, or None."""
    if gpu in kernel:
        return kernel[gpu]["mem_efficiency"], "calibrated", kernel[gpu]["source"]
    if SAME_CHIP.get(gpu) in kernel:
        k = kernel[SAME_CHIP[gpu]]
        return k["mem_efficiency"], "transferred", f"same chip as {SAME_CHIP[gpu]}: {k['source']}"
    return None


# ---- the fit ----------------------------------------------------------------------------------------------
def names_for(obs: dict[str, Obs]) -> tuple[str, ...]:
    gpus = sorted({g for o in obs.values() for g in o.frame["gpu"]})
    names = list(SHAPE)
    for g in gpus:
        names += [f"{g}.{k}" for k in PER_GPU]
        if any(g in set(o.frame["gpu"]) for s, o in obs.items() if s == "lib"):
            names.append(f"lib-{g}.layer_overhead_s")
    for s, o in obs.items():
        if s == "lss":  # eager module timings: their own launch cost and streaming rate per GPU (nuisances)
            names += [f"lss-{g}.{k}" for g in sorted(set(o.frame["gpu"])) for k in ("step_overhead_s", "eager_mem_efficiency")]
        elif s == "lib":
            names += ["lib.step_overhead_s", "lib.seq_overhead_s"]
        elif s == "v1":
            names += ["v1.step_overhead_s", "v1.layer_overhead_s"]
            names += [f"v1-{k}.draft_step_overhead_s" for k in sorted(set(o.frame["kind"]) - {"decode"})]
        elif s == "ours":
            names += ["ours.step_overhead_s", "ours.layer_overhead_s"]
    return tuple(names)


def prior_of(name: str) -> float:
    base = name.rsplit(".", 1)[-1]
    if name.startswith("lss-") and base == "step_overhead_s":
        return 100e-6  # eager: ~10 module launches per layer
    if name.startswith("ours.") and base in ("step_overhead_s", "layer_overhead_s"):
        return 30e-6  # graph replay: an LM head's and a layer's few-microsecond kernel tails
    return PRIORS[base]


@dataclass
class EngineFit:
    values: dict
    stderr: dict
    fitted: list
    fixed: dict
    prior_dominated: dict = field(default_factory=dict)


_KERNEL: dict = {}


def stream_frozen(obs: dict[str, Obs]) -> dict:
    """eta_mem of every GPU the observations name that has kernel evidence (frozen in the engine fit)."""
    if not _KERNEL:
        _KERNEL.update(kernel_stream_efficiency())
    out = {}
    for g in sorted({g for o in obs.values() for g in o.frame["gpu"]}):
        e = stream_efficiency_for(g, _KERNEL)
        if e is not None:
            out[f"{g}.mem_efficiency"] = e[0]
    return out


def fit(obs: dict[str, Obs], frozen: dict | None = None, only: tuple[str, ...] | None = None) -> EngineFit:
    """Fit every parameter the observations name (``only``: just these; ``frozen``: fixed values; each GPU's
    eta_mem is frozen at its kernel-table value where there is one).

    Staged where the layer profiles are among the observations: the step's shape in its token count (p, j) is
    fitted on them alone -- the one controlled experiment of it (same model, same kernels, 1 to 2048 tokens) --
    then frozen for the whole-step sources, where it would trade against per-sequence and draft costs."""
    frozen = dict(frozen or {})
    if "lss" in obs and len(obs) > 1 and not all(n in frozen for n in ("roofline_p", "multi_token_penalty")):
        first = _fit_once({"lss": obs["lss"]}, frozen, only)
        frozen.update({n: first.values[n] for n in ("roofline_p", "multi_token_penalty") if n not in frozen})
        rest = _fit_once(obs, frozen, only)
        for n in ("roofline_p", "multi_token_penalty"):
            if n in first.stderr:
                rest.stderr[n] = first.stderr[n]
                rest.fitted.append(n)
                rest.fixed.pop(n, None)
        return rest
    return _fit_once(obs, frozen, only)


def _fit_once(obs: dict[str, Obs], frozen: dict | None = None, only: tuple[str, ...] | None = None) -> EngineFit:
    from calibrate.fit.log_time_fit import fit_log_times

    frozen = {**stream_frozen(obs), **dict(frozen or {})}
    names = names_for(obs)
    prior = {n: frozen.get(n, prior_of(n)) for n in names}
    cand = tuple(n for n in names if n not in frozen and (only is None or n in only))
    y = np.log(np.concatenate([o.frame["time_s"].to_numpy(float) for o in obs.values()]))

    def predict(values):
        return np.concatenate([o.predict(o.frame, values) for o in obs.values()])

    r = fit_log_times(predict, y, prior, cand, names=names, build=lambda v: v, bounds=EFFICIENCY_BOUNDS)
    fixed = {**dict(r.fixed), **{n: "frozen: kernel-table weight stream, the layer profiles' shape or the training "
                                 "fold's value" for n in frozen if n in names}}
    return EngineFit(dict(r.values), dict(r.stderr), list(r.fitted), fixed, dict(r.prior_dominated))


def predict(obs: Obs, values: dict) -> np.ndarray:
    return obs.predict(obs.frame, values)


def transferred_gpu_values(values: dict, gpu: str, from_gpus: list[str]) -> dict:
    """A GPU without data: the median over fitted GPUs of each fraction and of each source's per-layer cost (its
    weight stream from the kernel tables where they have it)."""
    out = dict(values)
    for k in PER_GPU:
        vals = [values[f"{g}.{k}"] for g in from_gpus if f"{g}.{k}" in values]
        if vals:
            out[f"{gpu}.{k}"] = float(np.median(vals))
    for src in ("lib",):
        vals = [values[f"{src}-{g}.layer_overhead_s"] for g in from_gpus if f"{src}-{g}.layer_overhead_s" in values]
        if vals:
            out[f"{src}-{gpu}.layer_overhead_s"] = float(np.median(vals))
    out.update(stream_frozen({"x": Obs("x", pd.DataFrame({"gpu": [gpu]}), None)}))
    return out


def ape(pred, meas) -> np.ndarray:
    return np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)


def _score(fold: str, obs: Obs, values: dict, mask=None) -> pd.DataFrame:
    f = obs.frame if mask is None else obs.frame[mask]
    p = obs.predict(f.reset_index(drop=True), values)
    out = f.reset_index(drop=True).copy()
    out["fold"], out["source"], out["predicted_s"] = fold, obs.source, p
    out["error"] = p / out["time_s"].to_numpy(float) - 1.0
    return out


def heldout(obs: dict[str, Obs]) -> pd.DataFrame:
    """Every held-out prediction of the three fold families (module docstring)."""
    rows = []
    gpus = sorted({g for o in obs.values() for g in o.frame["gpu"]})
    # leave one GPU out
    for g in gpus:
        train = {s: Obs(s, o.frame[o.frame["gpu"] != g].reset_index(drop=True), o.predict) for s, o in obs.items()}
        train = {s: o for s, o in train.items() if len(o)}
        test = {s: Obs(s, o.frame[o.frame["gpu"] == g].reset_index(drop=True), o.predict) for s, o in obs.items()}
        if not train or not any(len(o) for o in test.values()):
            continue
        fr = fit(train)
        others = sorted({x for o in train.values() for x in o.frame["gpu"]})
        vals = transferred_gpu_values(fr.values, g, others)
        for s, o in test.items():
            if len(o):
                if s == "lss":  # the eager launch cost of a GPU's layer modules is a nuisance: fitted on its own rows
                    vals = {**vals, **fit({s: o}, frozen={k: v for k, v in vals.items() if not k.startswith("lss-")}).values}
                if s == "v1" and "v1.step_overhead_s" not in fr.values:
                    continue
                rows.append(_score(f"gpu-out:{g}", o, vals))
    # leave one source out: shared parameters from the others, the source's own engine offsets fitted on it
    for s, o in obs.items():
        train = {k: v for k, v in obs.items() if k != s}
        if not train:
            continue
        fr = fit(train)
        vals = dict(fr.values)
        for g in sorted(set(o.frame["gpu"])):
            if f"{g}.mem_efficiency" not in vals:
                vals = transferred_gpu_values(vals, g, sorted({x for t in train.values() for x in t.frame["gpu"]}))
        own = [n for n in names_for({s: o}) if n.startswith(f"{s}.") or n.startswith(f"{s}-")]
        frozen = {n: v for n, v in vals.items() if n not in own}
        vals.update(fit({s: o}, frozen=frozen).values)
        rows.append(_score(f"source-out:{s}", o, vals))
    # extrapolation within a source
    if "lib" in obs:
        o = obs["lib"]
        small = (o.frame["input_tokens"] <= 512) & (o.frame["batch"] <= 16)
        fr = fit({**obs, "lib": Obs("lib", o.frame[small].reset_index(drop=True), o.predict)})
        rows.append(_score("extrapolate:lib len>512 or batch>16", o, fr.values, ~small))
    if "ours" in obs:  # leave one model out of our campaign; its verification passes, never fitted
        o = obs["ours"]
        for m in sorted(set(o.frame["model"])):
            mask = (o.frame["model"] == m).to_numpy()
            fr = fit({**obs, "ours": Obs("ours", o.frame[~mask].reset_index(drop=True), o.predict)})
            rows.append(_score(f"model-out:{m}", o, fr.values, mask))
        ver = load_ours_verify()
        if len(ver):
            fr = fit(obs)
            for k, d in ver.groupby("kernel"):
                rows.append(_score(f"never-fitted:verify ({k} attention)", Obs("ours", d.reset_index(drop=True), predict_ours),
                                   fr.values))
    if "v1" in obs:
        o = obs["v1"]
        small = o.frame["k"] <= 4
        fr = fit({**obs, "v1": Obs("v1", o.frame[small].reset_index(drop=True), o.predict)})
        rows.append(_score("extrapolate:v1 k>=5", o, fr.values, ~small))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def summarize(h: pd.DataFrame) -> pd.DataFrame:
    g = h.assign(ae=h["error"].abs()).groupby(["fold", "source"])
    return g.agg(points=("ae", "size"), median_ape=("ae", "median"), p90_ape=("ae", lambda x: float(np.quantile(x, 0.9))),
                 bias=("error", "median")).reset_index()


# ---- a GPU no fit saw: the B200 closed-loop sweep ----------------------------------------------------------
# the sweep's Qwen/Qwen3.8-27B: a dense hybrid (48 Gated DeltaNet + 16 full-attention layers)
B200_MODEL = "qwen3.8-27b"


def b200_baseline_check(values: dict, path: Path | None = None) -> pd.DataFrame:
    """The speculators B200 sweep without speculation (vLLM 0.30): measured median ITL at each concurrency vs the
    step model's decode step of that many sequences at the sweep's mean context (prompt + half the mean output),
    on the catalog's B200 (datasheet; eta_mem from its GEMM table) with the fitted engine terms of today's vLLM
    (t_step, t_layer from the H100 V1 rows) and the per-sequence cost. The model (``B200_MODEL``: the folder names
    it, its shape is the catalog's) keeps a fixed linear-attention state per sequence, read and written every step:
    the growth with concurrency is the check. Prefill interruptions of the closed loop are not in the prediction."""
    f = pd.read_csv(path or ENGINE / "speculators-b200-concurrency" / "baseline_math_reasoning.csv")
    m = get_model(B200_MODEL)
    p = params_for(values, "b200", "v1")
    p = replace(p, mem_efficiency=stream_frozen({"x": Obs("x", pd.DataFrame({"gpu": ["b200"]}), None)}).get(
        "b200.mem_efficiency", p.mem_efficiency), seq_overhead_s=values.get("lib.seq_overhead_s", PRIORS["seq_overhead_s"]),
        compute_efficiency=float(np.median([v for k, v in values.items() if k.endswith(".compute_efficiency")])))
    d = Deployment(m, get_hardware("b200"), 1, p)
    rows = []
    for r in f.sort_values("offered_concurrency").itertuples():
        c = int(r.offered_concurrency)
        ctx = float(r.mean_prompt_tokens + r.mean_output_tokens / 2)
        t = float(d.batch_forward_time(np.ones(c), np.full(c, ctx)))
        rows.append({"concurrency": c, "measured_itl_ms": float(r.median_itl_ms), "predicted_step_ms": t * 1e3})
    out = pd.DataFrame(rows)
    base_m, base_p = out["measured_itl_ms"].iloc[0], out["predicted_step_ms"].iloc[0]
    out["measured_growth"] = out["measured_itl_ms"] / base_m
    out["predicted_growth"] = out["predicted_step_ms"] / base_p
    out["growth_error"] = out["predicted_growth"] / out["measured_growth"] - 1
    return out
