"""Serving-level simulation: many requests at once on continuous-batching engines.

One concept per module: ``arrivals`` (when requests come), ``kv_cache`` (static memory split),
``prefix_cache`` (KV reused across calls and requests), ``bench_workload`` (plain serving workloads as benchmarks
define them), ``engine`` (one continuous-batching engine), ``replica`` (colocated engines on shared GPUs,
the SimPy process; requests come from ``simulator.engines.request_model``, the sampler of the
single-request DES), ``clients`` (who sends them: open loop, closed-loop users, sessions), ``metrics`` (summaries, goodput, Little's law), ``slo`` (SLO strings).
"""

from simulator.engines.serving.arrivals import (BurstyArrivals, ClosedLoopUsers, PoissonArrivals, ReplayArrivals,
                                        StagedArrivals, load_arrival_times)
from simulator.engines.serving.replica import ServingResult, simulate_serving

__all__ = ["BurstyArrivals", "ClosedLoopUsers", "PoissonArrivals", "ReplayArrivals", "ServingResult", "StagedArrivals",
           "load_arrival_times", "simulate_serving"]
