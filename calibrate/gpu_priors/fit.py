"""Fit :class:`~calibrate.gpu_priors.kernel_model.KernelParams` to measured op records.

Residual r = log T_pred - log T_meas (a 5 us norm and a 50 ms GEMM weigh the same),
``scipy.optimize.least_squares`` with a soft-L1 loss (f_scale 5 %) over the logs of the free
parameters. Records from several GPUs can be pooled: each row is predicted with its own GPU's
datasheet (BW, F), so the fitted fractions are what transfers to a GPU nobody profiled.
All-reduce latency and bandwidth are fitted apart, per (GPU, link), on the collective the engine
uses inside CUDA graphs (``vllm_graph``; Vidur's NCCL rows where that is all there is).
Large tables are subsampled per (GPU, op, source) with a fixed seed (``MAX_PER_GROUP``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from calibrate.gpu_priors.kernel_model import Datasheet, KernelParams, OpArrays
from calibrate.contracts.op_records import DENSE_OPS
from simulator.catalog import get_hardware, hardware_catalog

COMPUTE_PARAMS = ("mem_efficiency", "compute_efficiency", "gemm_tile_tokens", "attn_compute_efficiency",
                  "row_mem_efficiency", "kernel_overhead_s")
AR_PARAMS = ("allreduce_latency_s", "allreduce_bandwidth_bytes_per_s")
FIT_DTYPES = {"bfloat16", "float16"}  # bf16/fp16 kernels only (fp8 GEMMs and fp8 KV caches are other kernels)
MAX_PER_GROUP = 4000
F_SCALE = 0.05
SEED = 0


def datasheet(gpu: str) -> Datasheet:
    h = get_hardware(gpu, None, "gpu")
    return Datasheet(h.memory_bandwidth_bytes_per_s, h.dense_bf16_flops_per_s)


def _has_datasheet(df: pd.DataFrame) -> pd.Series:
    """Rows of GPUs the catalog has a datasheet for (records may carry others, e.g. b200: nothing to predict with)."""
    return df["gpu"].isin(set(hardware_catalog()))


def fit_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the compute fit uses: the kernel model's dense ops (no all-reduce; no MoE / MLA), bf16/fp16
    kernels, GPUs with a datasheet."""
    ops = [o for o in DENSE_OPS if o != "allreduce"]
    return df[df["op"].isin(ops) & df["dtype"].isin(FIT_DTYPES) & _has_datasheet(df)]


CUSTOM_AR_MAX_BYTES = 8 * 2**20  # vLLM's custom all-reduce handles messages up to 8 MiB; NCCL above


def allreduce_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Single-node all-reduce rows of the path vLLM takes: its custom all-reduce inside CUDA graphs up to
    ``CUSTOM_AR_MAX_BYTES``, NCCL above (and everywhere when only NCCL was measured: Vidur)."""
    ar = df[(df["op"] == "allreduce") & df["link"].isin(["nvlink", "pcie"]) & _has_datasheet(df)]
    graph = ar[(ar["backend"] == "vllm_graph") & (ar["message_bytes"] <= CUSTOM_AR_MAX_BYTES)]
    nccl = ar[ar["backend"] == "nccl"]
    if graph.empty:
        return nccl
    parts = [graph]
    for key, g in graph.groupby(["gpu", "link"]):
        big = nccl[(nccl["gpu"] == key[0]) & (nccl["link"] == key[1]) & (nccl["message_bytes"] > CUSTOM_AR_MAX_BYTES)]
        parts.append(big)
    return pd.concat(parts)


def subsample(df: pd.DataFrame, n: int = MAX_PER_GROUP, seed: int = SEED) -> pd.DataFrame:
    parts = [g.sample(min(len(g), n), random_state=seed) for _, g in df.groupby(["gpu", "op", "source"], sort=True)]
    return pd.concat(parts) if parts else df


class Predictor:
    """Per-row predictions for a records frame that may mix GPUs (datasheet per row)."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self.groups = [(datasheet(g), np.flatnonzero((df["gpu"] == g).to_numpy()), OpArrays(df[df["gpu"] == g]))
                       for g in sorted(df["gpu"].unique())]

    def __call__(self, p: KernelParams) -> np.ndarray:
        out = np.empty(len(self.df))
        for hw, idx, arr in self.groups:
            out[idx] = arr.time(p, hw)
        return out


@dataclass
class Fit:
    params: KernelParams
    free: tuple[str, ...]
    stderr: dict[str, float]
    n_rows: int


