"""Help users read (issue 30): every option of every command described, an example per command, no artefacts."""

from __future__ import annotations

import pytest

from specsim_cli.main import command_tree, main

SIMULATOR_COMMANDS = ["simulate whatif", "list", "show", "simulate capacity", "simulate report", "simulate pass-time", "init"]
# options without a description in commands other engineers own (calibrate/, validate/ ...): reported in issue 30,
# kept visible here as expected failures until their owners describe them
KNOWN_GAPS: set[str] = set()  # commands allowed to lack option descriptions (none left)


COMMANDS = [(" ".join(path), cmd) for path, cmd in command_tree()]


@pytest.mark.parametrize("name,cmd", [pytest.param(n, c, marks=pytest.mark.xfail(reason="owned elsewhere; issue 30",
                                                                                    strict=False) if n in KNOWN_GAPS else ())
                                      for n, c in COMMANDS], ids=[n for n, _ in COMMANDS])
def test_every_option_of_every_command_has_a_description(name, cmd):
    missing = [p.name for p in cmd.params if not (getattr(p, "help", None) or "").strip() and p.name != "help"]
    assert not missing, f"specsim {name}: no description for {missing}"
    assert (cmd.help or "").strip(), f"specsim {name} has no description"


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_each_command_shows_an_example(name, capsys):
    cmd = dict(COMMANDS)[name]
    assert f"Example: specsim {name} " in (cmd.help or ""), f"specsim {name}: no 'Example: specsim {name} ...' line"


@pytest.mark.parametrize("name", SIMULATOR_COMMANDS)
def test_help_has_no_artefacts(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main([*name.split(), "--help"]) == 0
    out = capsys.readouterr().out
    for bad in ("%%", "<list[", "{scenario}", "{what}", "{"):
        assert bad not in out, f"specsim {name} --help shows {bad!r}"
    assert "Example: specsim" in out


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_no_command_shows_typers_list_type(name, capsys, monkeypatch):
    """A repeatable option or a variadic argument shows its element's type (``<path>``), not ``<list[Path]>``."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main([*name.split(), "--help"]) == 0
    assert "<list[" not in capsys.readouterr().out, f"specsim {name} --help"


def test_docs_cli_lists_every_command_of_each_task_group():
    """docs/cli.md's group bullets name every command a group has (a new command is found where users look)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    bullets = {m.group(1): m.group(2) for m in re.finditer(r"^- `([a-z]+)`: (.*?)(?=^- |^$)", text, re.M | re.S)}
    missing = [" ".join(path) for path, _ in command_tree()
               if len(path) == 2 and path[0] in bullets and f"`{path[1]}`" not in bullets[path[0]]]
    assert len(bullets) >= 5 and missing == []
