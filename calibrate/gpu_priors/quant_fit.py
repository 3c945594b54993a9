"""Quantised GEMM kinds fitted on measured data (``specsim fit quant``; the kinds and the rule:
:mod:`simulator.catalog.quant_gemm`, docs/gpu-cost-model.md "Quantised GEMMs").

Two sources, one per family of kinds:

- **W8A8 FP8 / FP8 block / NVFP4** -- AIConfigurator's vLLM GEMM tables (shared data ``aiconfigurator-vllm-kernels``:
  bf16, fp8, fp8_block, nvfp4 linear layers timed in CUDA graphs on H100, L40S, B200). Per (GPU, dtype) a kernel model

      t(m, n, k) = t0 + softmax_p(bytes / (em BW), 2 m n k / (ec F_peak)),   bytes = n k b_w + 2 (m k + m n),  p = 3

  is fitted (least squares on log t); a kind's ratios are the quantised fit's over the bf16 fit's on the same GPU
  (rc = ec_q / ec_bf16, rm = em_q / em_bf16, t_q = t0_q - t0_bf16), pooled over GPUs by their geometric mean (t_q: the
  mean). Held out by GPU: each GPU's quantised rows predicted from its own bf16 fit and the other GPUs' ratios.
- **Weight-only (W8A16 FP8-Marlin, W4A16 AWQ-Marlin) on A100** -- GPUStack's ``vllm serve`` bursts of 1000 requests of
  Qwen3-14B / 32B in bf16, FP8 and AWQ on one A100 (vLLM 0.11; shared data ``engine-measurements/
  gpustack-performance-lab``). Each burst is predicted as the released validation predicts it
  (:func:`calibrate.fit.released_predict.predict_released`: the catalog's A100 priors with the host terms of the
  run's vLLM version, vLLM's A100 ``vllm serve`` defaults as the released-table importer takes them, ShareGPT's
  spread of prompt and reply lengths at the burst's means, one serial API server). The kind's compute ratio rc is
  fitted to the quantised bursts' durations; rm = 1 and t_q = 0 stay priors (a burst is compute-bound: they are not
  identified).
  Held out by model (no second GPU has weight-only vLLM runs): rc fitted on one model predicts the other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize_scalar

from calibrate.gpu_priors.engine_data import SHARED
from calibrate.fit.gpustack_import import GPUSTACK as RELEASED_TABLES, TABLE, ReleasedRun, released_runs
from simulator.catalog import get_hardware, hardware_catalog
from simulator.catalog.hardware import data_labels
from simulator.catalog.quant_gemm import GemmKind, gemm_kind
from simulator.catalog.versions import folder_version
from simulator.cost.roofline import soft_roofline
from simulator.errors import InputError

AIC = SHARED / "aiconfigurator-vllm-kernels"
GPUSTACK = RELEASED_TABLES / TABLE
ROOFLINE_P = 3.0
MIN_WEIGHTS = 1e6  # n k below this: launch-bound GEMMs whose time says nothing about streaming or compute rates
# AIConfigurator dtype -> (kind, bytes per weight element, peak)
AIC_KINDS = {"fp8": ("w8a8-fp8", 1.0, "fp8"), "fp8_block": ("w8a8-fp8-block", 1.0 + 4.0 / 128 ** 2, "fp8"),
             "nvfp4": ("w4a4-fp4", 0.5 + 1.0 / 16, "fp4")}
# The held-out check's "before": how the cost model priced each dtype before the kinds (its peak, the kind's bytes)
BEFORE_PEAK = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "bf16"}
BURST_MODELS = ("qwen3-14b", "qwen3-32b")  # the models with bf16, FP8 and AWQ bursts on one A100



# ---- kernel level: AIConfigurator GEMM tables ------------------------------------------------------------
def load_gemm_tables(root: Path = AIC) -> pd.DataFrame:
    """Per catalog GPU, the newest vLLM version's GEMM table that has quantised rows: bf16 and each quantised dtype
    of the same table, min latency over the kernel sources per (dtype, m, n, k) (the fastest kernel vLLM offers)."""
    labels = data_labels("aiconfigurator")
    frames = []
    for label, gpu in sorted(labels.items()):
        tables = sorted((root / label / "gemm" / "vllm").glob("*/gemm_perf.parquet"), key=folder_version)
        for path in reversed(tables):
            try:
                d = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
            except (OSError, ValueError, KeyError) as e:
                raise InputError(str(path), "gemm_dtype, m, n, k, latency", f"a readable GEMM table ({e})") from None
            if d["gemm_dtype"].isin(list(AIC_KINDS)).any():
                d = d[d["gemm_dtype"].isin(["bfloat16", *AIC_KINDS]) & (d["n"] * d["k"] >= MIN_WEIGHTS)]
                d = d.groupby(["gemm_dtype", "m", "n", "k"], as_index=False)["latency"].min()
                frames.append(d.assign(gpu=gpu, version=path.parent.name, time_s=d["latency"] * 1e-3,
                                       table=str(path.relative_to(root))))
                break
    if not frames:
        raise FileNotFoundError(f"no quantised GEMM tables under {root}")
    return pd.concat(frames, ignore_index=True).drop(columns="latency")


def _peak(gpu: str, peak: str) -> float:
    h = get_hardware(gpu)
    return {"bf16": h.dense_bf16_flops_per_s, "fp8": h.dense_fp8_flops_per_s or h.dense_bf16_flops_per_s,
            "fp4": h.dense_fp4_flops_per_s or h.dense_bf16_flops_per_s}[peak]


def kernel_time(d: pd.DataFrame, gpu: str, bytes_per_weight: float, peak: str, em: float, ec: float, t0: float):
    m, n, k = (d[c].to_numpy(float) for c in ("m", "n", "k"))
    h = get_hardware(gpu)
    t_mem = (n * k * bytes_per_weight + 2.0 * (m * k + m * n)) / (em * h.memory_bandwidth_bytes_per_s)
    return t0 + soft_roofline(t_mem, 2.0 * m * n * k / (ec * _peak(gpu, peak)), ROOFLINE_P)


def fit_kernel(d: pd.DataFrame, gpu: str, bytes_per_weight: float, peak: str) -> dict:
    """(em, ec, t0) of one GPU's rows of one dtype: least squares on log time."""
    y = np.log(d["time_s"].to_numpy(float))

    def res(x):
        em, ec, t0 = np.exp(x)
        return np.log(kernel_time(d, gpu, bytes_per_weight, peak, em, ec, t0)) - y

    r = least_squares(res, np.log([0.7, 0.6, 5e-6]), bounds=(np.log([1e-3, 1e-3, 1e-7]), np.log([2.0, 2.0, 1e-3])),
                      loss="soft_l1", f_scale=0.1)  # robust: a few rows of a table are 2x off their neighbours
    em, ec, t0 = np.exp(r.x)
    return {"em": float(em), "ec": float(ec), "t0": float(t0), "rows": int(len(d)),
            "rms_log": float(np.sqrt(np.mean(r.fun ** 2)))}


