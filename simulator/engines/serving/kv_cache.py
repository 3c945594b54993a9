"""KV-cache capacity of the serving engines, from vLLM's start-up memory plan (``simulator/cost/memory_plan.py``).

Which engines share a GPU, and how much of it each gets (``engine_utilizations``): vLLM runs one engine per GPU
with ``gpu_memory_utilization`` of it (default 0.9). A system whose steps are all written by one model runs one
engine: vanilla-base and specdecode the base engine (a draft model, EAGLE head, MTP module or prompt lookup lives
inside it), vanilla-small the small one; that engine gets the scenario's whole utilization (small + base shares).
Only specreason-style systems, where the small model writes steps while the base scores and regenerates them, run
two colocated engines, and those split the GPU as the scenario says (two vLLM instances, each with its own
``gpu_memory_utilization``).

Each engine's capacity is its plan's ``usable_tokens``: whole ``block_size`` blocks of what is left after weights,
activation peak, non-torch and CUDA-graph memory (or ``execution.num_gpu_blocks_override`` blocks), less vLLM's null
block. A running sequence holds whole blocks: on average half a block beyond its tokens
(``MemoryPlan.partial_block_tokens``, part of each sequence's reservation below); a speculating one also the slots
of its drafts (:func:`speculative_slots`). Sliding-window layers (gpt-oss, Gemma 3) keep at most
``sliding_window`` tokens per sequence (vLLM's hybrid KV allocator frees the blocks that slide out): the capacity
counts full-attention tokens only, and each running sequence reserves its window's worth of sliding-layer KV, in
full-attention token equivalents (``seq_reserve_tokens``; exact once a sequence is longer than the window, an upper
bound before). A model whose layers all slide keeps the per-token count of every layer (no reservation). Linear-
attention layers (Qwen3-Next, Qwen3.5) keep a fixed state per sequence and no per-token KV: the same reservation
holds their states (vLLM's hybrid allocator gives each running sequence its state pages; a speculating one 1 + k
of them, k the drafts it verifies per step).
"""

from __future__ import annotations

from simulator.catalog.engine_hosts import ServingEngine, running_version
from simulator.cost.cost_model import Deployment
from simulator.cost.execution import Execution
from simulator.cost.memory_plan import MemoryPlan, memory_plan

# vLLM without chunked prefill profiles max(max_model_len, this) tokens (SchedulerConfig default)
UNCHUNKED_MIN_BATCHED_TOKENS = 2048


def engine_utilizations(spec, small: float, base: float) -> tuple[float, float]:
    """(small engine, base engine) shares of each GPU for a system ``spec`` (a ``SystemSpec``): both engines run
    only when the small model writes steps and the base model runs too; a lone engine gets small + base."""
    if spec.small_writes_steps and spec.uses_base:
        return small, base
    total = small + base
    return (total, 0.0) if not spec.uses_base else (0.0, total)


def plan_version(engine: ServingEngine | None) -> str | None:
    """The vLLM version whose start-up accounting sizes ``engine``'s KV cache: the version it runs; None (the newest
    accounting) for no engine or another engine than vLLM."""
    return running_version(engine) if engine is not None and engine.name == "vllm" else None


def engine_plan(utilization: float, deployments: list[Deployment], execution: Execution | None = None,
                max_model_len: int | None = None, engine: ServingEngine | None = None,
                spec_tokens: int = 0) -> MemoryPlan:
    """The memory plan of one serving engine holding ``deployments`` (its model, then a draft living in it), as
    ``engine``'s version sizes it (None: the newest fitted vLLM; :func:`plan_version`); the scheduler limits
    ``execution`` leaves unset are that version's defaults on its device (``Execution.for_device``);
    ``spec_tokens``: drafts verified per step (:func:`simulator.cost.memory_plan.memory_plan`)."""
    d = deployments[0]
    ex = (execution or Execution()).for_device(d.hardware, engine, world_size=d.tp * d.pp)
    tokens = ex.max_num_batched_tokens or max(int(max_model_len or 0), UNCHUNKED_MIN_BATCHED_TOKENS)
    return memory_plan(deployments, utilization, tokens, ex.max_num_seqs, ex.block_size, plan_version(engine),
                       ex.num_gpu_blocks_override, spec_tokens)


def kv_layout(utilization: float, deployments: list[Deployment], execution: Execution | None = None,
              engine: ServingEngine | None = None, spec_tokens: int = 0) -> tuple[int, int]:
    """(capacity in tokens, KV tokens each running sequence reserves) of an engine holding ``deployments``; with
    data-parallel attention the dp ranks' caches together (a sequence lives on one rank); ``spec_tokens``: drafts
    verified per step (a linear-attention state per verified position); ``engine``: as :func:`engine_plan`."""
    if utilization <= 0.0:  # the engine does not run (engine_utilizations)
        return 0, 0
    p = engine_plan(utilization, deployments, execution, engine=engine, spec_tokens=spec_tokens)
    return p.usable_tokens * deployments[0].dp, p.running_seq_reserve_tokens


def verified_drafts(drafting, gamma: int | None) -> int:
    """Drafts a speculating sequence verifies per step (besides the token it commits); 0 without speculation."""
    return drafting.verify_tokens(gamma) - 1 if gamma else 0


def speculative_slots(drafting, gamma: int | None) -> int:
    """KV slots (tokens) a running speculating sequence holds beyond its accepted tokens: each step vLLM allocates
    room for the tokens it verifies (the drafts, besides the one it commits) and, for a drafter that writes KV
    ahead of them (a draft model, EAGLE / MTP heads, block drafters: vLLM's ``num_lookahead_tokens`` = gamma), gamma
    more; prompt lookup writes none ahead. Rejected drafts leave their slots allocated (only the computed count rolls
    back), so every running sequence holds them. ``gamma``: the engine's largest (a gamma policy's gamma_max)."""
    if not gamma:
        return 0
    return verified_drafts(drafting, gamma) + (0 if drafting.free else gamma)


def kv_capacity_tokens(utilization: float, deployments: list[Deployment], execution: Execution | None = None) -> int:
    """Tokens of KV cache an engine holding ``deployments`` can keep (>= 0; :func:`kv_layout`)."""
    return kv_layout(utilization, deployments, execution)[0]


def longest_sequence(spec, workload, step_calls: bool, engine: str) -> int:
    """Tokens of the longest sequence one request puts in ``engine`` ("base" or "small") -- what vLLM's
    ``max_model_len`` must cover. Semantics of ``simulator/engines/request_model.py``: a one-call chain is capped at the
    token budget B (prompt P + min(chain, B) + answer A); a chain written step by step stops after the step that
    reaches B, so it holds at most B - 1 + max_step_tokens; the base engine of a scoring system also prefills the
    step with the judge template (J tokens) on that context, and the answer call follows the whole chain."""
    w = workload
    P, B, A = w.max_prompt_tokens, w.token_budget, w.answer_tokens
    if spec.one_call and not step_calls:
        return P + B + A
    chain = B - 1 + w.max_step_tokens
    if engine == "small":
        return P + chain
    return P + chain + max(A, w.judge_template_tokens if spec.scores_steps else 0)
