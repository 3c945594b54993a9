"""The one output contract (simulator/output_contract.py, docs/cli.md "Output files") on EVERY command that writes.

The walk finds each command of the ``specsim`` tree with an output option (--out, --report, --priors,
--fit-all-out), checks that it declares the option's kind with ``@writes``, and tries each refusal on each output:
an existing FIFO (a device node or socket is refused the same way: not a regular file), a file or folder git
tracks, a non-empty folder (a folder where a file is written), and an extension that names another format. Each
must exit 2 with one line naming the rule, before any work (the other inputs are placeholders that would fail
later), and leave the target as it was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import specsim_cli.main as cli
from simulator.output_contract import declared_outputs

REPO = Path(__file__).resolve().parents[2]
OUTPUT_OPTIONS = ("--out", "--report", "--priors", "--fit-all-out")
FILE_EXT = {"table": ".csv", "yaml": ".yaml", "csv": ".csv", "json": ".json", "folder": "", "runs": ""}
WRONG_EXT = {"table": ".yaml", "yaml": ".parquet", "csv": ".parquet", "json": ".csv", "folder": ".csv", "runs": ".md"}
CASES = ("fifo", "tracked", "non-empty folder", "wrong extension")


def _writing_commands():
    out = []
    for path, cmd in cli.command_tree():
        outs = [p for p in cmd.params if p.param_type_name == "option" and set(p.opts) & set(OUTPUT_OPTIONS)]
        if outs:
            out.append((" ".join(path), cmd, outs))
    return out


COMMANDS = _writing_commands()
WALK = [(name, p.name, case) for name, cmd, outs in COMMANDS for p in outs for case in CASES]


def _placeholder(p) -> list[str]:
    """A value click accepts for a required parameter (the body never runs: the output check comes first)."""
    ann = str(getattr(p.type_descriptor, "annotation", ""))
    v = str(REPO / "README.md") if "Path" in ann else "1"  # required params are paths, ints and strings only
    return [v] if p.param_type_name == "argument" else [p.opts[0], v]


def _argv(name: str, cmd, target_param: str, target: Path, tmp: Path) -> list[str]:
    kinds = declared_outputs(cmd.callback)
    args = name.split()
    for p in cmd.params:
        if p.name == target_param:
            args += [p.opts[0], str(target)]
        elif p.name in kinds:  # another output of the command: a fresh, valid name
            if p.required:
                args += [p.opts[0], str(tmp / f"other-{p.name}{FILE_EXT[kinds[p.name]]}")]
        elif p.required:
            args += _placeholder(p)
    return args


def _snapshot(path: Path):
    if path.is_dir():
        return sorted((str(f.relative_to(path)), f.read_bytes()) for f in path.rglob("*") if f.is_file())
    if path.is_file():
        return path.read_bytes()
    return "fifo" if path.exists() else None


def test_the_walk_finds_every_writing_command_and_each_declares_its_outputs():
    names = {n for n, _, _ in COMMANDS}
    assert {"simulate whatif", "validate runs", "fit cost", "fit workload", "measure spec-metrics", "simulate pass-time",
            "fit engine", "measure step-plan", "measure study specdecode"} <= names, names
    bad = [f"{n}: {[p.opts[0] for p in outs]} vs {declared_outputs(cmd.callback)}" for n, cmd, outs in COMMANDS
           if {p.name for p in outs} != set(declared_outputs(cmd.callback))]
    assert not bad, f"output options without @writes: {bad}"
    no_force = [n for n, cmd, _ in COMMANDS if not any(p.opts == ["--force"] for p in cmd.params)]
    assert not no_force, no_force


@pytest.mark.parametrize("name, param, case", WALK, ids=[f"{n}:{p}:{c}" for n, p, c in WALK])
def test_every_output_refuses_each_case_before_any_work(tmp_path, capsys, name, param, case):
    cmd = next(c for n, c, _ in COMMANDS if n == name)
    kind = declared_outputs(cmd.callback)[param]
    folder = kind in ("folder", "runs")
    ext = FILE_EXT[kind]
    if case == "fifo":
        target = tmp_path / f"pipe{ext}"
        os.mkfifo(target)
        words = "not a regular file"
    elif case == "tracked":
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        target = tmp_path / ("committed" if folder else f"committed{ext}")
        f = target / ("run.json" if kind == "runs" else "report.md") if folder else target
        f.parent.mkdir(exist_ok=True)
        f.write_text("keep\n")
        subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
        words = "git tracks" if kind != "folder" else "not empty"
    elif case == "non-empty folder":
        target = tmp_path / "full"
        target.mkdir()
        (target / "earlier.txt").write_text("keep\n")
        words = "not empty" if folder else "is a folder"
    else:
        target = tmp_path / f"named{WRONG_EXT[kind]}"
        words = "looks like a file name" if folder else "ends in"
    before = _snapshot(target)
    rc = cli.main(_argv(name, cmd, param, target, tmp_path))
    err = capsys.readouterr().err
    assert rc == 2 and words in err and err.count("\n") == 1, (rc, err)
    assert _snapshot(target) == before
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in (target.name, ".git"))
    assert not left, f"{name} wrote {left} before refusing"


def test_validate_refuses_the_tracked_docs_folder(tmp_path, capsys):
    cmd = next(c for n, c, _ in COMMANDS if n == "validate runs")
    before = _snapshot(REPO / "docs")
    rc = cli.main(_argv("validate runs", cmd, "report", REPO / "docs", tmp_path))
    err = capsys.readouterr().err
    assert rc == 2 and "docs is a folder that is not empty" in err, err
    assert _snapshot(REPO / "docs") == before
