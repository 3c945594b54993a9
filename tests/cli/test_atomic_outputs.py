"""Issue 14: ``calibrate fit`` and ``validate`` write their outputs write-then-rename: a command killed
while writing leaves the previous file (or none), never a half-written profile or report; a rerun
completes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from specsim_cli.main import main
from tests.validate.test_validate import make_run_dir
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]


class Killed(BaseException):
    """Stands for SIGKILL arriving between the write and the rename."""


def _runs(tmp: Path) -> list[str]:
    rng = np.random.default_rng(21)
    return [str(make_run_dir(tmp / n, rng, sigma=0.05, n_requests=2, steps=10)) for n in ("runA", "runB", "runC")]


def test_killed_fit_and_validate_leave_no_half_written_output(tmp_path, monkeypatch):
    a, b, c = _runs(tmp_path)
    prof, rep = tmp_path / "cost.yaml", tmp_path / "rep"
    real = os.replace

    def killed(*args, **kw):
        raise Killed

    monkeypatch.setattr(os, "replace", killed)
    try:
        main(["fit", "cost", a, b, "--out", str(prof)])
    except Killed:
        pass
    assert not prof.exists() and not list(tmp_path.glob(".cost.yaml.*"))  # temporary removed, target never half
    monkeypatch.setattr(os, "replace", real)
    assert main(["fit", "cost", a, b, "--out", str(prof)]) == 0
    good = prof.read_text()
    monkeypatch.setattr(os, "replace", killed)
    try:
        main(["fit", "cost", a, "--out", str(prof)])  # a kill while overwriting keeps the old profile whole
    except Killed:
        pass
    assert prof.read_text() == good
    try:
        main(["validate", a, b, c, "--profile", str(prof), "--out", str(rep), "--no-distribution"])
    except Killed:
        pass
    assert not (rep / "report.md").exists() and not [p for p in rep.glob("*") if p.name.endswith(".tmp")]
    monkeypatch.setattr(os, "replace", real)
    assert main(["validate", a, b, c, "--profile", str(prof), "--out", str(rep), "--no-distribution"]) in (0, 2)
    assert (rep / "report.md").read_text().startswith("# Validation report")


def test_sigkill_during_fit_never_leaves_a_partial_profile(tmp_path):
    """A real SIGKILL at a random moment of ``calibrate fit``: the profile is absent or parses whole."""
    import yaml

    a, b, _ = _runs(tmp_path)
    prof = tmp_path / "cost.yaml"
    for delay in (0.8, 1.6, 2.4):
        p = subprocess.Popen([sys.executable, "-m", "specsim_cli", "calibrate", "fit", a, b, "--out", str(prof)],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if prof.exists():
            assert "calibrated" in yaml.safe_load(prof.read_text())["mem_efficiency"]["kind"]
