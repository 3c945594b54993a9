"""Benchmark of the capacity search that `specsim capacity` and `specsim report` share: CPU seconds of one fixed
search (cpu-smollm2, every 3rd configuration, 40 requests per simulation, 3 replications, one process) with this
tree's code and with an earlier commit's, their ratio, and whether the capacities are identical.

    .venv/bin/python bench/bench_capacity.py [--ref 1062a20] [--requests 40]

The earlier code is exported with `git archive REF simulator` into a temporary folder and run with PYTHONPATH
pointing there (the same interpreter and packages). CPU time (user + system of the process) is reported, not
wall time: on a shared machine the wall clock measures the neighbours. Default REF: the commit before issue 30's
capacity changes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from dataclasses import replace
from simulator.capacity import IntervalSpec, LoadSpec, capacity_interval, capacity_points, load_scenario
from simulator.serving.slo import parse_slo
rs = load_scenario("scenarios/cpu-smollm2.yaml")
load = LoadSpec(requests=int(sys.argv[2]), seed=1)
spec = IntervalSpec(max_reps=3)
t = time.process_time()
out = []
for p in capacity_points(rs, parse_slo("p99_latency<=40s"), load)[::3]:
    d = capacity_interval(p, spec)
    out.append([p.cfg.label, d["max_qps"], d["max_qps_lo"], d["max_qps_hi"], d["evaluations"]])
print(json.dumps({"cpu_s": time.process_time() - t, "rows": out}))
"""


def run(tree: str, requests: int) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, tree, str(requests)], cwd=ROOT, capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="1062a20", help="earlier commit to compare with (default: before issue 30)")
    ap.add_argument("--requests", type=int, default=40, help="requests per simulation")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as old:
        arch = subprocess.run(["git", "archive", a.ref, "simulator"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
        before = run(old, a.requests)
    now = run(str(ROOT), a.requests)
    same = [r[:4] for r in before["rows"]] == [r[:4] for r in now["rows"]]
    sims = (sum(r[4] for r in before["rows"]), sum(r[4] for r in now["rows"]))
    print(f"capacity search ({len(now['rows'])} configurations of cpu-smollm2, {a.requests} requests, 3 replications): "
          f"{before['cpu_s']:.2f} CPU s at {a.ref} -> {now['cpu_s']:.2f} CPU s now: {before['cpu_s'] / now['cpu_s']:.2f}x; "
          f"simulations {sims[0]} -> {sims[1]}; capacities {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
