"""Benchmark of the simulator core (not a test): analytic predictions/s and DES steps/s.

    .venv/bin/python bench/bench_simulator.py [--repeats 5]

Prints medians over repeats, with the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from simulator.scenario import load_scenario
from simulator.systems import SystemConfig
from simulator.whatif import run_grid


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")

    rs = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
    n_points = len(run_grid(rs, engine="analytic"))
    t = _median_time(lambda: run_grid(rs, engine="analytic"), args.repeats)
    print(f"analytic, reference grid ({n_points} points, budget 8192): {t:.3f} s per grid -> {n_points / t:.1f} predictions/s")

    from simulator.scenario import PROFILES_DIR
    from simulator.workload import load_workload

    rs1 = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
    rs1.workload = load_workload(PROFILES_DIR / "workload_aime60_qwq32b_r1-1.5b.yaml")
    t1 = _median_time(lambda: run_grid(rs1, engine="analytic"), args.repeats)
    print(f"analytic, reference grid on the single-problem workload (aime60, the default before the mixture): "
          f"{t1:.3f} s per grid -> {n_points / t1:.1f} predictions/s")

    rs2 = load_scenario("scenarios/modern-h100-h200-qwen3.yaml")
    n2 = len(run_grid(rs2, engine="analytic"))
    t2 = _median_time(lambda: run_grid(rs2, engine="analytic"), args.repeats)
    print(f"analytic, H100/H200 x TP grid ({n2} points): {t2:.3f} s per grid -> {n2 / t2:.1f} predictions/s")

    from simulator.cost_tables import CostTables
    from simulator.des import simulate

    dep = rs.deployments("rtx-a6000", 2)
    for cfg in (SystemConfig(system="specreason", threshold=7), SystemConfig(system="specreason-decode", threshold=7, gamma=5),
                SystemConfig(system="specdecode", gamma=5)):
        tables = CostTables(dep["base"], dep["small"], dep["draft"], rs.workload, cfg.gamma)
        n_req = 40
        steps_box = {}

        def run():
            req, steps = simulate(cfg, tables, n_req, 1)
            steps_box["n"] = len(steps)

        t3 = _median_time(run, max(3, args.repeats // 2))
        print(f"DES {cfg.label:30s}: {n_req} requests, {steps_box['n']} steps in {t3:.2f} s -> "
              f"{steps_box['n'] / t3:,.0f} simulated steps/s, {n_req / t3:.1f} requests/s")


if __name__ == "__main__":
    main()
