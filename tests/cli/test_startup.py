"""``specsim --help`` lists the task groups without importing any library behind them: the commands import theirs
inside their bodies, and a task group loads its commands only when one of them is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("scipy", "pandas", "matplotlib", "numpy", "torch", "calibrate", "validate")


def test_help_imports_no_heavy_library():
    code = ("import sys\nfrom specsim_cli.main import main\nrc = main(['--help'])\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), file=sys.stderr)\n"
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"
    assert "simulate" in r.stdout and "calibrate " not in r.stdout
