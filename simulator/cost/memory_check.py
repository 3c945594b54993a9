"""The memory check: vLLM's start-up memory plan of every engine a scenario starts (or ``specsim pass-time``'s one
engine), and the refusals vLLM makes at start-up, in its words (``gpu_worker.determine_available_memory``,
``kv_cache_utils.check_enough_kv_cache_memory``): :func:`memory_error`, the one statement of them, blamed on a
scenario's fields by :func:`check_plan` and on pass-time's options by :func:`check_step` (which also checks the
model's shape against TP, ``simulator/catalog/model_shape.py``, as ``ResolvedScenario.check_placement`` does). The
plan itself is ``simulator/cost/memory_plan.py``; which engines run and their shares ``simulator/engines/serving/kv_cache.py``."""

from __future__ import annotations

from dataclasses import replace

from simulator.catalog.model_shape import tp_error
from simulator.errors import InputError
from simulator.cost.memory_plan import DEFAULT_UTILIZATION
from simulator.engines.serving.kv_cache import engine_plan, engine_utilizations, longest_sequence
from simulator.inputs.systems import spec_of


def engine_plans(rs, hw_name: str, tp: int, length: int | None = None) -> list[tuple]:
    """One vLLM memory plan per engine the scenario's systems start at (hardware, tp): (plan, what it holds,
    its longest sequence, the scenario field of its share, its gpu_memory_utilization). A system running one
    engine gives it the whole utilization; specreason's colocated engines split it (serving/kv_cache.py)."""
    sc = rs.scenario
    deps = rs.deployments(hw_name, tp)
    mf, ex = sc.memory_fraction, rs.execution_for(hw_name, tp)
    out, seen = [], set()
    for system in sc.systems:
        spec = spec_of(system)
        u_small, u_base = engine_utilizations(spec, mf.small, mf.base)
        both = u_small > 0 and u_base > 0
        for role, u in (("small", u_small), ("base", u_base)):
            if u <= 0:
                continue
            models = [deps[role]]
            what = (rs.base_model if role == "base" else rs.small_model).name
            if role == "base" and spec.draft and not rs.drafting.free:
                models.append(deps["draft"])
                what += f" + draft {rs.draft_model.name}"
            n = length or longest_sequence(spec, rs.workload, ex.step_calls, role)
            key = (role, round(u, 9), len(models), n)
            if key in seen:
                continue
            seen.add(key)
            fld = f"{sc.memory_field}.{role}" if both else sc.memory_field
            out.append((engine_plan(u, models, ex, max_model_len=n, engine=sc.serving_engine), what, n, fld, u))
    return out


def memory_error(plan, length: int, length_note: str = "") -> tuple[str, str] | None:
    """What vLLM refuses at start-up, in its words (None: it starts): ``("weights", why)`` -- the weights alone
    exceed the GPU (CUDA out of memory while loading); ``("kv", why)`` -- no memory left for the KV cache;
    ``("blocks", why)`` -- ``num_gpu_blocks_override`` blocks hold less than one sequence of ``length`` tokens;
    ``("length", why)`` -- less KV cache than one sequence of ``length`` tokens needs
    (kv_cache_utils.check_enough_kv_cache_memory; ``length_note`` says what makes up the length). The caller says
    where and which field to blame."""
    g = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    if plan.weights_bytes >= plan.total_bytes:
        return "weights", (f"the model's weights need {g(plan.weights_bytes)} per GPU, more than the GPU holds "
                           "(CUDA out of memory while loading)")
    if plan.kv_bytes <= 0:
        graphs = f" and CUDA graphs {g(plan.cudagraph_bytes)}" if plan.cudagraph_counted else ""
        return "kv", (f"No available memory for the cache blocks -- gpu_memory_utilization {plan.utilization:.3g} x "
                      f"{g(plan.total_bytes)} = {g(plan.requested_bytes)}, but the weights need "
                      f"{g(plan.weights_bytes)}, the profile pass's activations {g(plan.activation_bytes)}, non-torch "
                      f"memory {g(plan.non_torch_bytes)}{graphs}")
    if plan.blocks_override is not None and plan.kv_tokens < length:  # the cache has exactly the blocks it is given
        return "blocks", (f"execution.num_gpu_blocks_override {plan.blocks_override:,} blocks of {plan.block_size} "
                          f"hold {plan.kv_tokens:,} tokens, fewer than one request with max_model_len {length:,}"
                          f"{length_note} needs: it could never be scheduled")
    need = plan.request_bytes(length)
    if need > plan.kv_bytes:
        return "length", (f"To serve at least one request with max_model_len {length:,}{length_note}, {g(need)} KV "
                          f"cache is needed, which is larger than the available KV cache memory {g(plan.kv_bytes)} "
                          f"(gpu_memory_utilization {plan.utilization:.3g}); the estimated maximum model length is "
                          f"{plan.max_model_len():,}")
    return None


# the workload fields a request's longest sequence is made of (serving/kv_cache.longest_sequence), blamed in this order
LENGTH_FIELDS = ("token_budget", "prompt_tokens", "judge_template_tokens", "answer_tokens", "max_step_tokens")


