"""Whole-pass cost priors for every catalog GPU from the measured kernel profiles.

    .venv/bin/specsim fit transfer-priors --records out/gpu-records/vidur.csv \\
        --records out/gpu-records/aiconfigurator.csv --out simulator/catalog/gpu_priors.yaml

The whole-pass model (``simulator/cost/cost_model.py``) charges a decode pass
``bytes / (eta_mem BW) + L t_layer + 2 L t_ar + ...``. Its parameters are projected from the data:

* ``mem_efficiency`` and the linear part of ``layer_overhead_s``: the whole-pass form fitted to
  Vidur's *measured* decode layer passes (one layer's ops summed at <= 4 tokens, per model x TP):
  ``t_layer_pass = a + W_layer / TP / (eta_mem BW)`` (A100-80GB, A40; its errors are in the evidence written). The
  L40S has no layer passes: its eta_mem is fitted on its AIConfigurator GEMM rows at <= 64 tokens
  (the weight-streaming kernels of a decode pass).
* the attention part of ``layer_overhead_s``: median time of batch-1 decode attention at KV <= 256
  (AIConfigurator: A100, L40S) -- the kernel's fixed cost; the KV bytes are in the roofline.
* ``compute_efficiency``: the fitted kernel profile's (``calibrate/gpu_priors/profiles/gpu_*.yaml``).
* ``allreduce_latency_s``, ``allreduce_bandwidth_bytes_per_s`` (the catalog's ``link_bandwidth_bytes_per_s``):
  t_ar + 2 (g-1)/g bytes / B_ar fitted on vLLM's custom all-reduce inside CUDA graphs (<= 8 MiB), per
  link and TP degree. NVLink: A100, pooled over TP 2/4/8 (they agree); PCIe: L40S at TP = 2 (TP 4/8 on
  PCIe are much slower in latency and bandwidth: not representable by one pair; recorded).
* Transfer to GPUs nobody profiled: the median over the profiled GPUs of each fraction and fixed cost,
  applied to the GPU's datasheet (BW, F); NVLink bandwidth as the A100's achieved fraction of its
  datasheet link bandwidth times the target's; PCIe all-reduce as measured on the L40S (same PCIe 4.0 x16).
* ``step_overhead_s``, ``call_overhead_s``, ``seq_overhead_s``: nothing in the kernel data pins them
  (Vidur's CPU-overhead table is not in the shared data): they stay priors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.gpu_priors.fit import AR_PARAMS, Predictor, allreduce_rows, datasheet, fit_params, fit_rows, subsample
from simulator.catalog import get_hardware
from simulator.paths import GPU_PROFILES_DIR

PROFILES = GPU_PROFILES_DIR
PROFILED = ("a100-80gb", "a40", "l40s")
DECODE_TOKENS = 4      # layer passes at <= this many tokens are decode passes
GEMM_DECODE_TOKENS = 64
ATTN_FIXED_KV = 256
PCIE_TP = 2            # the PCIe all-reduce pair is fitted at this TP degree (custom all-reduce; the shipped PCIe setups)
# GPUs nobody profiled: (kind of transfer, which profiled GPUs the all-reduce comes from)
def targets() -> dict[str, str | None]:
    """Every catalog GPU -> the profiled GPU whose fractions it takes: itself when profiled, its ``same_chip_as``
    (hardware.yaml) when that one is profiled, else None (transferred by the median)."""
    from simulator.catalog import hardware_catalog

    out = {}
    for g, h in hardware_catalog().items():
        if h.interconnect == "none":
            continue
        out[g] = g if g in PROFILED else h.same_chip_as if h.same_chip_as in PROFILED else None
    return out
STEP_PRIORS = {"step_overhead_s": 2.0e-3, "call_overhead_s": 5e-3, "seq_overhead_s": 1e-6}
PRIOR_SRC = "prior: typical vLLM figures (CUDA graphs); not pinned by kernel profiles (no CPU-overhead table in shared/data)"


def layer_pass_fit(records: pd.DataFrame, gpu: str) -> dict | None:
    """eta_mem and the per-layer fixed cost of the linear part, from Vidur's measured decode layer passes."""
    v = fit_rows(records)
    v = v[(v["source"] == "vidur") & (v["gpu"] == gpu) & (v["op"] != "embedding") & (v["tokens"] <= DECODE_TOKENS)]
    if v.empty:
        return None
    v = v.assign(wb=np.where(v["op"] == "gemm", 2.0 * v["n"].astype(float) * v["k"].astype(float), 0.0))
    g = v.groupby(["model", "tp", "tokens", "source_file", "source_row"]).agg(t=("time_s", "sum"), wb=("wb", "sum"))
    d = g.groupby(["model", "tp"]).agg(t=("t", "median"), wb=("wb", "first")).reset_index()
    bw = datasheet(gpu).bandwidth
    X = np.c_[np.ones(len(d)), d["wb"] / bw]
    w = 1.0 / d["t"].to_numpy()  # least squares on relative error
    coef, *_ = np.linalg.lstsq(X * w[:, None], d["t"].to_numpy() * w, rcond=None)
    ape = np.abs(X @ coef / d["t"].to_numpy() - 1.0)
    return {"eta_mem": float(1.0 / coef[1]), "t_linear": float(coef[0]), "passes": len(d),
            "median_ape": float(np.median(ape)), "max_ape": float(ape.max())}


