"""Engine 2 -- discrete-event simulation (SimPy) of requests, one at a time.

Requests are sampled by the one request model (:mod:`simulator.engines.request_model`: the same
sampler, seeds and call conventions as the serving simulator); every call's duration comes
from the same :class:`~simulator.cost.cost_tables.CostTables` the analytic engine sums, so the two
engines agree in expectation (tested). The colocated base and small engines share one GPU
resource: a request holds it for its calls back to back (requests run one at a time here, so
no call ever waits; concurrent requests, batching and queueing are ``simulator.engines.serving``).

Costs are evaluated for all requests' calls at once by the one call-time function
(:func:`simulator.cost.call_time.call_costs`: table look-ups and bincounts), not call by call in Python.

Returns per-request and per-step pandas DataFrames.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import simpy

from simulator.cost.cost_tables import COMPONENTS, CostTables
from simulator.cost.call_time import ANSWER, BASE, SCORE, SMALL, CallArrays, call_costs
from simulator.engines.request_model import RequestSampler, SampledRequest
from simulator.inputs.systems import SystemConfig

STEP_COLUMNS = ("request", "step", "problem", "context_tokens", "proposer", "small_tokens", "score", "accepted",
                "base_tokens", "kept_tokens", "small_s", "scoring_s", "base_s", "step_s")


def _cat(reqs: list[SampledRequest], name: str) -> np.ndarray:
    """One field of every request, concatenated in request order."""
    return np.concatenate([getattr(r, name) for r in reqs])


def _calls(reqs: list[SampledRequest], draft: bool) -> CallArrays:
    """All requests' calls, concatenated in order (iterations re-indexed to the concatenation)."""
    cat = lambda name: _cat(reqs, name)  # noqa: E731
    offsets = np.cumsum([0] + [len(r.call_out) for r in reqs[:-1]])
    engine = cat("call_engine")
    return CallArrays(engine=engine, kind=cat("call_kind"), new=cat("call_new"), cached=cat("call_cached"),
                      out=cat("call_out"), ctx=cat("call_ctx"), spec=cat("call_spec"),
                      draft_prefill=(engine == BASE) if draft else np.zeros(len(engine), bool),
                      it_call=np.concatenate([r.it_call + o for r, o in zip(reqs, offsets)]),
                      it_offset=np.concatenate([r.it_offset for r in reqs]))


