"""The engine-level GPU step model (issue 24): the cost model's one pass formula fitted on what engines measure.

Kernel tables time one operator at a time, eagerly; an engine replays CUDA graphs, samples, schedules. This
module fits :meth:`simulator.cost_model.Deployment.pass_time` (no other formula) on engine-level evidence in
``../shared/data/engine-measurements`` and scores it on held-out folds. Sources (each an *observation
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
``v1``      vLLM V1 batch-1 speculative decoding on an H100 (vLLM issue #20780; Llama-3.1-8B): the plain TPOT and
            one speculative iteration (TPOT x acceptance length) of EAGLE-1 / EAGLE-3 heads at k = 2..7 =
            k head passes + one verification pass of k+1 tokens. Pins today's t_step under CUDA graphs, the
            head pass's fixed cost (``v1.draft_step_overhead_s``) and the verification's growth with k.
``ours``    our own GPU campaign (issue 31; ``reports/gpu-campaign-<gpu>/run-*/records.jsonl``, written by
            ``calibrate/run/gpu_step_bench.py`` on a lent H100 / H200): whole decoder steps of three models (1.5B, 8B,
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

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import get_hardware, get_model
from simulator.catalog.hardware import data_labels, same_chip
from simulator.cost_model import CostParams, Deployment, Drafting

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "data"
CAMPAIGN_RECORDS = "reports/gpu-campaign-*/run-*/records.jsonl"
OURS_FIT_OPS = ("decode", "prefill", "head")
ENGINE = SHARED / "engine-measurements"
SHAPE = ("roofline_p", "multi_token_penalty", "kv_mem_efficiency")
PER_GPU = ("mem_efficiency", "compute_efficiency")
PER_SOURCE = ("step_overhead_s", "seq_overhead_s", "layer_overhead_s")
# Physical bounds for this fit: no efficiency above 1 (a value there is a wrong form, not a fast GPU)
EFFICIENCY_BOUNDS = {"mem_efficiency": (1e-3, 1.0), "compute_efficiency": (1e-3, 1.0), "kv_mem_efficiency": (1e-3, 1.0)}
# Priors (posterior-mode fit: each parameter is pulled towards these with a log-normal prior, sd 1 in F_SCALE units)
PRIORS = {"roofline_p": 3.0, "multi_token_penalty": 0.05, "kv_mem_efficiency": 0.6,
          "mem_efficiency": 0.8, "compute_efficiency": 0.6, "layer_overhead_s": 15e-6,
          "step_overhead_s": 1e-3, "seq_overhead_s": 30e-6, "draft_step_overhead_s": 0.3e-3,
          "eager_mem_efficiency": 0.8}
LSS_MODELS = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b"}
LIB_MODELS = {"meta-llama/Meta-Llama-3-8B": "llama-3-8b", "meta-llama/Llama-2-7b-hf": "llama-2-7b",
              "mistralai/Mistral-7B-v0.1": "mistral-7b", "Qwen/Qwen2-7B": "qwen2-7b",
              "meta-llama/Llama-2-70b-hf": "llama-2-70b", "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
              "Qwen/Qwen2-72B": "qwen2-72b"}
LSS_TOKENS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
V1_CONTEXT = 512  # assumption: the thread's prompts (MT-bench-like) + output average ~512 cached tokens; KV is < 1% of the step
PREFILL_BUDGET = 8192  # vLLM ~0.5 offline: prompts prefilled in passes of whole sequences up to this many tokens
EAGLE3_DRAFT_VOCAB = 32000
DECODE_NODES = 16


# ---- observations -----------------------------------------------------------------------------------------
@dataclass
class Obs:
    """One source's measured times and how to predict them from a parameter dict."""

    source: str
    frame: pd.DataFrame  # one row per measurement: gpu, model, tp, ... , time_s
    predict: object  # (frame, values) -> seconds per row

    def __len__(self):
        return len(self.frame)


