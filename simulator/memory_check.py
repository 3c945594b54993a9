"""The scenario's memory check: vLLM's start-up memory plan of every engine a scenario starts, and the refusals
vLLM makes at start-up, in its words (``gpu_worker.determine_available_memory``,
``kv_cache_utils.check_enough_kv_cache_memory``). The plan itself is ``simulator/memory_plan.py``; which engines run
and their shares ``simulator/serving/kv_cache.py``."""

from __future__ import annotations

from dataclasses import replace

from simulator.catalog import get_hardware
from simulator.errors import InputError
from simulator.serving.kv_cache import engine_plan, engine_utilizations, longest_sequence
from simulator.systems import spec_of


def engine_plans(rs, hw_name: str, tp: int, length: int | None = None) -> list[tuple]:
    """One vLLM memory plan per engine the scenario's systems start at (hardware, tp): (plan, what it holds,
    its longest sequence, the scenario field of its share, its gpu_memory_utilization). A system running one
    engine gives it the whole utilization; specreason's colocated engines split it (serving/kv_cache.py)."""
    sc = rs.scenario
    deps = rs.deployments(hw_name, tp)
    mf, ex = sc.memory_fraction, sc.execution
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
            out.append((engine_plan(u, models, ex, max_model_len=n), what, n, fld, u))
    return out


def check_plan(rs, plan, what: str, length: int, fld: str, util: float, tp: int) -> None:
    """Refuse what vLLM refuses at start-up, in its words: no memory left for the KV cache, or less than one
    request of the longest sequence needs (kv_cache_utils.check_enough_kv_cache_memory)."""
    f, hw = rs.file, get_hardware(plan.hardware)
    g = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    where = f"{what} at tp={tp} on {hw.name} ({g(plan.total_bytes)} per GPU as the driver reports it)"
    if plan.weights_bytes >= plan.total_bytes:
        raise InputError(f, "grid.tp" if rs.scenario.grid.tp else "base.tp",
                         f"{where}: the model's weights need {g(plan.weights_bytes)} per GPU, more than the GPU "
                         f"holds (CUDA out of memory while loading): raise tp (or base.pp) or use a smaller weight_dtype")
    if plan.kv_bytes <= 0:
        raise InputError(
            f, fld,
            f"{where}: No available memory for the cache blocks -- gpu_memory_utilization {util:.3g} x "
            f"{g(plan.total_bytes)} = {g(plan.requested_bytes)}, but the weights need {g(plan.weights_bytes)}, the "
            f"profile pass's activations {g(plan.activation_bytes)}, non-torch memory {g(plan.non_torch_bytes)}"
            + (f" and CUDA graphs {g(plan.cudagraph_bytes)}" if plan.cudagraph_counted else "")
            + ": increase gpu_memory_utilization or tp")
    need = plan.request_bytes(length)
    if need > plan.kv_bytes:
        sc, w = rs.scenario, rs.workload
        over = sc.workload_overrides
        if replace(plan, utilization=1.0).kv_bytes >= need:  # a larger share would hold it: blame the share
            where_f, bfld = f, fld
        else:  # no share of this GPU holds one request: the request's length is what is wrong
            where_f, bfld = ((f, "workload_overrides.token_budget") if "token_budget" in over else
                             (f, "workload_overrides.prompt_tokens") if "prompt_tokens" in over else
                             (str(rs._ref(sc.workload, "workload")), "token_budget"))
        raise InputError(
            where_f, bfld,
            f"{where}: To serve at least one request with max_model_len {length:,} (prompt + token_budget "
            f"{w.token_budget:,} + answer, workload {w.name}), {g(need)} KV cache is needed, which is larger than "
            f"the available KV cache memory {g(plan.kv_bytes)} (gpu_memory_utilization {util:.3g}); the estimated "
            f"maximum model length is {plan.max_model_len():,}: lower token_budget, or raise "
            f"gpu_memory_utilization or tp")


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