def check_plan(rs, plan, what: str, length: int, fld: str, tp: int) -> None:
    """A scenario's engine: :func:`memory_error`, blamed on the scenario field that can fix it."""
    sc, w = rs.scenario, rs.workload
    err = memory_error(plan, length, f" (prompt + token_budget {w.token_budget:,} + answer, workload {w.name})")
    if err is None:
        return
    f, (kind, why) = rs.file, err
    where = (f"{what} at tp={tp} on {plan.hardware} ({plan.total_bytes / 2**30:.2f} GiB per GPU as the driver "
             f"reports it)")
    if kind == "weights":
        raise InputError(f, "grid.tp" if sc.grid.tp else "base.tp", f"{where}: {why}: raise tp or use a smaller "
                         "weight_dtype")
    seqs = (f", or lower execution.max_num_seqs (vLLM warms its sampler up on {plan.sampler_rows:,} rows)"
            if plan.sampler_bound else "")
    if kind == "kv":
        raise InputError(f, fld, f"{where}: {why}: increase gpu_memory_utilization or tp{seqs}")
    if kind == "blocks":
        raise InputError(f, "execution.num_gpu_blocks_override", f"{where}: {why}")
    over = sc.workload_overrides
    if replace(plan, utilization=1.0).kv_bytes >= plan.request_bytes(length):  # a larger share would hold it
        where_f, bfld = f, fld
    else:  # no share of this GPU holds one request: the request's length is what is wrong
        mine = [k for k in LENGTH_FIELDS if k in over]  # the scenario's own overrides first, then the profile's
        where_f, bfld = (f, f"workload_overrides.{mine[0]}") if mine else (str(rs.ref_path(sc.workload, "workload")),
                                                                            "token_budget")
    raise InputError(where_f, bfld, f"{where}: {why}: lower token_budget, or raise gpu_memory_utilization or tp{seqs}")


def check_serving_length(rs, sw, cells: list[tuple[str, int]], file: str | None, field: str) -> None:
    """A serving workload's (``sw``) longest request -- system prompt + input + output cap -- fits every engine's KV
    cache at each (hardware, tp) of ``cells``, as vLLM requires of max_model_len at start-up: a longer one could never
    be served. In :func:`memory_error`'s words, blamed on ``file`` / ``field``."""
    parts = [sw.input_tokens.longest, sw.output_tokens.longest]
    if any(x is None for x in parts):
        return  # an unbounded lognormal length: no longest request to check
    n = sum(parts) + (sw.system_prompts.tokens if sw.system_prompts else 0)
    for hw, tp in cells:
        for plan, what, _, _, _ in engine_plans(rs, hw, tp, n):
            err = memory_error(plan, n, " (the serving workload's longest request: system prompt + input + output "
                               "cap)")
            if err is not None:
                raise InputError(file, field, f"{what} at tp={tp} on {hw}: {err[1]}")


def check_step(target, draft, batch: int, tokens: int, context: int, engine=None) -> None:
    """``specsim pass-time``'s placement (the scenario's is ``ResolvedScenario.check_placement``): the model and its
    draft shard over TP (``model_shape.tp_error``), vLLM starts an engine holding them at its default
    gpu_memory_utilization (:func:`memory_error`), and that engine's KV cache holds ``batch`` sequences of
    ``context + tokens`` tokens each (the step's largest; with data-parallel attention, each rank its share).
    ``engine``: the :class:`simulator.catalog.engine_hosts.ServingEngine` whose version sizes the cache (None: the
    newest fitted vLLM)."""
    held = [d for d in (target, draft) if d is not None and not d.drafting.free]
    for opt, d in zip(("--tp", "--draft"), held):
        err = tp_error(d.model, d.tp)
        if err:
            raise InputError(None, opt, err)
    n = context + tokens
    plan = engine_plan(DEFAULT_UTILIZATION, held, max_model_len=n, engine=engine)
    where = " + draft ".join(d.model.name for d in held) + f" at tp={target.tp} on {target.hardware.name}"
    err = memory_error(plan, n, " (context + new tokens)")
    if err is not None:
        raise InputError(None, "--context" if err[0] == "length" else "--tp", f"{where}: {err[1]}")
    per_rank = -(-batch // target.dp)  # data-parallel attention: each rank holds its share of the sequences' KV
    one = plan.held_bytes(n)
    need = per_rank * one
    if need > plan.kv_bytes:
        share = f" ({per_rank:,} per data-parallel rank)" if target.dp > 1 else ""
        raise InputError(None, "--batch", f"{where}: {batch:,} sequences{share} of {n:,} tokens need {need / 2**30:.2f} GiB "
                         f"of KV cache, more than the {plan.kv_bytes / 2**30:.2f} GiB vLLM leaves at "
                         f"gpu_memory_utilization {DEFAULT_UTILIZATION} ({int(plan.kv_bytes // one)} of "
                         "them fit)")


def plan_view(rs) -> dict:
    """``specsim show``'s memory plan section: per (hardware, tp), each engine's vLLM start-up memory, term by term,
    and how many of its longest sequences it holds at once."""
    out = {}
    for hw in rs.hardware_names:
        for tp in rs.tps:
            pp, dp = rs.scenario.base.pp, rs.scenario.base.dp
            out[f"{hw} tp={tp}" + (f" pp={pp}" if pp > 1 else "") + (f" dp={dp}" if dp > 1 else "")] = [
                {"engine": what, "gpu_memory_utilization": round(u, 6), "set_by": fld, "max_model_len": n,
                 "plan": dict(plan.rows(n))}
                for plan, what, n, fld, u in engine_plans(rs, hw, tp)]
    return out
