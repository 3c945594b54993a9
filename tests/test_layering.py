"""Imports point one way, for every package, in the order the work flows:

    simulator  <-  calibrate.contracts  <-  calibrate.measure | calibrate.fit  <-  calibrate.gpu_priors
               <-  calibrate (commands composing the stages)  <-  validate  <-  specsim_cli

``calibrate.measure`` (engines, runners: the only code needing torch or vLLM) and ``calibrate.fit`` (loading, fitters,
importers) never import each other: they share only the contracts (trace schema and rules, spec-decoding metrics, op
records). ``calibrate.gpu_priors`` (the GPU evidence pipeline) builds on the fitters. ``specsim_cli`` composes the
packages into the one ``specsim`` command tree."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "calibrate", "validate", "specsim_cli")
# (layer of a module, the layers it may import); a module's layer is the longest matching prefix of its name.
_CAL = ("calibrate.contracts", "calibrate.measure", "calibrate.fit", "calibrate.gpu_priors")
LAYERS = {
    "simulator": {"simulator"},
    "calibrate.contracts": {"simulator", "calibrate.contracts"},
    "calibrate.measure": {"simulator", "calibrate.contracts", "calibrate.measure"},
    "calibrate.fit": {"simulator", "calibrate.contracts", "calibrate.fit"},
    "calibrate.gpu_priors": {"simulator", "calibrate.contracts", "calibrate.fit", "calibrate.gpu_priors"},
    "calibrate": {"simulator", *_CAL, "calibrate"},
    "validate": {"simulator", *_CAL, "calibrate", "validate"},
    "specsim_cli": set(),  # the top: composes everything
}
FORBIDDEN = ("calibrate", "validate", "specsim_cli")  # packages above simulator


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None for a third-party or standard-library module."""
    for name in (*_CAL, *PACKAGES):
        if module == name or module.startswith(name + "."):
            return name
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a relative ``from .x import y`` names."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement names (top level or inside functions), plus string literals given to
    ``importlib.import_module`` / ``__import__``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            out.append((node.lineno, node))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value))
    return out


def _violations(source: str, filename: str, module: str = "simulator.x", is_package: bool = False) -> list[str]:
    """``FILE:LINE: MODULE`` for every import of a layer ``module``'s layer may not import."""
    allowed = LAYERS[layer_of(module)]
    out = []
    for line, name in _imported_names(ast.parse(source, filename)):
        if isinstance(name, ast.ImportFrom):
            name = _resolve(name, module, is_package)
        target = layer_of(name)
        if target is not None and allowed and target not in allowed:
            out.append(f"{filename}:{line}: {name}")
    return out


def test_the_checker_sees_every_kind_of_import():
    src = ("import calibrate\nfrom validate.cli import register\n"
           "def f():\n    import calibrate.fit.fit_workload_runs as r\n    from validate import serving\n"
           "    import importlib\n    importlib.import_module('calibrate.cli')\n"
           "import simulator.cost\nfrom simulator import errors\nfrom . import x\n")
    assert [v.split(": ")[1] for v in _violations(src, "t.py")] == [
        "calibrate", "validate.cli", "calibrate.fit.fit_workload_runs", "validate", "calibrate.cli"]


def test_the_checker_applies_each_layer_rule():
    run_imports_fit = "from calibrate.fit.fit_cost import Setup\n"
    assert _violations(run_imports_fit, "r.py", "calibrate.measure.runner")
    assert _violations("import calibrate.measure.engine\n", "f.py", "calibrate.fit.measured")
    assert not _violations("from calibrate.contracts.trace_schema import check_run_dir\n", "f.py", "calibrate.fit.measured")
    assert not _violations("from calibrate.contracts.spec_metrics import pool\n", "r.py", "calibrate.measure.serve_bench")
    assert _violations("from calibrate.measure.engine import Engine\n", "c.py", "calibrate.contracts.trace_schema")
    assert _violations("from validate.cli import x\n", "c.py", "calibrate.gpu_priors.transfer")
    assert not _violations(run_imports_fit, "c.py", "calibrate.cli")
    assert _violations("from ..fit import fit_cost\n", "r.py", "calibrate.measure.runner")  # relative, resolved
    assert not _violations("from .load import ServingRun\n", "v.py", "validate.serving.client")
    assert not _violations("from calibrate.fit import measured\n", "s.py", "specsim_cli.main")


def test_every_package_imports_only_downward():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert {layer_of(_module_name(p)) for p in files} == set(LAYERS), "a layer has no module: update LAYERS"
    bad = [v for p in files for v in _violations(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)),
                                                 _module_name(p), p.name == "__init__.py")]
    assert not bad, "imports against the layering (module docstring):\n" + "\n".join(bad)


def test_importing_the_simulator_loads_no_upper_package():
    code = ("import sys, simulator.inputs.accuracy, simulator.studies.whatif, simulator.studies.capacity\n"
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


def test_specsim_help_lists_the_task_groups(composed):
    assert _commands(composed, []) == ["simulate", "measure", "import", "fit", "validate", "list", "show", "init"]
    assert _commands(composed, ["simulate"]) == ["whatif", "capacity", "report", "pass-time", "serve-workload"]
    assert {"run", "microbench", "serve-run", "serve-systems", "serve-bench", "op-bench", "study"} \
        <= set(_commands(composed, ["measure"]))
    assert {"vidur", "aiconfigurator", "specreason", "bench-serve"} <= set(_commands(composed, ["import"]))
    assert {"cost", "workload", "gpu", "engine", "moe", "mla", "drafter-curves"} <= set(_commands(composed, ["fit"]))
    assert {"runs", "serving", "capacity", "cpu", "mixture", "kernels", "step-summary"} \
        <= set(_commands(composed, ["validate"]))
    assert _commands(composed, ["measure", "study"]) == ["specdecode", "draft-head"]


def test_the_commands_are_defined_in_one_place():
    """Every command's function lives in specsim_cli/commands/; a library module declares no typer app."""
    from specsim_cli.main import command_tree

    where = {" ".join(p): c.callback.__module__ for p, c in command_tree()}
    outside = {n: m for n, m in where.items() if not m.startswith("specsim_cli.commands.")}
    assert outside == {}, outside
    apps = [str(p.relative_to(ROOT)) for pkg in ("simulator", "calibrate", "validate")
            for p in sorted((ROOT / pkg).rglob("*.py")) if "typer.Typer(" in p.read_text(encoding="utf-8")]
    assert apps == [], apps


def test_console_script_points_at_the_composed_main():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["scripts"]["specsim"] == "specsim_cli.main:main"
    assert "specsim_cli*" in meta["tool"]["setuptools"]["packages"]["find"]["include"]