def params_for(values: dict, gpu: str, source: str) -> CostParams:
    """The CostParams of one (GPU, engine version) from a grouped parameter dict (missing: prior). A source's own
    ``<source>.eager_mem_efficiency`` (the eager layer profiles' apparent streaming rate: module wall times with
    the launch partly hidden behind the kernels, not a physical fraction, so it may exceed 1) overrides the GPU's."""
    g = lambda k: values.get(f"{source}.eager_{k}", values.get(f"{gpu}.{k}", PRIORS[k]))  # noqa: E731
    s = lambda k: values.get(f"{source}.{k}", PRIORS[k])  # noqa: E731
    layer = values.get(f"{source}-{gpu}.layer_overhead_s", s("layer_overhead_s"))
    return CostParams(mem_efficiency=g("mem_efficiency"), compute_efficiency=g("compute_efficiency"),
                      step_overhead_s=s("step_overhead_s"), layer_overhead_s=layer,
                      call_overhead_s=0.0, allreduce_latency_s=get_hardware(gpu).allreduce_latency_s,
                      seq_overhead_s=s("seq_overhead_s"), roofline_p=values.get("roofline_p", PRIORS["roofline_p"]),
                      multi_token_penalty=values.get("multi_token_penalty", PRIORS["multi_token_penalty"]),
                      kv_mem_efficiency=values.get("kv_mem_efficiency", PRIORS["kv_mem_efficiency"]))


def layer_model(name: str):
    """One decoder layer of a catalog model and nothing else (no LM head: vocab 1): what a layer profile times."""
    return get_model(name).cut(1, name=f"{name}-layer").model_copy(update={"vocab": 1, "tie_embeddings": True})


def load_lss(root: Path | None = None) -> pd.DataFrame:
    """LLMServingSim layer passes: per (gpu, model, tp, tokens) the median of each module, summed over one layer's
    non-attention modules (embedding, final norm, LM head and the attention kernel left out)."""
    from calibrate.fit.gpu_profiles.import_llmservingsim import load_llmservingsim_layers

    d = load_llmservingsim_layers(root or ENGINE / "llmservingsim-layer-profiles")
    d = d[d["model"].isin(LSS_MODELS) & (d["kv_tokens"] == 0) & d["tokens"].isin(LSS_TOKENS)]
    d = d[~d["module"].isin(["embedding", "final_layernorm", "lm_head", "attn"])]
    med = d.groupby(["gpu", "model", "tp", "tokens", "module"], as_index=False)["time_s"].median()
    out = med.groupby(["gpu", "model", "tp", "tokens"], as_index=False)["time_s"].sum()
    out["model"] = out["model"].map(LSS_MODELS)
    return out


def predict_lss(f: pd.DataFrame, values: dict) -> np.ndarray:
    out = np.empty(len(f))
    for (gpu, model, tp), idx in f.groupby(["gpu", "model", "tp"]).indices.items():
        p = params_for(values, gpu, f"lss-{gpu}")
        p = CostParams(**{**p.__dict__, "layer_overhead_s": 0.0, "seq_overhead_s": 0.0})
        d = Deployment(layer_model(model), get_hardware(gpu), int(tp), p)
        n = f["tokens"].to_numpy(float)[idx]
        # one layer, no KV, no attention (the attention module is left out), no logits; no all-reduce inside a module
        out[idx] = d.pass_time(n, n * 0.0, n * 0.0, n * 0.0, 0.0) - d.allreduce_time(n)
    return out


def load_lib(path: Path | None = None) -> pd.DataFrame:
    """LLM-Inference-Bench vLLM rows on catalog GPUs and models (time_s = the run's latency)."""
    from calibrate.fit.gpu_profiles.import_llm_inference_bench import load_llm_inference_bench

    d = load_llm_inference_bench(path or ENGINE / "llm-inference-bench" / "All_results.csv")
    d = d[(d["framework"].str.lower() == "vllm") & d["model_id"].isin(LIB_MODELS) & (d["gpu"] != "")]
    if "consistent" in d:
        d = d[d["consistent"].astype(bool)]
    from simulator.catalog import hardware_catalog

    d = d[d["gpu"].isin(hardware_catalog())].copy()
    d["model"] = d["model_id"].map(LIB_MODELS)
    d["time_s"] = d["latency_s"].astype(float)
    # does it fit? weights + the batch's KV at full length on TP GPUs (runs that could not have run are not kept)
    keep = []
    for r in d.itertuples():
        m, h = get_model(r.model), get_hardware(r.gpu)
        need = m.weight_bytes_resident / r.tp + r.batch * (r.input_tokens + r.output_tokens) * m.kv_bytes_per_token(int(r.tp))
        keep.append(need < 0.85 * h.memory_bytes)  # vLLM's default 0.9 of memory, less activations and graphs
    return d[np.array(keep, dtype=bool)].reset_index(drop=True)


