"""The cost model's pass time, pre-multiplied for the serving loop's hot path.

``Deployment.pass_time(N, KV, A, L)`` (see :mod:`simulator.cost.cost_model`) is affine in the
batch aggregates inside each roofline branch:

    G = softmax_p(m0 (1 + j [N >= 2]), c_n N + c_l L) + softmax_p(m1 KV, c_a A) + AR(N) + og,   H = h0 + s S
    T = step_time(G, H, a)   (G + H without async scheduling; max(G, a H) + (1 - a) H with it)

with m0 = (W/TP)/(eta_mem BW), m1 = kv_bytes/(eta_kv BW), c_n = 2 P_layers/(TP eta_comp F),
c_l = 2 V H/(TP eta_comp F), c_a = 4 L heads head_dim/(TP eta_comp F), AR(N) = 2 L min over the all-reduce's paths of
(t + N r) (``Deployment.allreduce_lines``: custom all-reduce, and NCCL's large-message path on NVLink; 0 at TP = 1),
og = L t_layer + the GEMMs' fixed costs, h0 = t_step,
s = t_seq (host cost per sequence; S sequences), a = the async overlap. The serving
loop evaluates it millions of times, so the coefficients are computed once here; a test
checks it equals ``Deployment.batch_forward_time`` exactly.
"""

from __future__ import annotations

import numpy as np

from simulator.catalog.allreduce import smallest_line
from simulator.cost.cost_model import Deployment
from simulator.cost.roofline import soft_roofline, step_time


_SCALAR = (float, int, np.float64)


class PassCost:
    def __init__(self, dep: Deployment):
        m, h, c = dep.model, dep.hardware, dep.cost
        # mixtures of experts, latent attention, sliding windows, expert parallelism, pipeline stages: not affine in
        # the aggregates (experts hit grow with the tokens; micro-batches with the sequences): the one formula itself
        self.dep = dep if (not m.is_plain or getattr(dep, "ep", 1) != 1 or getattr(dep, "pp", 1) != 1) else None
        bw = c.mem_efficiency * h.memory_bandwidth_bytes_per_s
        fl = c.compute_efficiency * h.dense_bf16_flops_per_s
        self.m0 = dep.streamed_weight_bytes_per_gpu / bw
        self.m1 = dep.kv_bytes_per_token_per_gpu / (c.kv_efficiency * h.memory_bandwidth_bytes_per_s)
        self.j = c.multi_token_penalty
        self.p = c.roofline_p
        self.hard = not np.isfinite(self.p)
        self.c_n = 2.0 * m.matmul_params_per_token / dep.tp / (c.compute_efficiency * dep.matmul_flops_per_s)
        self.c_l = 2.0 * m.embedding_params / dep.tp / fl
        self.c_a = 4.0 * m.layers * m.heads * m.head_dim / dep.tp / fl * dep.attention_ratio
        # the 2 L all-reduces' lines (Deployment.allreduce_lines: one per path vLLM can take; none at TP 1)
        self.ar = tuple((2.0 * m.layers * a, 2.0 * m.layers * b) for a, b in dep.allreduce_lines)
        self.og = dep.gpu_overhead_time  # the GPU side's fixed costs
        self.h0 = dep.host_step_time  # the host side's
        self.s = c.seq_overhead_s
        self.a = c.async_overlap
        # the memory roof is > 0 at any context (weights streamed every pass): the array path's division needs no guard
        self.positive = self.m0 > 0 and 1.0 + self.j > 0 and self.m1 >= 0
        self._fused: dict = {}  # spec_iteration_times' row coefficients, by (draft, γ, batch, verified tokens, width)

    def time(self, n: float, kv: float, attn: float, logits: float, seqs: float | None = None) -> float:
        """Scalar T_pass from aggregates: sum n_i, sum (c_i+n_i), sum n_i (c_i+(n_i+1)/2), sum l_i and the
        number of sequences (default: one per logit row, i.e. no verification in the pass)."""
        if self.dep is not None:
            return float(self.dep.pass_time(n, kv, attn, logits, logits if seqs is None else seqs))
        gpu = self._soft(self.m0 * (1.0 + self.j * (n >= 2)), self.c_n * n + self.c_l * logits) \
            + self._soft(self.m1 * kv, self.c_a * attn)
        return step_time(gpu + self.allreduce(n) + self.og, self.h0 + self.s * (logits if seqs is None else seqs), self.a)

    def allreduce(self, n):
        """The pass's all-reduces for ``n`` tokens (a scalar or an array): the smallest of :attr:`ar`'s lines."""
        return smallest_line(self.ar, n)

    def _soft(self, mem: float, comp: float) -> float:
        """Scalar soft roofline, as :func:`soft_roofline` computes it."""
        hi, lo = (mem, comp) if mem >= comp else (comp, mem)
        if self.hard:
            return hi
        return hi * (1.0 + (lo / hi) ** self.p) ** (1.0 / self.p) if hi > 0 else 0.0

    def times(self, n, kv, attn, logits, seqs=None) -> np.ndarray:
        """Vectorised :meth:`time` over arrays of aggregates."""
        if self.dep is not None:
            return np.asarray(self.dep.pass_time(n, kv, attn, logits, logits if seqs is None else seqs), dtype=float)
        if self.positive and type(kv) is np.ndarray and type(attn) is np.ndarray and type(n) in _SCALAR \
                and type(logits) in _SCALAR and (seqs is None or type(seqs) in _SCALAR):
            # the serving loop's case (scalar batch, arrays of contexts): the GEMMs' roofline once, as a scalar
            # (the fused speculative rows evaluate it the same way, so both give the same floats), the attention's
            # over the array
            n, logits = float(n), float(logits)
            return step_time(self.gemm_roofline(n, logits) + soft_roofline(self.m1 * kv, self.c_a * attn, self.p) + self.allreduce(n) + self.og,
                             self.h0 + self.s * (logits if seqs is None else float(seqs)), self.a)
        n = np.asarray(n, dtype=float)
        gemms = self.c_n * n + self.c_l * np.asarray(logits, dtype=float)
        gpu = soft_roofline(self.m0 * (1.0 + self.j * (n >= 2)), gemms, self.p) \
            + soft_roofline(self.m1 * np.asarray(kv, dtype=float), self.c_a * np.asarray(attn, dtype=float), self.p)
        return step_time(gpu + self.allreduce(n) + self.og,
                         self.h0 + self.s * (logits if seqs is None else np.asarray(seqs, dtype=float)), self.a)

    def gemm_roofline(self, n: float, logits: float) -> float:
        """The GEMMs' soft roofline of a pass of ``n`` tokens and ``logits`` logit rows (scalars): the one evaluation
        the array fast path of :meth:`times` and the fused speculative rows share, so both give the same floats."""
        return float(soft_roofline(self.m0 * (1.0 + self.j * (n >= 2)), self.c_n * n + self.c_l * logits, self.p))

    def batch(self, n: np.ndarray, c: np.ndarray, logits: np.ndarray | float | None = None) -> float:
        """= ``Deployment.batch_forward_time(n, c, logits)`` (one pass over explicit per-sequence arrays)."""
        L = float(np.sum(logits)) if logits is not None and np.ndim(logits) else (
            float(len(n)) * (1.0 if logits is None else float(logits)))
        return self.time(float(n.sum()), float((c + n).sum()), float((n * (c + (n + 1.0) / 2.0)).sum()), L, float(len(n)))


