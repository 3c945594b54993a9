"""Arrival processes: when requests reach the deployment.

- :class:`PoissonArrivals` (rate λ): gaps ~ Exponential(mean 1/λ).
- :class:`BurstyArrivals` (rate λ, coefficient of variation cv): gaps ~ Gamma(shape k = 1/cv²,
  scale 1/(k λ)), mean 1/λ and CV cv (cv = 1 is Poisson, cv > 1 bursty).
- :class:`ClosedLoopUsers` (N users, think time): each user sends a request, waits for its
  answer, thinks (Exponential, mean ``think_time_s``; 0 = none) and sends the next one.
- :class:`ReplayArrivals`: arrival instants read from a file (:func:`load_arrival_times`).
- :class:`StagedArrivals`: load stages, a list of (rate, duration), Poisson within each.
- A burst (every request at once, vLLM's ``--request-rate inf``) is ``PoissonArrivals(inf)``.
- :class:`RampArrivals`: a rate ramped from a start to an end over the run's requests (linear or exponential).
- :class:`CappedArrivals`: an open loop with at most N requests in flight (``--max-concurrency`` with a rate).

Open-loop gaps are drawn as *standard* variates and scaled by 1/λ, so with a fixed seed the
arrival instants at rate 2λ are exactly half those at rate λ (common random numbers: latency
vs load curves are smooth and monotone comparisons are paired).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.errors import InputError


@dataclass(frozen=True)
class PoissonArrivals:
    rate_per_s: float

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.cumsum(rng.standard_exponential(n)) / self.rate_per_s

    @property
    def label(self) -> str:
        return f"poisson({self.rate_per_s:.4g}/s)"


@dataclass(frozen=True)
class BurstyArrivals:
    rate_per_s: float
    cv: float

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k = 1.0 / self.cv**2
        return np.cumsum(rng.standard_gamma(k, n) / k) / self.rate_per_s

    @property
    def label(self) -> str:
        return f"gamma({self.rate_per_s:.4g}/s, cv={self.cv:g})"


@dataclass(frozen=True)
class ReplayArrivals:
    arrival_times_s: tuple[float, ...]
    source: str = "replay"

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        t = np.asarray(self.arrival_times_s[:n], dtype=float)
        return t - t[0] if len(t) else t

    @property
    def rate_per_s(self) -> float:
        t = self.arrival_times_s
        return (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else float("nan")

    @property
    def label(self) -> str:
        return f"replay({self.source}, {len(self.arrival_times_s)} arrivals)"


@dataclass(frozen=True)
class ClosedLoopUsers:
    users: int
    think_time_s: float = 0.0

    @property
    def label(self) -> str:
        return f"closed({self.users} users, think {self.think_time_s:g}s)"

    def processes(self, jobs: int) -> int:
        """Users worth simulating for a run of ``jobs`` requests (or sessions): at most one per job -- a user beyond
        them never sends one, so the results are those of ``users`` users, and 10^8 users cost what ``jobs`` do."""
        u = self.users
        if not (isinstance(u, (int, float, np.integer, np.floating)) and u >= 1 and float(u).is_integer()):
            raise ValueError(f"closed-loop users must be an integer >= 1 (got {u!r})")
        return int(min(u, jobs))


@dataclass(frozen=True)
class StagedArrivals:
    """Load stages: Poisson at ``rate`` for ``duration`` seconds, stage after stage ((rate, duration), ...). The
    number of arrivals is what the stages give (``times(n)`` returns at most n of them)."""

    stages: tuple[tuple[float, float], ...]

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        out, t0 = [], 0.0
        for rate, dur in self.stages:
            k = max(int(rate * dur * 1.5 + 10 * np.sqrt(rate * dur) + 10), 1)
            t = np.cumsum(rng.standard_exponential(k)) / rate
            while t[-1] < dur:  # rare: more arrivals than the generous first draw
                t = np.concatenate([t, t[-1] + np.cumsum(rng.standard_exponential(k)) / rate])
            out.append(t0 + t[t < dur])
            t0 += dur
        return np.concatenate(out)[:n]

    @property
    def rate_per_s(self) -> float:
        return sum(r * d for r, d in self.stages) / sum(d for _, d in self.stages)

    @property
    def label(self) -> str:
        return "stages(" + ", ".join(f"{r:.4g}/s x {d:g}s" for r, d in self.stages) + ")"


@dataclass(frozen=True)
class RampArrivals:
    """`vllm bench serve --ramp-up-strategy linear|exponential --ramp-up-start-rps A --ramp-up-end-rps B`: request i
    of n follows a gap drawn at the rate of its place in the run, p = i / (n - 1): A + (B - A) p (linear) or
    A (B / A)^p (exponential); Gamma gaps of coefficient of variation ``cv`` (1: Poisson), as vLLM draws them."""

    strategy: str
    start_rps: float
    end_rps: float
    cv: float = 1.0

    def rates(self, n: int) -> np.ndarray:
        p = np.arange(n) / max(n - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * p
        return self.start_rps * (self.end_rps / self.start_rps) ** p

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k = 1.0 / self.cv**2
        return np.cumsum(rng.standard_gamma(k, n) / k / self.rates(n))

    @property
    def rate_per_s(self) -> float:
        return float("nan")  # no one rate: the run's mean depends on its length

    @property
    def label(self) -> str:
        return f"{self.strategy} ramp({self.start_rps:g} -> {self.end_rps:g}/s)"


@dataclass(frozen=True)
class CappedArrivals:
    """An open loop with at most ``max_concurrency`` requests in flight (`vllm bench serve --request-rate R
    --max-concurrency N`): requests arrive as ``inner`` gives them, and one is sent only once fewer than N are
    unanswered, first come first served (the client's semaphore); its latency counts from when it is sent, as the
    benchmark's clock starts inside the semaphore."""

    inner: PoissonArrivals | BurstyArrivals | RampArrivals
    max_concurrency: int

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.inner.times(n, rng)

    @property
    def rate_per_s(self) -> float:
        return self.inner.rate_per_s

    @property
    def label(self) -> str:
        return f"{self.inner.label} at most {self.max_concurrency} in flight"


ArrivalProcess = (PoissonArrivals | BurstyArrivals | ReplayArrivals | ClosedLoopUsers | StagedArrivals | RampArrivals
                  | CappedArrivals)


def load_arrival_times(path: str | Path) -> ReplayArrivals:
    """Arrival instants (seconds), one per line: CSV (a number, optional header
    ``arrival_s``/``arrival_time_s``/``t``; extra columns ignored: the first is used) or JSONL
    (a number or an object with one of those keys). Non-decreasing; errors name the line."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "arrival file not found")
    jsonl = p.suffix.lower() in (".jsonl", ".ndjson")
    keys = ("arrival_s", "arrival_time_s", "arrival_at", "t")
    out: list[float] = []
    for lineno, raw in enumerate(p.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if jsonl:
                obj = json.loads(line)
                if isinstance(obj, dict):
                    key = next((k for k in keys if k in obj), None)
                    if key is None:
                        raise ValueError(f"object needs one of {', '.join(keys)}")
                    obj = obj[key]
                if isinstance(obj, bool) or not isinstance(obj, (int, float)):
                    raise ValueError("expected a number")
                v = float(obj)
            else:
                cell = line.split(",")[0].strip()
                if not out and cell.strip('"') in keys:
                    continue  # header
                v = float(cell)
        except (ValueError, json.JSONDecodeError) as e:
            raise InputError(str(p), f"line {lineno}", f"expected an arrival time in seconds ({e}; got {raw[:60]!r})") from None
        if not np.isfinite(v) or v < 0:
            raise InputError(str(p), f"line {lineno}", f"arrival time must be a finite number >= 0 (got {v})")
        if out and v < out[-1]:
            raise InputError(str(p), f"line {lineno}", f"arrival times must be non-decreasing ({v} < {out[-1]})")
        out.append(v)
    if len(out) < 2:
        raise InputError(str(p), None, "need at least 2 arrival times")
    return ReplayArrivals(tuple(out), p.name)
