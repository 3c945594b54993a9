"""Issue 19: every usage mistake -- unknown command, misspelled option, missing argument, bad option
value -- is one line ``error: ...`` (typer's "did you mean" kept) and exit 2, for every subcommand of
the tree, with or without the real engines; ``specsim --version``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import specsim_cli.main as cli

# subcommands whose parameters are all optional: no arguments is a valid call (and would run the job)
VALID_WITHOUT_ARGS = {("measure", "prepare-models"), ("validate", "inferencex"), ("fit", "attention"),
                     ("fit", "allreduce"),
                     ("validate", "moe-shapes")}  # every option has a default


def _tree() -> list[tuple[tuple[str, ...], object]]:
    return cli.command_tree(groups=True)


TREE = _tree()
COMMANDS = [p for p, c in TREE if not hasattr(c, "list_commands")]
GROUPS = [p for p, c in TREE if hasattr(c, "list_commands")]


def _run(args, capsys) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    return rc, cap.out, cap.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_the_tree_is_walked():
    assert ("simulate", "whatif") in COMMANDS and ("fit", "cost") in COMMANDS and ("validate", "runs") in COMMANDS
    assert ("fit",) in GROUPS and ("measure", "study") in GROUPS and len(COMMANDS) >= 15


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_misspelled_option_is_one_line_exit_2(path, capsys):
    rc, _, err = _run([*path, "--no-such-optoin", "1"], capsys)
    assert rc == 2
    assert "--no-such-optoin" in _one_error_line(err)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_no_arguments_is_one_line_exit_2_or_valid(path, capsys, tmp_path, monkeypatch):
    if path in VALID_WITHOUT_ARGS:
        pytest.skip("all parameters optional: a bare call runs the job")
    # from an empty folder: a default input relative to the working directory (validate moe-routing's
    # out/gpu-records/aiconfigurator.csv) is then absent whatever a developer has built in the checkout
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run(path, capsys)
    assert rc == 2
    line = _one_error_line(err)  # click's "Missing ..." or the command's own one-line input error
    assert "Missing" in line or line.startswith("error: "), line


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "specsim")
def test_bare_group_prints_help_exit_0_and_unknown_subcommand_exit_2(path, capsys):
    rc, out, err = _run(path, capsys)
    assert rc == 0 and "Usage" in out and not err.strip()
    rc, _, err = _run([*path, "no-such-command"], capsys)
    assert rc == 2 and "No such command" in _one_error_line(err)


@pytest.mark.parametrize("args, expect", [
    (["simulate", "whatf", "x"], "Did you mean 'whatif'?"),
    (["simulate", "whatif", "reference-a6000-qwq32b", "--gama", "3"], "--gamma"),
    (["list"], "Missing argument"),
    (["simulate", "whatif", "reference-a6000-qwq32b", "--requests", "abc"], "Invalid value for '--requests'"),
    (["fitt"], "Did you mean 'fit'?"),
    (["validate", "runs", "x", "--profile"], "requires an argument"),
    (["measure", "run", "--engine", "torch", "--small", "arch:nope", "--system", "vanilla-small", "--out", "/nonexistent/x"],
     "--small: arch:nope: unknown architecture 'nope'"),
])
def test_issue_examples(args, expect, capsys):
    rc, _, err = _run(args, capsys)
    assert rc == 2 and expect in _one_error_line(err)


def test_version(capsys):
    from importlib.metadata import version

    rc, out, _ = _run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"specsim {version('specreason-sim')}"


def test_without_engines_or_click_in_a_subprocess():
    """The console script's path with click, torch and vllm unimportable (a venv made from the
    declared dependencies only), also for a ``calibrate`` group command."""
    # an import hook that refuses them (as a venv without them would): a None in sys.modules would instead break
    # libraries that probe ``sys.modules['torch']`` (scipy's array-API helpers)
    block = ("import sys, importlib.abc\n"
             "class _Absent(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name.split('.')[0] in ('click', 'torch', 'vllm', 'transformers'):\n"
             "            raise ImportError(f'No module named {name!r}')\n"
             "sys.meta_path.insert(0, _Absent())\n")
    for code, expect in (
        (block + "from specsim_cli.main import main; sys.exit(main(['simulate', 'whatf', 'x']))", "Did you mean 'whatif'?"),
        (block + "from specsim_cli.main import main; sys.exit(main(['measure', 'run', '--sytem', 'x']))", "--sytem"),
        (block + "from specsim_cli.main import main; sys.exit(main(['fit', 'cost', '--outt', 'x']))", "--outt"),
    ):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert expect in _one_error_line(r.stderr)


def test_yaml_alias_bomb_is_refused_fast(tmp_path, capsys):
    """Issue 30: a 'billion laughs' scenario is refused in one line (the loaders walk nothing exponential)."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    prev = "a"
    for name in "bcdefghijk":
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
        prev = name
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    rc, out, err = _run(["simulate", "whatif", str(f)], capsys)
    # refused by the expansion bound before anything walks the expanded tree (without it: minutes, then a field error)
    assert rc == 2 and "expands to more than" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["simulate", "whatif", "reference-a6000-qwq32b", "--engine", "des", "--requests", "1000000000"],
                                  ["simulate", "capacity", "cpu-smollm2", "--requests", "1000000000"],
                                  ["simulate", "whatif", "reference-a6000-qwq32b", "--gamma", "3-1"]])
