"""Large all-reduces as vLLM runs them (NCCL, outside CUDA graphs), measured on AIConfigurator's all-reduce tables.

Why: the step model's all-reduce ``t_ar + 2 (g-1)/g bytes / B_ar`` was fitted on vLLM's custom all-reduce inside CUDA
graphs at <= 8 MiB (a decode step's message: calibrate/gpu_priors/transfer.py). vLLM hands larger messages (a prefill
chunk's hidden states: 8192 tokens x 4096 x 2 bytes = 64 MiB) to NCCL, which reaches several times that bus
bandwidth after a larger fixed cost; extrapolating the small pair prices an 8192-token chunk's all-reduces on 8
H100s at 1.7x their measured time, on 8 A100s at 1.5x (docs/gpu-cost-model.md, "Large all-reduces").

Data (read, never copied): every ``<gpu>/comm/vllm/<version>/custom_allreduce_perf.parquet`` of the shared data's
``aiconfigurator-vllm-kernels`` (vLLM's all-reduce entry point, which picks custom or NCCL by size), the eager rows
(``backend`` vllm_eager: a step of more tokens than vLLM captures in CUDA graphs runs eager), bf16 messages of
``MIN_BYTES`` to ``MAX_BYTES`` (beyond the custom kernel's 8 MiB cap, up to a 16k-token chunk of a 8192-wide model),
every TP degree (2, 4, 8). Per GPU and TP degree, pooled over versions, least squares in relative error:

    t(bytes) = t_L + 2 (g-1)/g bytes / B_L,    f_L = B_L / datasheet link bandwidth

The bus bandwidth grows with the TP degree (A100 / H100 / B200 reach 0.53 / 0.56 / 0.50 of their link at TP 2, 0.64 /
0.77 / 0.62 at TP 8), alike on the three. GPUs with no table take their ``same_chip_as``'s f_L (on their own
datasheet link) and t_L; other NVLink GPUs the median f_L and t_L of the measured NVLink GPUs at that TP degree. PCIe GPUs get none: the L40S's rows at TP 4 and 8 reach 2-4 GB/s
(host-routed PCIe), which no per-link pair represents; their small-message pair stands (evidence kept).

    specsim fit allreduce --out simulator/catalog/allreduce.yaml --date 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import SHARED, data_commit
from simulator.errors import InputError

ROOT = SHARED / "aiconfigurator-vllm-kernels"
TABLE = "custom_allreduce_perf.parquet"
BACKEND = "vllm_eager"
MIN_BYTES = 16 * 2**20   # twice vLLM's custom all-reduce cap (8 MiB): NCCL carries these
MAX_BYTES = 256 * 2**20  # a 16k-token chunk of an 8192-wide model in bf16
BYTES_PER_ELEMENT = 2    # message_size counts bf16 elements
FOLDERS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "b200_sxm": "b200", "l40s": "l40s"}  # folder -> catalog
NEED = ("num_gpus", "message_size", "latency", "backend")


def load_rows(root: Path = ROOT) -> pd.DataFrame:
    """Every table's eager rows in the fitted size range: gpu (catalog name), version, tp, bytes, seconds."""
    paths = sorted(Path(root).glob(f"*/comm/vllm/*/{TABLE}"))
    if not paths:
        raise InputError(str(root), None, f"no <gpu>/comm/vllm/<version>/{TABLE} (AIConfigurator tables)")
    frames = []
    for p in paths:
        d = pd.read_parquet(p)
        missing = [c for c in NEED if c not in d.columns]
        if missing:
            raise InputError(str(p), missing[0], "missing column (an AIConfigurator all-reduce table)")
        if "allreduce_dtype" in d.columns:
            d = d[d["allreduce_dtype"].astype(str).isin(("bfloat16", "half", "float16"))]
        b = d["message_size"].astype(float) * BYTES_PER_ELEMENT
        d = d[(d["backend"].astype(str) == BACKEND) & (b >= MIN_BYTES) & (b <= MAX_BYTES) & (d["latency"] > 0)]
        folder = p.parts[-5]
        if d.empty or folder not in FOLDERS:
            continue
        frames.append(pd.DataFrame({"gpu": FOLDERS[folder], "version": p.parts[-2], "tp": d["num_gpus"].astype(int),
                                    "bytes": d["message_size"].astype(float) * BYTES_PER_ELEMENT,
                                    "seconds": d["latency"].astype(float) * 1e-3}))
    if not frames:
        raise InputError(str(root), None, f"no {BACKEND} all-reduce rows of {MIN_BYTES >> 20}-{MAX_BYTES >> 20} MiB")
    return pd.concat(frames, ignore_index=True)


