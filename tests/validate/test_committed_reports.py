"""Committed reports reproduce from their own commands.

Each report below is regenerated into a temporary folder by the command its header records ("Command: `specsim
...`"), and its figure files are compared with the committed ones: the same rows and words, every number within
rounding (relative 1e-3, or 1e-5 absolute near zero). A model change that moves these figures fails here until the report (and the docs quoting
it) is regenerated with the command in the failure message. Only reports that take seconds to rebuild are here; the
ones built from the shared data skip where it is absent."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulator.paths import REPO, SHARED_DATA as SHARED
from specsim_cli.main import main

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
REL_TOL = 1e-3
# a near-zero figure (an error or bias as a fraction) differing by under 1e-5 (0.001 percentage points) is floating-point
# noise between machines (a fit's last iterations under another BLAS build), far below any quoted rounding
ABS_TOL = 1e-5


@dataclass(frozen=True)
class Report:
    header: str  # the committed file whose "Command:" line made the report, relative to the repository
    files: tuple[str, ...]  # the figure files compared, beside the header
    needs: str | None = None  # a shared-data folder it is built from

    @property
    def folder(self) -> Path:
        return REPO / self.header.rsplit("/", 1)[0]

    def command(self, out: Path) -> list[str]:
        """The header's command (after `specsim`) writing into ``out``: the report folder (``--out`` or ``--report``)
        becomes ``out``, a file ``--out`` (a catalog the command writes) a file in it."""
        text = re.search(r"Command: `specsim ([^`]*)`", (REPO / self.header).read_text()).group(1)
        args = shlex.split(text)
        for i, a in enumerate(args[:-1]):
            if a in ("--out", "--report"):
                target = args[i + 1]
                args[i + 1] = str(out / Path(target).name) if Path(target).suffix else str(out)
        return args + ([] if "--force" in args else ["--force"])


REPORTS = [
    Report("reports/deepseek-low-concurrency/summary.md", ("summary.md", "rows.csv"),
           needs="engine-measurements/inferencex-deepseek-r1"),
    Report("reports/b200-speculation/report.md", ("itl.csv",), needs="engine-measurements/speculators-b200-concurrency"),
    Report("reports/quant-gemm/report.md", ("bursts.csv", "heldout.csv"), needs="aiconfigurator-vllm-kernels"),
    Report("reports/moe-shapes/summary.md", ("summary.md", "ratios.csv"), needs="aiconfigurator-vllm-kernels"),
    Report("reports/serving-released/screen.md", ("screen.csv",), needs="engine-measurements/gpustack-performance-lab"),
    Report("reports/serving-systems/report.md", ("per_run.csv", "speedup.csv")),
    Report("reports/specdecode-serving/report-step-fit/report.md", ("per_run.csv", "speedup.csv")),
    Report("reports/specdecode-serving/report/report.md", ("per_run.csv", "speedup.csv")),
    Report("reports/serving-validation/report.md", ("per_run.csv",)),
    Report("reports/serve-bench-cpu/varied-report/report.md", ("per_run.csv",)),
    Report("reports/capacity-cpu/long64/report.md", ("capacity.csv", "levels.csv")),
    Report("reports/front-end-cpu/fit/report.md", ("report.md", "fit.json")),
]


def _split(text: str) -> tuple[list[str], list[float]]:
    """(the text with every number replaced by a marker, the numbers); paths and dates masked."""
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
        if not math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL) and not (math.isnan(a) and math.isnan(b)):
            out.append(f"number {i}: committed {a:g}, now {b:g}")
    return out[:10]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.header.rsplit("/", 1)[0])
def test_committed_report_reproduces(report: Report, tmp_path, monkeypatch):
    if report.needs and not (SHARED / report.needs).is_dir():
        pytest.skip(f"shared data {report.needs} not present")
    monkeypatch.chdir(REPO)
    out = tmp_path / "report"
    assert main(report.command(out)) == 0
    regenerate = "specsim " + shlex.join(report.command(report.folder.relative_to(REPO)))
    for name in report.files:
        diff = _differences((report.folder / name).read_text(), (out / name).read_text())
        assert not diff, f"{report.folder}/{name} no longer reproduces; regenerate with `{regenerate}`:\n" + "\n".join(diff)


def test_the_comparison_sees_a_moved_figure_and_ignores_paths_and_dates():
    assert _differences("latency 9.3% at reports/a/b", "latency 9.3% at /tmp/x/y") == []
    assert _differences("latency 9.3%", "latency 9.30001%") == []
    assert _differences("latency 9.3%", "latency 16.2%")
    assert _differences("latency 9.3%", "throughput 9.3%")
    assert _differences("date 2026-11-28, 9.3%", "date 2026-11-30T10:00:00+00:00, 9.3%") == []


def test_the_header_command_writes_into_the_given_folder():
    r = Report("reports/quant-gemm/report.md", ())
    cmd = r.command(Path("/x"))
    assert cmd[cmd.index("--report") + 1] == "/x" and cmd[cmd.index("--out") + 1] == "/x/quant_gemm.yaml"
    assert cmd[-1] == "--force" and cmd.count("--force") == 1
