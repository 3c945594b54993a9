"""Summaries of a served trace: latency/TTFT/queueing statistics, goodput, engine load,
and the Little's-law check.

A rate meets an SLO when the steady requests meet every term *and* the run is stationary
(:func:`stationarity`): the backlog does not grow. Two checks, both must pass:

- trend: the steady requests (after the warm-up) are cut into ``TREND_BATCHES`` consecutive batches
  by arrival; the least-squares slope of the batch-mean latency over the batch index, times the
  window (batches - 1), relative to the mean latency, is the *growth* of latency over the steady
  window. A growing backlog makes latency grow linearly with arrival time. The run fails when
  growth > ``GROWTH_LIMIT`` and the slope is significant (one-sided t on the batch means, t >
  ``TREND_T``; batch means absorb the autocorrelation of neighbouring requests' latencies);
- drift: :func:`latency_drift` (mean latency of the last quarter of arrivals / second quarter)
  <= ``DRIFT_LIMIT``.

Warm-up: the first ``warmup_fraction`` of arrivals meet an empty system, so latency
statistics use the later requests only (all requests still load the system).

Little's law on the trace: over a window [t0, t1] of the stationary part,
    L = (1 / (t1 - t0)) * integral N(t) dt      (N: requests in system)
must equal lambda * W (lambda: arrival rate, W: mean time in system of the window's arrivals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.serving.replica import ServingResult
from simulator.serving.slo import Slo

WARMUP_FRACTION = 0.1
DRIFT_LIMIT = 1.25  # unstable if the last quarter's mean latency exceeds 1.25x the second quarter's
TREND_BATCHES = 10
GROWTH_LIMIT = 0.2  # latency may rise by at most 20% of its mean over the steady window ...
TREND_T = 1.86  # ... unless the rise is not significant (one-sided 95%, t with TREND_BATCHES - 2 = 8 df)


def latency_drift(requests: pd.DataFrame) -> float:
    """Mean latency of the last quarter of arrivals / that of the second quarter.

    About 1 when the load is sustained; an overloaded queue grows linearly with time, which
    gives ~2.3. A finite run at an unsustainable rate can still meet a percentile SLO (the
    queue has not grown enough yet): this ratio catches it."""
    lat = requests.sort_values("arrival_at").latency_s.to_numpy()
    n = len(lat)
    if n < 8:
        return 1.0
    q2, q4 = lat[n // 4 : n // 2].mean(), lat[3 * n // 4 :].mean()
    return float(q4 / q2) if q2 > 0 else 1.0


def latency_trend(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION,
                  batches: int = TREND_BATCHES) -> tuple[float, float]:
    """(growth, t): relative rise of latency over the steady window and its t statistic, from the
    least-squares slope of ``batches`` batch-mean latencies (consecutive arrivals) on the batch index."""
    lat = steady(requests, warmup_fraction).latency_s.to_numpy()
    if len(lat) < 2 * batches:
        return 0.0, 0.0
    m = np.array([b.mean() for b in np.array_split(lat, batches)])
    x = np.arange(batches, dtype=float) - (batches - 1) / 2
    slope = float((x * (m - m.mean())).sum() / (x * x).sum())
    resid = m - m.mean() - slope * x
    se = float(np.sqrt((resid ** 2).sum() / (batches - 2) / (x * x).sum()))
    mean = float(m.mean())
    growth = slope * (batches - 1) / mean if mean > 0 else 0.0
    t = slope / se if se > 0 else (np.inf if slope > 0 else 0.0)
    return float(growth), float(t)


def stationarity(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION) -> dict:
    """The backlog checks of the module docstring: growth, its t, drift and the verdict."""
    growth, t = latency_trend(requests, warmup_fraction)
    drift = latency_drift(requests)
    ok = not (growth > GROWTH_LIMIT and t > TREND_T) and drift <= DRIFT_LIMIT
    return {"latency_growth": growth, "latency_growth_t": t, "latency_drift": drift, "stationary": bool(ok)}


def steady(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION, planned: int | None = None) -> pd.DataFrame:
    """The requests after the warm-up: the first ``warmup_fraction`` of the ``planned`` requests (default: all of
    them; a stopped run's table holds only those that arrived) by arrival are skipped."""
    r = requests.sort_values("arrival_at")
    return r.iloc[int((len(r) if planned is None else planned) * warmup_fraction):]


def lower_bounds(requests: pd.DataFrame, at: float, t_call: float) -> pd.DataFrame:
    """A stopped run's requests (``simulator.serving.early_stop``) with every time still unknown at ``at`` set to
    ``at``: latency, TTFT and queue delay of the unfinished ones become their lower bounds."""
    r = requests.copy()
    waited = at - r.arrival_at
    r["latency_s"] = r.latency_s.fillna(waited)
    r["ttft_s"] = r.ttft_s.fillna(waited)
    r["queue_delay_s"] = r.queue_delay_s.fillna((waited - t_call).clip(lower=0.0))
    for c in ("first_admit_at", "first_token_at", "done_at"):
        r[c] = r[c].fillna(at)
    return r


def summarize_serving(res: ServingResult, slo: Slo | None = None, warmup_fraction: float = WARMUP_FRACTION) -> dict:
    """One row of numbers for a served trace (documented keys)."""
    stop = res.info.get("stopped_at")
    if stop is None:
        req = res.requests
        st = steady(req, warmup_fraction)
    else:  # stopped early (its SLO certainly missed): figures over the arrived requests, latencies as lower bounds
        req = lower_bounds(res.requests, stop, res.info["call_overhead_s"])
        st = steady(req, warmup_fraction, res.info["requests"])
    lat, ttft, q = st.latency_s.to_numpy(), st.ttft_s.to_numpy(), st.queue_delay_s.to_numpy()
    span = float(req.done_at.max() - req.arrival_at.min())
    out = {
        "requests": len(req),
        "offered_qps": float((len(req) - 1) / (req.arrival_at.max() - req.arrival_at.min()))
        if req.arrival_at.max() > req.arrival_at.min() else np.nan,
        "throughput_qps": len(req) / span if span > 0 else np.nan,
        "latency_mean_s": float(lat.mean()),
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p90_s": float(np.percentile(lat, 90)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "queue_delay_mean_s": float(q.mean()),
        "output_tokens_per_s": float(req.output_tokens.sum() / span) if span > 0 else np.nan,
    }
    # the same quantities under `vllm bench serve`'s names (ms, steady-state requests); TPOT is a request's mean
    # gap between output tokens after the first, (latency - TTFT) / (output tokens - 1); ITL is every gap
    # between successive output chunks of a generating call (one per engine iteration: a speculative iteration
    # emits its accepted tokens as one chunk, as vLLM streams them), over the rounds from the first steady-state
    # arrival on; gaps between a multi-call request's calls are latency, not ITL.
    many = st.output_tokens.to_numpy() > 1
    tpot = ((lat - ttft)[many] / (st.output_tokens.to_numpy()[many] - 1)) * 1e3
    out.update({
        "request_throughput": out["throughput_qps"], "output_throughput": out["output_tokens_per_s"],
        "mean_ttft_ms": float(ttft.mean() * 1e3), "median_ttft_ms": float(np.median(ttft) * 1e3),
        "p99_ttft_ms": float(np.percentile(ttft, 99) * 1e3),
        "mean_tpot_ms": float(tpot.mean()) if len(tpot) else np.nan,
        "median_tpot_ms": float(np.median(tpot)) if len(tpot) else np.nan,
        "p99_tpot_ms": float(np.percentile(tpot, 99)) if len(tpot) else np.nan,
        "mean_e2el_ms": float(lat.mean() * 1e3), "p99_e2el_ms": float(np.percentile(lat, 99) * 1e3),
    })
    if "itl" in res.info:
        out.update(itl_summary(*res.info["itl"], since=float(st.arrival_at.min()) if len(st) else 0.0))
    tl = res.timeline
    for name in ("small", "base"):
        e = tl[tl.engine == name]
        dur = e.duration_s.to_numpy()
        busy = dur.sum()
        out[f"{name}_utilization"] = float(busy / span) if span > 0 else 0.0
        out[f"{name}_batch_mean"] = float((e.batch * dur).sum() / busy) if busy > 0 else 0.0
        out[f"{name}_batch_max"] = int(e.batch.max()) if len(e) else 0
        cap = res.info["kv_capacity_tokens"][name]
        out[f"{name}_kv_occupancy_mean"] = float((e.kv_used_tokens * dur).sum() / busy / cap) if busy > 0 and cap else 0.0
        out[f"{name}_kv_occupancy_max"] = float(e.kv_used_tokens.max() / cap) if len(e) and cap else 0.0
        out[f"{name}_preemptions"] = res.info["preemptions"][name]
    pc = res.info.get("prefix_cache")
    if pc:  # vLLM's prefix_cache_queries / prefix_cache_hits (tokens), both engines, every call of the run
        q, h, qb, hb = (sum(v[i] for v in pc.values()) for i in range(4))
        out.update({"prefix_cache_queries_tokens": q, "prefix_cache_hits_tokens": h,
                    "prefix_cache_hit_rate": h / q if q else np.nan,
                    "prefix_cache_block_hit_rate": hb / qb if qb else np.nan})
    gr = res.info.get("gamma_rounds") or {}
    if gr:  # speculative base engine: the mean γ over its decoding iterations (constant unless a policy picks it)
        n = sum(gr.values())
        out["base_gamma_mean"] = float(sum(g * c for g, c in gr.items()) / n) if n else np.nan
    if slo is not None:
        ok = slo.per_request_ok(st)
        out["slo_attainment"] = float(ok.mean()) if len(ok) else np.nan
        # requests finishing within the SLO per second: the share within the SLO times the completed rate,
        # never above the throughput (and so never above the offered load once the run is stationary)
        out["goodput_qps"] = float(out["slo_attainment"] * out["throughput_qps"]) if len(ok) else 0.0
        if stop is None:
            out.update(stationarity(req, warmup_fraction))
            out["slo_met"] = slo.met(st) and out["stationary"]
        else:  # not judged: the SLO alone already fails
            out.update({"latency_growth": np.nan, "latency_growth_t": np.nan, "latency_drift": np.nan,
                        "stationary": False, "slo_met": False})
        for t in slo.terms:
            out[t.name] = t.value(st[t.metric].to_numpy())
    if stop is not None:
        out["stopped_early"] = True
        out["stopped_at_s"] = float(stop)
    return out


def weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The q-quantile of samples x with integer weights w (inverse CDF: the smallest x with F(x) >= q)."""
    return weighted_quantiles(x, w, (q,))[0]


def weighted_quantiles(x: np.ndarray, w: np.ndarray, qs) -> list[float]:
    """:func:`weighted_quantile` at each of ``qs``, sorting once."""
    o = np.argsort(x, kind="stable")
    c = np.cumsum(w[o])
    xs = x[o]
    return [float(xs[min(int(np.searchsorted(c, q * c[-1], side="left")), len(x) - 1)]) for q in qs]


def itl_summary(start: np.ndarray, duration: np.ndarray, weight: np.ndarray, since: float = 0.0) -> dict:
    """vLLM's ITL statistics (ms) from the rounds starting at or after ``since``: every decoding sequence of a
    round contributes one gap equal to the round's duration."""
    keep = (start >= since) & (weight > 0)
    x, w = duration[keep] * 1e3, weight[keep]
    if not len(x):
        return {"mean_itl_ms": np.nan, "median_itl_ms": np.nan, "p99_itl_ms": np.nan}
    med, p99 = weighted_quantiles(x, w, (0.5, 0.99))
    return {"mean_itl_ms": float((x * w).sum() / w.sum()), "median_itl_ms": med, "p99_itl_ms": p99}


def number_in_system(requests: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """N(t): requests arrived by t and not yet done."""
    a = np.sort(requests.arrival_at.to_numpy())
    d = np.sort(requests.done_at.to_numpy())
    return np.searchsorted(a, at, side="right") - np.searchsorted(d, at, side="right")


def littles_law(requests: pd.DataFrame, rate_per_s: float, lo: float = 0.2, hi: float = 0.8) -> tuple[float, float]:
    """(L, lambda W) over the window between the lo- and hi-quantiles of arrival times."""
    a = requests.arrival_at.to_numpy()
    t0, t1 = np.quantile(a, lo), np.quantile(a, hi)
    grid = np.linspace(t0, t1, 20001)
    L = float(number_in_system(requests, grid).mean())
    inside = (a >= t0) & (a <= t1)
    W = float(requests.latency_s.to_numpy()[inside].mean())
    return L, rate_per_s * W
