"""Cost model: wall time of one forward pass of a deployment (model, hardware, TP degree).

For a batch of sequences i with n_i new tokens on c_i cached context tokens (l_i logit
rows: 1 for generation, gamma+1 for verification), per GPU:

    T_w    = W/TP / (eta_mem BW) (1 + j [N >= 2])                      (weights streamed)
    T_kv   = sum_i (c_i + n_i) * kv_bytes_per_token/TP / (eta_kv BW)    (KV reads)
    T_gemm = [2 P_layers sum_i n_i + 2 V H sum_i l_i] / TP / (eta_comp F)   (matmuls + LM head)
    T_attn = 4 L (heads*head_dim) sum_i n_i (c_i + (n_i + 1)/2) / TP / (eta_comp F)   (attention)
    T_gpu  = softmax_p(T_w, T_gemm) + softmax_p(T_kv, T_attn)          (each kernel kind on its own roofline)
    T_ar   = 2 L [t_ar + 2 (TP-1)/TP * (sum_i n_i) H b / B_link]          (Megatron: 2 all-reduces per layer)
    T_pass = T_gpu + T_ar + L t_layer + t_step + (TP-1) t_tp + t_seq S   (host: per step, per extra TP worker, per sequence)

and an engine call (one request to the engine: generate, score) adds t_call once. W: weight bytes streamed per pass
(layers + LM head), P_layers: per-token matmul weights, V: vocab, H: hidden, L: layers, b: activation bytes (2),
BW / F: datasheet bandwidth and peak dense BF16 FLOP/s, B_link / t_ar: link bandwidth and all-reduce latency.

softmax_p(a, b) = (a^p + b^p)^(1/p): p = inf is the hard roofline max(a, b) (profiles fitted without engine-level
data, e.g. the CPU ones); engine-level GPU fits give a finite p (docs/gpu-cost-model.md). GEMMs and attention are
separate kernels, each on its own roofline (``roofline.gpu_split``). j is the jump from a one-token GEMV to the
multi-token GEMM kernels (N = tokens in the pass); eta_kv the KV cache's (default eta_mem).

The calibrated parameters are few, physical and named (:class:`~simulator.cost.cost_profile.CostParams`, stored with
kinds and sources as a :class:`~simulator.cost.cost_profile.CostProfile`): eta_mem, eta_comp, t_step, t_layer, t_call,
t_seq, t_tp (and t_ar, a hardware prior), p, j, eta_kv. Every function here is pure and broadcasts over numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.catalog.models import skewed_experts_hit
from simulator.catalog.moe_kernels import moe_kind_ratios
from simulator.catalog.moe_layout import stored_expert_factor
from simulator.catalog.allreduce import allreduce_lines, smallest_line
from simulator.catalog.attention_kernels import prefill_attention_ratio
from simulator.catalog.quant_gemm import GemmKind, gemm_kind, peak_flops
from simulator.cost.cost_profile import CostParams
from simulator.cost.roofline import ACTIVATION_BYTES, gpu_split, moe_token_time, step_time

# GEMMs per decoder layer outside the routed experts as vLLM runs them (q/k/v fused, gate/up fused): qkv, o, gate_up,
# down; a MoE layer: qkv, o (+ gate_up, down of its shared experts)
GEMMS_PER_DENSE_LAYER = 4
GEMMS_PER_ATTENTION = 2


def _host_parts(gpu_side, step, sequences, overlap: float) -> tuple:
    """(total, exposed t_step, exposed S t_seq): :func:`step_time`, the exposed host time split pro rata."""
    host = step + sequences
    total = step_time(gpu_side, host, overlap)
    if overlap <= 0.0:
        return total, step, sequences
    exposed = total - gpu_side
    share = np.divide(step, host, out=np.zeros_like(np.asarray(host, dtype=float)), where=np.asarray(host) > 0)
    return total, exposed * share, exposed * (1.0 - share)


DRAFT_KINDS = ("model", "head", "eagle3", "mtp", "block", "ngram")


@dataclass(frozen=True)
class Drafting:
    """How a draft proposes tokens (a draft deployment's ``drafting``; docs/model.md, docs/drafters.md).

    ``kind``: ``model`` -- a separate small model with its own full KV cache (the default);
    ``head`` -- an EAGLE / MTP-style head (the deployment's model is ``ModelSpec.draft_head`` of the
    target: a few layers of the target's width + LM head, fed the target's hidden states);
    ``eagle3`` -- an EAGLE-3 head (``catalog.draft_heads.eagle3_head``: three target layers' features fused by a 3H x H
    projection, one decoder layer whose attention reads [embedding, feature] (2H), its own reduced-vocabulary LM
    head), one pass per drafted token;
    ``mtp`` -- the target's own multi-token-prediction module (``ModelSpec.mtp_head``: DeepSeek's MoE layer sharing
    the embedding and LM head), one pass per drafted token (vLLM runs module ``step mod n`` of n: one per pass);
    ``block`` -- a block drafter (DSpark): the gamma drafts of an iteration in ONE pass of gamma tokens;
    ``ngram`` -- prompt lookup: no model, no GPU cost.
    ``tree_width``: w candidates per drafted position (1: a chain). A tree of width w drafts w tokens per
    level (one draft pass of w tokens) and the target verifies w*gamma + 1 tokens in one pass.
    """

    kind: str = "model"
    tree_width: int = 1

    def __post_init__(self):
        if self.kind not in DRAFT_KINDS:
            raise ValueError(f"unknown draft kind {self.kind!r}; known: {', '.join(DRAFT_KINDS)}")
        if self.tree_width < 1:
            raise ValueError("tree_width must be >= 1")
        if self.kind == "block" and self.tree_width != 1:
            raise ValueError("a block drafter drafts a chain (tree_width 1)")

    @property
    def free(self) -> bool:
        """No model runs (prompt lookup): drafting costs no GPU time."""
        return self.kind == "ngram"

    def verify_tokens(self, gamma: int) -> int:
        """Tokens the target verifies per iteration: the tree's w*gamma drafts + the last accepted one."""
        return self.tree_width * gamma + 1


