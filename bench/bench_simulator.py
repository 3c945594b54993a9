"""Benchmark of the simulator core (not a test): analytic predictions/s and DES steps/s.

    .venv/bin/python bench/bench_simulator.py [--repeats 5] [--compare GIT_REF]

Prints medians over repeats, with the machine it ran on. ``--compare GIT_REF`` also times the analytic
reference grids (mixture and single-problem workloads) with the code of GIT_REF, checked out in a temporary
git worktree and run in a subprocess, round by round with this tree's (old, new, old, new, ...: a shared,
noisy machine slows both alike), and prints both medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig
from simulator.studies.whatif import run_grid

ROOT = Path(__file__).resolve().parents[1]

# Times the two reference grids with the code of the current directory; prints "mixture single" seconds.
_GRID_TIMER = r"""
import sys, time
sys.path.insert(0, ".")
try:  # the house's rooms; a ref from before them has the flat layout
    from simulator.inputs.scenario import load_scenario, PROFILES_DIR
    from simulator.inputs.workload import load_workload
    from simulator.studies.whatif import run_grid
except ImportError:
    from simulator.scenario import load_scenario, PROFILES_DIR
    from simulator.workload import load_workload
    from simulator.whatif import run_grid
rs = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
rs1 = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
# the single-problem AIME #60 workload: its file before the mixture was workload_aime_qwq32b_r1-1.5b.yaml
single = [p for p in ("workload_aime60_qwq32b_r1-1.5b.yaml", "workload_aime_qwq32b_r1-1.5b.yaml") if (PROFILES_DIR / p).exists()]
rs1.workload = load_workload(PROFILES_DIR / single[0])
n = int(sys.argv[1])
out = []
for r in (rs, rs1):
    run_grid(r, engine="analytic")  # warm-up (imports, FFT plans, the workload's compiled views)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); run_grid(r, engine="analytic"); ts.append(time.perf_counter() - t0)
    out.append(sorted(ts))
print(len(getattr(rs.workload, "problems", None) or []) or 1, " ".join(",".join(f"{t:.6f}" for t in ts) for ts in out))
"""


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _grid_times(cwd: Path, repeats: int) -> tuple[list[float], list[float], int]:
    """(default-scenario grid times, single-problem grid times, problems in that tree's default workload)."""
    out = subprocess.run([sys.executable, "-c", _GRID_TIMER, str(repeats)], cwd=cwd, check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(cwd)}).stdout.split()
    mix, single = ([float(x) for x in s.split(",")] for s in out[-2:])
    return mix, single, int(out[-3])


def compare(ref: str, repeats: int, rounds: int = 3) -> None:
    """Reference grids, GIT_REF's code vs this tree's, ``rounds`` alternating rounds of ``repeats`` runs each."""
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old_tree), ref], cwd=ROOT, check=True)
        try:
            old, new, problems = ([], []), ([], []), {}
            for _ in range(rounds):
                for acc, tree, who in ((old, old_tree, ref), (new, ROOT, "this tree")):
                    m, s, problems[who] = _grid_times(tree, repeats)
                    acc[0].extend(m)
                    acc[1].extend(s)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False)
    print(f"default workload of the reference scenario: {ref} {problems[ref]} problem(s), this tree {problems['this tree']}")
    for i, name in enumerate(("default workload", "single-problem workload (aime60) in both")):
        o, n = statistics.median(old[i]), statistics.median(new[i])
        print(f"analytic reference grid, {name}: {ref} {o:.3f} s, this tree {n:.3f} s -> {o / n:.1f}x "
              f"(medians of {len(old[i])} runs each, alternating rounds)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compare", metavar="GIT_REF", help="also time the reference grids with GIT_REF's code")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")

    rs = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
    n_points = len(run_grid(rs, engine="analytic"))
    t = _median_time(lambda: run_grid(rs, engine="analytic"), args.repeats)
    print(f"analytic, reference grid ({n_points} points, budget 8192): {t:.3f} s per grid -> {n_points / t:.1f} predictions/s")

    from simulator.inputs.scenario import PROFILES_DIR
    from simulator.inputs.workload import load_workload

    rs1 = load_scenario("scenarios/reference-a6000-qwq32b.yaml")
    rs1.workload = load_workload(PROFILES_DIR / "workload_aime60_qwq32b_r1-1.5b.yaml")
    t1 = _median_time(lambda: run_grid(rs1, engine="analytic"), args.repeats)
    print(f"analytic, reference grid on the single-problem workload (aime60, the default before the mixture): "
          f"{t1:.3f} s per grid -> {n_points / t1:.1f} predictions/s")

    # the chain DP alone: every chain the reference grid needs, per problem of the mixture, both evaluations
    from simulator.engines.analytic import chain_key
    from simulator.engines.chain import run_chains

    configs = rs.system_configs()
    parts = [(w, sorted({chain_key(c, w) for c in [SystemConfig(system="vanilla-base"), *configs]}))
             for _, w in rs.workload.components()]
    dp = {m: _median_time(lambda m=m: [run_chains(w, [k[0] for k in keys], [k[1] for k in keys], method=m)
                                        for w, keys in parts], max(1, args.repeats // 2 + 1))
          for m in ("auto", "stepwise")}
    print(f"chain DP of the reference grid ({len(parts)} problems x {len(parts[0][1])} chains): "
          f"composed {dp['auto']:.3f} s, stepwise {dp['stepwise']:.3f} s -> {dp['stepwise'] / dp['auto']:.1f}x")

    if args.compare:
        compare(args.compare, max(1, args.repeats // 2 + 1))

    rs2 = load_scenario("scenarios/modern-h100-h200-qwen3.yaml")
    n2 = len(run_grid(rs2, engine="analytic"))
    t2 = _median_time(lambda: run_grid(rs2, engine="analytic"), args.repeats)
    print(f"analytic, H100/H200 x TP grid ({n2} points): {t2:.3f} s per grid -> {n2 / t2:.1f} predictions/s")

    from simulator.cost.cost_tables import CostTables
    from simulator.engines.des import simulate

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