def kernel_ratios(tables: pd.DataFrame) -> pd.DataFrame:
    """Per (GPU, quantised dtype): the bf16 and quantised kernel fits and their ratios."""
    rows = []
    for gpu, g in tables.groupby("gpu"):
        base = fit_kernel(g[g["gemm_dtype"] == "bfloat16"], gpu, 2.0, "bf16")
        for dt, (kind, b, peak) in AIC_KINDS.items():
            q = g[g["gemm_dtype"] == dt]
            if not len(q):
                continue
            f = fit_kernel(q, gpu, b, peak)
            rows.append({"gpu": gpu, "dtype": dt, "kind": kind, "table": q["table"].iloc[0], "rows": f["rows"],
                         "bf16_em": base["em"], "bf16_ec": base["ec"], "bf16_t0": base["t0"],
                         "compute_ratio": f["ec"] / base["ec"], "mem_ratio": f["em"] / base["em"],
                         "gemm_overhead_s": f["t0"] - base["t0"], "rms_log": f["rms_log"]})
    return pd.DataFrame(rows)


def pooled(r: pd.DataFrame) -> dict:
    """A kind's ratios pooled over GPUs: geometric means of the ratios, mean extra time per GEMM (>= 0)."""
    return {"compute_ratio": float(np.exp(np.log(r["compute_ratio"]).mean())),
            "mem_ratio": float(np.exp(np.log(r["mem_ratio"]).mean())),
            "gemm_overhead_s": max(0.0, float(r["gemm_overhead_s"].mean()))}


