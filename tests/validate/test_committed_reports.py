"""Committed reports reproduce from their own commands.

Each report below is regenerated into a temporary folder by the command that wrote it, and its figure files are
compared with the committed ones: the same rows and words, every number within rounding (relative 1e-3). A model
change that moves these figures fails here until the report (and the docs quoting it) is regenerated with the
command in the failure message. Only reports that take seconds to rebuild are here; the ones built from the shared
data skip where it is absent."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from specsim_cli.main import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
REL_TOL = 1e-3


@dataclass(frozen=True)
class Report:
    folder: str  # the committed report, relative to the repository
    args: tuple[str, ...]  # the command (after `specsim`), "{out}" for the report folder
    files: tuple[str, ...]  # the figure files compared
    needs: str | None = None  # a shared-data folder it is built from
    runs: str | None = None  # a glob of committed run folders appended to the command

    def command(self, out: Path) -> list[str]:
        runs = sorted(str(p.relative_to(REPO)) for p in REPO.glob(self.runs)) if self.runs else []
        head = [a.replace("{out}", str(out)) for a in self.args[:2]]
        return head + runs + [a.replace("{out}", str(out)) for a in self.args[2:]]


REPORTS = [
    Report("reports/deepseek-low-concurrency", ("validate", "inferencex", "--out", "{out}"),
           ("summary.md", "rows.csv"), needs="engine-measurements/inferencex-deepseek-r1"),
    Report("reports/b200-speculation", ("validate", "spec-sweep", "--out", "{out}"), ("itl.csv",),
           needs="engine-measurements/speculators-b200-concurrency"),
    pytest.param(Report("reports/quant-gemm", ("fit", "quant", "--report", "{out}", "--out", "{out}/quant_gemm.yaml"),
                        ("bursts.csv", "heldout.csv"), needs="aiconfigurator-vllm-kernels"),
                 marks=pytest.mark.xfail(strict=True, reason=(
                     "kept at its 2026-11-28 fit: refitted today its equal-length burst replay would move rc by the "
                     "replay's own error (docs/results.md, Quantised GEMMs); passes once the fit replays the bursts as "
                     "the released validation does and the catalog is refitted"))),
    Report("reports/serving-systems", ("validate", "serving", "--profile", "simulator/profiles/cost_cpu-vllm032.yaml",
                                       "--fit-levels", "closed-1", "--out", "{out}"),
           ("per_run.csv", "speedup.csv"), runs="reports/serving-systems/runs/rep[0-9]*/*/*"),
    Report("reports/specdecode-serving/report-step-fit",
           ("validate", "serving", "--profile", "simulator/profiles/cost_cpu-epyc-vllm032.yaml", "--fit-levels",
            "closed-1,closed-2,closed-4,closed-8", "--acceptance-levels", "closed-1", "--out", "{out}"),
           ("per_run.csv", "speedup.csv"), runs="reports/specdecode-serving/runs/rep[12]/*/closed-*"),
    Report("reports/capacity-cpu/long64", ("validate", "capacity", "--scenario", "scenarios/cpu-serve-capacity.yaml",
                                           "--slo", "p90_latency<=12s", "--threshold", "6", "--requests", "300",
                                           "--out", "{out}"),
           ("capacity.csv", "levels.csv"), runs="reports/capacity-cpu/runs/long64/*/poisson-*"),
]


def _split(text: str) -> tuple[list[str], list[float]]:
    """(the text with every number replaced by a marker, the numbers), path-like tokens left out."""
    text = re.sub(r"(?:/tmp|/work)\S*|reports/\S+", "<path>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d(?:[T ][\d:.]+(?:[+-]\d\d:\d\d)?)?", "<date>", text)
    return NUMBER.sub("#", text).splitlines(), [float(x) for x in NUMBER.findall(text)]


def _differences(committed: str, fresh: str) -> list[str]:
    """Where ``fresh`` differs from ``committed`` beyond rounding: changed words or rows, numbers out of tolerance."""
    (cw, cn), (fw, fn) = _split(committed), _split(fresh)
    if cw != fw:
        lines = [f"- {a}\n+ {b}" for a, b in zip(cw, fw) if a != b] or [f"{len(cw)} lines, now {len(fw)}"]
        return ["text differs:"] + lines[:5]
    out = []
    for i, (a, b) in enumerate(zip(cn, fn)):
        if not math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9) and not (math.isnan(a) and math.isnan(b)):
            out.append(f"number {i}: committed {a:g}, now {b:g}")
    return out[:10]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.folder)
def test_committed_report_reproduces(report: Report, tmp_path, monkeypatch):
    if report.needs and not (SHARED / report.needs).is_dir():
        pytest.skip(f"shared data {report.needs} not present")
    committed = REPO / report.folder
    monkeypatch.chdir(REPO)
    out = tmp_path / "report"
    cmd = report.command(out)
    assert main(cmd) == 0
    regenerate = "specsim " + " ".join(report.command(Path(report.folder))) + " --force"
    for name in report.files:
        diff = _differences((committed / name).read_text(), (out / name).read_text())
        assert not diff, f"{report.folder}/{name} no longer reproduces; regenerate with `{regenerate}`:\n" + "\n".join(diff)


def test_the_comparison_sees_a_moved_figure_and_ignores_paths():
    assert _differences("latency 9.3% at reports/a/b", "latency 9.3% at /tmp/x/y") == []
    assert _differences("latency 9.3%", "latency 9.30001%") == []
    assert _differences("latency 9.3%", "latency 16.2%")
    assert _differences("latency 9.3%", "throughput 9.3%")
    assert _differences("date 2026-11-28, 9.3%", "date 2026-11-30T10:00:00+00:00, 9.3%") == []
