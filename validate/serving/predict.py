"""Prediction by trace replay: each measured request's plan from its measured token counts, the measured
arrivals (or the same closed-loop users), through the serving simulator; run-level figures of both sides."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .load import ServingRun

MEMORY_FRACTION = (0.3, 0.5)  # scenarios/cpu-smollm2.yaml's split; KV never binds at these batch sizes


def replay_plans(req: pd.DataFrame):
    """One base-engine call per measured request (its own token counts)."""
    from simulator.request_model import BASE, Call, RequestPlan

    plans = []
    for r in req.itertuples():
        new = int(r.prompt_tokens - r.cached_tokens)
        # a cross-request prefix hit cannot be represented (the simulator caches per request): count it as new
        call = Call(BASE, int(r.prompt_tokens) if r.cached_tokens else new, 0, int(r.output_tokens))
        plans.append(RequestPlan([call], int(r.output_tokens), int(r.output_tokens), 1, 0, "length"))
    return plans


def replay_system_plans(calls: pd.DataFrame, requests: pd.DataFrame):
    """Whole-system runs: each request's measured calls in order, on their engines, with the measured
    prompt / cached / output tokens (block-granular prefix-cache hits included: they are measured)."""
    from simulator.request_model import BASE, SMALL, Call, RequestPlan

    plans = []
    by_req = {rid: d for rid, d in calls.groupby("request_id", sort=True)}
    for r in requests.itertuples():
        d = by_req[r.request_id]
        # a hit on a request's first call of an engine (another request's prompt blocks) cannot be held by the
        # simulator, which caches a request's prefix for its own calls only: that call prefills its whole prompt
        cs = [Call(SMALL if c.engine == "small" else BASE, int(c.prompt_tokens - c.cached_tokens), int(c.cached_tokens),
                   int(c.output_tokens)) for c in d.itertuples()]
        gen = d[d.op == "generate"]
        plans.append(RequestPlan(cs, int(gen.output_tokens.sum()), int(d.output_tokens.sum()), len(gen),
                                 int((gen.engine == "small").sum()), "replay"))
    return plans


def _workload():
    from simulator.workload import WorkloadProfile

    # only the token bounds matter to a replica serving replayed plans
    return WorkloadProfile.model_validate({
        "name": "serving-replay", "dataset": "replay", "base_model": "smollm2-135m", "small_model": "smollm2-135m-cut6",
        "provenance": {"kind": "prior", "source": "validate/serving/predict.py (replayed plans)"},
        "prompt_tokens": 1, "answer_tokens": 0, "judge_template_tokens": 1, "token_budget": 4096, "max_step_tokens": 4096,
        "steps_per_request": {"base": {"kind": "geometric", "mean": 1, "min": 1, "max": 1}}, "verbosity": 1.0,
        "step_tokens": {"small": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64},
                        "base": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64}},
        "scores": [0.1] * 10, "token_acceptance": [0.5]})


def deployments(params, setup) -> dict:
    from simulator.cost_model import Deployment

    return {role: Deployment(m, setup.hardware, setup.tp, params) for role, m in setup.models.items()}


def predict_run(run: ServingRun, params, setup):
    """(per-request table: measured and predicted, serving result of the simulator)."""
    from simulator.serving.arrivals import ClosedLoopUsers, ReplayArrivals
    from simulator.serving.replica import simulate_serving
    from simulator.systems import SystemConfig

    if run.calls is not None:
        plans = replay_system_plans(run.calls, run.requests)
        cfg = SystemConfig(system="specreason", threshold=min(10, int(round(run.meta.get("threshold") or 0)))) \
            if run.system == "specreason" else SystemConfig(system=run.system)
    else:
        plans, cfg = replay_plans(run.requests), SystemConfig(system="vanilla-base")
    if run.mode == "closed":
        arrivals = ClosedLoopUsers(run.users, 0.0)
    else:
        arrivals = ReplayArrivals(tuple(float(t) for t in run.requests.arrival_s), run.label)
    res = simulate_serving(cfg, deployments(params, setup), _workload(), arrivals,
                           len(plans), seed=0, memory_fraction=MEMORY_FRACTION, plans=plans)
    sim = res.requests.set_index("request")
    t = run.requests[["request_id", "prompt_tokens", "output_tokens", "latency_s", "ttft_s"]].copy()
    t["pred_latency_s"] = sim.loc[t.request_id, "latency_s"].to_numpy()
    t["pred_ttft_s"] = sim.loc[t.request_id, "ttft_s"].to_numpy()
    return t, res


def measured_run_figures(run: ServingRun) -> dict:
    r, s = run.requests, run.steps[run.steps.engine == "base"]
    span = float(r.done_s.max() - r.arrival_s.min())
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(s.running, weights=s.duration_s)), "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median())}


def predicted_run_figures(res) -> dict:
    r = res.requests
    span = float(r.done_at.max() - r.arrival_at.min())
    tl = res.timeline[res.timeline.engine == "base"]
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(tl.batch, weights=tl.duration_s)), "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median())}