def test_cli_bounds_match_the_yaml_bounds(args, capsys):
    rc, out, err = _run(args, capsys)
    assert rc == 2 and err.count("\n") == 1 and ("--requests" in err or "--gamma" in err), err


@pytest.mark.parametrize("args, expect", [
    (["simulate", "whatif", "reference-a6000-qwq32b", "--gamma", "3-1"], "error: --gamma: empty range '3-1': write it low-high, e.g. 1-3"),
    (["simulate", "whatif", "reference-a6000-qwq32b", "--gamma", "x"], "error: --gamma: expected an integer, a range like 1-8 or a list like 3,5,7 (got 'x')"),
    (["simulate", "whatif", "reference-a6000-qwq32b", "--gamma", "2,17"], "error: --gamma: must lie in 1..16 (got 17)"),
    (["simulate", "whatif", "reference-a6000-qwq32b", "--threshold", "11"], "error: --threshold: must lie in 0..10 (got 11)"),
    (["simulate", "capacity", "cpu-smollm2", "--threshold", "5-11"], "error: --threshold: must lie in 0..10 (got 11)"),
    (["simulate", "capacity", "cpu-smollm2", "--gamma", "0,2"],
     "error: --gamma: must lie in 1..16 (got 0): 0, plain decoding, is --best-gamma's baseline only"),
    (["validate", "capacity", "x", "--scenario", "s", "--slo", "p90_latency<=1s", "--out", "o", "--threshold", "11"],
     "error: --threshold: must lie in 0..10 (got 11)"),
    (["measure", "run", "--system", "specreason", "--threshold", "11", "--out", "o"], "error: --threshold: must lie in 0..10 (got 11)"),
    (["measure", "run", "--system", "specreason", "--threshold", "x", "--out", "o"], "error: --threshold: expected a number in 0..10 (got 'x')"),
    (["measure", "serve-systems", "--threshold", "-1", "--out", "o"], "error: --threshold: must lie in 0..10 (got -1)"),
    (["measure", "microbench", "--gammas", "3-1", "--out", "o"], "error: --gamma: empty range '3-1': write it low-high, e.g. 1-3"),
    (["measure", "study", "specdecode", "--gamma", "x", "--out", "o"], "error: --gamma: expected an integer, a range like 1-8 or a list like 3,5,7 (got 'x')"),
    (["fit", "acceptance", "--fit-gammas", "3-1"], "error: --fit-gammas: empty range '3-1': write it low-high, e.g. 1-3"),
])
def test_one_parser_one_wording_for_gamma_and_threshold(args, expect, capsys, tmp_path, monkeypatch):
    """Issue 30: every --gamma / --threshold goes through simulator.option_values: the same syntax, bounds and
    wording in every command (list-taking or single), one line, exit 2, nothing run."""
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run(args, capsys)
    assert rc == 2 and _one_error_line(err) == expect
    assert not (tmp_path / "o").exists()


DATED = [p for p, c in TREE if any(getattr(q, "name", None) == "date" for q in getattr(c, "params", []))]


def test_the_dated_commands_are_found():
    assert ("fit", "cost") in DATED and ("fit", "workload-traces") in DATED and len(DATED) >= 10


@pytest.mark.parametrize("path", DATED, ids=" ".join)
@pytest.mark.parametrize("date", ["yesterday", "2026-13-45", "20261130"])
def test_a_provenance_date_is_a_calendar_date(path, date, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run([*path, "--date", date], capsys)
    assert rc == 2
    line = _one_error_line(err)
    assert "'--date'" in line and "YYYY-MM-DD" in line and date in line
    assert not list(tmp_path.iterdir())  # nothing written