def _lib_steps(f: pd.DataFrame) -> dict:
    """Per (gpu, model, tp): the aggregates of every pass of every run (prefill passes, then the decode steps),
    and the run each pass belongs to (computed once per frame: the fit evaluates it many times)."""
    out = {}
    for key, idx in f.groupby(["gpu", "model", "tp"]).indices.items():
        agg = {k: [] for k in ("row", "w", "N", "KV", "A", "L", "S")}
        for i in idx:
            r = f.iloc[i]
            B, L, O = int(r["batch"]), int(r["input_tokens"]), int(r["output_tokens"])
            per = max(1, PREFILL_BUDGET // L)  # sequences per prefill pass
            b = np.array([min(per, B - s) for s in range(0, B, per)], dtype=float)
            # the O-1 decode steps after the first output token, at contexts L+1 .. L+O-1: a step is affine in its
            # context below the ridge and smooth above it, so the sum is taken by the midpoint rule on <= 16 nodes
            m = min(O - 1, DECODE_NODES)
            ctx = L + 0.5 + (np.arange(m) + 0.5) * (O - 1) / m if m else np.zeros(0)
            n = len(b) + len(ctx)
            agg["row"].append(np.full(n, i))
            agg["w"].append(np.concatenate([np.ones(len(b)), np.full(len(ctx), (O - 1) / max(m, 1))]))
            agg["N"].append(np.concatenate([b * L, np.full(len(ctx), float(B))]))
            agg["KV"].append(np.concatenate([b * L, B * (ctx + 1)]))
            agg["A"].append(np.concatenate([b * L * (L + 1) / 2, B * (ctx + 1)]))
            agg["L"].append(np.concatenate([b, np.full(len(ctx), float(B))]))
            agg["S"].append(np.concatenate([b, np.full(len(ctx), float(B))]))
        out[key] = {k: np.concatenate(v) for k, v in agg.items()}
    return out


_LIB_CACHE: dict = {}


def predict_lib(f: pd.DataFrame, values: dict) -> np.ndarray:
    key = (id(f), len(f))
    if key not in _LIB_CACHE:
        _LIB_CACHE.clear()
        _LIB_CACHE[key] = (f, _lib_steps(f))
    steps = _LIB_CACHE[key][1]
    out = np.zeros(len(f))
    for (gpu, model, tp), a in steps.items():
        d = Deployment(get_model(model), get_hardware(gpu), int(tp), params_for(values, gpu, "lib"))
        t = d.pass_time(a["N"], a["KV"], a["A"], a["L"], a["S"])
        out += np.bincount(a["row"], weights=t * a["w"], minlength=len(f))
    return out


def load_v1(path: Path | None = None) -> pd.DataFrame:
    """vLLM V1 batch-1 TPOT vs k (vllm-spec-decode-batch1): the plain decode step and each head's iteration."""
    t = pd.read_csv(path or ENGINE / "vllm-spec-decode-batch1" / "vllm20780_bs1_tpot_vs_k_llama31_8b.csv")
    rows = [{"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "kind": "decode", "k": 0,
             "time_s": float(t["tpot_vanilla_ms"].iloc[0]) * 1e-3}]
    for r in t.itertuples():
        for head in ("eagle1", "eagle3"):
            rows.append({"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "kind": head, "k": int(r.k),
                         "time_s": getattr(r, f"tpot_{head}_ms") * getattr(r, f"al_{head}") * 1e-3})
    return pd.DataFrame(rows)


def load_ours(root: Path | None = None, ops=OURS_FIT_OPS, pattern: str = CAMPAIGN_RECORDS) -> pd.DataFrame:
    """Our GPU campaign's engine steps (median over the runs of each point), GPU named by the catalog from the run's
    provenance. A record without a needed field, or a GPU the catalog does not know, is one clear error."""
    import json

    from simulator.catalog.hardware import catalog_hardware
    from simulator.errors import InputError

    rows = []
    for f in sorted((root or REPO).glob(pattern)):
        run = f.parent / "run.json"
        try:
            prov = json.loads(run.read_text(encoding="utf-8"))["provenance"]
            gpu = catalog_hardware(prov["gpu_name"], prov.get("device"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(str(run), "provenance.gpu_name", f"a run.json with the GPU's name ({type(e).__name__})") from None
        if gpu is None or gpu == "cpu":
            raise InputError(str(run), "provenance.gpu_name", f"a catalog GPU (got {prov.get('gpu_name')!r})")
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            try:
                r = json.loads(line)
            except ValueError:
                raise InputError(str(f), f"line {i}", "a JSON record") from None
            if r.get("op") not in ops or r.get("attention", "sdpa") not in ("sdpa",):
                continue
            try:
                rows.append({"gpu": gpu, "model": str(r["model"]), "tp": 1, "op": r["op"], "batch": int(r["batch"]),
                             "new": int(r["new"]), "context": int(r["context"]), "time_s": float(r["time_s"]),
                             "folder": f.parent.parent.name})
            except (KeyError, TypeError, ValueError) as e:
                raise InputError(str(f), f"line {i}", f"model, op, batch, new, context, time_s ({e})") from None
            if not rows[-1]["time_s"] > 0:
                raise InputError(str(f), f"line {i}: time_s", f"a positive time (got {r['time_s']})")
    if not rows:
        return pd.DataFrame(columns=["gpu", "model", "tp", "op", "batch", "new", "context", "time_s"])
    d = pd.DataFrame(rows)
    keys = ["gpu", "model", "tp", "op", "batch", "new", "context"]
    out = d.groupby(keys, as_index=False).agg(time_s=("time_s", "median"), runs=("time_s", "size"))
    return out


def load_ours_verify(root: Path | None = None) -> pd.DataFrame:
    """The campaign's verification passes (never fitted): ``kernel`` sdpa (torch's own choice, the plan's runs) and
    ``best`` (the attention study: per point the faster of FlashAttention-2 forced and the GQA-packed query, the
    envelope of what an engine's attention kernels reach; ``verify-attention/`` where a campaign has one)."""
    a = load_ours(root, ops=("verify",)).assign(kernel="sdpa")
    rows = []
    import json

    from simulator.catalog.hardware import catalog_hardware

    for f in sorted((root or REPO).glob("reports/gpu-campaign-*/verify-attention/records.jsonl")):
        prov = json.loads((f.parent / "run.json").read_text(encoding="utf-8"))["provenance"]
        gpu = catalog_hardware(prov["gpu_name"], prov.get("device"))
        for line in f.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r.get("op") == "verify" and r.get("attention") in ("flash", "packed"):
                rows.append({"gpu": gpu, "model": r["model"], "tp": 1, "op": "verify", "batch": int(r["batch"]),
                             "new": int(r["new"]), "context": int(r["context"]), "time_s": float(r["time_s"])})
    if rows:
        b = pd.DataFrame(rows).groupby(["gpu", "model", "tp", "op", "batch", "new", "context"], as_index=False)["time_s"].min()
        a = pd.concat([a, b.assign(kernel="best")], ignore_index=True)
    return a


def predict_ours(f: pd.DataFrame, values: dict) -> np.ndarray:
    """A bench step: the pass formula without host terms (no per-sequence cost; the graph's own per-pass cost as
    the step term, for the head too); logits of every new token in a verification, of the last one otherwise."""
    out = np.empty(len(f))
    for (gpu, model), idx in f.groupby(["gpu", "model"]).indices.items():
        p = params_for(values, gpu, "ours")
        p = replace(p, seq_overhead_s=0.0, draft_step_overhead_s=p.step_overhead_s)
        hw = get_hardware(gpu)
        tgt = Deployment(get_model(model), hw, 1, p)
        head = Deployment(get_model(model).draft_head(1), hw, 1, p.for_role("draft"), Drafting(kind="head"))
        r = f.iloc[idx]
        B, n, C = (r[k].to_numpy(float) for k in ("batch", "new", "context"))
        rows = np.where(r["op"].to_numpy() == "verify", B * n, B)
        agg = (B * n, B * (C + n), B * n * (C + (n + 1) / 2), rows, B)
        is_head = r["op"].to_numpy() == "head"
        out[idx] = np.where(is_head, head.pass_time(*agg), tgt.pass_time(*agg))
    return out


def head_model(target: str, kind: str):
    """The draft head as a catalog-shaped model: one layer of the target's width; EAGLE-1 shares the target's LM
    head, EAGLE-3 has its own reduced draft vocabulary (32k rows) and fuses three target hidden states (3H x H)."""
    m = get_model(target)
    if kind == "eagle3":
        h = m.draft_head(1, vocab=EAGLE3_DRAFT_VOCAB)
        return h.model_copy(update={"extra_matmul_params": 3 * m.hidden * m.hidden})
    return m.draft_head(1)


def iteration_time(target: Deployment, head: Deployment, k, context) -> np.ndarray:
    """One speculative iteration at batch 1: k head passes (one token each) + one verification pass of k+1 tokens
    (the cost model's own verify_time and draft_level_time)."""
    k = np.asarray(k, dtype=float)
    return target.verify_time(k, context) + k * head.draft_level_time(context)


def predict_v1(f: pd.DataFrame, values: dict) -> np.ndarray:
    p = params_for(values, "h100-sxm", "v1")
    hw = get_hardware("h100-sxm")
    tgt = Deployment(get_model("llama-3.1-8b"), hw, 1, p)
    out = np.empty(len(f))
    for i, r in enumerate(f.itertuples()):
        if r.kind == "decode":
            out[i] = float(tgt.decode_time(V1_CONTEXT))
        else:  # each head implementation has its own fixed cost per head pass (graph replay, draft sampling)
            hp = replace(p, draft_step_overhead_s=values.get(
                f"v1-{r.kind}.draft_step_overhead_s", PRIORS["draft_step_overhead_s"])).for_role("draft")
            head = Deployment(head_model("llama-3.1-8b", r.kind), hw, 1, hp, Drafting(kind="head"))
            # a verification of k+1 tokens is one pass whatever k: vectorised per row
            out[i] = float(iteration_time(tgt, head, r.k, V1_CONTEXT))
    return out


LOADERS = {"lss": (load_lss, predict_lss), "lib": (load_lib, predict_lib), "v1": (load_v1, predict_v1),
           "ours": (load_ours, predict_ours)}


def load_all(sources=tuple(LOADERS)) -> dict[str, Obs]:
    out = {}
    for s in sources:
        load, pred = LOADERS[s]
        try:
            fr = load()
        except FileNotFoundError:
            continue
        if len(fr):
            out[s] = Obs(s, fr.reset_index(drop=True), pred)
    return out


# ---- the weight stream, from kernel tables ----------------------------------------------------------------
# Whole steps cannot separate eta_mem from the fixed costs (a bigger model has both more bytes and more layers),
# so each GPU's weight-streaming efficiency comes from AIConfigurator's GEMM tables, timed as CUDA-graph replays
# (no launch cost): one-token to 8-token GEMMs of >= 1M weights, t = t_gemm + bytes / (eta_mem BW); eta_mem is
# the asymptotic rate of a large weight stream, the per-GEMM tail t_gemm goes into the per-layer cost.
KERNEL_GPUS = data_labels("aiconfigurator")  # folder -> catalog GPU; folders without GEMM tables are skipped
# Same chip, other memory (the stream fraction transfers): GPU -> the kernel-profiled GPU it takes it from
SAME_CHIP = same_chip()  # hardware.yaml same_chip_as


def kernel_stream_efficiency(root: Path | None = None) -> dict[str, dict]:
    """Per kernel-profiled GPU: eta_mem, the per-GEMM tail, rows and fit error (newest vLLM version's table)."""
    from scipy.optimize import least_squares

    root = root or SHARED / "aiconfigurator-vllm-kernels"
    out = {}
    for folder, gpu in KERNEL_GPUS.items():
        files = sorted((root / folder / "gemm" / "vllm").glob("*/gemm_perf.parquet"),
                       key=lambda p: tuple(int(x) for x in p.parent.name.split(".") if x.isdigit()))
        if not files:
            continue
        d = pd.read_parquet(files[-1])
        d = d[d["gemm_dtype"].astype(str).str.contains("bfloat16|float16") & (d["m"] <= 8) & (d["n"] * d["k"] >= 1e6)]
        b = 2.0 * (d["m"] * d["k"] + d["n"] * d["k"] + d["m"] * d["n"]).to_numpy(float)
        t = d["latency"].to_numpy(float) * 1e-3
        bw = get_hardware(gpu).memory_bandwidth_bytes_per_s
        r = least_squares(lambda x: np.log(x[0] * 1e-6 + b / (x[1] * bw)) - np.log(t), [3.0, 0.8],
                          bounds=([0.0, 0.05], [50.0, 1.0]), loss="soft_l1", f_scale=0.05)
        e = np.abs(np.exp(r.fun) - 1)
        out[gpu] = {"mem_efficiency": round(float(r.x[1]), 4), "gemm_tail_s": float(f"{r.x[0] * 1e-6:.3g}"),
                    "rows": int(len(d)), "median_ape": round(float(np.median(e)), 4),
                    "source": f"AIConfigurator {folder}/gemm/vllm/{files[-1].parent.name}/gemm_perf.parquet: bf16 GEMMs, "
                              f"m <= 8, n k >= 1M ({len(d)} rows, CUDA-graph replays), t = t_gemm + bytes/(eta BW)"}
    return out


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
    from calibrate.fit.fit_cost import fit_log_times

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
B200_PROXY_LAYERS = 53  # "Qwen3.8-27B": a 27B dense Qwen; proxy = Qwen3-32B's layer shape cut to 53 layers (27.4B)


def b200_baseline_check(values: dict, path: Path | None = None) -> pd.DataFrame:
    """The speculators B200 sweep without speculation (vLLM 0.30): measured median ITL at each concurrency vs the
    step model's decode step of that many sequences at the sweep's mean context (prompt + half the mean output),
    on the catalog's B200 (datasheet; eta_mem from its GEMM table) with the fitted engine terms of today's vLLM
    (t_step, t_layer from the H100 V1 rows) and the per-sequence cost. The model's architecture is not published in
    the folder: a proxy of the same size (``B200_PROXY_LAYERS``) -- so the absolute is indicative, the growth with
    concurrency is the check. Prefill interruptions of the closed loop are not in the prediction."""
    f = pd.read_csv(path or ENGINE / "speculators-b200-concurrency" / "baseline_math_reasoning.csv")
    m = get_model("qwen3-32b").cut(B200_PROXY_LAYERS, name="qwen-27b-proxy")
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


# ---- catalog priors, report ------------------------------------------------------------------------------
STEP_PARAMS = ("mem_efficiency", "compute_efficiency", "layer_overhead_s", "step_overhead_s", "seq_overhead_s",
               "draft_step_overhead_s", "roofline_p", "multi_token_penalty", "kv_mem_efficiency")
DRAFT_HEAD_FOR_PRIOR = "eagle1"  # a plain one-layer head's pass (EAGLE-3's mid-2025 vLLM pass cost 3.7x more)


def _p(value, kind, source, stderr=None) -> dict:
    out = {"value": float(f"{value:.4g}"), "kind": kind, "source": source}
    if stderr is not None and np.isfinite(stderr):
        out["stderr"] = float(f"{stderr:.3g}")
    return out


SOURCE_NAMES = {"lss": "LLMServingSim layer passes", "lib": "LLM-Inference-Bench vLLM runs", "v1": "vLLM V1 batch-1 steps",
                "ours": "our GPU campaign (reports/gpu-campaign-*: CUDA-graph decoder steps)"}


def catalog_priors(fr: EngineFit, gpus: list[str], existing: dict, gpu_sources: dict | None = None) -> dict[str, dict]:
    """The step model's parameters for every catalog GPU: fitted where its data are, transferred where not (which,
    from what: in each ``source``). ``existing``: the kernel-level priors (all-reduce, eta_comp of profiled GPUs).
    ``gpu_sources``: per GPU, the sources with its rows (named in each calibrated parameter's source)."""
    gpu_sources = gpu_sources or {}
    kernel = kernel_stream_efficiency()
    v, se = fr.values, fr.stderr
    fitted_gpus = sorted({n.split(".")[0] for n in fr.fitted if n.endswith(".compute_efficiency")})
    eng = "engine-level fit (calibrate.fit.gpu_profiles.engine_fit, docs/gpu-cost-model.md)"
    out = {}
    for g in gpus:
        p = {}
        e = stream_efficiency_for(g, kernel)
        if e is None:
            med = float(np.median([k["mem_efficiency"] for k in kernel.values()]))
            listed = ", ".join(f"{k} {x['mem_efficiency']:.3f}" for k, x in kernel.items())
            p["mem_efficiency"] = _p(med, "transferred", f"median of the kernel-table weight streams ({listed}) x this GPU's BW")
        else:
            p["mem_efficiency"] = _p(e[0], e[1], e[2])
        own = g if g in fitted_gpus else SAME_CHIP.get(g) if SAME_CHIP.get(g) in fitted_gpus else None
        own = own or next((a for a, b in SAME_CHIP.items() if b == g and a in fitted_gpus), None)
        if own is not None:
            n = f"{own}.compute_efficiency"
            p["compute_efficiency"] = _p(v[n], "calibrated" if own == g else "transferred",
                                         f"{eng}: {'' if own == g else f'same chip as {own}: '}"
                                         f"{' / '.join(SOURCE_NAMES[x] for x in gpu_sources.get(own, ['lss', 'lib']))}"
                                         f", passes above the ridge", se.get(n))
        elif existing.get(g, {}).get("compute_efficiency", {}).get("kind") == "calibrated":
            p["compute_efficiency"] = existing[g]["compute_efficiency"]
        else:
            vals = [v[f"{x}.compute_efficiency"] for x in fitted_gpus]
            p["compute_efficiency"] = _p(float(np.median(vals)), "transferred",
                                         f"{eng}: median of the fitted GPUs ({', '.join(fitted_gpus)}) x this GPU's F")
        here = g == "h100-sxm"
        src_v1 = ("vLLM V1 batch-1 decode and speculative iterations on an H100 (vllm-spec-decode-batch1, Llama-3.1-8B)"
                  + ("" if here else "; transferred as measured (host-side and graph-replay costs, assumed the same on this GPU)"))
        p["layer_overhead_s"] = _p(v["v1.layer_overhead_s"], "calibrated" if here else "transferred",
                                   f"{eng}: per layer under CUDA graphs; {src_v1}", se.get("v1.layer_overhead_s"))
        p["step_overhead_s"] = _p(v["v1.step_overhead_s"], "calibrated" if here else "transferred",
                                  f"{eng}: per engine step; {src_v1}", se.get("v1.step_overhead_s"))
        n = f"v1-{DRAFT_HEAD_FOR_PRIOR}.draft_step_overhead_s"
        if n in v:
            p["draft_step_overhead_s"] = _p(v[n], "calibrated" if here else "transferred",
                                            f"{eng}: one head pass inside a speculative step (the TPOT x acceptance slope "
                                            f"in k of an EAGLE-1 head); EAGLE-3's pass: {v.get('v1-eagle3.draft_step_overhead_s', float('nan')) * 1e3:.2f} ms; "
                                            f"{src_v1}", se.get(n))
        p["seq_overhead_s"] = _p(v["lib.seq_overhead_s"], "transferred",
                                 f"{eng}: per sequence per step, LLM-Inference-Bench vLLM ~0.5 offline runs (A100, H100, "
                                 f"GH200; batch 1-64); today's engines not measured per sequence here: an upper bound",
                                 se.get("lib.seq_overhead_s"))
        for n in SHAPE:
            p[n] = _p(v[n], "calibrated" if n in fr.fitted else "prior",
                      f"{eng}: shared by every GPU (LLMServingSim layer passes 1-2048 tokens, H100 and RTX A6000; "
                      f"LLM-Inference-Bench runs; vLLM V1 verification passes; our GPU campaign's CUDA-graph decode "
                      f"steps, H100 and H200, batch 1-256, context 1k-16k)", se.get(n))
        out[g] = p
    return out


def update_priors_file(path: Path, priors: dict[str, dict], command: str) -> None:
    """Merge the step model into the catalog's priors file: its parameters replace the kernel-level ones, the
    all-reduce figures and call overhead stay; the header names both commands."""
    import yaml

    from simulator.loading import write_atomic

    path = Path(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    raw = raw or {}
    pri = raw.get("priors", {})
    for g, p in priors.items():
        pri.setdefault(g, {}).update(p)
    raw["priors"] = pri
    raw.setdefault("evidence", {})["engine_step_model"] = {"command": command}
    old = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    head = [x for x in old if x.startswith("#")
            and not any(w in x for w in ("engine_fit", "fit-engine", "engine-level step model"))]
    header = "\n".join(head + ["# Then the engine-level step model (issue 24) replaces the step terms (do not edit by hand):",
                                f"#   {command}"]) + "\n"
    write_atomic(path, header + yaml.safe_dump(raw, sort_keys=False, width=120))


def write_report(out: Path, obs: dict[str, Obs], fr: EngineFit, h: pd.DataFrame, command: str, date: str) -> None:
    """report.md, heldout.csv, summary.csv, params.yaml, heldout.png under ``out`` (each written atomically)."""
    import yaml

    from simulator.loading import save_figure_atomic, write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summ = summarize(h)
    write_atomic(out / "heldout.csv", h.to_csv(index=False))
    write_atomic(out / "summary.csv", summ.to_csv(index=False))
    prov = {"date": date, "command": command, "method": "calibrate.fit.fit_cost.fit_log_times on log step / run times "
            "(posterior mode, soft-L1); eta_mem per GPU frozen at the kernel-table weight stream",
            "sources": {s: {"rows": len(o), "gpus": sorted(set(o.frame["gpu"]))} for s, o in obs.items()},
            "data": {"engine-measurements": _commit(ENGINE / "llmservingsim-layer-profiles"),
                     "llm-inference-bench": _commit(ENGINE / "llm-inference-bench"),
                     "aiconfigurator": _commit(SHARED / "aiconfigurator-vllm-kernels"),
                     "vllm-spec-decode-batch1": "vLLM issue #20780 (transcribed)",
                     "gpu-campaign": _campaign_provenance()},
            "params": {n: {"value": float(f"{x:.5g}"), **({"stderr": float(f"{fr.stderr[n]:.3g}")} if n in fr.stderr else
                                                          {"fixed": fr.fixed.get(n, "")})} for n, x in fr.values.items()}}
    write_atomic(out / "params.yaml", yaml.safe_dump(prov, sort_keys=False, width=120))
    lines = [f"# Engine-level GPU step model: fit and held-out errors ({date})", "",
             f"Command: `{command}`", "", "## Parameters (fitted on every source)", "",
             "| parameter | value | stderr / why fixed |", "|---|---|---|"]
    for n, x in fr.values.items():
        lines.append(f"| {n} | {x:.4g} | {('±%.2g' % fr.stderr[n]) if n in fr.stderr else fr.fixed.get(n, '')} |")
    lines += ["", "## Held-out whole-step errors", "",
              "fold: `gpu-out:G` fit without GPU G (its per-GPU parameters transferred); `source-out:S` every shared "
              "parameter from the other sources, only S's own engine offsets fitted on S; `extrapolate:...` fit on the "
              "small cases, predict the rest. APE = |predicted / measured - 1|; bias = median signed error.", "",
              "| fold | source | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|"]
    for r in summ.itertuples():
        lines.append(f"| {r.fold} | {r.source} | {r.points} | {r.median_ape:.1%} | {r.p90_ape:.1%} | {r.bias:+.1%} |")
    try:
        b2 = b200_baseline_check(fr.values)
    except FileNotFoundError:
        b2 = None
    if b2 is not None:
        write_atomic(out / "b200_check.csv", b2.to_csv(index=False))
        lines += ["", "## A GPU no fit saw: B200, closed-loop decode without speculation (speculators sweep, vLLM 0.30)", "",
                  "Median ITL measured vs the step model's decode step at that many sequences (27B proxy architecture: "
                  "the absolute is indicative, the growth with concurrency is the check; `b200_baseline_check`).", "",
                  "| concurrency | measured ITL ms | predicted step ms | growth measured | growth predicted | growth error |",
                  "|---|---|---|---|---|---|"]
        for r in b2.itertuples():
            lines.append(f"| {r.concurrency} | {r.measured_itl_ms:.2f} | {r.predicted_step_ms:.2f} | {r.measured_growth:.2f} | "
                         f"{r.predicted_growth:.2f} | {r.growth_error:+.1%} |")
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for (fold, src), d in h.groupby(["fold", "source"]):
        ax.loglog(d["time_s"], d["predicted_s"], ".", ms=3, label=f"{fold} ({src})")
    lo, hi = h[["time_s", "predicted_s"]].min().min(), h[["time_s", "predicted_s"]].max().max()
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.5)
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted, held out (s)")
    ax.legend(fontsize=5)
    save_figure_atomic(fig, out / "heldout.png")
    plt.close(fig)


def _campaign_provenance() -> dict:
    """Per campaign run folder: GPU, driver, torch / CUDA, date (from its run.json)."""
    import json

    out = {}
    for f in sorted(REPO.glob(CAMPAIGN_RECORDS)):
        try:
            p = json.loads((f.parent / "run.json").read_text(encoding="utf-8"))["provenance"]
        except (OSError, ValueError, KeyError):
            continue
        out[str(f.parent.relative_to(REPO))] = {k: p.get(k) for k in ("gpu_name", "driver", "torch", "cuda", "date_utc")}
    return out


def _commit(folder: Path) -> str:
    f = folder / "SOURCE_COMMIT"
    return f.read_text(encoding="utf-8").strip()[:40] if f.is_file() else "?"


def fit_and_report(report: Path, priors: Path | None, date: str | None, with_heldout: bool, command: str) -> pd.DataFrame:
    """The fit on every engine measurement in ../shared/data (+ our GPU campaign's records), its held-out folds
    (unless ``with_heldout`` is false) and ``REPORT/{report.md, heldout.csv, params.yaml}``; with ``priors``, the catalog
    priors file updated. Returns the held-out rows."""
    import datetime as _dt

    import yaml

    from simulator.catalog import hardware_catalog
    from simulator.errors import InputError

    obs = load_all()
    if not obs:
        raise InputError(str(ENGINE), None, "no engine measurements found")
    fr = fit(obs)
    h = heldout(obs) if with_heldout else pd.DataFrame(columns=["fold", "source", "time_s", "predicted_s", "error"])
    write_report(Path(report), obs, fr, h, command, date or _dt.date.today().isoformat())
    if priors:
        priors = Path(priors)
        gpus = [g for g, hw in hardware_catalog().items() if hw.interconnect != "none"]
        existing = (yaml.safe_load(priors.read_text(encoding="utf-8")) or {}).get("priors", {}) if priors.is_file() else {}
        gpu_sources = {}
        for s, o in obs.items():
            for g in sorted(set(o.frame["gpu"])):
                gpu_sources.setdefault(g, []).append(s)
        update_priors_file(priors, catalog_priors(fr, gpus, existing, gpu_sources), command)
    return h
