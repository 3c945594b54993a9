"""The single-request engines by name, behind one interface and one result record.

An engine predicts one what-if point (:class:`GridPoint`: a configuration on one hardware/TP, its cost tables and
the analytic engine's cost vectors) and returns a :class:`PointResult`. ``analytic`` sums the expected cost in
closed form (:mod:`simulator.engines.analytic`); ``des`` samples requests and runs them through the discrete-event
simulation (:mod:`simulator.engines.des`), adding the spread of latencies (:data:`DES_COLUMNS`). Both fill the same
result columns, so a study picks an engine by name (:func:`get_engine`) and never tests for one.

The serving simulator (:func:`simulator.engines.serving.simulate_serving`) is not one of these: it runs a stream of
arrivals on batching engines and answers with throughput and latency distributions under load, not one point's
expected latency.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from simulator.cost.cost_tables import COMPONENTS, CostTables
from simulator.engines.analytic import CostVectors, MixturePredictor
from simulator.engines.des import simulate, summarize
from simulator.errors import InputError
from simulator.inputs.systems import SystemConfig

SUMMARY_COLUMNS = ("latency_s", "small_step_fraction", "acceptance_length", "thinking_tokens", "steps")
DES_COLUMNS = ("latency_p50_s", "latency_p90_s", "latency_p99_s", "ci_low_s", "ci_high_s", "requests")


@dataclass(frozen=True)
class GridPoint:
    """One point to predict: ``cfg`` on the hardware/TP named by ``key`` (``"hw|tp|label"``), its cost ``tables``,
    the mixture predictor ``mix`` with its cost ``vectors`` at the configuration's gamma, and what a sampling engine
    draws (``requests`` requests, from ``seed`` mixed with ``key``)."""

    cfg: SystemConfig
    tables: CostTables
    mix: MixturePredictor
    vectors: list[CostVectors]
    key: str
    requests: int
    seed: int


@dataclass(frozen=True)
class PointResult:
    """One point's prediction: mean latency (s) and its per-component breakdown (``cost_tables.COMPONENTS``, s),
    the fraction of steps the small model kept, tokens per verification (NaN without speculative decoding),
    thinking tokens and steps per request; ``spread``: the sampled latency distribution (:data:`DES_COLUMNS`,
    sampling engines only)."""

    latency_s: float
    small_step_fraction: float
    acceptance_length: float
    thinking_tokens: float
    steps: float
    components: dict[str, float]
    spread: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_summary(cls, out: dict, spread=()) -> "PointResult":
        """From an engine's summary dict (the summary columns, every component, and the ``spread`` keys)."""
        return cls(*(out[c] for c in SUMMARY_COLUMNS), {c: out[c] for c in COMPONENTS}, {c: out[c] for c in spread})

    def row(self) -> dict:
        """The result columns of one row of a what-if table."""
        return {**{c: getattr(self, c) for c in SUMMARY_COLUMNS}, **self.components, **self.spread}


class AnalyticEngine:
    """Closed-form expected latency (:class:`simulator.engines.analytic.MixturePredictor`)."""

    name = "analytic"
    columns: tuple[str, ...] = ()
    samples = False

    def predict(self, point: GridPoint) -> PointResult:
        return PointResult.from_summary(point.mix.predict(point.cfg, point.vectors))


class DesEngine:
    """Sampled requests through the discrete-event simulation; acceptance length from the analytic engine."""

    name = "des"
    columns = DES_COLUMNS
    samples = True

    def predict(self, point: GridPoint) -> PointResult:
        # a distinct, reproducible stream per grid point
        point_seed = [point.seed, zlib.crc32(point.key.encode())]
        req, _ = simulate(point.cfg, point.tables, point.requests, np.random.SeedSequence(point_seed).generate_state(1)[0])
        out = summarize(req)
        out["acceptance_length"] = (point.mix.predict(point.cfg, point.vectors)["acceptance_length"]
                                    if point.cfg.gamma else np.nan)
        return PointResult.from_summary(out, DES_COLUMNS)


ENGINES = {e.name: e for e in (AnalyticEngine(), DesEngine())}


def get_engine(name: str):
    """The engine registered as ``name``; an unknown name is an :class:`InputError` listing the known ones."""
    try:
        return ENGINES[name]
    except KeyError:
        raise InputError(None, "engine", f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
