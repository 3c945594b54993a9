"""The MoE layer at the served models' own shapes: the catalog's MoE terms against AIConfigurator's measured fused-MoE
layers of exactly those shapes, by token count (a check: the catalog is untouched; docs/moe.md).

The MoE fit (:mod:`calibrate.gpu_priors.moe_fit`) takes one compute efficiency and one token-pass count per GPU and
kernel generation across every shape and dtype of a table; the held-out-by-GPU scores pool the shapes. A planner's
question is narrower: what does the model charge for *this* model's layer at a prefill's token count? For each catalog
MoE model, each GPU and vLLM version whose table holds its layer (hidden, expert intermediate, experts, top-k), every
TP degree, dtype and token count of ``TOKENS``, balanced routing, no expert parallelism:

    ratio = predicted / measured   (predicted: ``moe_fit.predict`` with the terms the catalog gives that GPU at that
                                    table's vLLM version: its newest table's in gpu_priors.yaml, older ones through
                                    ``simulator.catalog.moe_kernels.moe_kernel_terms``, the one rule the cost model reads)

    specsim validate moe-shapes --out reports/moe-shapes
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.allreduce_fit import FOLDERS, ROOT  # the AIConfigurator folder -> catalog GPU map
from simulator.errors import InputError

MODELS = ("qwen3-235b-a22b", "qwen3-30b-a3b", "glm-4.5-air", "glm-4.6", "deepseek-r1", "gpt-oss-120b", "gpt-oss-20b")
TOKENS = (16, 256, 2048, 8192)
from simulator.catalog.moe_kernels import KINDS as TERMS  # the MoE terms, one list


def catalog_terms(gpu: str, version: str) -> dict:
    """``{gpu.term: value}``: the MoE terms the catalog gives ``gpu`` for vLLM ``version``."""
    from simulator.catalog import get_hardware
    from simulator.catalog.moe_kernels import kind_values, moe_kernel_terms
    from simulator.cost.cost_profile import prior_profile

    h = get_hardware(gpu)
    base = prior_profile(h).params(h)
    older = moe_kernel_terms(gpu, "vllm", version)
    return {f"{gpu}.{k}": (older[k].value if k in older else getattr(base, k)) for k in TERMS} | kind_values(gpu, version)


def _layer_rows(d: pd.DataFrame, model, gpu: str) -> list[dict]:
    from calibrate.gpu_priors.moe_fit import DTYPES

    x = d[(d["hidden_size"] == model.hidden) & (d["inter_size"] == model.expert_intermediate)
          & (d["num_experts"] == model.experts) & (d["topk"] == model.experts_per_token)]
    return [dict(model=model.name, tokens=int(r.num_tokens), hidden=model.hidden, inter=model.expert_intermediate,
                 experts=model.experts, topk=model.experts_per_token, tp=int(r.moe_tp_size), ep=1,
                 distribution="balanced", dtype=r.moe_dtype, gpu=gpu, unit=gpu, source="aic", mats=3.0,
                 bytes_per_weight=DTYPES[r.moe_dtype][0], rate=DTYPES[r.moe_dtype][1], measured_s=float(r.latency) * 1e-3)
            for r in x.itertuples()]


def shape_ratios(root: Path = ROOT, models=MODELS) -> pd.DataFrame:
    """One row per (model, GPU, version, dtype, TP, tokens): measured and predicted seconds, their ratio."""
    from calibrate.gpu_priors.moe_fit import DTYPES, predict, with_layer_shape
    from simulator.catalog import get_model

    paths = sorted(Path(root).glob("*/moe/vllm/*/moe_perf.parquet"))
    if not paths:
        raise InputError(str(root), None, "no <gpu>/moe/vllm/<version>/moe_perf.parquet (AIConfigurator tables)")
    specs = [get_model(m) for m in models]
    out = []
    for p in paths:
        gpu, version = FOLDERS.get(p.parts[-5]), p.parts[-2]
        if gpu is None:
            continue
        d = pd.read_parquet(p)
        d = d[(d["moe_ep_size"] == 1) & (d["distribution"] == "balanced") & d["moe_dtype"].isin(list(DTYPES))
              & d["num_tokens"].isin(TOKENS)]
        rows = [r for m in specs for r in _layer_rows(d, m, gpu)]
        if not rows:
            continue
        f = with_layer_shape(pd.DataFrame(rows))
        f["predicted_s"] = predict(f, catalog_terms(gpu, version))
        out.append(f.assign(version=version))
    if not out:
        raise InputError(str(root), None, f"no table holds the layer of any of {', '.join(models)}")
    f = pd.concat(out, ignore_index=True)
    f["ratio"] = f["predicted_s"] / f["measured_s"]
    return f[["model", "gpu", "version", "dtype", "tp", "tokens", "measured_s", "predicted_s", "ratio"]]


def summarize(f: pd.DataFrame) -> str:
    """Per model, GPU, version and dtype: the median ratio over TP degrees at each token count (markdown)."""
    t = f.groupby(["model", "gpu", "version", "dtype", "tokens"])["ratio"].median().unstack("tokens")
    t.columns = [f"{c} tokens" for c in t.columns]
    big = f[f["tokens"] >= 2048]
    lines = ["# The MoE layer at the served models' shapes: catalog terms / measured (balanced routing, EP 1)", "",
             "Command: `specsim validate moe-shapes --out reports/moe-shapes` (validate/moe_shapes.py). Each cell: the",
             "median over TP degrees of predicted / measured seconds; > 1 the model charges more than the kernel took.",
             "", f"At >= 2048 tokens, median ratio by dtype: " + ", ".join(
                 f"{k} {v:.2f}" for k, v in big.groupby("dtype")["ratio"].median().items())
             + f"; below 2048: {f[f['tokens'] < 2048]['ratio'].median():.2f}.", "",
             t.round(2).reset_index().to_markdown(index=False), ""]
    return "\n".join(lines)


def write_report(root: Path, out: Path | None) -> str:
    from simulator.inputs.loading import write_atomic

    f = shape_ratios(root)
    text = summarize(f)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(out) / "ratios.csv", f.to_csv(index=False, float_format="%.6g"))
        write_atomic(Path(out) / "summary.md", text)
    return text if np.isfinite(f["ratio"]).all() else text + "\n(non-finite ratios present)\n"
