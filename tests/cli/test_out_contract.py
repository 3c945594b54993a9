"""One --out contract (issue 30): checked before any work; a folder given for a file, a non-empty folder for a
report, a git-tracked file and an extension that contradicts --format are refused in one line, exit 2; with the
table format a .json name writes JSON; --force overrides the two refusals that protect existing files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import specsim_cli.main as cli

REPO = Path(__file__).resolve().parents[2]


def _run(args, capsys):
    rc = cli.main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_tracked_file_is_refused_without_force(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    f = tmp_path / "committed.csv"
    f.write_text("keep\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "committed.csv"], check=True)
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--out", f], capsys)
    assert rc == 2 and "git tracks" in err and f.read_text() == "keep\n"
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--out", f, "--force"], capsys)
    assert rc == 0 and "pass_ms" in f.read_text()


@pytest.mark.parametrize("make, args, words", [
    (lambda d: d / "adir", ["--out", "{p}"], "is a folder"),
    (lambda d: d / "x.json", ["--format", "csv", "--out", "{p}"], "names must agree"),
    (lambda d: Path(""), ["--out", ""], "is a folder"),  # typer reads "" as the current folder
])
def test_bad_out_paths_are_refused_before_work(tmp_path, capsys, make, args, words):
    p = make(tmp_path)
    if p.name == "adir":
        p.mkdir()
    rc, out, err = _run(["simulate", "whatif", "reference-a6000-qwq32b", *[a.format(p=p) for a in args]], capsys)
    assert rc == 2 and words in err and err.count("\n") == 1, err
    assert not list(tmp_path.glob("*.tmp")) and not (REPO / "out.tmp").exists()


def test_json_name_with_table_format_writes_json(tmp_path, capsys):
    f = tmp_path / "rows.json"
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--out", f], capsys)
    assert rc == 0 and json.loads(f.read_text())["results"][0]["pass_ms"] > 0


def test_report_refuses_a_non_empty_folder(tmp_path, capsys):
    d = tmp_path / "rep"
    d.mkdir()
    (d / "old.md").write_text("stale\n")
    rc, out, err = _run(["simulate", "report", "cpu-smollm2", "--out", d], capsys)
    assert rc == 2 and "not empty" in err and (d / "old.md").read_text() == "stale\n"
