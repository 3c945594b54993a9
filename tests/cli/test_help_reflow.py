"""Help text reads as paragraphs: each description paragraph is wrapped once to the width (no ragged lines where a
docstring's source line ended; specsim_cli.main.reflow)."""

from __future__ import annotations

import pytest

from specsim_cli.main import command_tree, main, reflow

WIDTH = 100
COMMANDS = [" ".join(path) for path, _ in command_tree()]


def test_reflow_joins_lines_and_keeps_lists():
    assert reflow("a b\nc d") == "a b c d"
    assert reflow("items:\n- one\n- two\n  more") == "items:\n- one\n- two\n  more"
    assert reflow("\bkeep\nas is") == "\bkeep\nas is"


def description(out: str) -> list[list[str]]:
    """The paragraphs (lists of lines) between the usage line and the first box."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Usage:")) + 1
    end = next((i for i, ln in enumerate(lines) if ln.startswith("╭")), len(lines))
    paras, cur = [], []
    for ln in lines[start:end]:
        if ln.strip():
            cur.append(ln.strip())
        elif cur:
            paras.append(cur)
            cur = []
    return paras + ([cur] if cur else [])


@pytest.mark.parametrize("name", COMMANDS)
def test_help_paragraphs_are_not_ragged(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert main([*name.split(), "--help"]) == 0
    for para in description(capsys.readouterr().out):
        for line, nxt in zip(para, para[1:]):
            # greedy wrapping: a line ends early only when the next word would not fit on it
            assert len(line) + 1 + len(nxt.split()[0]) > WIDTH - 4, f"specsim {name} --help: ragged line {line!r}"
