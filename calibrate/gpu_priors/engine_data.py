"""The engine-level step model's observations: each source's measured times, read from the shared data's
``engine-measurements`` and our GPU campaign's records, and how the one pass formula
(:meth:`simulator.cost.cost_model.Deployment.pass_time`) predicts them from a parameter dict. The sources, the parameters
and the fit: :mod:`calibrate.gpu_priors.engine_fit`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment, Drafting
from simulator.cost.cost_profile import CostParams
from simulator.paths import REPO, SHARED_DATA

SHARED = SHARED_DATA
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
    from calibrate.gpu_priors.import_llmservingsim import load_llmservingsim_layers

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
    from calibrate.gpu_priors.import_llm_inference_bench import load_llm_inference_bench

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
            # torch's own attention choice, and a prefill's causal pass (the prefill grid, as engines run it)
            if r.get("op") not in ops or r.get("attention", "sdpa") not in (
                    ("sdpa", "causal") if r.get("op") == "prefill" else ("sdpa",)):
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


def campaign_provenance() -> dict:
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


def data_commit(folder: Path) -> str:
    """The source commit a shared data folder records: its ``SOURCE_COMMIT`` file, else the first full (40-hex)
    commit its README names after the word "commit"; "?" where it records none."""
    import re

    f = folder / "SOURCE_COMMIT"
    if f.is_file():
        return f.read_text(encoding="utf-8").strip()[:40]
    readme = folder / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    m = re.search(r"\bcommit\s+`?([0-9a-f]{40})\b", text)
    return m.group(1) if m else "?"
