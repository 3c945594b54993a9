"""The capacity search on a serving benchmark's workload: the scenario's ``serving_workload`` or a
``vllm bench serve`` line (``--bench-serve``) instead of the reasoning workload.

A point carries the workload as JSON (``Point.serving``); its requests come from
:meth:`~simulator.engines.serving.bench_workload.ServingWorkload.plans` and its arrivals from
:meth:`~simulator.engines.serving.bench_workload.ServingWorkload.at_load` at each rate (or user count) the search
tries. The workload gives the shape (lengths, early end of sequence, shared system prompts, burstiness); the
search gives the load: a rate, a user count or a run length the workload states (``request_rate``,
``max_concurrency``, ``stages``, ``num_prompts``) is ignored, and the table's title says so
(:func:`load_notes`).

Systems: ``vanilla-base`` (plain serving: every request one call of the base engine) and ``specdecode`` (the
same call, decoded speculatively by the scenario's drafter with the acceptance of the scenario's ``workload``:
iterations drawn per request from their own streams, so the requests are the same as vanilla-base's). Other
systems (SpecReason's step calls, the small model alone) have no plain-serving form and are refused.

Common random numbers: request i of a replication is the same at every rate and run length (the plans of the
longest run a search may make are sampled once and cut).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from simulator.errors import InputError

SERVING_SYSTEMS = ("vanilla-base", "specdecode")
IDLE_REQUESTS = 8  # requests served one at a time for the single-request latency


@lru_cache(maxsize=16)
def workload_of(js: str):
    from simulator.engines.serving.bench_workload import ServingWorkload

    return ServingWorkload.model_validate_json(js)


def resolve(rs, bench_serve: str | None, field: str = "--bench-serve"):
    """The serving workload of a capacity command: ``bench_serve`` (a vllm bench serve line; errors name the
    option) or the scenario's ``serving_workload``; None when neither. Multi-turn sessions are refused (the
    search's rate would be sessions per second, not requests)."""
    from simulator.engines.serving.bench_workload import ServingWorkload

    sw = ServingWorkload.from_command(bench_serve, field) if bench_serve is not None else rs.scenario.serving_workload
    if sw is not None and sw.sessions is not None:
        raise InputError(None if bench_serve is not None else rs.file, field if bench_serve is not None else
                         "serving_workload.sessions", "a capacity search over multi-turn sessions is not supported (its "
                         "rate would count sessions, not requests); use specsim serve-workload for sessions")
    if sw is not None:
        from simulator.cost.memory_check import check_serving_length

        check_serving_length(rs, sw, [(h, t) for h in rs.hardware_names for t in rs.tps],
                             None if bench_serve is not None else rs.file,
                             field if bench_serve is not None else "serving_workload")
    return sw


def load_notes(sw) -> list[str]:
    """What of the workload's own load the search ignores (it sets the rate, the users and the run length)."""
    notes = []
    if sw.stages is not None:
        notes.append("its load stages")
    elif sw.ramp_up is not None:
        notes.append(f"its {sw.ramp_up.strategy} ramp-up ({sw.ramp_up.start_rps:g} to {sw.ramp_up.end_rps:g}/s)")
    elif sw.request_rate != "inf":
        notes.append(f"its request rate {sw.request_rate:g}/s")
    elif sw.max_concurrency is None:
        notes.append("its request rate inf (a burst)")
    if sw.max_concurrency is not None:
        notes.append(f"its max concurrency {sw.max_concurrency}")
    notes.append(f"its {sw.num_prompts} prompts")
    return notes


def check_systems(configs, explicit: bool) -> list:
    """The configurations a serving workload can run: ``explicit`` (--system given): any other system is an
    error; else the scenario's other systems are left out (vanilla-base when none is left)."""
    from simulator.inputs.systems import SystemConfig

    bad = [c for c in configs if c.system not in SERVING_SYSTEMS]
    if bad and explicit:
        raise InputError(None, "--system", f"{bad[0].system} has no plain-serving form: with a serving workload "
                         f"(--bench-serve or serving_workload) use {' or '.join(SERVING_SYSTEMS)}")
    keep = [c for c in configs if c.system in SERVING_SYSTEMS]
    return keep or [SystemConfig(system="vanilla-base")]


def plans(rs, cfg, js: str, n: int, seed: int) -> list:
    """Requests 0..n-1 of the workload for ``cfg`` (one base call each; specdecode: with its iterations)."""
    base, _sessions, _think = workload_of(js).plans(n, seed)
    if not cfg.drafts:
        return base
    from simulator.engines.speculative import draw_iterations, iteration_cdf, split_iterations

    m_cdf = iteration_cdf(rs.workload.acceptance_per_position(cfg.gamma))
    out = []
    for i, p in enumerate(base):
        (call,) = p.calls
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, i)))  # request i's own iterations
        r = max(call.out_tokens - 1, 0)
        if cfg.adaptive:  # raw draws at γ_max, cut per iteration by the engine's policy
            new = replace(call, spec_draws=draw_iterations(m_cdf, r, rng).astype(np.uint8))
        else:
            _seg, _g, toks = split_iterations(m_cdf, np.array([r]), rng)
            new = replace(call, spec_cum=np.cumsum(toks))
        out.append(replace(p, calls=[new]))
    return out


def arrivals(js: str, rate: float | None = None, users: int | None = None):
    """The workload's arrival process at the search's load (its burstiness kept)."""
    return workload_of(js).at_load(rate, users).arrivals()


def idle_latency(rs, hw: str, tp: int, cfg, js: str) -> float:
    """Mean latency of the workload's requests served one at a time (a closed loop of one user, IDLE_REQUESTS
    requests: its shared prefixes hit the cache as they would on an idle replica)."""
    from simulator.engines.serving.replica import simulate_serving

    mf = rs.scenario.memory_fraction
    ps = plans(rs, cfg, js, IDLE_REQUESTS, rs.scenario.seed)
    res = simulate_serving(cfg, rs.deployments(hw, tp), rs.workload, arrivals(js, users=1), len(ps), rs.scenario.seed,
                           (mf.small, mf.base), plans=ps, execution=rs.execution_for(hw, tp),
                           engine=rs.scenario.serving_engine)
    lat = float(res.requests.latency_s.mean())
    if not (lat > 0 and math.isfinite(lat)):
        raise InputError(rs.file, "serving_workload", f"one request at a time takes {lat} s: nothing to search")
    return lat