def simulate(cfg: SystemConfig, tables: CostTables, n_requests: int, seed,
             requests: list[SampledRequest] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run ``n_requests`` sequential requests of ``seed`` (or the given sampled ``requests``);
    returns (requests, steps) DataFrames."""
    if cfg.adaptive:
        raise ValueError(f"{cfg.label}: a per-iteration gamma policy needs a batch; it runs in the serving simulator only")
    if requests is None:
        sampler = RequestSampler(cfg, tables.workload, step_calls=tables.execution.step_calls)
        requests = sampler.sample(n_requests, seed)
    reqs = requests
    n_req = len(reqs)
    calls = _calls(reqs, cfg.drafts)
    comp = call_costs(calls, tables)
    n_calls = np.array([len(r.call_out) for r in reqs])
    call_req = np.repeat(np.arange(n_req), n_calls)
    call_total = sum(comp.values())
    req_comp = {c: np.bincount(call_req, weights=v, minlength=n_req) for c, v in comp.items()}
    answer_s = np.bincount(call_req, weights=np.where(calls.kind == ANSWER, call_total, 0.0), minlength=n_req)
    n_steps = np.array([r.steps for r in reqs])
    step_s = _step_seconds(reqs, calls, call_req, call_total, n_steps)
    latency = _run_events(np.bincount(call_req, weights=call_total, minlength=n_req))
    iters = np.array([len(r.it_call) for r in reqs])
    spec_tokens = np.array([int(r.it_tokens.sum()) for r in reqs])
    req_df = pd.DataFrame({
        "request": np.arange(n_req), "problem": [r.problem for r in reqs], "latency_s": latency,
        "steps": n_steps, "small_steps": [r.small_steps for r in reqs],
        "thinking_tokens": [r.thinking_tokens for r in reqs], "stop_reason": [r.stop_reason for r in reqs],
        "iterations": iters, "spec_tokens": spec_tokens, "answer_s": answer_s, **req_comp,
    })
    return req_df, _steps_frame(reqs, n_steps, *step_s)


def _step_seconds(reqs: list[SampledRequest], calls: CallArrays, call_req: np.ndarray, call_total: np.ndarray,
                  n_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step seconds by role, steps of all requests in order: the small model's call, the scoring call, the
    base model's call."""
    kind, engine = calls.kind, calls.engine
    step_off = np.concatenate([[0], np.cumsum(n_steps)[:-1]])
    cstep = _cat(reqs, "call_step")
    on_step = cstep >= 0
    gstep = (step_off[call_req] + cstep)[on_step]
    tot = int(n_steps.sum())
    ct = call_total[on_step]
    role = np.where(kind[on_step] == SCORE, 1, np.where(engine[on_step] == SMALL, 0, 2))
    small_s, scoring_s, base_s = (np.bincount(gstep, weights=np.where(role == k, ct, 0.0), minlength=tot) for k in range(3))
    return small_s, scoring_s, base_s


def _run_events(per_req: np.ndarray) -> np.ndarray:
    """The discrete-event run: one process per request, holding the shared GPUs for its calls (``per_req``
    seconds); returns each request's latency."""
    env = simpy.Environment()
    gpus = simpy.Resource(env, capacity=1)
    latency = np.zeros(len(per_req))

    def one_request(i: int):
        start = env.now
        with gpus.request() as hold:
            yield hold
            yield env.timeout(per_req[i])
        latency[i] = env.now - start

    def driver():
        for i in range(len(per_req)):
            yield env.process(one_request(i))

    env.process(driver())
    env.run()
    return latency


def _steps_frame(reqs: list[SampledRequest], n_steps: np.ndarray, small_s: np.ndarray, scoring_s: np.ndarray,
                 base_s: np.ndarray) -> pd.DataFrame:
    """One row per step of every request (:data:`STEP_COLUMNS`)."""
    n_req = len(reqs)
    cat = lambda name: _cat(reqs, name)  # noqa: E731
    producer, score = cat("step_producer"), cat("step_score")
    return pd.DataFrame({
        "request": np.repeat(np.arange(n_req), n_steps),
        "step": np.concatenate([np.arange(k) for k in n_steps]),
        "problem": np.repeat([r.problem for r in reqs], n_steps),
        "context_tokens": cat("step_context"),
        "proposer": np.where(producer == SMALL, "small", "base"),
        "small_tokens": cat("step_small_tokens"),
        "score": np.where(score >= 0, score, np.nan),
        "accepted": producer == SMALL,
        "base_tokens": cat("step_base_tokens"),
        "kept_tokens": cat("step_kept"),
        "small_s": small_s, "scoring_s": scoring_s, "base_s": base_s,
        "step_s": small_s + scoring_s + base_s,
    }, columns=list(STEP_COLUMNS))


def summarize(requests: pd.DataFrame, level: float = 0.99) -> dict:
    """Mean, percentiles and a t-interval for the mean latency; component means."""
    lat = requests["latency_s"].to_numpy()
    n = len(lat)
    se = lat.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    from scipy import stats  # heavy import, only for the confidence interval

    half = stats.t.ppf(0.5 + level / 2, n - 1) * se if n > 1 else np.nan
    out = {
        "latency_s": float(lat.mean()), "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p90_s": float(np.percentile(lat, 90)), "latency_p99_s": float(np.percentile(lat, 99)),
        "ci_low_s": float(lat.mean() - half), "ci_high_s": float(lat.mean() + half), "ci_level": level,
        "small_step_fraction": float(requests["small_steps"].sum() / requests["steps"].sum()),
        "thinking_tokens": float(requests["thinking_tokens"].mean()),
        "steps": float(requests["steps"].mean()),
        "measured_acceptance_length": float(requests["spec_tokens"].sum() / requests["iterations"].sum())
        if requests["iterations"].sum() > 0 else np.nan,
        "requests": n,
    }
    for c in COMPONENTS:
        out[c] = float(requests[c].mean())
    return out