def _err_row(what: str, held: str, fitted_on: str, n: int, before: np.ndarray, after: np.ndarray) -> dict:
    return {"check": what, "held_out": held, "fitted_on": fitted_on, "rows": n,
            "before_median_abs_pct": 100 * float(np.median(np.abs(before))),
            "before_p90_abs_pct": 100 * float(np.quantile(np.abs(before), 0.9)),
            "before_bias_pct": 100 * float(np.median(before)),
            "after_median_abs_pct": 100 * float(np.median(np.abs(after))),
            "after_p90_abs_pct": 100 * float(np.quantile(np.abs(after), 0.9)),
            "after_bias_pct": 100 * float(np.median(after))}


def kernel_heldout(tables: pd.DataFrame, ratios: pd.DataFrame) -> pd.DataFrame:
    """Each GPU's quantised GEMMs predicted from its own bf16 kernel fit and the ratios of the other GPUs (after),
    against the rule before the kinds (the bf16 fit on the kind's peak and bytes, nothing else)."""
    out = []
    for (gpu, dt), r in ratios.groupby(["gpu", "dtype"]):
        others = ratios[(ratios["dtype"] == dt) & (ratios["gpu"] != gpu)]
        if not len(others):
            continue
        kind, b, peak = AIC_KINDS[dt]
        q = tables[(tables["gpu"] == gpu) & (tables["gemm_dtype"] == dt)]
        em, ec, t0 = (float(r[c].iloc[0]) for c in ("bf16_em", "bf16_ec", "bf16_t0"))
        p = pooled(others)
        meas = q["time_s"].to_numpy(float)
        before = kernel_time(q, gpu, b, BEFORE_PEAK[dt], em, ec, t0) / meas - 1.0
        after = kernel_time(q, gpu, b, peak, em * p["mem_ratio"], ec * p["compute_ratio"],
                            t0 + p["gemm_overhead_s"]) / meas - 1.0
        out.append(_err_row(f"kernel {dt} GEMM time", gpu, ", ".join(sorted(others["gpu"])), len(q), before, after))
    return pd.DataFrame(out)


# ---- engine level: weight-only bursts on an A100 ---------------------------------------------------------
def plain_a100_burst(run: ReleasedRun) -> bool:
    """GPUStack's plain ``vllm serve <Qwen3 14B/32B>[-FP8|-AWQ]`` ShareGPT burst of 1000 requests on one A100: no
    server option but ``--max-model-len`` (vLLM's defaults decide the rest)."""
    opts = run.server_options
    plain = all(a == "--max-model-len" or (a.isdigit() and i and opts[i - 1] == "--max-model-len")
                for i, a in enumerate(opts))
    return (run.gpu == "a100-80gb" and run.model in BURST_MODELS and run.concurrency is None and run.requests == 1000
            and run.dataset == "sharegpt" and plain)


def load_bursts(folder: Path = RELEASED_TABLES) -> pd.DataFrame:
    """The plain A100 bursts (:func:`plain_a100_burst`) among the released-table runs
    (:func:`calibrate.fit.gpustack_import.released_runs`, the one reader of the table), the first per (model, weight
    dtype): table row, model, weight dtype, requests, mean input / output tokens, measured duration, and the run
    itself (``run``: the server's limits and the dataset as the released validation takes them)."""
    runs, _ = released_runs(folder)
    rows = [{"row": r.row, "model": r.model, "weight_dtype": r.weight_dtype, "requests": r.requests,
             "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "duration_s": r.measured["duration_s"],
             "vllm": r.version, "source": f"{r.doc}: {r.serve_cmd}", "run": r} for r in runs if plain_a100_burst(r)]
    if not rows:
        raise InputError(str(Path(folder) / TABLE), "serve_cmd", "no plain vllm serve Qwen3-14B/32B burst on an A100")
    return pd.DataFrame(rows).drop_duplicates(["model", "weight_dtype"]).reset_index(drop=True)