CHAIN = Drafting()


def data_parallel_error(model: ModelSpec, dp: int) -> str | None:
    """Why data-parallel attention over ``dp`` ranks cannot serve ``model`` (None: it can): it needs experts to
    spread over every rank's GPUs."""
    if dp > 1 and not model.is_moe:
        return f"dp={dp} (data-parallel attention) needs a mixture-of-experts model ({model.name} is dense)"
    return None


def expert_parallel_error(model: ModelSpec, tp: int, ep: int, dp: int = 1) -> str | None:
    """Why ``ep`` cannot serve ``model`` at ``tp`` (None: it can). ep = 1: every expert sharded over the TP GPUs along
    its FFN dimension (the usual all-reduce); ep = tp: whole experts, experts / ep of them per GPU, attention still
    tensor-parallel (vLLM's ``--enable-expert-parallel`` without data-parallel attention); dp > 1: attention
    replicated over dp ranks of tp GPUs (data-parallel attention), the experts over all of them: ep = tp * dp."""
    if dp > 1:
        err = data_parallel_error(model, dp)
        if err:
            return err
        if ep != tp * dp:
            return f"ep={ep} must be tp x dp = {tp * dp} with dp={dp} (experts sharded over every GPU of the replica)"
    if ep == 1:
        return None
    if ep < 1:
        return f"must be >= 1 (got {ep})"
    if not model.is_moe:
        return f"ep={ep} needs a mixture-of-experts model ({model.name} is dense)"
    if ep != tp * dp:
        return f"ep={ep} must be 1 (experts sharded by TP) or equal to tp={tp} (whole experts per GPU)"
    if model.experts % ep:
        return f"{model.name}'s {model.experts} routed experts are not divisible by ep={ep}"
    return None


