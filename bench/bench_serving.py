"""Benchmark of the serving DES: simulated requests per wall-clock second, and the wall time
of one full SLO capacity search (median over repeats).

    .venv/bin/python bench/bench_serving.py [--repeats 3] [--requests 1000] [--ref-requests 100] [--profile]

Scenario: scenarios/cpu-smollm2.yaml (CPU prior workload), one process. The last line times one
capacity search of ``specreason t=7`` on the AIME reference scenario
(scenarios/reference-a6000-qwq32b.yaml, its own SLO, ``--ref-requests`` per simulation; 0 skips
it). ``--profile`` prints the top functions of cProfile for one specreason run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from simulator.studies.capacity import LoadSpec, Point, search_capacity, single_request_latency
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import PoissonArrivals, simulate_serving
from simulator.inputs.systems import SystemConfig

SCENARIO = "scenarios/cpu-smollm2.yaml"
CONFIGS = [SystemConfig(system="vanilla-base"), SystemConfig(system="specdecode", gamma=4),
           SystemConfig(system="specreason", threshold=5),
           SystemConfig(system="specreason-decode", threshold=5, gamma=2)]
SLO = "p99_latency<=40s"
REFERENCE = "scenarios/reference-a6000-qwq32b.yaml"
REFERENCE_CFG = SystemConfig(system="specreason", threshold=7)


def _median_time(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--load", type=float, default=0.5, help="offered load as a multiple of 1/single-request latency")
    ap.add_argument("--ref-requests", type=int, default=100,
                    help="requests per simulation of the reference-scenario capacity search (0: skip)")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    rs = load_scenario(SCENARIO)
    deps = rs.deployments("cpu", 1)
    mf = (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)
    print(f"scenario {SCENARIO}, {a.requests} requests per run, load {a.load} x 1/latency, median of {a.repeats}")
    print(f"{'configuration':<34} {'sim req/s':>10} {'wall s':>8}   {'search s':>9} {'sims':>5} {'max req/s':>9}")
    for cfg in CONFIGS:
        rate = a.load / single_request_latency(rs, "cpu", 1, cfg)
        wall = _median_time(lambda: simulate_serving(cfg, deps, rs.workload, PoissonArrivals(rate), a.requests, 1, mf),
                            a.repeats)
        p = Point(SCENARIO, "cpu", 1, cfg, LoadSpec(), SLO)
        res = {}
        search = _median_time(lambda: res.update(search_capacity(p)), a.repeats)
        print(f"{cfg.label:<34} {a.requests / wall:>10.0f} {wall:>8.2f}   {search:>9.2f} {res['evaluations']:>5} "
              f"{res['max_qps']:>9.3g}")
    if a.ref_requests:
        ref = load_scenario(REFERENCE)
        p = Point(REFERENCE, ref.hardware_names[0], ref.tps[0], REFERENCE_CFG,
                  LoadSpec(requests=a.ref_requests, seed=ref.scenario.seed), ref.scenario.slo)
        res = {}
        search = _median_time(lambda: res.update(search_capacity(p)), a.repeats)
        print(f"{'reference ' + REFERENCE_CFG.label + f' ({a.ref_requests} req)':<34} {'':>10} {'':>8}   "
              f"{search:>9.2f} {res['evaluations']:>5} {res['max_qps']:>9.3g}")
    if a.profile:
        import cProfile
        import pstats

        cfg = CONFIGS[2]
        rate = a.load / single_request_latency(rs, "cpu", 1, cfg)
        pr = cProfile.Profile()
        pr.runcall(simulate_serving, cfg, deps, rs.workload, PoissonArrivals(rate), a.requests, 1, mf)
        pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