def fit_params(df: pd.DataFrame, free: tuple[str, ...], start: KernelParams | None = None) -> Fit:
    """Least-squares fit of the ``free`` parameters (log space) on ``df``; the others stay at ``start``.
    A parameter with no rows to pin it (no attention rows: ``attn_compute_efficiency``) is not free."""
    start = start or KernelParams()
    ops = set(df["op"])
    needs = {"attn_compute_efficiency": {"attn_decode", "attn_prefill"}, "row_mem_efficiency": {"norm", "rope", "act", "add", "embedding"},
             "gemm_tile_tokens": {"gemm"}, "compute_efficiency": {"gemm"}}
    free = tuple(n for n in free if not (n in needs and not (needs[n] & ops)))
    pred, y = Predictor(df), df["time_s"].to_numpy(dtype=float)

    def resid(x):
        return np.log(pred(start.replace(**dict(zip(free, np.exp(x))))) / y)

    best = None
    for scale in (1.0, 0.6):  # the roofline max() is non-smooth: two starts, keep the best
        x0 = np.log([getattr(start, n) * (scale if "efficiency" in n else 1.0) for n in free])
        res = least_squares(resid, x0, loss="soft_l1", f_scale=F_SCALE)
        if best is None or res.cost < best.cost:
            best = res
    params = start.replace(**dict(zip(free, np.exp(best.x))))
    if "gemm_tile_tokens" in free:
        params, best = _polish_tile(df, pred, y, params, free, best)
    stderr = _stderr(best, params, free)
    return Fit(params, free, stderr, len(df))


def _soft_l1_cost(r: np.ndarray) -> float:
    """least_squares' cost for loss="soft_l1" at ``F_SCALE``."""
    z = (r / F_SCALE) ** 2
    return float(0.5 * F_SCALE**2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def _polish_tile(df, pred, y, params: KernelParams, free, best):
    """The GEMM tile enters as a step (m padded to a multiple of it), so only the gap of the measured token grid
    it falls in is identifiable and a gradient fit can stop inside the wrong gap. Try the grid values within a
    factor 4 of the fitted tile (each the top of its gap) with the other parameters held, keep the cheapest, and
    re-fit the other parameters at that tile. Never worse than the gradient fit (it is one of the candidates)."""
    grid = np.unique(df.loc[df["op"] == "gemm", "tokens"].to_numpy(dtype=float))
    t0 = params.gemm_tile_tokens
    cands = [t0, *grid[(grid >= t0 / 4) & (grid <= t0 * 4)]]
    costs = [_soft_l1_cost(np.log(pred(params.replace(gemm_tile_tokens=float(t))) / y)) for t in cands]
    tile = float(cands[int(np.argmin(costs))])
    if tile == t0:
        return params, best
    rest = tuple(n for n in free if n != "gemm_tile_tokens")
    fixed = params.replace(gemm_tile_tokens=tile)

    def resid(x):
        return np.log(pred(fixed.replace(**dict(zip(rest, np.exp(x))))) / y)

    res = least_squares(resid, np.log([getattr(fixed, n) for n in rest]), loss="soft_l1", f_scale=F_SCALE)
    if res.cost >= best.cost:
        return params, best
    new = fixed.replace(**dict(zip(rest, np.exp(res.x))))
    # the returned result carries the tile's column (zero: a step has no derivative) for the stderr
    full = np.zeros((res.jac.shape[0], len(free)))
    full[:, [free.index(n) for n in rest]] = res.jac
    res.jac = full
    return new, res


def _stderr(res, params: KernelParams, free) -> dict[str, float]:
    r, J = res.fun, res.jac
    s = 1.4826 * np.median(np.abs(r - np.median(r)))
    try:
        cov = s**2 * np.linalg.pinv(J.T @ J)
    except np.linalg.LinAlgError:
        return {n: float("nan") for n in free}
    # a column with no derivative (the GEMM tile, a step): not identifiable beyond its gap -> nan, not 0
    return {n: float(getattr(params, n) * np.sqrt(max(cov[i, i], 0.0))) if np.any(J[:, i]) else float("nan")
            for i, n in enumerate(free)}


def fit_allreduce(df: pd.DataFrame, start: KernelParams | None = None) -> Fit:
    ar = allreduce_rows(df)
    if ar.empty:
        raise ValueError("no all-reduce rows")
    return fit_params(ar, AR_PARAMS, start)


def fit_gpu(df: pd.DataFrame, gpu: str | None = None) -> tuple[KernelParams, dict]:
    """Compute parameters from the GPU's op rows; all-reduce parameters from its all-reduce rows."""
    d = df if gpu is None else df[df["gpu"] == gpu]
    comp = fit_params(subsample(fit_rows(d)), COMPUTE_PARAMS)
    info = {"compute_rows": comp.n_rows, "stderr": dict(comp.stderr), "allreduce_rows": 0}
    params = comp.params
    if len(allreduce_rows(d)):
        ar = fit_allreduce(d, params)
        params = params.replace(**{n: getattr(ar.params, n) for n in AR_PARAMS})
        info["allreduce_rows"] = ar.n_rows
        info["stderr"].update(ar.stderr)
    return params, info


def today() -> str:
    return _dt.date.today().isoformat()
