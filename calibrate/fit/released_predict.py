"""Released `vllm bench serve` results (:mod:`calibrate.fit.gpustack_import`) predicted by the serving simulator.

Each run becomes one base-engine call per request (:func:`run_workload`: the random dataset's fixed lengths, or
ShareGPT's spread of prompt and reply lengths at the run's means -- the table holds totals), all at once (a burst) or from N closed-loop users, on a replica with the run's GPU, TP /
EP, dtypes, ``max_num_batched_tokens``, ``max_num_seqs``, ``gpu_memory_utilization`` as the KV share, and one API
server process paying each request's host cost in turn (``front_end: serial``). The host terms (per step, per
sequence, per request, async overlap) come from the engine catalog (:mod:`simulator.catalog.engine_hosts`) for the
run's vLLM version, or from ``host`` (the fitter's trial values). Figures as `vllm bench serve` prints them: mean
TTFT, mean TPOT ((latency - TTFT) / (output - 1)), output throughput (output tokens / benchmark duration)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from calibrate.fit.gpustack_import import ReleasedRun


def replay_workload(max_tokens: int):
    """A workload profile for replayed plans: only its token bounds matter to the replica."""
    from simulator.inputs.workload import WorkloadProfile

    return WorkloadProfile.model_validate({
        "name": "released-bench", "dataset": "random", "base_model": "released", "small_model": "released",
        "provenance": {"kind": "prior", "source": "calibrate/fit/released_predict.py (replayed plans)"},
        "prompt_tokens": 1, "answer_tokens": 0, "judge_template_tokens": 1, "token_budget": max_tokens,
        "max_step_tokens": max_tokens,
        "steps_per_request": {"base": {"kind": "geometric", "mean": 1, "min": 1, "max": 1}}, "verbosity": 1.0,
        "step_tokens": {"small": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64},
                        "base": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64}},
        "scores": [0.1] * 10, "token_acceptance": [0.5]})

FIGURES = ("tpot", "ttft", "out_tps", "itl", "mean_itl")  # predicted vs measured: mean TPOT, mean TTFT, output tokens/s, median and mean ITL
MEASURED = {"tpot": "mean_tpot_ms", "ttft": "mean_ttft_ms", "out_tps": "out_tps", "itl": "median_itl_ms",
            "mean_itl": "mean_itl_ms"}
SMALL_SHARE = 0.0  # a vanilla-base replica runs one engine: it gets small + base shares (simulator.engines.serving.kv_cache)


def run_params(run: ReleasedRun, host: dict | None = None):
    """(hardware, CostParams) of ``run``: the GPU's derived priors with the host terms of the run's engine version
    (``host``: explicit host terms, the fitter's trial values: step/seq/call overheads, async_overlap)."""
    from simulator.catalog import get_hardware
    from simulator.cost.cost_profile import prior_profile

    hw = get_hardware(run.gpu)
    return hw, prior_profile(hw, serving_engine=serving_engine(run), host=host).params(hw)


def serving_engine(run: ReleasedRun):
    """The engine ``run`` measured, as a :class:`simulator.catalog.engine_hosts.ServingEngine`."""
    from simulator.catalog.engine_hosts import ServingEngine

    return ServingEngine(name=run.engine, version=run.version, async_scheduling=run.async_scheduling)


def run_workload(run: ReleasedRun, sharegpt_sigma: float | None = None, early_end: bool = False):
    """The requests of ``run`` as a serving workload: ShareGPT runs (:func:`calibrate.fit.gpustack_import.dataset_of`)
    get vLLM's ShareGPT lengths at the run's measured per-request means (the replies' mean is what the model wrote,
    early ends included; spread ``sharegpt_sigma``, default the assumed one), random-dataset runs the fixed means;
    with ``early_end`` a random-dataset run below its cap (``ReleasedRun.output_cap``) replays requests capped there
    that end early with a constant end-of-sequence probability per token, at the run's measured mean
    (:func:`simulator.engines.serving.bench_workload.eos_for_mean`)."""
    from simulator.engines.serving.bench_workload import (SHAREGPT_SIGMA, Lengths, ServingWorkload, eos_for_mean,
                                                          sharegpt_lengths)

    eos = 0.0
    if run.dataset == "sharegpt":
        li, lo = sharegpt_lengths(run.input_tokens, run.output_tokens,
                                  SHAREGPT_SIGMA if sharegpt_sigma is None else sharegpt_sigma)
    elif early_end and run.output_cap and run.output_tokens < run.output_cap:
        li, lo = Lengths(kind="fixed", tokens=run.input_tokens), Lengths(kind="fixed", tokens=run.output_cap)
        eos = eos_for_mean(run.output_cap, run.output_tokens)
    else:
        li, lo = Lengths(kind="fixed", tokens=run.input_tokens), Lengths(kind="fixed", tokens=run.output_tokens)
    return ServingWorkload(input_tokens=li, output_tokens=lo, eos_per_token=eos, num_prompts=run.requests,
                           max_concurrency=run.concurrency, source=run.key)


def predict_released(run: ReleasedRun, host: dict | None = None, max_requests: int | None = None,
                     sharegpt_sigma: float | None = None, intake: tuple[float, float] | None = None,
                     early_end: bool = False, gemm=None, eta_scale: float = 1.0) -> dict:
    """Predicted figures of ``run`` (``tpot_ms``, ``ttft_ms``, ``out_tps``, the medians over requests
    ``median_tpot_ms`` and ``median_ttft_ms``; ``batch_mean``: sequences per step).
    ``max_requests``: simulate the first that many of a burst only (the burst's tail is the same queue; stated);
    ``sharegpt_sigma``: another spread of ShareGPT's lengths (:func:`run_workload`); ``intake`` = (c, s): the serial
    front end of a deployment's own probe, c seconds per request of which the share s on arrival (the replica's
    two-stage front end, ``front_end_first_share``), in place of the host terms' t_fe (their concurrent latency
    t_call - t_fe kept); ``early_end``: random-dataset requests end early (:func:`run_workload`); ``gemm``: the base
    model's GEMM kind parameters in place of the catalog's (a fit's candidate, ``Deployment.gemm_params``);
    ``eta_scale``: the compute efficiencies (dense and MoE) x this (a what-if); ``duration_s``: first arrival to
    last completion; ``kv_peak_share``: the most of the KV cache any step held; ``preemptions``: sequences preempted;
    ``over_capacity``: requests admitted alone whose context did not fit the predicted cache (the deployment's held it)."""
    from simulator.catalog import get_model
    from simulator.cost.execution import Execution
    from simulator.engines.serving.arrivals import ClosedLoopUsers, ReplayArrivals
    from simulator.engines.serving.metrics import itl_summary
    from simulator.engines.serving.replica import simulate_serving
    from simulator.cost.setup import Setup
    from simulator.inputs.systems import SystemConfig

    hw, params = run_params(run, host)
    if eta_scale != 1.0:
        params = replace(params, compute_efficiency=params.compute_efficiency * eta_scale,
                         moe_compute_efficiency=(params.moe_compute_efficiency or params.compute_efficiency) * eta_scale)
    m = get_model(run.model).with_dtypes(run.weight_dtype, run.kv_dtype)
    setup = Setup(hw, run.tp, {"base": m, "small": m, "draft": m}, ep={"base": run.ep})
    n = run.requests if max_requests is None else min(run.requests, max_requests)
    plans, _, _ = run_workload(run, sharegpt_sigma, early_end).plans(n, seed=0)
    if intake is not None:
        fe = params.call_overhead_s if params.front_end_serial_s is None else params.front_end_serial_s
        params = replace(params, call_overhead_s=params.call_overhead_s - fe + intake[0], front_end_serial_s=intake[0],
                         front_end_first_share=intake[1])
    arrivals = (ReplayArrivals((0.0,) * n, "burst") if run.concurrency is None
                else ClosedLoopUsers(run.concurrency, 0.0))
    execution = Execution(max_num_batched_tokens=run.max_num_batched_tokens, max_num_seqs=run.max_num_seqs,
                          front_end="serial")
    max_out = max(max(p.calls[0].out_tokens for p in plans), 64)
    deps = setup.deployments(params)
    deps["base"] = replace(deps["base"], gemm_params=gemm)
    res = simulate_serving(SystemConfig(system="vanilla-base"), deps, replay_workload(max_out), arrivals, n,
                           seed=0, memory_fraction=(SMALL_SHARE, run.gpu_memory_utilization), plans=plans,
                           execution=execution, engine=serving_engine(run))
    r = res.requests
    span = float(r.done_at.max() - r.arrival_at.min())
    n1 = (r.output_tokens - 1).where(r.output_tokens > 1)
    tl = res.timeline[res.timeline.engine == "base"]
    itl = itl_summary(*res.info["itl"])
    tpot = (r.latency_s - r.ttft_s) / n1
    return {"tpot_ms": float(tpot.mean() * 1e3), "ttft_ms": float(r.ttft_s.mean() * 1e3),
            "median_tpot_ms": float(tpot.median() * 1e3), "median_ttft_ms": float(r.ttft_s.median() * 1e3),
            "out_tps": float(r.output_tokens.sum()) / span, "duration_s": span, "itl_ms": itl["median_itl_ms"],
            "mean_itl_ms": itl["mean_itl_ms"],
            "batch_mean": float(np.average(tl.batch, weights=tl.duration_s)) if len(tl) else np.nan,
            "kv_peak_share": float((tl.kv_used_tokens / tl.kv_capacity_tokens).max()) if len(tl) else np.nan,
            "preemptions": int(res.info["preemptions"]["base"]), "over_capacity": int(res.info["over_capacity"]["base"])}


def measured_figures(run: ReleasedRun) -> dict:
    return {"tpot_ms": run.measured["mean_tpot_ms"], "ttft_ms": run.measured["mean_ttft_ms"],
            "out_tps": run.measured["out_tps"], "itl_ms": run.measured["median_itl_ms"],
            "mean_itl_ms": run.measured["mean_itl_ms"]}
