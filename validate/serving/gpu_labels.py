"""Which GPU measured a released doc: the evidence behind :data:`calibrate.fit.gpustack_import.MEASURED_ON`.

A decode step that reads the weights and the KV cache is memory-bound, so its time says which memory it ran on:
an H100 SXM (3.35 TB/s) and an H100 PCIe (2.0 TB/s) differ 1.68x there, where the step model is validated within a
few percent on measured H100 SXM steps (docs/results.md, GPU step model). Two checks, per H100 doc:

- **model-free** (:func:`itl_ratios`): the same model and load in the doc's A100 sibling, median ITL A100 / H100 in
  the runs whose median step is a decode step on both GPUs (random 32k-token prompts at TP 1; the median ITL shorter
  than any step holding a full prefill chunk could be at the datasheet peak). An SXM would be 1.64x faster than the
  A100 (the bandwidth ratio), a PCIe 0.98x.
- **the step model** (:func:`label_evidence`): the median signed error of the predicted median ITL over the doc's
  long-prompt runs (random prompts of 2k tokens and more: most steps decode between prefill chunks), on the GPU the doc
  names and on the other H100; the catalog's host terms, nothing fitted on these runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from calibrate.fit.gpustack_import import ReleasedRun

ALTERNATIVE = {"h100-sxm": "h100-pcie", "h100-pcie": "h100-sxm"}
BANDWIDTH_TOKENS = 32000  # the model-free check's prompts: one request fills the KV cache of a 32B model at TP 1
LONG_PROMPT = 1500  # the step-model check's runs: random prompts of 2k tokens and longer ("2K": 1996-1999)


def itl_ratios(runs: list[ReleasedRun]) -> pd.DataFrame:
    """Per H100 doc with an A100 sibling (same model, TP 1): A100 / H100 median ITL of their random runs of
    :data:`BANDWIDTH_TOKENS`-token prompts where, on both GPUs, the median step is shorter than any step holding a
    full prefill chunk (``max_num_batched_tokens`` at the labelled GPU's peak,
    :meth:`calibrate.fit.gpustack_import.ReleasedRun.peak_matmul_s`: a decode step), beside the two H100s'
    bandwidth ratios to the A100."""
    from simulator.catalog import get_hardware

    a100 = get_hardware("a100-80gb").memory_bandwidth_bytes_per_s
    bandwidth = {f"{g}_bw_over_a100": get_hardware(g).memory_bandwidth_bytes_per_s / a100 for g in ALTERNATIVE}
    key = lambda r: (r.model, r.tp, r.weight_dtype)  # noqa: E731
    long = [r for r in runs if r.dataset == "random" and r.input_tokens >= BANDWIDTH_TOKENS and r.tp == 1
            and r.concurrency is None
            and r.measured["median_itl_ms"] / 1e3 < r.peak_matmul_s(r.max_num_batched_tokens, r.labelled_gpu)]
    base = {key(r): r for r in long if r.labelled_gpu == "a100-80gb"}
    rows = []
    for r in long:
        if r.labelled_gpu not in ALTERNATIVE or key(r) not in base:
            continue
        a, h = base[key(r)].measured["median_itl_ms"], r.measured["median_itl_ms"]
        rows.append({"doc": r.doc, "run": r.key, "model": r.model, "a100_itl_ms": a, "h100_itl_ms": h,
                     "a100_over_h100": a / h, **bandwidth})
    return pd.DataFrame(rows)


def label_evidence(runs: list[ReleasedRun]) -> pd.DataFrame:
    """Per H100 doc: the median signed error of the predicted median ITL over its long-prompt runs on the GPU its
    hardware line names and on the other H100 (:data:`ALTERNATIVE`), and the GPU this project reads it as."""
    from calibrate.fit.released_predict import predict_released

    rows = []
    for doc in sorted({r.doc for r in runs if r.labelled_gpu in ALTERNATIVE}):
        mine = [r for r in runs if r.doc == doc and r.dataset == "random" and r.input_tokens >= LONG_PROMPT]
        if not mine:
            continue
        labelled = mine[0].labelled_gpu
        err = {g: float(np.median([predict_released(dataclasses.replace(r, gpu=g))["itl_ms"]
                                   / r.measured["median_itl_ms"] - 1.0 for r in mine]))
               for g in (labelled, ALTERNATIVE[labelled])}
        rows.append({"doc": doc, "runs": len(mine), "labelled": labelled, "read_as": mine[0].gpu,
                     "itl_bias_as_labelled": err[labelled], "itl_bias_as_other": err[ALTERNATIVE[labelled]],
                     "other": ALTERNATIVE[labelled]})
    return pd.DataFrame(rows)
