"""Every ``specsim`` command the README, the Makefile, the docs, the committed reports and the shipped YAML headers
show names a command that exists and only options that command has, so a reader who copies one gets a run, not a
usage error. (Whether it runs to the end is another check: the quoted figures' own, ``tests/test_doc_figures.py``,
and the profiles', ``tests/calibrate/test_profiles_reproduce.py``.) ``docs/history.md`` is left out: it records
commands as they ran then. Former names still run (hidden aliases), so they pass.

What counts as a command: an inline code span that starts with ``specsim`` (or ``.../specsim``), and a line of a
fenced or indented code block, a Makefile recipe (``$(SPECSIM)``) or a YAML comment that does, its ``\\``
continuations joined. Words in capitals or with ``<``, ``[`` or ``...`` are placeholders; the command ends at a shell
operator or comment."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from simulator.paths import REPO
from specsim_cli.main import full_app

STOP = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&", "2>", "<"}
LINE = re.compile(r"\s*(#\s*|\$ )?([\w.~-]*/)*(specsim|\$\(SPECSIM\)) ")
IN_LINE = re.compile(r"(?:^|[\s/$(])(?:specsim|\$\(SPECSIM\)) (.*)$")
# shown as the error a mistyped name gets, on purpose
SHOWN_AS_ERRORS = {("docs/calibration.md", "whatf x")}


def shown_files() -> list[Path]:
    docs = [p for p in sorted((REPO / "docs").glob("*.md")) if p.name != "history.md"]
    return [REPO / "README.md", REPO / "Makefile", *docs, *sorted((REPO / "reports").rglob("*.md")),
            *sorted((REPO / "simulator").rglob("*.yaml")), *sorted((REPO / "scenarios").glob("*.yaml"))]


def block_commands(text: str) -> list[str]:
    """Commands on code-block, recipe and comment lines (continuations joined)."""
    out, fenced, buf = [], False, ""
    for ln in text.splitlines():
        if ln.strip().startswith("```"):
            fenced, buf = not fenced, ""
            continue
        if not (buf or fenced or LINE.match(ln)):
            continue
        if ln.rstrip().endswith("\\"):
            buf += ln.rstrip()[:-1] + " "
            continue
        full, buf = buf + ln, ""
        out += [m.group(1) for m in IN_LINE.finditer(full)]
    return out


def inline_commands(text: str) -> list[str]:
    """Commands in inline code spans (outside fenced and indented blocks)."""
    t = re.sub(r"```.*?```", "", text, flags=re.S)
    t = "\n".join(ln for ln in t.splitlines() if not ln.startswith("    ") or ln.lstrip().startswith(("|", "-", "*")))
    out = []
    for span in re.findall(r"`([^`]+)`", t):
        m = re.match(r"\s*(?:\S*/)?specsim (.*)", span.replace("\n", " "), flags=re.S)
        if m:
            out.append(m.group(1))
    return out


def shown_commands() -> list[tuple[str, str]]:
    out = []
    for f in shown_files():
        text = f.read_text(encoding="utf-8", errors="replace")
        rel = f.relative_to(REPO).as_posix()
        out += [(rel, c) for c in dict.fromkeys(block_commands(text) + inline_commands(text))]
    return out


def placeholder(token: str) -> bool:
    return bool(re.search(r"[A-Z<\[]|\.\.\.", token))


def problem(args: str, root, ctx) -> str | None:
    """What is wrong with ``specsim ARGS`` as the CLI would parse it (None: nothing)."""
    try:
        toks = shlex.split(args)
    except ValueError as e:
        return f"cannot be split as a shell line: {e}"
    cmd, path, i = root, [], 0
    while i < len(toks) and hasattr(cmd, "list_commands"):
        t = toks[i]
        if t in STOP or t.startswith(("-", "#")):
            break
        sub = cmd.get_command(ctx, t)
        if sub is None:
            return f"no command {' '.join([*path, t])!r}" if re.fullmatch(r"[a-z][a-z0-9-]*", t) else None
        cmd, path, i = sub, [*path, t], i + 1
    if hasattr(cmd, "list_commands"):  # a group named in prose
        return None
    opts = {"--help"}.union(*(set(p.opts) | set(p.secondary_opts) for p in cmd.params))
    for t in toks[i:]:
        if t in STOP or t.startswith(("#", ">")):
            break
        name = t.split("=", 1)[0]
        if name.startswith("--") and name not in opts and not placeholder(name):
            return f"'{' '.join(path)}' has no option {name}"
    return None


def test_every_shown_command_names_a_command_and_its_options():
    root = typer.main.get_command(full_app())
    ctx = root.make_context("specsim", [], resilient_parsing=True)
    shown = shown_commands()
    assert len(shown) > 100, "the scan finds the docs' commands"
    bad = [f"{f}: {p}: specsim {c[:140]}" for f, c in shown
           if (f, c) not in SHOWN_AS_ERRORS and (p := problem(c, root, ctx))]
    assert not bad, "commands shown that the CLI would refuse:\n" + "\n".join(bad)


@pytest.mark.parametrize("args, want", [
    ("simulate whatif S --no-such-option 3", "has no option --no-such-option"),
    ("simulate whatiff S", "no command 'simulate whatiff'"),
    ("fit moe --report R --force=yes", None),
    ("validate serving DIR/closed-* --profile P --out R  # a comment --nope", None),
    ("simulate capacity S --users 1,16 | tee --nope", None),
    ("simulate capacity S --<OPTION> 3", None),
    ("simulate", None),
    ("simulate whatif 'unclosed", "cannot be split"),
])
def test_the_check_itself(args, want):
    root = typer.main.get_command(full_app())
    ctx = root.make_context("specsim", [], resilient_parsing=True)
    got = problem(args, root, ctx)
    assert (got is None) if want is None else (got is not None and want in got)


def test_commands_are_found_in_each_form():
    text = ("Run `specsim fit moe --report R`.\n\n```bash\n.venv/bin/specsim simulate whatif S \\\n    --format json\n```\n"
            "\n    specsim validate cpu --out D\n# Regenerate:\n#   specsim fit engine --force\n\t$(SPECSIM) simulate whatif S\n")
    got = block_commands(text) + inline_commands(text)
    assert got == ["simulate whatif S      --format json", "validate cpu --out D", "fit engine --force",
                   "simulate whatif S", "fit moe --report R"]
