"""Stopping an open-loop serving run as soon as its SLO is certainly missed (hopeless rates stop early).

Every SLO statistic (a mean, or a percentile as ``numpy.percentile`` computes it) never decreases when a sample
increases. At time t each steady request's value has a lower bound:

- a finished request's latency (TTFT, queue delay once admitted) is known;
- a request still in the system has latency >= t - arrival (TTFT >= t - arrival until its first token, queue
  delay >= t - arrival - t_call until its first admission);
- a request that has not arrived yet, >= 0.

So if a term's statistic over these lower bounds already exceeds its limit, the term's statistic of the finished
run does too, whatever happens after t: the rate misses the SLO and the run can stop. The verdict (``slo_met``
False) is the full run's; what differs is only the figures of the stopped run (lower bounds over the requests
that arrived; the summary row says ``stopped_early``). The steady requests are the full run's: request i arrives
i-th (an open loop), the first ``warmup_fraction`` of the planned requests are skipped as in
:func:`simulator.engines.serving.metrics.steady`. A relative margin of 1e-9 on the limit keeps the certificate clear of
rounding.
"""

from __future__ import annotations

import numpy as np

from simulator.engines.serving.slo import STATS, Slo

MARGIN = 1e-9


class SloStop:
    """The check, bound to one run by :meth:`start`; :meth:`missed` is called as requests finish."""

    def __init__(self, slo: Slo, warmup_fraction: float):
        self.slo = slo
        self.warmup_fraction = warmup_fraction

    def start(self, n_requests: int, t_call: float) -> "SloStop":
        self.first = int(n_requests * self.warmup_fraction)
        self.m = n_requests - self.first  # steady requests
        self.t_call = t_call
        self.arrival = np.full(self.m, np.inf)  # not arrived yet: lower bound 0
        self.latency = np.full(self.m, np.nan)  # unknown until done
        # per term: the fewest lower bounds above the limit that can put the statistic above it (a cheap pre-check)
        self.need = []
        for t in self.slo.terms:
            q = STATS[t.stat]
            self.need.append(1 if q is None else max(self.m - int(np.floor((self.m - 1) * q / 100.0)) - 1, 1))
        return self

    def arrived(self, rid: int, at: float) -> None:
        if rid >= self.first:
            self.arrival[rid - self.first] = at

    def finished(self, rid: int, latency: float) -> None:
        if rid >= self.first:
            self.latency[rid - self.first] = latency

    def missed(self, at: float, reqs: dict) -> bool:
        """Whether some term's statistic over the steady requests' lower bounds at time ``at`` exceeds its limit."""
        if self.m <= 0:
            return False
        waited = np.maximum(at - self.arrival, 0.0)
        for t, need in zip(self.slo.terms, self.need):
            if t.metric == "latency_s":
                lb = np.where(np.isnan(self.latency), waited, self.latency)
            else:
                lb = self._other(t.metric, at, reqs, waited)
            if np.count_nonzero(lb > t.limit_s) < need:
                continue
            if t.value(lb) > t.limit_s * (1.0 + MARGIN):
                return True
        return False

    def _other(self, metric: str, at: float, reqs: dict, waited: np.ndarray) -> np.ndarray:
        lb = np.zeros(self.m)
        for i in range(self.m):
            r = reqs.get(self.first + i)
            if r is None:
                continue
            if metric == "ttft_s":
                v = r.first_token_at - r.arrival_at
                lb[i] = waited[i] if v != v else v
            else:  # queue_delay_s
                v = r.first_admit_at - r.arrival_at - self.t_call
                lb[i] = max(waited[i] - self.t_call, 0.0) if v != v else v
        return lb