def fit_pair(rows: pd.DataFrame) -> tuple[float, float, float]:
    """(t_L seconds, B_L bytes/s, rms relative error) of ``t = t_L + 2 (g-1)/g bytes / B_L`` (relative least squares)."""
    ring = 2.0 * (rows["tp"] - 1) / rows["tp"] * rows["bytes"]
    t = rows["seconds"].to_numpy(float)
    a = np.vstack([np.ones(len(t)), ring.to_numpy(float)]).T / t[:, None]
    (lat, inv), *_ = np.linalg.lstsq(a, np.ones(len(t)), rcond=None)
    if inv <= 0:
        raise InputError(None, "bandwidth", "the fitted large-message bandwidth is not positive")
    lat = max(float(lat), 0.0)
    pred = lat + ring.to_numpy(float) * inv
    return lat, 1.0 / float(inv), float(np.sqrt(np.mean((pred / t - 1.0) ** 2)))


def fit_gpus(rows: pd.DataFrame) -> dict:
    """Per GPU and TP degree: the pair and its fraction of the GPU's datasheet link bandwidth."""
    from simulator.catalog import get_hardware

    out: dict = {}
    for (gpu, tp), g in rows.groupby(["gpu", "tp"]):
        if len(g) < 2:
            continue
        h = get_hardware(gpu)
        lat, bw, rms = fit_pair(g)
        out.setdefault(gpu, {"interconnect": h.interconnect, "tp": {}})["tp"][int(tp)] = {
            "latency_s": lat, "bandwidth_bytes_per_s": bw, "link_fraction": bw / h.datasheet_link_bytes_per_s, "rms": rms,
            "points": int(len(g)), "versions": sorted(g["version"].unique())}
    return out


def _entry(v: dict) -> dict:
    return {"latency_s": float(f"{v['latency_s']:.4g}"), "link_fraction": round(v["link_fraction"], 4),
            "source": (f"vLLM {', '.join(v['versions'])} {BACKEND}, {MIN_BYTES >> 20}-{MAX_BYTES >> 20} MiB: "
                       f"{v['points']} points, bus bandwidth {v['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s, "
                       f"rms {100 * v['rms']:.1f}%")}


def _by_tp(v: dict) -> str:
    return ", ".join(f"{t}: {e['bandwidth_bytes_per_s'] / 1e9:.0f}" for t, e in sorted(v["tp"].items()))


def catalog_doc(fits: dict, command: str, date: str | None) -> dict:
    """The YAML document of ``simulator/catalog/allreduce.yaml``."""
    nv = {k: v for k, v in fits.items() if v["interconnect"] == "nvlink"}
    if not nv:
        raise InputError(str(ROOT), None, "no NVLink GPU among the all-reduce tables")
    gpus = {k: {tp: _entry(e) for tp, e in sorted(v["tp"].items())} for k, v in sorted(nv.items())}
    transfer = {}
    for tp in sorted({t for v in nv.values() for t in v["tp"]}):
        got = {k: v["tp"][tp] for k, v in nv.items() if tp in v["tp"]}
        transfer[tp] = {"latency_s": float(f"{np.median([e['latency_s'] for e in got.values()]):.4g}"),
                        "link_fraction": round(float(np.median([e["link_fraction"] for e in got.values()])), 4),
                        "source": f"median over {', '.join(sorted(got))}"}
    left = {k: f"{v['interconnect']}: not applied (bus bandwidth by TP {_by_tp(v)} GB/s)"
            for k, v in sorted(fits.items()) if v["interconnect"] != "nvlink"}
    return {"provenance": {"kind": "fitted", "source": f"aiconfigurator-vllm-kernels (commit {data_commit(ROOT)})",
                           "command": command, "date": date or "undated",
                           "method": "calibrate.gpu_priors.allreduce_fit (relative least squares per GPU and TP)"},
            "gpus": gpus, "nvlink_transfer": transfer, "not_applied": left}


