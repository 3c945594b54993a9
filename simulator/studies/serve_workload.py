"""Plain serving of one workload by one replica of the base model (``specsim simulate serve-workload``): the
scenario's ``serving_workload`` (or a ``vllm bench serve`` line) through the serving simulator, summarised under
``vllm bench serve``'s names."""

from __future__ import annotations

import numpy as np

from simulator.engines.serving.arrivals import StagedArrivals
from simulator.engines.serving.bench_workload import ServingWorkload
from simulator.errors import InputError


def simulate_workload(sw: ServingWorkload, deps: dict, workload, seed: int = 0, memory_fraction=(0.1, 0.8),
                      execution=None, requests: int | None = None, engine=None):
    """Serve ``sw`` on one replica of the base model alone (``vanilla-base``: plain serving). ``workload`` (a
    ``WorkloadProfile``) only bounds token counts; ``requests`` overrides ``num_prompts`` (load stages: the
    arrivals the stages give); ``engine``: the serving engine whose version sizes the KV cache
    (``simulate_serving``). Returns the :class:`~simulator.engines.serving.replica.ServingResult`."""
    from simulator.engines.serving.replica import simulate_serving
    from simulator.inputs.systems import SystemConfig

    arrivals = sw.arrivals()
    n = requests or sw.num_prompts
    if isinstance(arrivals, StagedArrivals):  # as many as the stages bring (simulate_serving's arrival stream)
        n = len(arrivals.times(10**9, np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])))
        if n < 2:
            raise InputError(None, "serving_workload.stages", f"the stages bring {n} request(s): need at least 2")
    plans, sessions, think = sw.plans(n, seed)
    return simulate_serving(SystemConfig(system="vanilla-base"), deps, workload, arrivals, len(plans), seed,
                            memory_fraction, plans=plans, execution=execution, sessions=sessions,
                            think_s=think, engine=engine)


SUMMARY_KEYS = ("requests", "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
                "mean_e2el_ms", "p99_e2el_ms", "prefix_cache_hit_rate", "prefix_cache_block_hit_rate",
                "base_batch_mean", "base_kv_occupancy_max", "base_preemptions")


def layout(dep) -> str:
    """The base deployment's parallelism as the capacity table writes it, with the GPUs it takes:
    ``TP=1 x DP=8, EP=8 (8 GPUs)``."""
    from simulator.studies.capacity.table import parallelism

    gpus = f"{dep.gpus} GPU{'s' * (dep.gpus > 1)}"
    return parallelism({"tp": dep.tp, "pp": dep.pp, "dp": dep.dp, "ep": dep.ep}) + f" ({gpus})"


def serve_scenario(scenario, bench_serve: str | None = None, hardware: str | None = None, tp: int | None = None,
                   requests: int | None = None, seed: int | None = None, prefix_caching: bool | None = None) -> dict:
    """``specsim serve-workload``: the scenario's ``serving_workload`` (or ``bench_serve``, a vllm bench serve line)
    served by one replica of its base model; the summary under vllm bench serve's names (every request counted:
    a benchmark reports them all) and the workload it ran."""
    from simulator.catalog.serving_accuracy import scenario_error_lines
    from simulator.inputs.scenario import load_scenario
    from simulator.engines.serving.metrics import summarize_serving

    rs = load_scenario(scenario)
    sc = rs.scenario
    sw = ServingWorkload.from_command(bench_serve) if bench_serve is not None else sc.serving_workload
    if sw is None:
        raise InputError(rs.file, "serving_workload", "the scenario has none: add one or pass --bench-serve")
    hw = hardware or rs.hardware_names[0]
    tp = tp or rs.tps[0]
    rs.check_placement(hw, tp)
    from simulator.cost.memory_check import check_serving_length

    check_serving_length(rs, sw, [(hw, tp)], None if bench_serve is not None else rs.file,
                         "--bench-serve" if bench_serve is not None else "serving_workload")
    ex = rs.execution_for(hw, tp)
    ex = ex if prefix_caching is None else ex.model_copy(update={"prefix_caching": prefix_caching})
    deps = rs.deployments(hw, tp)
    res = simulate_workload(sw, deps, rs.workload, sc.seed if seed is None else seed,
                            (sc.memory_fraction.small, sc.memory_fraction.base), ex, requests=requests,
                            engine=sc.serving_engine)
    s = summarize_serving(res, warmup_fraction=0.0)
    return {"scenario": sc.name, "hardware": hw, "tp": tp, "parallelism": layout(deps["base"]),
            "workload": sw.source or "serving_workload",
            "arrivals": res.info["arrivals"], "prefix_caching": ex.prefix_caching,
            "max_num_batched_tokens": ex.max_num_batched_tokens, "max_num_seqs": ex.max_num_seqs,
            **{k: s[k] for k in SUMMARY_KEYS if k in s}, "model_error": scenario_error_lines(rs, hw)}
