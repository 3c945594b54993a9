"""Service-level objectives: ``"p99_latency<=300s"``, ``"mean_ttft <= 2.5"``, ``"p99_tpot<=50ms"``, several joined
by ``,`` or ``and`` (all must hold).

Grammar (case-insensitive, spaces ignored): ``STAT_METRIC <= NUMBER [UNIT]`` with STAT one of
mean, p50, p90, p95, p99 (also ``median``), METRIC one of latency (also ``e2e``, ``e2el``), ttft, queue_delay
(also ``queue``), tpot, itl, UNIT one of s (default), ms, min. ``<`` is accepted and means the same.

The metrics as ``vllm bench serve`` defines them (``simulator.engines.serving.metrics.summarize_serving`` computes the
same figures): latency, TTFT and queue delay per request; TPOT per request, (latency - TTFT) / (output tokens - 1),
over the requests with more than one output token (a one-token request has no TPOT: it meets any TPOT limit); ITL
pooled over every gap between successive output chunks of every request (each decoding round contributes its
duration once per sequence that emitted a chunk in it), so an ITL term has no per-request value and does not enter
the per-request goodput criterion. Statistics over the steady-state requests (and their rounds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from simulator.errors import InputError

STATS = {"mean": None, "median": 50.0, "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
METRICS = {"latency": "latency_s", "e2e": "latency_s", "e2el": "latency_s", "ttft": "ttft_s",
           "queue_delay": "queue_delay_s", "queue": "queue_delay_s", "tpot": "tpot_s", "itl": "itl_s"}
PER_REQUEST = ("latency_s", "ttft_s", "queue_delay_s", "tpot_s")  # metrics with a value per request
UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "min": 60.0}
_TERM = re.compile(r"^(?P<stat>[a-z0-9]+)_(?P<metric>[a-z_0-9]+?)<=?(?P<value>[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?)(?P<unit>[a-z]*)$")


def tpot_s(requests) -> np.ndarray:
    """Per request (latency - TTFT) / (output tokens - 1) in seconds; NaN for a request of one output token."""
    out = requests["output_tokens"].to_numpy().astype(float)
    gap = requests["latency_s"].to_numpy() - requests["ttft_s"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(out > 1, gap / (out - 1), np.nan)


@dataclass(frozen=True)
class SloTerm:
    stat: str  # mean | p50 | ...
    metric: str  # column of the request table (latency_s, ttft_s, queue_delay_s), tpot_s or itl_s
    limit_s: float

    @property
    def name(self) -> str:
        return f"{self.stat}_{self.metric}"

    def samples(self, requests) -> np.ndarray:
        """The term's per-request values (TPOT: the requests that have one); not for ITL (see :meth:`Slo.values`)."""
        if self.metric == "tpot_s":
            x = tpot_s(requests)
            return x[~np.isnan(x)]
        return requests[self.metric].to_numpy()

    def value(self, samples: np.ndarray, weights: np.ndarray | None = None) -> float:
        """The statistic of ``samples`` (``weights``: integer weights, e.g. ITL rounds x sequences)."""
        if weights is not None:
            samples, weights = samples[weights > 0], weights[weights > 0]
        if len(samples) == 0:
            return float("nan")
        q = STATS[self.stat]
        if weights is not None:
            if q is None:
                return float((samples * weights).sum() / weights.sum())
            return weighted_quantile(samples, weights, q / 100.0)
        return float(np.mean(samples)) if q is None else float(np.percentile(samples, q))

    def met(self, samples: np.ndarray, weights: np.ndarray | None = None) -> bool:
        v = self.value(samples, weights)
        return bool(v == v and v <= self.limit_s)


@dataclass(frozen=True)
class Slo:
    terms: tuple[SloTerm, ...]
    text: str

    def values(self, requests, itl: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
        """Each term's statistic over ``requests`` (``itl``: the (gap s, weight) samples of the same requests' decoding
        rounds, needed by an ITL term: NaN without them)."""
        out = {}
        for t in self.terms:
            if t.metric == "itl_s":
                out[t.name] = t.value(*itl) if itl is not None else float("nan")
            else:
                out[t.name] = t.value(t.samples(requests))
        return out

    def met(self, requests, itl: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
        v = self.values(requests, itl)
        return all(v[t.name] == v[t.name] and v[t.name] <= t.limit_s for t in self.terms)

    def per_request_ok(self, requests) -> np.ndarray:
        """Requests within every per-request term's limit (the goodput criterion, as vLLM's ``--goodput``; a request
        without a TPOT meets a TPOT term; ITL terms have no per-request value)."""
        ok = np.ones(len(requests), bool)
        for t in self.terms:
            if t.metric == "tpot_s":
                x = tpot_s(requests)
                ok &= np.isnan(x) | (x <= t.limit_s)
            elif t.metric in PER_REQUEST:
                ok &= requests[t.metric].to_numpy() <= t.limit_s
        return ok

    @property
    def stops_early(self) -> bool:
        """Whether ``serving.early_stop`` bounds every term (latency, TTFT, queue delay): only then may a run stop
        as soon as the SLO is certainly missed."""
        return all(t.metric in ("latency_s", "ttft_s", "queue_delay_s") for t in self.terms)


def parse_slo(text: str, field: str = "--slo") -> Slo:
    if not isinstance(text, str) or not text.strip():
        raise InputError(None, field, "empty SLO; expected e.g. 'p99_latency<=300s'")
    parts = re.split(r",|\band\b", text.lower())
    if any(not p.strip() for p in parts):
        raise InputError(None, field, f"an empty term in {text.strip()!r} (a comma or 'and' with nothing beside it); "
                         "expected terms like 'p99_latency<=300s,mean_ttft<=2s'")
    terms = []
    for part in parts:
        s = re.sub(r"\s+", "", part)
        m = _TERM.match(s)
        if not m:
            raise InputError(None, field, f"cannot parse {part.strip()!r}; expected STAT_METRIC<=SECONDS like "
                             "'p99_latency<=300s' (STAT: mean, p50, p90, p95, p99; METRIC: latency, ttft, queue_delay, "
                             "tpot, itl)")
        stat, metric, unit = m["stat"], m["metric"], m["unit"] or "s"
        if stat not in STATS:
            raise InputError(None, field, f"unknown statistic {stat!r} in {part.strip()!r}; use one of {', '.join(STATS)}")
        if metric not in METRICS:
            raise InputError(None, field, f"unknown metric {metric!r} in {part.strip()!r}; use latency, ttft, queue_delay, "
                             "tpot or itl")
        if unit not in UNITS:
            raise InputError(None, field, f"unknown unit {unit!r} in {part.strip()!r}; use s, ms or min")
        limit = float(m["value"]) * UNITS[unit]
        if not np.isfinite(limit) or limit <= 0:
            raise InputError(None, field, f"limit must be a positive number of seconds (got {m['value']})")
        terms.append(SloTerm("p50" if stat == "median" else stat, METRICS[metric], limit))
    return Slo(tuple(terms), text.strip())


def weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The q-quantile of samples x with integer weights w (inverse CDF: the smallest x with F(x) >= q)."""
    return weighted_quantiles(x, w, (q,))[0]


def weighted_quantiles(x: np.ndarray, w: np.ndarray, qs) -> list[float]:
    """:func:`weighted_quantile` at each of ``qs``, sorting once."""
    o = np.argsort(x, kind="stable")
    c = np.cumsum(w[o])
    xs = x[o]
    return [float(xs[min(int(np.searchsorted(c, q * c[-1], side="left")), len(x) - 1)]) for q in qs]