def gemm_decode_eta(records: pd.DataFrame, gpu: str) -> float | None:
    """eta_mem of the GEMMs at decode shapes (<= 64 tokens): the weight-streaming kernels."""
    g = fit_rows(records)
    g = g[(g["gpu"] == gpu) & (g["op"] == "gemm") & (g["tokens"] <= GEMM_DECODE_TOKENS)]
    if g.empty:
        return None
    f = fit_params(subsample(g), ("mem_efficiency", "kernel_overhead_s"))
    return float(f.params.mem_efficiency)


def attn_fixed(records: pd.DataFrame, gpu: str) -> float | None:
    a = fit_rows(records)
    a = a[(a["gpu"] == gpu) & (a["op"] == "attn_decode") & (a["batch"] == 1) & (a["kv_tokens"] <= ATTN_FIXED_KV)]
    return float(a["time_s"].median()) if len(a) else None


def allreduce_table(records: pd.DataFrame) -> dict:
    """(latency, bandwidth, median APE) per (gpu, link, TP) and pooled per (gpu, link), vLLM custom all-reduce."""
    ar = allreduce_rows(records)
    ar = ar[ar["backend"] == "vllm_graph"]
    out = {}
    for (gpu, link), d in ar.groupby(["gpu", "link"]):
        e = {}
        for tp, dd in [("pooled", d)] + list(d.groupby("num_gpus")):
            f = fit_params(dd, AR_PARAMS)
            ape = np.abs(Predictor(dd)(f.params) / dd["time_s"].to_numpy() - 1.0)
            e[tp if tp == "pooled" else int(tp)] = {"latency_s": float(f.params.allreduce_latency_s),
                                                    "bandwidth_bytes_per_s": float(f.params.allreduce_bandwidth_bytes_per_s),
                                                    "median_ape": float(np.median(ape)), "rows": len(dd)}
        out[(gpu, link)] = e
    return out


def _g(x: float) -> float:
    return float(f"{x:.4g}")


@dataclass
class _Evidence:
    """What the kernel profiles say, per profiled GPU: the layer-pass fits (``lp``), the GEMM decode fractions
    (``gemm``), the attention fixed costs (``att``), the all-reduce table (``ar``: ``nv`` pooled NVLink, ``pc`` PCIe at
    PCIE_TP), each GPU's memory fraction and its source (``eta_mem``, ``eta_src``), linear per-layer cost (``t_lin``) and
    compute fraction (``comp``); the ``*_t`` values are their medians, what a GPU without a profile takes."""
    lp: dict
    gemm: dict
    att: dict
    ar: dict
    nv: dict
    pc: dict
    eta_mem: dict
    eta_src: dict
    t_lin: dict
    comp: dict
    eta_t: float
    tlin_t: float
    att_t: float
    comp_t: float
    fr: str = f"median over {', '.join(PROFILED)}"


