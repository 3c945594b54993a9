"""Per-op GPU time from a few named physical parameters (the form the fits and the transfer use).

Datasheet facts per GPU: BW (memory bandwidth), F (dense BF16 tensor FLOP/s). Parameters
(:class:`KernelParams`, all named, all physical)::

    eta_mem     achieved fraction of BW by streaming kernels (GEMM weights, KV reads, row ops)
    eta_comp    achieved fraction of F by large GEMMs
    m_tile      GEMM token tile: m is padded to a multiple of m_tile (wave / tile quantisation),
                so the compute term of a GEMM is flat from 1 to m_tile tokens, then steps
    eta_row     achieved fraction of BW by the small row kernels (norms, RoPE, activation, residual add):
                they move little data per launch and stay below the streaming kernels' bandwidth
    eta_attn    achieved fraction of F by prefill attention (flash attention)
    t_kernel    fixed cost per kernel (launch, prologue/epilogue, tail wave): what makes small
                shards launch-bound (7B at TP=4 far below the bandwidth roofline)
    t_ar, B_ar  all-reduce latency and achieved bus bandwidth of the link (NVLink or PCIe)

Times (b = 2 bytes per bf16 element)::

    gemm(m, n, k)      = t_kernel + max(b (m k + k n + m n) / (eta_mem BW), 2 ceil(m/m_tile) m_tile n k / (eta_comp F))
    row op(bytes)      = t_kernel + bytes / (eta_row BW)                         norm, rope, act, add, embedding
    attn_decode        = t_kernel + max(B (c 2 h_kv d s_kv + 4 h d) / (eta_mem BW), 4 B h d c / (eta_attn F))
    attn_prefill       = t_kernel + max(B ((c+n) 2 h_kv d b + 2 n h d b) / (eta_mem BW),
                                        4 B h d n (c + (n+1)/2) / (eta_attn F))
    allreduce(bytes,g) = t_ar + 2 (g-1)/g bytes / B_ar

(B sequences, c cached tokens, n new tokens, h / h_kv query / KV heads on this GPU, s_kv KV bytes
per element.) Row-op bytes: norm 2 H b (read + write), rope 2 (h + h_kv) d b / TP,
act 3 F b / TP (gated; 2 F b plain), add 3 H b, embedding H b (per token).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

BYTES = 2.0
KV_DTYPE_BYTES = {"fp8": 1.0, "int8": 1.0}


KERNELS_PER_LAYER = 10  # Vidur's per-layer ops (9-10) + attention: how today's t_layer maps to a per-kernel cost


@dataclass(frozen=True)
class KernelParams:
    mem_efficiency: float = 0.8
    compute_efficiency: float = 0.6
    gemm_tile_tokens: float = 64.0
    attn_compute_efficiency: float = 0.4
    row_mem_efficiency: float = 0.5
    kernel_overhead_s: float = 4e-6
    allreduce_latency_s: float = 10e-6
    allreduce_bandwidth_bytes_per_s: float = 100e9

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def replace(self, **kw) -> "KernelParams":
        return KernelParams(**{**self.as_dict(), **kw})


@dataclass(frozen=True)
class Datasheet:
    bandwidth: float  # bytes/s
    flops: float      # dense bf16 FLOP/s


def _f(df: pd.DataFrame, c: str) -> np.ndarray:
    return pd.to_numeric(df[c]).to_numpy(dtype=float, na_value=np.nan)


class OpArrays:
    """The shape arrays of a records frame, computed once (fits call :meth:`time` many times)."""

    def __init__(self, df: pd.DataFrame):
        self.op = df["op"].to_numpy(dtype=str)
        g = {c: _f(df, c) for c in ("tokens", "n", "k", "batch", "kv_tokens", "heads", "kv_heads", "head_dim",
                                    "hidden", "intermediate", "gated", "tp", "message_bytes", "num_gpus")}
        self.is_gemm = self.op == "gemm"
        self.is_row = np.isin(self.op, ["norm", "rope", "act", "add", "embedding"])
        self.is_attn = np.isin(self.op, ["attn_decode", "attn_prefill"])
        self.is_ar = self.op == "allreduce"
        m, n, k = g["tokens"], g["n"], g["k"]
        self.m, self.nk = m, n * k
        self.gemm_bytes = BYTES * (m * k + n * k + m * n)
        # row ops
        t, h, tp = g["tokens"], g["hidden"], np.nan_to_num(g["tp"], nan=1.0)
        rope = 2 * (g["heads"] + g["kv_heads"]) * g["head_dim"] * BYTES / tp
        act = np.where(g["gated"] > 0, 3.0, 2.0) * g["intermediate"] * BYTES / tp
        per_tok = {"norm": 2 * h * BYTES, "rope": rope, "act": act, "add": 3 * h * BYTES, "embedding": h * BYTES}
        self.row_bytes = np.zeros(len(df))
        for name, v in per_tok.items():
            sel = self.op == name
            self.row_bytes[sel] = (t * v)[sel]
        # attention
        b, c, nn = g["batch"], g["kv_tokens"], np.where(self.op == "attn_decode", 1.0, g["tokens"])
        hq, hkv, d = g["heads"], g["kv_heads"], g["head_dim"]
        kvb = df["dtype"].map(KV_DTYPE_BYTES).fillna(BYTES).to_numpy(dtype=float) if "dtype" in df else BYTES
        self.attn_bytes = b * ((c + nn) * 2 * hkv * d * kvb + 2 * nn * hq * d * BYTES)
        causal = np.where(self.op == "attn_decode", c + 1.0, c + (nn + 1.0) / 2.0)
        self.attn_flops = 4.0 * b * hq * d * nn * causal
        # all-reduce
        gg = g["num_gpus"]
        self.ar_bytes = 2.0 * (gg - 1.0) / gg * g["message_bytes"]

    def time(self, p: KernelParams, hw: Datasheet) -> np.ndarray:
        bw, fl = p.mem_efficiency * hw.bandwidth, p.compute_efficiency * hw.flops
        out = np.full(len(self.op), np.nan)
        s = self.is_gemm
        m_pad = np.ceil(self.m[s] / p.gemm_tile_tokens) * p.gemm_tile_tokens
        out[s] = p.kernel_overhead_s + np.maximum(self.gemm_bytes[s] / bw, 2.0 * m_pad * self.nk[s] / fl)
        s = self.is_row
        out[s] = p.kernel_overhead_s + self.row_bytes[s] / (p.row_mem_efficiency * hw.bandwidth)
        s = self.is_attn
        out[s] = p.kernel_overhead_s + np.maximum(self.attn_bytes[s] / bw,
                                                  self.attn_flops[s] / (p.attn_compute_efficiency * hw.flops))
        s = self.is_ar
        out[s] = p.allreduce_latency_s + self.ar_bytes[s] / p.allreduce_bandwidth_bytes_per_s
        return out


def constant_roofline_time(arrays: OpArrays, eta: float, hw: Datasheet) -> np.ndarray:
    """Baseline (b): one constant efficiency on both roofs, no fixed costs, no tiles:
    T = max(bytes, flops / (F/BW)) / (eta BW) per op; all-reduce = bytes / (eta B_link)."""
    a = arrays
    out = np.full(len(a.op), np.nan)
    bw, fl = eta * hw.bandwidth, eta * hw.flops
    out[a.is_gemm] = np.maximum(a.gemm_bytes[a.is_gemm] / bw, 2.0 * a.m[a.is_gemm] * a.nk[a.is_gemm] / fl)
    out[a.is_row] = a.row_bytes[a.is_row] / bw
    out[a.is_attn] = np.maximum(a.attn_bytes[a.is_attn] / bw, a.attn_flops[a.is_attn] / fl)
    return out
