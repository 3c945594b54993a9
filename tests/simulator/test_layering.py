"""Imports point one way (issue 16, layout): ``calibrate`` and ``validate`` may import ``simulator``,
never the reverse; the top-level ``specsim_cli`` package composes the three into the ``specsim`` tree."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("calibrate", "validate", "specsim_cli")  # packages above simulator


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement names (top level or inside functions), plus string literals given to
    ``importlib.import_module`` / ``__import__``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value))
    return out


def _violations(source: str, filename: str) -> list[str]:
    return [f"{filename}:{line}: {name}" for line, name in _imported_names(ast.parse(source, filename))
            if name.split(".")[0] in FORBIDDEN]


def test_the_checker_sees_every_kind_of_import():
    src = ("import calibrate\nfrom validate.cli import register\n"
           "def f():\n    import calibrate.fit_workload_runs as r\n    from validate import serving\n"
           "    import importlib\n    importlib.import_module('calibrate.cli')\n"
           "import simulator.cost\nfrom simulator import errors\nfrom . import x\n")
    assert [v.split(": ")[1] for v in _violations(src, "t.py")] == [
        "calibrate", "validate.cli", "calibrate.fit_workload_runs", "validate", "calibrate.cli"]


def test_simulator_imports_neither_calibrate_nor_validate():
    files = sorted((ROOT / "simulator").rglob("*.py"))
    assert len(files) > 20 and ROOT / "simulator" / "cli.py" in files
    bad = [v for p in files for v in _violations(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert not bad, "simulator/ must not import calibrate/, validate/ or specsim_cli/:\n" + "\n".join(bad)


def test_importing_the_simulator_cli_loads_no_upper_package():
    code = ("import sys, simulator.cli, simulator.accuracy, simulator.whatif\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'calibrate', 'validate', 'specsim_cli'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def composed():
    from specsim_cli.main import full_app

    return full_app()


def _commands(app, args) -> list[str]:
    """The command names of ``specsim ARGS --help``, in the order listed (rich panel rows ``│ name  help``)."""
    import re

    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"}, prog_name="specsim")
    assert r.exit_code == 0, r.output
    panel = r.output[r.output.index("Commands"):]
    return [m.group(1) for m in re.finditer(r"^[│|] +([a-z][a-z0-9-]*) {2,}", panel, flags=re.M)]


def test_specsim_help_lists_the_composed_commands(composed):
    assert _commands(composed, []) == ["whatif", "list", "show", "capacity", "report", "init", "pass-time", "validate", "validate-serving", "validate-capacity",
                                       "calibrate", "study"]
    assert {"run", "fit", "fit-workload", "serve-run", "serve-systems"} <= set(_commands(composed, ["calibrate"]))


def test_the_simulator_app_alone_has_only_its_own_commands():
    from simulator.cli import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert names == {"whatif", "list", "show", "capacity", "report", "init", "pass-time"} and not app.registered_groups


def test_console_script_points_at_the_composed_main():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["scripts"]["specsim"] == "specsim_cli.main:main"
    assert "specsim_cli*" in meta["tool"]["setuptools"]["packages"]["find"]["include"]