def _evidence(records: pd.DataFrame) -> _Evidence:
    prof = {g: yaml.safe_load((PROFILES / f"gpu_{g}.yaml").read_text(encoding="utf-8")) for g in PROFILED}
    lp = {g: layer_pass_fit(records, g) for g in PROFILED}
    gemm = {g: gemm_decode_eta(records, g) for g in PROFILED}
    att = {g: attn_fixed(records, g) for g in PROFILED}
    ar = allreduce_table(records)
    nv, pc = ar[("a100-80gb", "nvlink")]["pooled"], ar[("l40s", "pcie")][PCIE_TP]

    eta_mem, eta_src, t_lin = {}, {}, {}
    for g in PROFILED:
        if lp[g]:
            eta_mem[g], t_lin[g] = lp[g]["eta_mem"], lp[g]["t_linear"]
            eta_src[g] = (f"calibrated: whole-pass form fitted to Vidur's {lp[g]['passes']} measured {g} decode layer passes "
                          f"(median error {100 * lp[g]['median_ape']:.1f}%, max {100 * lp[g]['max_ape']:.1f}%)")
        else:
            eta_mem[g] = gemm[g]
            eta_src[g] = f"calibrated: {g} AIConfigurator GEMM rows at <= {GEMM_DECODE_TOKENS} tokens (no layer passes)"
    med = lambda d: float(np.median([v for v in d.values() if v is not None]))  # noqa: E731
    comp = {g: prof[g]["params"]["compute_efficiency"]["value"] for g in PROFILED}
    return _Evidence(lp, gemm, att, ar, nv, pc, eta_mem, eta_src, t_lin, comp, med(eta_mem), med(t_lin), med(att),
                     med(comp))


def _profiled_priors(gpu: str, ev: _Evidence) -> dict:
    """A kernel-profiled GPU's own fractions and per-layer cost."""
    att, t_lin = ev.att, ev.t_lin
    p = {"mem_efficiency": {"value": _g(ev.eta_mem[gpu]), "kind": "calibrated", "source": ev.eta_src[gpu]},
         "compute_efficiency": {"value": _g(ev.comp[gpu]), "kind": "calibrated",
                                "source": f"kernel profile calibrate/gpu_priors/profiles/gpu_{gpu}.yaml"}}
    lin_k = "Vidur layer passes" if gpu in t_lin else f"transferred ({', '.join(t_lin)} {ev.fr.split(' over ')[0]})"
    lin = t_lin.get(gpu, ev.tlin_t)
    at = att[gpu] if att[gpu] is not None else ev.att_t
    at_k = "batch-1 decode attention at KV <= 256 (AIConfigurator)" if att[gpu] is not None else \
        f"attention transferred (median of {', '.join(k for k, v in att.items() if v is not None)})"
    kind = "calibrated" if gpu in t_lin and att[gpu] is not None else "transferred"
    p["layer_overhead_s"] = {"value": _g(lin + at), "kind": kind,
                             "source": f"{lin * 1e6:.1f} us linear part ({lin_k}) + {at * 1e6:.1f} us {at_k}"}
    return p


def _transferred_priors(ev: _Evidence) -> dict:
    """A GPU without a kernel profile: the medians of the profiled GPUs, applied to its datasheet."""
    fr, eta_mem, comp = ev.fr, ev.eta_mem, ev.comp
    return {"mem_efficiency": {"value": _g(ev.eta_t), "kind": "transferred",
                               "source": f"transferred: {fr} of the calibrated eta_mem ({', '.join(f'{k} {v:.3f}' for k, v in eta_mem.items())}), x this GPU's datasheet BW"},
            "compute_efficiency": {"value": _g(ev.comp_t), "kind": "transferred",
                                   "source": f"transferred: {fr} of the kernel profiles' eta_comp ({', '.join(f'{k} {v:.3f}' for k, v in comp.items())}), x this GPU's datasheet F"},
            "layer_overhead_s": {"value": _g(ev.tlin_t + ev.att_t), "kind": "transferred",
                                 "source": f"transferred: median linear part {ev.tlin_t * 1e6:.1f} us (Vidur a100-80gb, a40) + median "
                                           f"decode-attention fixed cost {ev.att_t * 1e6:.1f} us (AIConfigurator a100-80gb, l40s)"}}