@dataclass(frozen=True)
class Deployment:
    """A model served on ``tp`` devices of one hardware kind with a set of cost parameters.

    A draft deployment carries its ``drafting`` (kind, tree width); every other deployment keeps the default.
    ``ep``: expert parallelism of a mixture of experts (1: experts sharded by TP; tp: whole experts per GPU,
    all-to-all dispatch and combine per MoE layer; :func:`expert_parallel_error`).
    ``pp``: pipeline parallelism, the layers split over pp stages of tp GPUs each (:meth:`pass_breakdown`); the
    per-GPU memory (weights, KV) is the model's over tp * pp GPUs. ``dp``: data-parallel attention of a mixture of
    experts (DeepSeek's deployment): dp ranks of tp GPUs, each with the attention and dense weights and its own
    sequences' KV, the routed experts sharded over all tp * dp GPUs (ep = tp * dp; :meth:`_moe_breakdown`).
    ``gemm_params``: parameters of the layer weights' GEMM kind in place of the catalog's (a fit's candidate)."""

    model: ModelSpec
    hardware: HardwareSpec
    tp: int
    cost: CostParams
    drafting: Drafting = CHAIN
    ep: int = 1
    pp: int = 1
    dp: int = 1
    gemm_params: GemmKind | None = None

    def __post_init__(self):
        if not 1 <= self.pp <= self.model.layers:
            raise ValueError(f"pp={self.pp} must lie in 1..{self.model.layers} (the layers of {self.model.name})")
        if self.dp < 1 or (self.dp > 1 and self.pp > 1):
            raise ValueError(f"dp={self.dp} must be >= 1, and data-parallel attention runs without pipeline stages")
        if self.ep != 1 or self.dp != 1:
            err = expert_parallel_error(self.model, self.tp, self.ep, self.dp)
            if err:
                raise ValueError(err)

    # ---- static quantities --------------------------------------------------------------
    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp per pipeline stage, pp stages (or dp data-parallel attention ranks)."""
        return self.tp * self.pp * self.dp

    @property
    def expert_shards(self) -> int:
        """GPUs the routed experts are spread over: ep (whole experts per GPU), else tp (each expert sharded)."""
        return self.ep if self.ep > 1 else self.tp

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes_read / self.gpus

    @property
    def resident_bytes_per_gpu(self) -> float:
        """Stored weights per GPU: the model over tp * pp GPUs; with data-parallel attention the non-expert weights
        over tp (every rank holds them), the routed experts over ep = tp * dp, as the engine allocates them (MXFP4
        padded: :func:`simulator.catalog.moe_layout.stored_expert_factor`; the pass reads the checkpoint's bytes)."""
        if self.drafting.free:
            return 0.0
        m = self.model
        experts = m.routed_expert_bytes
        padding = (stored_expert_factor(m, self.hardware, self.tp if self.ep == 1 else 1) - 1.0) * experts
        if self.dp == 1:
            return (m.weight_bytes_resident + padding) / self.gpus
        return (m.weight_bytes_resident - experts) / self.tp + (experts + padding) / self.ep

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes of one token on one GPU: its stage's layers (1/pp of them) over tp GPUs."""
        return 0.0 if self.drafting.free else self.model.kv_bytes_per_token(self.tp) / self.pp

    @cached_property
    def attention_ratio(self) -> float:
        """The attention FLOPs' time against the FlashAttention kernels eta_comp was fitted on: the Triton kernel's
        prefill ratio where the engine runs it (a model with attention sinks before Hopper), else 1
        (:func:`simulator.catalog.attention_kernels.prefill_attention_ratio`)."""
        return prefill_attention_ratio(self.model, self.hardware).value

    # ---- the linear layers' GEMMs by kernel kind (simulator/catalog/quant_gemm.py): the one place the rule lives ----
    @cached_property
    def gemm(self) -> tuple[str, GemmKind]:
        """(name, parameters) of the kernel kind the layer weights run as on this GPU: bf16, W8A8 FP8 (per-tensor or
        block scales), W4A4 FP4, or weight-only (FP8-Marlin, W4A16) where the GPU lacks the tensor cores."""
        name, kind = gemm_kind(self.model.weight_dtype, self.hardware)
        return name, self.gemm_params or kind

    @property
    def matmul_flops_per_s(self) -> float:
        """Rate of the layer weights' matmuls at eta_comp = 1: the kind's tensor-core peak (FP8 / FP4 where the GPU has
        them, else bf16) times its compute ratio rc (dequantisation or scale handling inside the main loop; bf16: 1).
        A quantised GEMM above the ridge:  T_comp = 2 P N / (TP eta_comp rc F_kind)."""
        name, k = self.gemm
        return peak_flops(k, self.hardware) * k.compute_ratio.value

    @property
    def streamed_weight_bytes_per_gpu(self) -> float:
        """The weight bytes a pass streams at eta_mem, with the quantised layer weights W_q counted at their kind's
        streaming efficiency:  (W - W_q + W_q / rm) / TP  (rm = 1 for bf16: the bytes as stored). A MoE model: its
        non-expert weights (the experts stream at the MoE fit's own eta_moe). Pipeline stages: summed over them (the
        time of a pass is the sum of its stages'; the memory per GPU is :attr:`weight_bytes_per_gpu`)."""
        m = self.model
        rm = self.gemm[1].mem_ratio.value
        routed = m.moe_layers * m.experts_per_token * m.expert_params
        w_q = (m.matmul_params_per_token - routed) * m.bytes_per_param
        total = m.nonexpert_bytes_read if m.is_moe else m.weight_bytes_read
        return (total - w_q + w_q / rm) / self.tp

    @property
    def gemm_overhead_time(self) -> float:
        """Extra fixed time per pass of the quantised GEMMs: t_q per GEMM (activation quantisation, scales) times the
        GEMMs outside the routed experts (GEMMS_PER_DENSE_LAYER per dense layer, GEMMS_PER_ATTENTION + 2 per shared-
        expert MoE layer); 0 for bf16."""
        t_q = self.gemm[1].gemm_overhead_s.value
        if not t_q:
            return 0.0
        m = self.model
        moe = m.moe_layers
        per_moe = GEMMS_PER_ATTENTION + (GEMMS_PER_DENSE_LAYER - GEMMS_PER_ATTENTION) * (m.shared_experts > 0)
        return t_q * ((m.layers - moe) * GEMMS_PER_DENSE_LAYER + moe * per_moe)

    # ---- one forward pass over aggregates -----------------------------------------------
    def pass_time(self, new_tokens, kv_tokens, attn_pairs, logit_rows, seqs=1.0):
        """T_pass from batch aggregates: sum n_i, sum (c_i + n_i), sum n_i (c_i + (n_i+1)/2), sum l_i,
        and the number of sequences in the pass."""
        return self.pass_breakdown(new_tokens, kv_tokens, attn_pairs, logit_rows, seqs)["total"]

    def pass_breakdown(self, new_tokens, kv_tokens, attn_pairs, logit_rows, seqs=1.0) -> dict:
        """The terms of T_pass (seconds, broadcast over the aggregates); ``total`` is their sum.

        ``weights`` + ``kv`` + ``compute`` split the GPU time softmax_p(T_w, T_gemm) + softmax_p(T_kv, T_attn) in
        proportion to each roof's p-th power (``roofline.gpu_split``); ``allreduce``,
        ``step`` (t_step), ``layers`` (L t_layer), ``sequences`` (S t_seq) and ``sendrecv`` (pipeline stages, 0 at
        pp = 1) are added as they are.
        A mixture of experts, latent attention, sliding windows or expert parallelism: :meth:`_moe_breakdown`;
        pipeline parallelism: :meth:`_pipeline_breakdown`."""
        if self.pp > 1:
            return self._pipeline_breakdown(new_tokens, kv_tokens, attn_pairs, logit_rows, seqs)
        if not self.model.is_plain or self.ep != 1 or self.dp != 1:
            return self._moe_breakdown(new_tokens, kv_tokens, attn_pairs, logit_rows, seqs)
        m, h, c = self.model, self.hardware, self.cost
        n = np.asarray(new_tokens, dtype=float)
        t_w = self.streamed_weight_bytes_per_gpu / (c.mem_efficiency * h.memory_bandwidth_bytes_per_s)
        t_w = t_w * (1.0 + c.multi_token_penalty * (n >= 2))
        t_kv = np.asarray(kv_tokens, dtype=float) * self.kv_bytes_per_token_per_gpu / (c.kv_efficiency * h.memory_bandwidth_bytes_per_s)
        lin = 2.0 * m.matmul_params_per_token * n / self.tp
        other = 2.0 * m.embedding_params * np.asarray(logit_rows, dtype=float) / self.tp
        attn = 4.0 * m.layers * m.heads * m.head_dim * np.asarray(attn_pairs, dtype=float) / self.tp
        # the weight matmuls at their own (FP8) rate where the GPU has one, the rest at bf16
        t_comp = (lin / self.matmul_flops_per_s + other / h.dense_bf16_flops_per_s) / c.compute_efficiency
        t_attn = attn / h.dense_bf16_flops_per_s / c.compute_efficiency * self.attention_ratio
        gpu, mem, kv_share = gpu_split(t_w, t_kv, t_comp, t_attn, c.roofline_p)
        out = {
            "weights": mem * (1.0 - kv_share),
            "kv": mem * kv_share,
            "compute": gpu - mem,
            "allreduce": self.allreduce_time(n),
            "layers": np.full_like(n, self.gpu_overhead_time),
            "sendrecv": np.zeros_like(n),  # pipeline stages' activations: _pipeline_breakdown
        }
        out["total"], out["step"], out["sequences"] = _host_parts(
            gpu + out["allreduce"] + out["layers"], np.full_like(n, self.host_step_time),
            np.asarray(seqs, dtype=float) * c.seq_overhead_s, c.async_overlap)
        return out

    def _moe_breakdown(self, new_tokens, kv_tokens, attn_pairs, logit_rows, seqs=1.0) -> dict:
        """:meth:`pass_breakdown` of a model that is not plain dense GQA (docs/moe.md), per GPU:

            W(N)   = W_other/TP + L_moe E_hit(N) W_expert/TP,   E_hit(N) = E [1 - (1 - k/E)^N]   (uniform routing;
                     routing_skew s > 0: skewed_experts_hit)
            T_w    = [W_other/TP / (eta_mem BW) + L_moe E_hit W_expert/TP / (r_m eta_moe BW)] (1 + j [N >= 2])
            T_kv   = KV(kv_tokens, S) / (eta_kv BW)                           (MLA latent; sliding layers <= window)
            T_comp = (2 P_other N / F_w + 2 V H L_log / F) / (TP eta_comp)
                     + 2 L_moe k P_expert N / (TP F_e r_c eta_moe_comp)     (r_m, r_c: the experts' kernel
                     kind's ratios to bf16 in the engine's kernel table, CostParams.moe_kind_ratios)
            T_attn = attention FLOPs / (TP F eta_comp)
            layers = L (t_layer + [MLA] t_mla) + L_moe (t_moe + [ep > 1] t_ep + E_hit / ep t_expert + N k pi H b / BW)
                     (MLA module's and MoE kernels' fixed costs; pi: passes of the routed pairs' alignment and
                     permutation over a token's hidden state, b = 2 bytes each)
            allreduce: ep = 1 the Megatron all-reduces; ep = TP one all-reduce per layer (attention) + per dense layer,
                       and per MoE layer an all-to-all dispatch + combine of the tokens: 2 [t_ar + (ep-1)/ep N H b / B]

        Data-parallel attention (dp > 1, ep = TP dp): the ranks step together (a MoE layer waits for every rank's
        tokens), each with the busiest rank's share of the batch, r = min(dp, S) ranks busy: N, KV, attention, logit
        rows and S above are the batch's / r (a rank's), except in the routed experts, which every GPU runs for the
        tokens of all ranks: E_hit(N_all) experts of its E/ep, 2 L_moe k P_expert N_all / (ep F_e eta_moe_comp); the
        all-to-all moves a rank's tokens, the attention all-reduce is within its tp GPUs (none at tp = 1).

        The soft rooflines (T_w against T_comp, T_kv against T_attn) and their split are the dense path's. A dense
        model with latent attention or sliding windows goes through the same lines with no MoE terms."""
        m, c = self.model, self.cost
        n_all = np.asarray(new_tokens, dtype=float)
        S = np.asarray(seqs, dtype=float)
        n = n_all
        if self.dp > 1:  # one rank's share of the batch (the busiest of min(dp, S) busy ranks)
            r = np.clip(S, 1.0, float(self.dp))
            n, S = n_all / r, S / r
            kv_tokens, attn_pairs = np.asarray(kv_tokens, dtype=float) / r, np.asarray(attn_pairs, dtype=float) / r
            logit_rows = np.asarray(logit_rows, dtype=float) / r
        hit = m.experts_hit(n_all) if not c.routing_skew else skewed_experts_hit(m.experts, m.experts_per_token, n_all,
                                                                                 c.routing_skew)
        gpu, mem, kv_share = gpu_split(*self._moe_roofline_terms(n_all, n, S, hit, kv_tokens, attn_pairs, logit_rows),
                                        c.roofline_p)
        moe_fixed = (c.moe_layer_overhead_s + (self.ep > 1) * c.moe_ep_overhead_s + hit / self.ep * c.expert_overhead_s
                     + n * m.experts_per_token
                     * moe_token_time(c.moe_token_passes, m.hidden, self.hardware.memory_bandwidth_bytes_per_s))
        layers = (m.layers * (c.layer_overhead_s + m.is_mla * c.mla_layer_overhead_s) + self.gemm_overhead_time
                  + m.moe_layers * moe_fixed)
        out = {
            "weights": mem * (1.0 - kv_share),
            "kv": mem * kv_share,
            "compute": gpu - mem,
            "allreduce": self.comm_time(n),
            "layers": np.broadcast_to(layers, n.shape).astype(float),
            "sendrecv": np.zeros_like(n),
        }
        out["total"], out["step"], out["sequences"] = _host_parts(
            gpu + out["allreduce"] + out["layers"], np.full_like(n, self.host_step_time), S * c.seq_overhead_s,
            c.async_overlap)
        return out

    def _moe_roofline_terms(self, n_all, n, S, hit, kv_tokens, attn_pairs, logit_rows) -> tuple:
        """(T_w, T_kv, T_comp of the GEMMs, T_attn) of :meth:`_moe_breakdown`: ``n`` / ``S`` a rank's
        tokens and sequences, ``n_all`` the batch's (the routed experts'), ``hit`` the experts hit."""
        m, h, c = self.model, self.hardware, self.cost
        bw = h.memory_bandwidth_bytes_per_s
        t_w = self.streamed_weight_bytes_per_gpu / (c.mem_efficiency * bw)
        if m.is_moe:
            t_w = t_w + m.moe_layers * hit * m.expert_bytes / self.expert_shards / (
                c.expert_mem_efficiency * self.expert_kind_ratios[0] * bw)
        t_w = t_w * (1.0 + c.multi_token_penalty * (n >= 2))
        t_kv = m.kv_bytes(kv_tokens, self.tp, S, rows=logit_rows) / (c.kv_efficiency * bw)
        routed = m.moe_layers * m.experts_per_token * m.expert_params
        lin = 2.0 * (m.matmul_params_per_token - routed) * n / self.tp
        other = 2.0 * m.embedding_params * np.asarray(logit_rows, dtype=float) / self.tp
        t_attn = m.attention_flops(attn_pairs, n, S, self.tp) / self.tp / h.dense_bf16_flops_per_s \
            / c.compute_efficiency * self.attention_ratio
        t_comp = (lin / self.matmul_flops_per_s + other / h.dense_bf16_flops_per_s) / c.compute_efficiency
        if m.is_moe:
            t_comp = t_comp + 2.0 * routed * n_all / self.expert_shards / (
                self.expert_flops_per_s * c.expert_compute_efficiency * self.expert_kind_ratios[1])
        return t_w, t_kv, t_comp, t_attn

    def _pipeline_breakdown(self, new_tokens, kv_tokens, attn_pairs, logit_rows, seqs=1.0) -> dict:
        """:meth:`pass_breakdown` with the layers split over pp stages (vLLM's pipeline parallelism: pp virtual
        engines, one micro-batch in flight per stage). The pass is one pipeline cycle, in which every sequence of the
        batch advances once:

            m      = min(pp, S)                                    micro-batches (a sequence is in one of them)
            T_pass = sum_stages T_stage(batch / m) + (pp - 1) (t_ar + (N / m) H b / B_link)

        Each stage runs L/pp layers of every term (weights, KV, FLOPs, all-reduces, t_layer) of the same tp, so the
        sum of the stage times of a micro-batch is the pp = 1 pass of that micro-batch at tp (the soft roofline is
        homogeneous: pp stages of 1/pp each sum to the whole); the send/recv of its activations between consecutive
        stages adds (pp - 1) hops of a link latency plus the hidden states of its tokens over the link. While that
        micro-batch travels, the other m - 1 fill the other stages, so the cycle is one micro-batch's round trip:
        at batch 1 the latency of pp = 1 plus the hops; at S >= pp the batch's cost is that of S/pp sequences.
        Not modelled: uneven stages (embedding and LM head on the end stages), per-micro-batch host work serialised
        on the scheduler (t_step, t_seq taken per micro-batch, overlapped), a token budget per micro-batch."""
        from dataclasses import replace

        n = np.asarray(new_tokens, dtype=float)
        S = np.asarray(seqs, dtype=float)
        m = np.clip(S, 1.0, float(self.pp))
        whole = replace(self, pp=1).pass_breakdown(n / m, np.asarray(kv_tokens, dtype=float) / m,
                                                   np.asarray(attn_pairs, dtype=float) / m,
                                                   np.asarray(logit_rows, dtype=float) / m, S / m)
        hop = self.cost.allreduce_latency_s + (n / m) * self.model.hidden * ACTIVATION_BYTES / self.hardware.link_bandwidth_bytes_per_s
        out = dict(whole)
        out["sendrecv"] = (self.pp - 1) * hop
        out["total"] = whole["total"] + out["sendrecv"]
        return out

    @cached_property
    def expert_kind_ratios(self) -> tuple[float, float]:  # (streaming, compute): moe_kernels.moe_kind_ratios
        return moe_kind_ratios(self.model.expert_weight_dtype or self.model.weight_dtype, self.hardware,
                               dict(self.cost.moe_kind_ratios))

    @property
    def expert_flops_per_s(self) -> float:
        """Peak rate of the routed experts' matmuls: FP8 tensor cores for FP8 experts where the GPU has them; 4-bit
        (MXFP4 / INT4) and bf16 experts at the bf16 rate (weight-only dequantization)."""
        m, h = self.model, self.hardware
        if (m.expert_weight_dtype or m.weight_dtype) == "fp8" and h.dense_fp8_flops_per_s:
            return h.dense_fp8_flops_per_s
        return h.dense_bf16_flops_per_s

    def comm_time(self, new_tokens):
        """Communication per pass: the Megatron all-reduces at ep = 1 (:meth:`allreduce_time`); with expert
        parallelism one all-reduce per layer (attention) and per dense layer (its MLP), and per MoE layer an
        all-to-all dispatch and combine of the pass's tokens (each t_ar + (ep-1)/ep of N H b bytes over the link)."""
        if self.ep == 1:
            return self.allreduce_time(new_tokens)
        m, h, c = self.model, self.hardware, self.cost
        size = np.asarray(new_tokens, dtype=float) * m.hidden * ACTIVATION_BYTES
        ar = self.one_allreduce(new_tokens)
        a2a = 2.0 * (c.allreduce_latency_s + (self.ep - 1) / self.ep * size / h.link_bandwidth_bytes_per_s)
        return (2 * m.layers - m.moe_layers) * ar + m.moe_layers * a2a

    @cached_property
    def allreduce_lines(self) -> tuple[tuple[float, float], ...]:
        """Each all-reduce path's (s, s per token) (:func:`simulator.catalog.allreduce.allreduce_lines`)."""
        return allreduce_lines(self.hardware, self.tp, self.model.hidden * ACTIVATION_BYTES, self.cost.allreduce_latency_s)

    def one_allreduce(self, new_tokens):
        """Time of one all-reduce of ``new_tokens`` tokens' hidden states: the smallest of :attr:`allreduce_lines`."""
        return smallest_line(self.allreduce_lines, np.asarray(new_tokens, dtype=float))

    def allreduce_time(self, new_tokens):
        """Two all-reduces per layer of (tokens x hidden) activations (:meth:`one_allreduce`); zero at TP=1."""
        return 2.0 * self.model.layers * self.one_allreduce(new_tokens)

    @property
    def host_step_time(self) -> float:
        """The host side's fixed cost of a step, t_step + (TP - 1) t_tp (the one place this rule lives)."""
        return self.cost.step_overhead_s + (self.tp - 1) * self.cost.tp_step_overhead_s

    @property
    def gpu_overhead_time(self) -> float:
        """The GPU side's fixed costs of a dense pass: L t_layer + the GEMMs' fixed costs."""
        return self.model.layers * self.cost.layer_overhead_s + self.gemm_overhead_time

    def forward_time(self, new_tokens, cached_tokens, logit_rows=1):
        n = np.asarray(new_tokens, dtype=float)
        c = np.asarray(cached_tokens, dtype=float)
        return self.pass_time(n, c + n, n * (c + (n + 1.0) / 2.0), logit_rows)

    def batch_forward_time(self, new_tokens, cached_tokens, logit_rows=None) -> float:
        """One pass over a batch (arrays with one entry per sequence)."""
        n = np.asarray(new_tokens, dtype=float)
        c = np.asarray(cached_tokens, dtype=float)
        l = np.ones_like(n) if logit_rows is None else np.asarray(logit_rows, dtype=float)
        return float(self.pass_time(n.sum(), (c + n).sum(), (n * (c + (n + 1.0) / 2.0)).sum(), l.sum(), len(n)))

    def decode_time(self, context_tokens):
        """One generated token with ``context_tokens`` already in the KV cache."""
        return self.forward_time(1, context_tokens)

    def prefill_time(self, new_tokens, cached_tokens=0):
        """Prefill ``new_tokens`` on top of a cached prefix (produces the first output token)."""
        return self.forward_time(new_tokens, cached_tokens)

    def verify_time(self, gamma, context_tokens, drafting: Drafting = CHAIN):
        """Target pass over the drafted tokens + the last accepted one, one logit row each: gamma + 1 for a
        chain, w*gamma + 1 for a tree of width w (``drafting`` is the draft's)."""
        if drafting.tree_width == 1:
            return self.forward_time(gamma + 1, context_tokens, logit_rows=gamma + 1)
        n = drafting.verify_tokens(gamma)
        return self.forward_time(n, context_tokens, logit_rows=n)

    def draft_level_time(self, context_tokens):
        """One drafted position at ``context_tokens``: a pass of w tokens (w logit rows) for a tree of width
        w, one decode for a chain; zero for prompt lookup."""
        d = self.drafting
        if d.free:
            return np.zeros_like(np.asarray(context_tokens, dtype=float))
        if d.tree_width == 1:
            return self.decode_time(context_tokens)
        return self.forward_time(d.tree_width, context_tokens, logit_rows=d.tree_width)

    def draft_prefill_time(self, new_tokens, cached_tokens=0):
        """The draft's prefill of a call's prompt (a head runs its layers over the target's hidden states of
        the new tokens); zero for prompt lookup."""
        if self.drafting.free:
            return np.zeros(np.broadcast(np.asarray(new_tokens), np.asarray(cached_tokens)).shape)
        return self.prefill_time(new_tokens, cached_tokens)

