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

Both look at latency, which a continuous-batching engine can keep flat while it falls behind: every
admitted request slows down together, and a short run at several times the capacity drains after its
last arrival with no latency trend at all. So a rate also counts as *sustained* only if the replica
keeps up with its arrivals while they come (:func:`sustain`). The judged window runs from the later of
the first steady arrival and (first arrival + the p90 latency of the steady requests: the time the
system needs to fill) to the last arrival; T_w is its length, A the arrivals in it, D the completions
in it, W the steady requests' mean latency:

- throughput: D >= A - ``SUSTAIN_Z`` sqrt(A): the completed throughput D / T_w keeps within 2 sd of
  the Poisson count of the window's arrivals (``throughput_ratio`` D / A, ``sustain_tol`` 2 / sqrt(A));
- queue: the least-squares rise of N(t) (requests in the system) over the window <= ``SUSTAIN_Z`` sqrt(A)
  (``queue_growth``: the rise / A);
- length: T_w >= ``HORIZON_LATENCIES`` W and A >= ``MIN_WINDOW_ARRIVALS`` (``window_latencies``): a
  run shorter than a few of its own latencies cannot show a backlog (the idle single-request latency is
  no measure of it: under load every request of a batch slows down).

A stationary system has A - D = N(t1) - N(t0), whose sd is sqrt(2 Var N) <= sqrt(A) for a Poisson-like
N (Var N = lambda W) once T_w >= 2 W. The verdict makes the offered rate of the window A / T_w at most
the window's throughput D / T_w times 1 / (1 - ``sustain_tol``): no sustained rate exceeds the
throughput simulated at it by more than that. The nominal rate of an open-loop run differs from A / T_w
by the Poisson noise of the arrivals (sd 1 / sqrt(A) relative), the same in every configuration
(common random numbers) and averaged out over replications.

Warm-up: the first ``warmup_fraction`` of arrivals meet an empty system, so latency
statistics use the later requests only (all requests still load the system).

Little's law on the trace: over a window [t0, t1] of the stationary part,
    L = (1 / (t1 - t0)) * integral N(t) dt      (N: requests in system)