def heldout(rows: pd.DataFrame, fits: dict) -> pd.DataFrame:
    """Leave one NVLink GPU out: its rows predicted from the other measured NVLink GPUs' median (t_L, f_L) at the same
    TP degree on its own datasheet link, beside the small-message pair it replaces (the hardware catalog's t_ar, B_ar
    extrapolated). One row per (GPU, TP): median APE of each."""
    from simulator.catalog import get_hardware
    from simulator.catalog.allreduce import allreduce_lines

    nv = [g for g, v in fits.items() if v["interconnect"] == "nvlink"]
    out = []
    for g in nv:
        h = get_hardware(g)
        link = h.datasheet_link_bytes_per_s
        for tp, x in rows[rows["gpu"] == g].groupby("tp"):
            others = [fits[o]["tp"][tp] for o in nv if o != g and tp in fits[o]["tp"]]
            if not others:
                continue
            lat = float(np.median([e["latency_s"] for e in others]))
            bw = float(np.median([e["link_fraction"] for e in others])) * link
            ring = 2.0 * (tp - 1) / tp * x["bytes"]
            large = lat + ring / bw
            a, b = allreduce_lines(h, int(tp), 1.0, h.allreduce_latency_s)[0]  # the custom all-reduce's line, per byte
            small = a + b * x["bytes"]
            out.append({"gpu": g, "tp": int(tp), "points": int(len(x)),
                        "large_ape": float(((large / x["seconds"]) - 1).abs().median()),
                        "small_ape": float(((small / x["seconds"]) - 1).abs().median()),
                        "small_bias": float(((small / x["seconds"]) - 1).median())})
    return pd.DataFrame(out)


def fit_and_write(root: Path, out: Path | None, command: str, date: str | None) -> str:
    """Fit the large-message pairs (``specsim fit allreduce``); with ``out`` write the catalog file. Returns a summary."""
    import yaml

    from simulator.inputs.loading import write_atomic

    rows = load_rows(root)
    fits = fit_gpus(rows)
    doc = catalog_doc(fits, command, date)
    head = ("# Large all-reduces (NCCL, eager) per GPU (simulator/catalog/allreduce.py, docs/gpu-cost-model.md).\n"
            "# Regenerate (do not edit by hand):\n"
            "#   specsim fit allreduce --out simulator/catalog/allreduce.yaml --date YYYY-MM-DD\n")
    if out is not None:
        write_atomic(out, head + yaml.safe_dump(doc, sort_keys=False, width=120))
    lines = [f"{k} TP {tp}: t_L {1e6 * e['latency_s']:.1f} us, B_L {e['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s "
             f"({e['link_fraction']:.2f} of the link), rms {100 * e['rms']:.1f}%, {e['points']} points"
             for k, v in sorted(fits.items()) for tp, e in sorted(v["tp"].items())]
    lines += [f"NVLink transfer TP {tp}: t_L {1e6 * t['latency_s']:.1f} us, link fraction {t['link_fraction']}"
              for tp, t in doc["nvlink_transfer"].items()]
    ho = heldout(rows, fits)
    lines += [f"held out {r.gpu} TP {r.tp}: large path {100 * r.large_ape:.1f}% median APE (the small pair "
              f"extrapolated: {100 * r.small_ape:.1f}%, bias {100 * r.small_bias:+.0f}%)" for r in ho.itertuples()]
    return "\n".join(lines)