def burst_runs(bursts: pd.DataFrame) -> dict[int, ReleasedRun]:
    """{table row: the released-table run} of ``bursts`` (:func:`load_bursts`)."""
    return {int(i): r for i, r in zip(bursts["row"], bursts["run"])}


def burst_duration(run: ReleasedRun, kind: GemmKind | None = None) -> float:
    """Predicted duration of a released burst, replayed as the released validation replays it
    (:func:`calibrate.fit.released_predict.predict_released`: ShareGPT's spread of lengths at the run's means, the
    run's vLLM limits, the host terms of its version, one serial API server); ``kind``: the quantised kind's
    parameters to price it with (None: the catalog's)."""
    from calibrate.fit.released_predict import predict_released

    return predict_released(run, gemm=kind)["duration_s"]


def _kind_with(rc: float, name: str) -> GemmKind:
    from simulator.catalog.hardware import PriorParam

    return GemmKind(peak="bf16", compute_ratio=PriorParam(value=rc, kind="calibrated", source="candidate"),
                    mem_ratio=PriorParam(value=1.0, kind="prior", source="prior"),
                    gemm_overhead_s=PriorParam(value=0.0, kind="prior", source="prior"))


def fit_weight_only(runs: dict[int, ReleasedRun], rows: pd.DataFrame) -> float:
    """rc of one weight-only kind from ``rows`` (its bursts): log predicted / measured durations in least squares over
    rc in (0.05, 1]. (Fitting the duration ratio quant / bf16 instead would import the bf16 runs' own errors: their
    batch is KV-capacity-bound at 14B and 32B alike, the quantised runs' is max_num_seqs-bound.)"""

    def loss(rc):
        e = [np.log(burst_duration(runs[r.row], _kind_with(rc, "")) / r.duration_s) for r in rows.itertuples()]
        return float(np.sum(np.square(e)))

    return float(minimize_scalar(loss, bounds=(0.05, 1.0), method="bounded", options={"xatol": 1e-3}).x)


def weight_only_fit(bursts: pd.DataFrame) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """({kind: rc fitted on every model}, the held-out-by-model rows, per-burst predictions before / after)."""
    a100 = get_hardware("a100-80gb")
    runs = burst_runs(bursts)
    q = bursts[bursts["weight_dtype"] != "bf16"].assign(
        kind=lambda f: [gemm_kind(w, a100)[0] for w in f["weight_dtype"]])
    fitted, held, preds = {}, [], []
    for kind, rows in q.groupby("kind"):
        fitted[kind] = fit_weight_only(runs, rows)
        for r in rows.itertuples():
            others = rows[rows["model"] != r.model]
            rc = fit_weight_only(runs, others) if len(others) else np.nan
            before = burst_duration(runs[r.row], kind=_kind_with(1.0, kind))
            after = burst_duration(runs[r.row], kind=_kind_with(rc, kind))
            b16 = bursts[(bursts.model == r.model) & (bursts.weight_dtype == "bf16")].iloc[0]
            pb, mb = burst_duration(runs[int(b16.row)]), float(b16.duration_s)
            preds.append({"model": r.model, "weight_dtype": r.weight_dtype, "kind": kind, "vllm": r.vllm,
                          "measured_s": r.duration_s, "before_s": before, "after_s": after, "rc_heldout": rc,
                          "bf16_measured_s": mb, "bf16_predicted_s": pb,
                          "measured_ratio": r.duration_s / mb, "before_ratio": before / pb, "after_ratio": after / pb})
    p = pd.DataFrame(preds)
    for what, col in (("burst duration", "_s"), ("burst duration / bf16's", "_ratio")):
        ref = p["measured" + col].to_numpy(float)
        held.append(_err_row(f"A100 weight-only {what}", "each model", "the other model", len(p),
                             p["before" + col].to_numpy(float) / ref - 1, p["after" + col].to_numpy(float) / ref - 1))
    return fitted, pd.DataFrame(held), p


def catalog_gpus() -> list[str]:
    return sorted(hardware_catalog())
