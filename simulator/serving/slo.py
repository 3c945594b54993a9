"""Service-level objectives: ``"p99_latency<=300s"``, ``"mean_ttft <= 2.5"``, several joined by
``,`` or ``and`` (all must hold).

Grammar (case-insensitive, spaces ignored): ``STAT_METRIC <= NUMBER [UNIT]`` with STAT one of
mean, p50, p90, p95, p99 (also ``median``), METRIC one of latency, ttft, queue_delay (also
``queue``), UNIT one of s (default), ms, min. ``<`` is accepted and means the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from simulator.errors import InputError

STATS = {"mean": None, "median": 50.0, "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
METRICS = {"latency": "latency_s", "e2e": "latency_s", "ttft": "ttft_s", "queue_delay": "queue_delay_s",
           "queue": "queue_delay_s"}
UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "min": 60.0}
_TERM = re.compile(r"^(?P<stat>[a-z0-9]+)_(?P<metric>[a-z_0-9]+?)<=?(?P<value>[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?)(?P<unit>[a-z]*)$")


@dataclass(frozen=True)
class SloTerm:
    stat: str  # mean | p50 | ...
    metric: str  # column of the request table, e.g. latency_s
    limit_s: float

    @property
    def name(self) -> str:
        return f"{self.stat}_{self.metric}"

    def value(self, samples: np.ndarray) -> float:
        if len(samples) == 0:
            return float("nan")
        q = STATS[self.stat]
        return float(np.mean(samples)) if q is None else float(np.percentile(samples, q))

    def met(self, samples: np.ndarray) -> bool:
        v = self.value(samples)
        return bool(v == v and v <= self.limit_s)


@dataclass(frozen=True)
class Slo:
    terms: tuple[SloTerm, ...]
    text: str

    def met(self, requests) -> bool:
        return all(t.met(requests[t.metric].to_numpy()) for t in self.terms)

    def per_request_ok(self, requests) -> np.ndarray:
        """Requests within every term's limit (the goodput criterion)."""
        ok = np.ones(len(requests), bool)
        for t in self.terms:
            ok &= requests[t.metric].to_numpy() <= t.limit_s
        return ok


def parse_slo(text: str, field: str = "--slo") -> Slo:
    if not isinstance(text, str) or not text.strip():
        raise InputError(None, field, "empty SLO; expected e.g. 'p99_latency<=300s'")
    parts = [p for p in re.split(r",|\band\b", text.lower()) if p.strip()]
    terms = []
    for part in parts:
        s = re.sub(r"\s+", "", part)
        m = _TERM.match(s)
        if not m:
            raise InputError(None, field, f"cannot parse {part.strip()!r}; expected STAT_METRIC<=SECONDS like "
                             "'p99_latency<=300s' (STAT: mean, p50, p90, p95, p99; METRIC: latency, ttft, queue_delay)")
        stat, metric, unit = m["stat"], m["metric"], m["unit"] or "s"
        if stat not in STATS:
            raise InputError(None, field, f"unknown statistic {stat!r} in {part.strip()!r}; use one of {', '.join(STATS)}")
        if metric not in METRICS:
            raise InputError(None, field, f"unknown metric {metric!r} in {part.strip()!r}; use latency, ttft or queue_delay")
        if unit not in UNITS:
            raise InputError(None, field, f"unknown unit {unit!r} in {part.strip()!r}; use s, ms or min")
        limit = float(m["value"]) * UNITS[unit]
        if not np.isfinite(limit) or limit <= 0:
            raise InputError(None, field, f"limit must be a positive number of seconds (got {m['value']})")
        terms.append(SloTerm("p50" if stat == "median" else stat, METRICS[metric], limit))
    return Slo(tuple(terms), text.strip())
