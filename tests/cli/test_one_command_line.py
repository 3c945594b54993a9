"""One command line (issue 29): every entry point is a ``specsim`` subcommand; no module of the packages runs as
``python -m`` except the two that must run outside the command tree (docs/cli.md)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

import typer.main
from typer.testing import CliRunner

from simulator.command_line import command_line
from specsim_cli.main import command_tree, main

ROOT = Path(__file__).resolve().parents[2]
# run outside the specsim tree: vLLM's own CLI in a subprocess; a script copied alone to a GPU machine with only torch
STANDALONE = {"calibrate/measure/vllm_cli.py", "calibrate/measure/gpu_step_bench.py",
              "calibrate/measure/gpu_kernel_bench.py"}
# the commands that replaced the python -m entry points (issue 29)
CONVERTED = ["fit workload-traces", "import specreason", "fit accuracy",
             "fit published-priors", "fit engine", "fit moe",
             "fit transfer-priors", "validate kernels", "validate priors",
             "validate spec-sweep", "measure step-plan", "measure step-predict",
             "validate step-summary", "measure op-bench", "validate capacity", "validate drift",
             "validate cpu", "validate gpu-summary"]


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (either operand order)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1):
        return False
    sides = [node.test.left, node.test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def _main_guards(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return any(_is_main_guard(n) for n in ast.walk(tree))


def test_the_guard_finder_sees_both_spellings():
    assert _is_main_guard(ast.parse('if __name__ == "__main__":\n    pass\n').body[0])
    assert _is_main_guard(ast.parse("if '__main__' == __name__:\n    pass\n").body[0])
    assert not _is_main_guard(ast.parse('if name == "__main__":\n    pass\n').body[0])


def test_no_python_m_entry_point_outside_the_standalone_scripts():
    files = [p for pkg in ("simulator", "calibrate", "validate") for p in sorted((ROOT / pkg).rglob("*.py"))]
    found = {str(p.relative_to(ROOT)) for p in files if _main_guards(p)}
    assert found - STANDALONE == set(), ("python -m entry points: make them specsim subcommands (a register(app) "
                                         f"called from specsim_cli/main.py), see docs/cli.md: {sorted(found - STANDALONE)}")
    assert STANDALONE <= found, "a standalone script lost its entry point: update STANDALONE and docs/cli.md"


def test_the_standalone_scripts_are_named_in_docs_cli():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert all(s in text for s in STANDALONE)


def _commands() -> dict[str, object]:
    return {" ".join(path): cmd for path, cmd in command_tree()}


def test_every_former_entry_point_is_a_command_of_the_tree():
    """The docs/cli.md table's commands (their help and examples: tests/cli/test_help.py)."""
    commands = _commands()
    assert [c for c in CONVERTED if c not in commands] == []
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert [c for c in CONVERTED if f"`{c}" not in text] == [], "docs/cli.md's table lacks them"


def test_bad_input_to_a_converted_command_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["validate", "gpu-summary", str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "nope" in err[0]
    rc = main(["measure", "step-plan", "--out", str(tmp_path / "p.json"), "--model", "no-such-model"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--model" in err[0] and not (tmp_path / "p.json").exists()


def test_step_plan_then_step_predict(tmp_path):
    import json

    plan = tmp_path / "plan.json"
    assert main(["measure", "step-plan", "--out", str(plan), "--model", "r1-distill-qwen-1.5b"]) == 0
    assert [m["spec"]["name"] for m in json.loads(plan.read_text())["models"]] == ["r1-distill-qwen-1.5b"]
    out = tmp_path / "pred.csv"
    assert main(["measure", "step-predict", str(plan), "--hardware", "h200", "--out", str(out)]) == 0
    assert out.read_text().startswith("model,hardware,op,")


def test_a_recorded_command_is_the_command_as_parsed():
    """Provenance names the command that ran, as parsed (sys.argv is pytest's in-process): arguments, then the options
    given on the command line, defaults left out."""
    app = typer.Typer()
    seen = []

    @app.command()
    def fit(ctx: typer.Context, runs: list[str] = typer.Argument(...), out: str = typer.Option(...),
            date: Optional[str] = typer.Option(None), rec: Optional[list[str]] = typer.Option(None),
            heldout: bool = typer.Option(True), seed: int = typer.Option(0)):
        seen.append(command_line(ctx))

    r = CliRunner().invoke(app, ["a b", "c", "--rec", "x", "--out", "o.yaml", "--rec", "y", "--no-heldout"],
                           prog_name="specsim")
    assert r.exit_code == 0, r.output
    assert seen == ["specsim 'a b' c --out o.yaml --rec x --rec y --no-heldout"]