def _allreduce_priors(gpu: str, h, ev: _Evidence) -> dict:
    """The all-reduce latency and bandwidth over the GPU's link (none for a GPU without NVLink or PCIe)."""
    p = {}
    if h.interconnect == "nvlink":
        frac = ev.nv["bandwidth_bytes_per_s"] / get_hardware("a100-80gb").datasheet_link_bytes_per_s
        bw = frac * h.datasheet_link_bytes_per_s
        kind = "calibrated" if gpu == "a100-80gb" else "transferred"
        src = ("vLLM custom all-reduce in CUDA graphs on A100 NVLink (AIConfigurator), pooled over TP 2/4/8"
               + ("" if gpu == "a100-80gb" else f"; bandwidth = the A100's achieved fraction {frac:.3f} of its datasheet "
                  f"link x this GPU's {h.datasheet_link_bytes_per_s / 1e9:.0f} GB/s"))
        p["allreduce_latency_s"] = {"value": _g(ev.nv["latency_s"]), "kind": kind, "source": src}
        p["allreduce_bandwidth_bytes_per_s"] = {"value": _g(bw), "kind": kind, "source": src}
    elif h.interconnect == "pcie":
        kind = "calibrated" if gpu == "l40s" else "transferred"
        src = (f"vLLM custom all-reduce in CUDA graphs on L40S PCIe 4.0 x16 at TP={PCIE_TP} (AIConfigurator)"
               + ("" if gpu == "l40s" else "; transferred as measured (same PCIe 4.0 x16 link)")
               + "; TP 4/8 on PCIe are slower (see all-reduce table in docs/gpu-cost-model.md)")
        p["allreduce_latency_s"] = {"value": _g(ev.pc["latency_s"]), "kind": kind, "source": src}
        p["allreduce_bandwidth_bytes_per_s"] = {"value": _g(ev.pc["bandwidth_bytes_per_s"]), "kind": kind, "source": src}
    return p


def derive(records: pd.DataFrame) -> dict:
    """Per catalog GPU: the whole-pass prior parameters, each {value, kind, source}, plus the evidence."""
    ev = _evidence(records)
    out = {}
    for gpu, own in targets().items():
        h = get_hardware(gpu)
        if own in PROFILED and gpu == own:
            p = _profiled_priors(gpu, ev)
        elif own == "a100-80gb":  # same chip, other HBM: the A100-80GB's fractions
            p = {n: {"value": _g(v), "kind": "transferred",
                     "source": "transferred from the a100-80gb calibration (same GA100 chip), applied to this datasheet"}
                 for n, v in (("mem_efficiency", ev.eta_mem[own]), ("compute_efficiency", ev.comp[own]),
                              ("layer_overhead_s", ev.t_lin[own] + ev.att[own]))}
        else:
            p = _transferred_priors(ev)
        p.update(_allreduce_priors(gpu, h, ev))
        for n, v in STEP_PRIORS.items():
            p[n] = {"value": v, "kind": "prior", "source": PRIOR_SRC}
        out[gpu] = p
    evidence = {"layer_pass": {g: v for g, v in ev.lp.items() if v},
                "gemm_decode_eta_mem": {g: v for g, v in ev.gemm.items() if v},
                "attn_fixed_s": {g: v for g, v in ev.att.items() if v is not None},
                "allreduce": {f"{g} {link}": {str(k): v for k, v in e.items()} for (g, link), e in ev.ar.items()}}
    return {"priors": out, "evidence": _round(evidence)}


def _round(x):
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, float):
        return float(f"{x:.4g}")
    return x


def write_priors(records: list[str], out: str | Path, command: str) -> dict:
    """Derive the priors from the records CSVs (:func:`derive`) and write them to ``out`` with a header naming
    ``command``; returns what :func:`derive` returned."""
    from calibrate.contracts.op_records import read_records
    from calibrate.gpu_priors.priors_chain import recorded_fits, warn_later_fits
    from simulator.inputs.loading import write_atomic

    res = derive(pd.concat([read_records(r) for r in records], ignore_index=True))
    recorded = recorded_fits(Path(out))  # before the file is replaced: which later fits had written into it
    header = ("# Whole-pass cost priors per GPU, derived from the measured kernel profiles (docs/gpu-cost-model.md).\n"
              "# kind: calibrated (fitted on this GPU's rows) | transferred (from profiled GPUs, how in source) | prior.\n"
              f"# Regenerate (do not edit by hand):\n#   {command}\n")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, header + yaml.safe_dump(res, sort_keys=False, width=120))
    warn_later_fits(Path(out), "transfer_priors", recorded, dropped=True)
    return res
