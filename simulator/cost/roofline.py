"""The step's formulas, pure and broadcasting over numpy arrays: the soft roofline, how async scheduling overlaps a
step's host and GPU sides, a pass's split into weights / KV / compute, and the MoE layer's per-pair cost. The cost
model (:mod:`simulator.cost.cost_model`) and the fits that evaluate its terms on kernel rows import them from here."""

from __future__ import annotations

import numpy as np

from simulator.catalog.layer_kinds import ACTIVATION_BYTES  # bf16 activations (one definition, re-exported)


def moe_token_time(passes, hidden, bandwidth_bytes_per_s):
    """Seconds per routed (token, expert) pair of a MoE layer: ``passes`` over the token's hidden state (``hidden``
    activations of :data:`ACTIVATION_BYTES`) at the memory bandwidth -- alignment, permutation and the scatter back
    move the pair's hidden state a few times (docs/moe.md). Broadcasts over arrays (the MoE fit's rows)."""
    return np.asarray(passes, dtype=float) * np.asarray(hidden, dtype=float) * ACTIVATION_BYTES \
        / np.asarray(bandwidth_bytes_per_s, dtype=float)


def soft_roofline(t_mem, t_comp, p: float):
    """(t_mem^p + t_comp^p)^(1/p), evaluated as hi (1 + (lo/hi)^p)^(1/p) (no overflow); p = inf: max."""
    t_mem = np.asarray(t_mem, dtype=float)
    t_comp = np.asarray(t_comp, dtype=float)
    hi = np.maximum(t_mem, t_comp)
    if not np.isfinite(p):
        return hi
    lo = np.minimum(t_mem, t_comp)
    ratio = np.divide(lo, hi, out=np.zeros_like(hi), where=hi > 0)
    return hi * (1.0 + ratio**p) ** (1.0 / p)


def step_time(gpu_side, host, overlap: float):
    """A step from its GPU side G (roofline, communication, per-layer costs) and host side H (t_step + S t_seq) with
    async scheduling running the share o of H beside the GPU: ``max(G, o H) + (1 - o) H`` (o = 0: ``G + H``). The one
    place this rule lives (pass breakdown, serving loop); hidden while the GPU is slower, pacing it when the host is."""
    if not (overlap > 0.0 if type(overlap) is float else np.any(overlap)):  # o: a float, or an array (one per row)
        return gpu_side + host
    if type(gpu_side) is float and type(host) is float:
        return max(gpu_side, overlap * host) + (1.0 - overlap) * host
    return np.maximum(gpu_side, overlap * host) + (1.0 - overlap) * host


def memory_share(t_mem, t_comp, p: float):
    """The share of a soft roofline's time given to its memory roof: in proportion to the roofs' p-th powers (p = inf:
    all to the larger roof; 1 where both are 0)."""
    t_mem, t_comp = np.asarray(t_mem, dtype=float), np.asarray(t_comp, dtype=float)
    if np.isfinite(p):
        wm, wc = t_mem**p, t_comp**p
    else:
        wm, wc = (t_mem >= t_comp).astype(float), (t_mem < t_comp).astype(float)
    tot = wm + wc
    return np.divide(wm, tot, out=np.ones_like(tot), where=tot > 0)


def gpu_split(t_w, t_kv, t_gemm, t_attn, p: float):
    """(GPU time, its memory part, the KV share of that part) of a pass whose kernels are of two kinds, each on its
    own soft roofline, summed: the GEMMs (weights streamed ``t_w`` against their FLOPs ``t_gemm``) and attention (the
    KV cache and linear-attention state ``t_kv`` against the attention FLOPs ``t_attn``). They are separate kernels,
    run one after the other, so one kind's memory time does not hide under the other's compute (a large decode batch:
    compute-bound GEMMs, memory-bound attention). The one place ``pass_breakdown`` (dense and MoE/MLA paths) and the
    MLA fit split a pass into weights / KV / compute."""
    g_w, g_kv = soft_roofline(t_w, t_gemm, p), soft_roofline(t_kv, t_attn, p)
    m_w, m_kv = g_w * memory_share(t_w, t_gemm, p), g_kv * memory_share(t_kv, t_attn, p)
    mem = m_w + m_kv
    return g_w + g_kv, mem, np.divide(m_kv, mem, out=np.zeros_like(mem), where=mem > 0)