must equal lambda * W (lambda: arrival rate, W: mean time in system of the window's arrivals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.engines.serving.replica import ServingResult
from simulator.engines.serving.slo import Slo, weighted_quantiles

WARMUP_FRACTION = 0.1
DRIFT_LIMIT = 1.25  # unstable if the last quarter's mean latency exceeds 1.25x the second quarter's
TREND_BATCHES = 10
GROWTH_LIMIT = 0.2  # latency may rise by at most 20% of its mean over the steady window ...
TREND_T = 1.86  # ... unless the rise is not significant (one-sided 95%, t with TREND_BATCHES - 2 = 8 df)
SUSTAIN_Z = 2.0  # throughput / queue tolerance: this many sds of the window's Poisson arrival count (one-sided 97.7%)
HORIZON_LATENCIES = 4.0  # the judged window must span >= this many mean latencies of the run itself
MIN_WINDOW_ARRIVALS = 20  # ... and expect at least this many arrivals
RAMP_PERCENTILE = 90.0  # the window opens this percentile of the steady latencies after the first arrival


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


def stationarity(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION, closed_loop: bool = False) -> dict:
    """The one rule for "this rate is sustained" (capacity search, ``--qps``/load curves, report, validation): the
    latency checks (growth, its t, drift; ``latency_steady`` their verdict) and :func:`sustain`'s; ``stationary`` is the
    verdict of all of them.
    ``closed_loop``: users wait for their answers, so no queue outgrows them: :func:`sustain`'s figures are
    reported but not required."""
    growth, t = latency_trend(requests, warmup_fraction)
    drift = latency_drift(requests)
    ok = not (growth > GROWTH_LIMIT and t > TREND_T) and drift <= DRIFT_LIMIT
    out = {"latency_growth": growth, "latency_growth_t": t, "latency_drift": drift, "latency_steady": bool(ok)}
    out.update(sustain(requests, warmup_fraction))
    if closed_loop:
        out["sustained"] = True
    out["stationary"] = bool(ok and out["sustained"])
    return out


def sustain(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION) -> dict:
    """Whether the replica keeps up with its arrivals (module docstring): the window's arrivals and completions per
    second, their ratio, the queue's rise, the window's length in mean latencies, the tolerance, ``keeps_up`` (None:
    no window to judge), ``too_short`` (too short in time to judge: a longer run might pass) and the verdict."""
    r = requests.sort_values("arrival_at")
    a, d = r.arrival_at.to_numpy(), r.done_at.to_numpy()
    n = len(a)
    lat = steady(r, warmup_fraction).latency_s.to_numpy()
    nan = float("nan")
    out = {"window_offered_qps": nan, "window_throughput_qps": nan, "throughput_ratio": nan, "queue_growth": nan,
           "window_arrivals": 0, "window_latencies": 0.0, "sustain_tol": nan, "too_short": True, "keeps_up": None,
           "sustained": False}
    if n < 2 or not len(lat):
        return out
    w = float(lat.mean())
    t0 = max(float(a[int(n * warmup_fraction)]), float(a[0] + np.percentile(lat, RAMP_PERCENTILE)))
    t1 = float(a[-1])
    span = t1 - t0
    arrived = int(np.count_nonzero((a > t0) & (a <= t1)))
    if not (span > 0 and arrived > 0):
        return out
    done = int(np.count_nonzero((d > t0) & (d <= t1)))
    grid = np.linspace(t0, t1, 257)
    x = grid - grid.mean()
    rise = float((x * number_in_system(r, grid)).sum() / (x * x).sum()) * span
    slack = SUSTAIN_Z * np.sqrt(arrived)
    too_short = bool(span < HORIZON_LATENCIES * w or arrived < MIN_WINDOW_ARRIVALS)
    keeps_up = bool(done >= arrived - slack and rise <= slack)
    out.update({"window_offered_qps": arrived / span, "window_throughput_qps": done / span,
                "throughput_ratio": done / arrived, "queue_growth": rise / arrived, "window_arrivals": arrived,
                "window_latencies": span / w if w > 0 else np.inf, "sustain_tol": float(slack / arrived),
                "too_short": too_short, "keeps_up": keeps_up, "sustained": keeps_up and not too_short})
    return out


def saturated_throughput(requests: pd.DataFrame) -> tuple[float, int]:
    """(completions per second while some request waits for admission, completions counted). While one waits
    the engine is at its admission limit (sequences, KV blocks), so this is the replica's full completion rate:
    a run whose offered rate lies well above it is overloaded however long it runs. NaN when none waited."""
    end = requests.first_admit_at.to_numpy()
    start = end - requests.queue_delay_s.to_numpy()
    keep = end > start + 1e-9
    if not keep.any():
        return float("nan"), 0
    order = np.argsort(start[keep], kind="stable")
    lo, hi = start[keep][order], end[keep][order]
    merged_lo, merged_hi = [lo[0]], [hi[0]]
    for a, b in zip(lo[1:], hi[1:]):
        if a <= merged_hi[-1]:
            merged_hi[-1] = max(merged_hi[-1], b)
        else:
            merged_lo.append(a)
            merged_hi.append(b)
    mlo, mhi = np.array(merged_lo), np.array(merged_hi)
    d = np.sort(requests.done_at.to_numpy())
    count = int((np.searchsorted(d, mhi, side="left") - np.searchsorted(d, mlo, side="right")).sum())
    dur = float((mhi - mlo).sum())
    return (count / dur if dur > 0 else float("nan")), count


def needed_span(requests: pd.DataFrame, rate: float, warmup_fraction: float = WARMUP_FRACTION) -> float:
    """The arrival span (s) a run at ``rate`` needs for :func:`sustain`'s window to be long enough, were its
    latencies those of ``requests``: T_w >= HORIZON_LATENCIES W after the ramp and the warm-up, with at least
    MIN_WINDOW_ARRIVALS expected arrivals."""
    lat = steady(requests, warmup_fraction).latency_s.to_numpy()
    if not len(lat):
        return 0.0
    w, ramp = float(lat.mean()), float(np.percentile(lat, RAMP_PERCENTILE))
    window = max(HORIZON_LATENCIES * w, MIN_WINDOW_ARRIVALS / rate)
    return max(window / (1.0 - warmup_fraction), ramp + window)


def steady(requests: pd.DataFrame, warmup_fraction: float = WARMUP_FRACTION, planned: int | None = None) -> pd.DataFrame:
    """The requests after the warm-up: the first ``warmup_fraction`` of the ``planned`` requests (default: all of
    them; a stopped run's table holds only those that arrived) by arrival are skipped."""
    r = requests.sort_values("arrival_at")
    return r.iloc[int((len(r) if planned is None else planned) * warmup_fraction):]


def lower_bounds(requests: pd.DataFrame, at: float, t_call: float) -> pd.DataFrame:
    """A stopped run's requests (``simulator.engines.serving.early_stop``) with every time still unknown at ``at`` set to
    ``at``: latency, TTFT and queue delay of the unfinished ones become their lower bounds."""
    r = requests.copy()
    waited = at - r.arrival_at
    r["latency_s"] = r.latency_s.fillna(waited)
    r["ttft_s"] = r.ttft_s.fillna(waited)
    r["queue_delay_s"] = r.queue_delay_s.fillna((waited - t_call).clip(lower=0.0))
    for c in ("first_admit_at", "first_token_at", "done_at"):
        r[c] = r[c].fillna(at)
    return r


def summarize_serving(res: ServingResult, slo: Slo | None = None, warmup_fraction: float = WARMUP_FRACTION,
                      closed_loop: bool = False) -> dict:
    """One row of numbers for a served trace (documented keys); ``closed_loop``: see :func:`stationarity`."""
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
    _add_bench_names(out, st, lat, ttft)
    if "itl" in res.info:
        out.update(itl_summary(*res.info["itl"], since=float(st.arrival_at.min()) if len(st) else 0.0))
    _add_engine_figures(out, res, span)
    if slo is not None:
        _add_slo_figures(out, res, slo, req, st, stop, warmup_fraction, closed_loop)
    if stop is not None:
        out["stopped_early"] = True
        out["stopped_at_s"] = float(stop)
    return out


def _add_bench_names(out: dict, st: pd.DataFrame, lat: np.ndarray, ttft: np.ndarray) -> None:
    """The latency figures again under `vllm bench serve`'s names, with TPOT and ITL."""
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


def _add_engine_figures(out: dict, res: ServingResult, span: float) -> None:
    """Per engine: utilization, batch and KV occupancy, preemptions; prefix-cache hits; the base engine's mean γ."""
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
        out[f"{name}_over_capacity"] = res.info.get("over_capacity", {}).get(name, 0)
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


def _add_slo_figures(out: dict, res: ServingResult, slo: Slo, req: pd.DataFrame, st: pd.DataFrame, stop,
                     warmup_fraction: float, closed_loop: bool) -> None:
    """SLO attainment, goodput, the stationarity verdict (not judged for a run stopped early) and the SLO's
    statistics."""
    ok = slo.per_request_ok(st)
    out["slo_attainment"] = float(ok.mean()) if len(ok) else np.nan
    # requests finishing within the SLO per second: the share within the SLO times the completed rate,
    # never above the throughput (and so never above the offered load once the run is stationary)
    out["goodput_qps"] = float(out["slo_attainment"] * out["throughput_qps"]) if len(ok) else 0.0
    itl = steady_itl(res.info["itl"], float(st.arrival_at.min()) if len(st) else 0.0) if "itl" in res.info else None
    if stop is None:
        out.update(stationarity(req, warmup_fraction, closed_loop))
        out["slo_met"] = slo.met(st, itl) and out["stationary"]
    else:  # not judged: the SLO alone already fails
        out.update({"latency_growth": np.nan, "latency_growth_t": np.nan, "latency_drift": np.nan,
                    "window_offered_qps": np.nan, "window_throughput_qps": np.nan, "throughput_ratio": np.nan,
                    "queue_growth": np.nan, "window_arrivals": 0, "window_latencies": np.nan, "sustain_tol": np.nan,
                    "too_short": False, "keeps_up": None,
                    "sustained": False, "stationary": False, "slo_met": False})
    out.update(slo.values(st, itl))


def steady_itl(itl: tuple, since: float) -> tuple[np.ndarray, np.ndarray]:
    """(gap s, weight) of the decoding rounds starting at or after ``since`` (``info["itl"]``: start, duration,
    weight): the ITL samples of an SLO term, the ones :func:`itl_summary` summarises."""
    start, duration, weight = itl
    keep = (start >= since) & (weight > 0)
    return duration[keep], weight[keep]


def itl_summary(start: np.ndarray, duration: np.ndarray, weight: np.ndarray, since: float = 0.0) -> dict:
    """vLLM's ITL statistics (ms) from the rounds starting at or after ``since``: every decoding sequence of a
    round contributes one gap equal to the round's duration."""
    x, w = steady_itl((start, duration, weight), since)
    x = x * 1e3
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
