"""How much KV cache an engine gets, computed the way vLLM's V1 engine sizes it at start-up.

vLLM (``gpu_worker.determine_available_memory`` and ``kv_cache_utils``) measures, per GPU:

    requested   = gpu_memory_utilization x total            (total: cudaMemGetInfo's, e.g. 79.22 GiB on an H100)
    non_kv      = weights + activation peak of the profile pass + non-torch memory [+ CUDA graphs, since 0.21]
    kv_bytes    = requested - non_kv
    num_blocks  = floor(kv_bytes / (block_size x KV bytes per token of every layer))
    kv_tokens   = num_blocks x block_size                    ("GPU KV cache size: N tokens")

and refuses to start when ``kv_bytes <= 0`` ("No available memory for the cache blocks") or when one request of
``max_model_len`` tokens needs more blocks than that ("To serve at least one request with the model's max seq
len ..."). :func:`memory_plan` reproduces the sum from the model's shape; :class:`MemoryPlan` keeps every term so a
report can show it; the serving simulator's KV capacity (``serving/kv_cache.py``) and the scenario's memory check
(``scenario.check_placement``) both read it.

The terms vLLM measures on the device are estimated here:

- **activation peak** (``torch peak memory increase``): one forward pass of ``T = max_num_batched_tokens`` tokens
  then the sampler warm-up on ``R = min(max_num_seqs, T)`` rows, bf16 activations (2 bytes), per GPU at TP t::

      forward = T·H·2·2                                               residual stream + hidden state
              + max(T·(q + 2·kv)·d·2/t + T·q·d·2/t,                   attention: QKV output + attention output
                    T·3·I·2/t,                                        dense MLP: gate_up (2I) and its activation (I)
                    T·k·(3·I_e + H)·2/t_e)                            MoE: per routed token gate_up, act, down out
      sampler = R·V·(2 + 4 + 4 + 4 + 8)                               logits bf16, fp32 copy, probs, sort values + int64 idx
      peak    = max(forward, sampler)

  (H hidden, I intermediate, d head_dim, q/kv heads, V vocab, k experts per token, I_e expert intermediate, t_e the
  expert split). vLLM measures the allocator's high-water mark; the formula counts the largest live tensors of the
  two phases, so it is a lower bound of the measured peak (allocator rounding, RoPE and norm temporaries);
  ``ACTIVATION_OVERHEAD`` (1: not fitted) would scale it to measured peaks (docs/serving-model.md "KV capacity").
- **non-torch memory** (``non-torch forward increase memory``): cuBLAS workspaces at TP 1, plus NCCL and custom
  all-reduce buffers at TP > 1 (priors, ``NON_TORCH_BYTES``).
- **CUDA graphs**: captured after the KV cache is allocated; vLLM before 0.21 left them to the 1 - utilization
  headroom, from 0.21 on it estimates them during profiling and subtracts them (``VLLM_MEMORY_PROFILER_ESTIMATE_
  CUDAGRAPHS``, on by default since 0.21). Prior: ``CUDAGRAPH_BYTES`` per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cost.cost_model import Deployment
from simulator.catalog.versions import version_key
from simulator.cost.roofline import ACTIVATION_BYTES

GIB = float(2**30)
DEFAULT_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default
DEFAULT_BLOCK_SIZE = 16  # vLLM's CacheConfig.block_size default on CUDA
# sampler warm-up bytes per logit: bf16 logits, fp32 logits, fp32 probabilities, fp32 sorted values, int64 indices
SAMPLER_BYTES_PER_LOGIT = 2.0 + 4.0 + 4.0 + 4.0 + 8.0
ACTIVATION_OVERHEAD = 1.0  # measured peak / formula: not fitted (one logged dense point: 1.26 / 0.78 GiB)
# Priors (vLLM V1 start-up logs, "non-torch forward increase memory"): 0.02-0.3 GiB on one GPU, 0.6 GiB with NCCL.
NON_TORCH_BYTES = {1: 0.2 * GIB, "multi": 0.6 * GIB}
# Prior: "Estimated CUDA graph memory" / "Graph capturing ... took" logs, 0.36-0.65 GiB per GPU for 4-30B models.
CUDAGRAPH_BYTES = 0.5 * GIB
CUDAGRAPH_PROFILED_SINCE = (0, 21)  # vLLM version from which CUDA-graph memory is subtracted before the KV cache


def cudagraphs_counted(version: str | None) -> bool:
    """Whether vLLM ``version`` subtracts CUDA-graph memory before sizing the KV cache (None: the newest, yes)."""
    return version is None or version_key(version) >= CUDAGRAPH_PROFILED_SINCE


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of one engine, term by term (bytes), and the KV cache it leaves."""

    hardware: str
    total_bytes: float  # what the driver reports (cudaMemGetInfo total)
    utilization: float  # this engine's gpu_memory_utilization
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cudagraph_bytes: float
    cudagraph_counted: bool  # subtracted before sizing the KV cache (vLLM >= 0.21)
    block_size: int
    full_bytes_per_token: float  # KV bytes per token of the full-attention layers of every model in the engine
    sliding_bytes_per_seq: float  # bytes one sequence's sliding-window layers (windows) and linear-attention states hold
    all_bytes_per_token: float  # KV bytes per token of every layer (sliding ones counting every token)
    profile_tokens: int
    sampler_rows: int
    blocks_override: int | None = None  # vLLM's num_gpu_blocks_override (None: sized from memory)
    sampler_bound: bool = False  # the sampler warm-up on sampler_rows rows, not the forward pass, sets the peak
    # the sliding-window layers apart: (KV bytes per token of the model's sliding layers, its window), per model;
    # ``sliding_bytes_per_seq`` holds each whole window plus the linear-attention states
    windows: tuple[tuple[float, int], ...] = ()

    @property
    def requested_bytes(self) -> float:
        return self.utilization * self.total_bytes

    @property
    def non_kv_bytes(self) -> float:
        return (self.weights_bytes + self.activation_bytes + self.non_torch_bytes
                + (self.cudagraph_bytes if self.cudagraph_counted else 0.0))

    @property
    def kv_bytes(self) -> float:
        """Available KV cache memory (may be <= 0: vLLM then refuses to start)."""
        return self.requested_bytes - self.non_kv_bytes

    @property
    def token_bytes(self) -> float:
        """Bytes per cached token that the token capacity counts (full-attention layers; every layer if all slide)."""
        return self.full_bytes_per_token if self.full_bytes_per_token > 0 else self.all_bytes_per_token

    @property
    def num_blocks(self) -> int:
        if self.blocks_override is not None:  # vLLM's --num-gpu-blocks-override: the cache has that many blocks
            return self.blocks_override
        per_block = self.block_size * self.token_bytes
        return max(int(self.kv_bytes // per_block), 0) if per_block > 0 else 0

    @property
    def kv_tokens(self) -> int:
        """GPU KV cache size in tokens (whole blocks)."""
        return self.num_blocks * self.block_size

    @property
    def seq_reserve_tokens(self) -> int:
        """Full-attention token equivalents each running sequence's sliding windows hold (0 without windows)."""
        if self.full_bytes_per_token <= 0 or self.sliding_bytes_per_seq <= 0:
            return 0
        return int(math.ceil(self.sliding_bytes_per_seq / self.full_bytes_per_token))

    @property
    def usable_tokens(self) -> int:
        """Tokens the running sequences can hold: every block but vLLM's null block (``BlockPool`` takes block 0 out
        of the free list as the placeholder of skipped positions)."""
        return max(self.num_blocks - 1, 0) * self.block_size

    @property
    def partial_block_tokens(self) -> int:
        """Tokens of a running sequence's last block it has not filled yet, in expectation: vLLM allocates whole
        blocks, so a sequence of L tokens holds ceil(L / block) blocks, (block - 1) / 2 tokens more than L on
        average over L mod block (its admission and its growth meet a full cache that much sooner)."""
        return (self.block_size - 1) // 2

    @property
    def running_seq_reserve_tokens(self) -> int:
        """KV (tokens) each running sequence holds besides its own tokens: its sliding windows or linear-attention
        state (:attr:`seq_reserve_tokens`) and the unfilled part of its last block (:attr:`partial_block_tokens`)."""
        return self.seq_reserve_tokens + self.partial_block_tokens

    def request_bytes(self, length: int) -> float:
        """KV bytes one sequence of ``length`` tokens needs, in whole blocks (windows capped)."""
        blocks = -(-int(length) // self.block_size)
        if self.full_bytes_per_token <= 0:
            return blocks * self.block_size * self.all_bytes_per_token
        return blocks * self.block_size * self.full_bytes_per_token + self.sliding_bytes_per_seq

    def held_bytes(self, length: int) -> float:
        """KV bytes a running sequence of ``length`` tokens holds, in whole blocks: its sliding layers hold
        min(length, window) tokens (vLLM's hybrid allocator frees what slides out), where :meth:`request_bytes`
        counts the whole window as vLLM's start-up accounting does."""
        if self.full_bytes_per_token <= 0:
            return self.request_bytes(length)
        tokens = -(-int(length) // self.block_size) * self.block_size
        whole = sum(b * w for b, w in self.windows)
        held = sum(b * min(tokens, w) for b, w in self.windows)
        return tokens * self.full_bytes_per_token + self.sliding_bytes_per_seq - whole + held

    def max_model_len(self) -> int:
        """Longest sequence the KV cache can hold (vLLM's "estimated maximum model length")."""
        if self.kv_bytes <= 0 or self.token_bytes <= 0:
            return 0
        if self.full_bytes_per_token <= 0:
            return self.kv_tokens
        return max(int((self.kv_bytes - self.sliding_bytes_per_seq) // (self.block_size * self.full_bytes_per_token))
                   * self.block_size, 0)

    def max_concurrency(self, length: int) -> float:
        """Sequences of ``length`` tokens the cache holds at once (vLLM's "Maximum concurrency for N tokens")."""
        need = self.request_bytes(length)
        return max(self.kv_bytes, 0.0) / need if need > 0 else math.inf

    def rows(self, length: int | None = None) -> list[tuple[str, str]]:
        """(term, value) rows for a report."""
        g = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
        out = [("total memory (driver)", g(self.total_bytes)),
               ("gpu_memory_utilization", f"{self.utilization:.3g} -> {g(self.requested_bytes)}"),
               ("weights", g(self.weights_bytes)),
               (f"activation peak ({self.profile_tokens} tokens, {self.sampler_rows} sampler rows)", g(self.activation_bytes)),
               ("non-torch (cuBLAS/NCCL)", g(self.non_torch_bytes)),
               ("CUDA graphs" + ("" if self.cudagraph_counted else " (outside the budget before vLLM 0.21)"),
                g(self.cudagraph_bytes)),
               ("available KV cache", g(self.kv_bytes)),
               (f"KV blocks of {self.block_size} tokens", f"{self.num_blocks:,}"),
               ("GPU KV cache size", f"{self.kv_tokens:,} tokens")]
        if length:
            out.append((f"max concurrency at {length:,} tokens", f"{self.max_concurrency(length):.2f}x"))
        return out

    def as_dict(self, length: int | None = None) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(requested_bytes=self.requested_bytes, kv_bytes=self.kv_bytes, num_blocks=self.num_blocks,
                 kv_tokens=self.kv_tokens, seq_reserve_tokens=self.seq_reserve_tokens)
        if length:
            d.update(max_model_len=length, max_concurrency=self.max_concurrency(length))
        return d


def activation_peak_bytes(d: Deployment, profile_tokens: int, sampler_rows: int) -> float:
    """Activation high-water mark per GPU of vLLM's profile pass (module docstring formula) for one model."""
    if d.drafting.free:
        return 0.0
    m, t, T = d.model, d.tp, float(profile_tokens)
    a = ACTIVATION_BYTES
    q = m.heads / t
    kv = -(-m.kv_heads // t)
    residual = 2.0 * T * m.hidden * a
    attn = T * (q + 2 * kv) * m.head_dim * a + T * q * m.head_dim * a
    dense_i = m.intermediate if (not m.is_moe or m.first_k_dense_layers or m.shared_experts) else 0
    mlp = T * 3.0 * dense_i * a / t
    moe = 0.0
    if m.is_moe:
        ie = m.expert_intermediate or m.intermediate
        moe = T * m.experts_per_token * (3.0 * ie / t + m.hidden / t) * a
    forward = residual + max(attn, mlp, moe)
    sampler = float(sampler_rows) * m.vocab * SAMPLER_BYTES_PER_LOGIT
    return ACTIVATION_OVERHEAD * max(forward, sampler)


def non_torch_bytes(tp: int) -> float:
    return NON_TORCH_BYTES[1] if tp <= 1 else NON_TORCH_BYTES["multi"]


def memory_plan(deployments: list[Deployment], utilization: float, max_num_batched_tokens: int,
                max_num_seqs: int, block_size: int = DEFAULT_BLOCK_SIZE,
                vllm_version: str | None = None, blocks_override: int | None = None,
                spec_tokens: int = 0) -> MemoryPlan:
    """The memory plan of one engine holding ``deployments`` (the first is the engine's model; a separate draft
    model shares the engine: its weights and KV per token add up, its profile pass runs after the target's, so
    the activation peak is the larger of the two) at ``utilization`` of each GPU. ``spec_tokens``: the drafts each
    speculating sequence verifies per step; a linear-attention state is then held 1 + spec_tokens times per
    sequence (vLLM's ``num_speculative_blocks``: the state after each verified position, for rollback)."""
    hw = deployments[0].hardware
    T = int(max_num_batched_tokens)
    R = min(int(max_num_seqs), T)
    full, sliding, every = 0.0, 0.0, 0.0
    windows: list[tuple[float, int]] = []
    for i, d in enumerate(deployments):
        per, m = d.kv_bytes_per_token_per_gpu, d.model
        every += per
        s = m.sliding_layers
        full += per * (m.layers - s) / m.layers
        if s:
            sliding += per * s / m.layers * m.sliding_window
            windows.append((per * s / m.layers, int(m.sliding_window)))
        if per > 0.0:  # linear-attention layers: a fixed state per sequence (Qwen3-Next, Qwen3.5), no per-token KV
            sliding += m.linear_state_bytes(d.tp) / d.pp * (1 + (spec_tokens if i == 0 else 0))  # its stage's layers
    if full <= 0.0:  # every layer slides: count every layer per token, no reservation
        sliding, windows = 0.0, []
    gpu = hw.interconnect != "none"
    peak = max(activation_peak_bytes(d, T, R) for d in deployments)
    tp = deployments[0].gpus  # NCCL's buffers: one GPU of a multi-GPU replica (tp * pp)
    return MemoryPlan(
        hardware=hw.name, total_bytes=hw.reported_memory_bytes, utilization=float(utilization),
        weights_bytes=sum(d.resident_bytes_per_gpu for d in deployments),
        activation_bytes=peak,  # the passes run one after another
        non_torch_bytes=non_torch_bytes(tp) if gpu else 0.0,
        cudagraph_bytes=CUDAGRAPH_BYTES if gpu else 0.0, cudagraph_counted=gpu and cudagraphs_counted(vllm_version),
        block_size=int(block_size), full_bytes_per_token=full, sliding_bytes_per_seq=sliding,
        all_bytes_per_token=every, profile_tokens=T, sampler_rows=R, blocks_override=blocks_override,
        sampler_bound=peak > max(activation_peak_bytes(d, T, 0) for d in deployments), windows=tuple(windows))