def spec_iteration_times(draft: PassCost, target: PassCost, g: int, B: float, vt: int, ctx: np.ndarray,
                         w: int = 1) -> np.ndarray | None:
    """The vectorised evaluation of the one speculative iteration
    (:func:`simulator.cost.spec_iteration.speculative_iteration`, no prefill) over k total contexts ``ctx``: the times
    ``draft + verify`` of k decode-only iterations of B sequences at γ = g, drafting w tokens per sequence per pass
    (a tree of width w; 1: a chain), verifying vt = w g + 1, i.e. ::

        sum_{i<g} draft.times(B w, ctx + B (i + w), w ctx + B w i + B w (w+1)/2, B w, B)
            + target.times(B vt, ctx + B vt, vt ctx + B vt (vt+1)/2, B vt, B)

    as one evaluation of g + 1 rows (per-row coefficients as columns): every element goes through the same operations
    as those calls (the aggregates are the same integers), and the rows are summed in the same order, so the floats are
    the same -- bit-identical to ``speculative_iteration(target.times, draft.times, ...)`` over the same array
    (tested in tests/simulator/test_iteration_agrees.py). None where the two passes do not share the array fast path
    (a formula that is not affine, another roofline exponent) or g = 0: evaluate the function itself."""
    if not (g > 0 and draft.dep is None and target.dep is None and draft.positive and target.positive
            and draft.hard == target.hard and (draft.hard or draft.p == target.p)):
        return None
    key = (id(draft), g, B, vt, w)
    cols = target._fused.get(key)
    if cols is None:
        n, nw = B * vt, B * w
        # (pass cost, tokens, KV offset, attention = aw ctx + attention offset) per row (a chain's draft rows: = KV)
        rows = [(draft, nw, B * (i + w), w, B * w * i + B * w * (w + 1) / 2.0) for i in range(g)] \
            + [(target, n, n, vt, B * vt * (vt + 1) / 2.0)]
        # GW (the GEMMs' roofline: constant per row, evaluated as PassCost.times evaluates it), M1, CA, R1, OG, host
        # H (B sequences in every pass), overlap A, KV offset, attention's context factor and offset
        cols = tuple(np.array(c, dtype=float)[:, None] for c in zip(*[
            (pc.gemm_roofline(float(nn), float(nn)), pc.m1, pc.c_a, pc.allreduce(float(nn)), pc.og, pc.h0 + pc.s * float(B), pc.a, off, aw, aoff)
            for pc, nn, off, aw, aoff in rows]))
        target._fused[key] = cols
    GW, M1, CA, R1, OG, H, A, OFF, AW, AOFF = cols
    kv = ctx + OFF
    if w == 1:
        attn = kv.copy()
        attn[g] = vt * ctx + B * vt * (vt + 1) / 2.0
    else:
        attn = AW * ctx + AOFF
    gpu = GW + soft_roofline(M1 * kv, CA * attn, target.p) + R1 + OG
    res = step_time(gpu, H, A)  # row by row: each pass's own overlap (a draft pass: 0)
    t = res[0].copy()
    for r in range(1, g):
        t += res[r]
    return t + res[g]
