"""`specsim report` keeps a configuration whose own accuracy is measured when the floor cannot be judged (the
reference's accuracy unknown): searched and plotted, never recommended; the ones left out are named with why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from simulator.inputs.accuracy import PROFILES_DIR, excluded_text, parse_floor, scenario_accuracy, searched
from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig

ROOT = Path(__file__).resolve().parents[2]


def test_reference_specreason_t7_is_searched():
    model = scenario_accuracy(load_scenario("reference-a6000-qwq32b"))
    floor = parse_floor(None)
    t7, t5 = SystemConfig(system="specreason", threshold=7), SystemConfig(system="specreason", threshold=5)
    keep, status, why = searched(model, t7, floor)
    assert keep and status == "unknown" and "vanilla-base accuracy unknown" in why  # measured 0.319: kept
    assert not searched(model, t5, floor)[0]  # no graded answers of its own
    assert not searched(model, SystemConfig(system="vanilla-small"), floor)[0]
    assert searched(model, SystemConfig(system="vanilla-base"), floor)[0]
    assert not searched(model, t7, parse_floor("0.9"))[0]  # shown below an absolute floor: fails, not searched
    (line,) = excluded_text(model, [t5], floor)
    assert line.startswith("specreason t=5: accuracy unknown (no graded answers")


def test_report_searches_measured_configuration_without_reference_accuracy(tmp_path):
    prof = (PROFILES_DIR / "accuracy_cpu_gsm_smollm2.yaml").read_text()
    a, b = prof.index("- system: vanilla-base"), prof.index("- system: specreason")
    (tmp_path / "acc.yaml").write_text(prof[:a] + prof[b:])  # vanilla-base's graded answers removed
    sc = tmp_path / "sc.yaml"
    sc.write_text((ROOT / "scenarios" / "cpu-smollm2.yaml").read_text() + "\naccuracy: acc.yaml\n")
    out = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "report", str(sc), "--system", "vanilla-base", "--system",
                        "specreason", "--threshold", "5,7", "--requests", "20", "--workers", "1", "--max-replications",
                        "3", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    cap = pd.read_csv(out / "capacity.csv")
    t5 = cap[(cap.system == "specreason") & (cap.threshold == 5)]
    assert len(t5) == 1 and t5.accuracy.notna().all()  # searched, with its measured accuracy
    assert not t5.recommended.any() and (t5.accuracy_floor == "unknown").all()
    assert "Excluded: specreason t=7: accuracy unknown (no graded answers" in r.stdout  # said, with why
    md = (out / "report.md").read_text()
    assert "specreason t=5: searched (accuracy measured) but not recommended" in md
