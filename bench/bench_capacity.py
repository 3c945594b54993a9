"""Benchmark of the capacity search that `specsim capacity` and `specsim report` share, with this tree's code and
with an earlier commit's: CPU seconds, their ratio, the simulations run and whether the capacities are identical.

    .venv/bin/python bench/bench_capacity.py [--ref 434dcde] [--scenario S] [--systems ...] [--requests N] [--report]

Default: the reference report's search on part of its grid (reference-a6000-qwq32b: vanilla-base and specdecode
gamma 3 and 5; the report's run length, 300 requests per simulation; 3 replications each; its SLO, p99 <= 900 s),
one configuration after another in one process, so the CPU time is the search's own. ``--report`` also times the
whole report (``simulator.report.capacity_report.build_report`` on that scenario, every configuration, default workers) in
both trees: wall seconds, and CPU seconds of the process and its workers.

The earlier code is exported with ``git archive REF simulator`` into a temporary folder and run with PYTHONPATH
pointing there (the same interpreter and packages). CPU time (user + system) is reported besides wall time: on a
shared machine the wall clock also measures the neighbours. Default REF: 434dcde, the code before issue 30's
report-speed work (faster serving DES, early-stopped hopeless rates, one worker pool, shared analytic chains).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEARCH = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from dataclasses import replace
try:  # the house's rooms; a ref from before them has the flat layout
    from simulator.studies.capacity import IntervalSpec, LoadSpec, capacity_interval, capacity_points, load_scenario
    from simulator.engines.serving.slo import parse_slo
    from simulator.inputs.systems import SystemConfig
except ImportError:
    from simulator.capacity import IntervalSpec, LoadSpec, capacity_interval, capacity_points, load_scenario
    from simulator.serving.slo import parse_slo
    from simulator.systems import SystemConfig
scenario, requests, reps, slo = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
configs = [SystemConfig(system=s.split(":")[0], gamma=int(s.split(":")[1]) if ":" in s else None) for s in sys.argv[6:]]
rs = load_scenario(scenario)
spec = IntervalSpec(min_reps=reps, max_reps=reps)
t = time.process_time()
out = []
for p in capacity_points(rs, parse_slo(slo), LoadSpec(requests=requests, seed=rs.scenario.seed), configs):
    d = capacity_interval(p, spec)
    out.append([p.cfg.label, d["max_qps"], d["max_qps_lo"], d["max_qps_hi"], d["evaluations"]])
print(json.dumps({"cpu_s": time.process_time() - t, "rows": out}))
"""
REPORT = r"""
import json, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
try:
    from simulator.report.capacity_report import build_report
except ImportError:
    from simulator.capacity_report import build_report
w = time.perf_counter()
with tempfile.TemporaryDirectory() as out:
    build_report(sys.argv[2], Path(out) / "r")
    import pandas as pd
    cap = pd.read_csv(Path(out) / "r" / "capacity.csv")
wall = time.perf_counter() - w
u = [resource.getrusage(k) for k in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
rows = cap[["label", "max_qps", "max_qps_lo", "max_qps_hi", "evaluations"]].values.tolist()
print(json.dumps({"cpu_s": sum(x.ru_utime + x.ru_stime for x in u), "wall_s": wall, "rows": rows}))
"""


def child(code: str, tree: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code, tree, *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"bench child failed in {tree}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(before: dict, now: dict) -> tuple[str, str]:
    same = [r[:4] for r in before["rows"]] == [r[:4] for r in now["rows"]]
    sims = f"simulations {sum(r[4] for r in before['rows'])} -> {sum(r[4] for r in now['rows'])}"
    return sims, "capacities identical" if same else "capacities DIFFERENT"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="434dcde", help="earlier commit to compare with (default: before issue 30's "
                    "report-speed work)")
    ap.add_argument("--scenario", default="scenarios/reference-a6000-qwq32b.yaml", help="scenario YAML")
    ap.add_argument("--systems", nargs="+", default=["vanilla-base", "specdecode:3", "specdecode:5"],
                    help="configurations, SYSTEM or SYSTEM:GAMMA")
    ap.add_argument("--requests", type=int, default=300, help="requests per simulation (the report's default)")
    ap.add_argument("--replications", type=int, default=3, help="replications per configuration")
    ap.add_argument("--slo", default="p99_latency<=900s", help="SLO of the search")
    ap.add_argument("--report", action="store_true", help="also time the whole report of --scenario in both trees")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as old:
        arch = subprocess.run(["git", "archive", a.ref, "simulator"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
        args = (a.scenario, str(a.requests), str(a.replications), a.slo, *a.systems)
        before, now = child(SEARCH, old, *args), child(SEARCH, str(ROOT), *args)
        sims, same = compare(before, now)
        print(f"capacity search ({Path(a.scenario).stem}: {', '.join(a.systems)}; {a.requests} requests, "
              f"{a.replications} replications, one process): {before['cpu_s']:.1f} CPU s at {a.ref} -> "
              f"{now['cpu_s']:.1f} CPU s now: {before['cpu_s'] / now['cpu_s']:.2f}x; {sims}; {same}")
        if a.report:
            before, now = child(REPORT, old, a.scenario), child(REPORT, str(ROOT), a.scenario)
            sims, same = compare(before, now)
            print(f"whole report ({Path(a.scenario).stem}, default workers): {before['wall_s']:.1f} s wall, "
                  f"{before['cpu_s']:.1f} CPU s at {a.ref} -> {now['wall_s']:.1f} s wall, {now['cpu_s']:.1f} CPU s "
                  f"now: {before['wall_s'] / now['wall_s']:.2f}x wall, {before['cpu_s'] / now['cpu_s']:.2f}x CPU; "
                  f"{sims}; {same}")


if __name__ == "__main__":
    main()
