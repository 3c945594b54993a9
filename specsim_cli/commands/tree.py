"""The one ``specsim`` command tree by task: ``simulate``, ``measure``, ``import``, ``fit``, ``validate`` (one module
each in ``specsim_cli/commands/``, each a table of its commands), plus ``list``, ``show`` and ``init``.

A task group imports its commands' module when one is asked for (``specsim --help`` imports no library). Every former name
(``specsim calibrate fit-workload``, ``specsim validate-serving``, ``specsim calibrate gpu fit-engine`` ...) keeps
working for one release as a hidden alias: it prints one line on stderr naming the new command, then runs it (same
options, output and exit code). ``specsim validate RUN...`` (the former command, now a group) runs ``validate runs``.
"""

from __future__ import annotations

import copy
import functools
import sys

from typer.core import TyperGroup

from specsim_cli.commands import fit, imports, measure, simulate, validate

TASKS = (("simulate", simulate), ("measure", measure), ("import", imports), ("fit", fit), ("validate", validate))
TOP = ("list", "show", "init")


def former_names() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every former command path -> its new path (the aliases; docs/cli.md has the same table)."""
    out = {}
    for group, module in TASKS:
        for new, (_, old) in module.COMMANDS.items():
            if old:  # None: a command added after the reorganisation, with no former name
                out[tuple(old.split())] = (group, new)
        for sub, (_, table) in getattr(module, "GROUPS", {}).items():
            for new, (_, old) in table.items():
                if old:
                    out[tuple(old.split())] = (group, sub, new)
    return out


def note(old: str, new: str) -> None:
    """The one line a former name prints on stderr."""
    print(f'note: "specsim {old}" is now "specsim {new}"', file=sys.stderr, flush=True)


def noted(cmd, old: tuple[str, ...], new: tuple[str, ...]):
    """A hidden copy of ``cmd`` that prints :func:`note` when it is invoked (or asked for its help)."""
    base = type(cmd)

    class Former(base):
        def make_context(self, info_name, args, parent=None, **extra):
            note(" ".join(old), " ".join(new))
            return super().make_context(info_name, args, parent, **extra)

    alias = copy.copy(cmd)
    alias.__class__ = Former
    alias.hidden = True
    return alias


def command_at(path: tuple[str, ...]):
    """The command at ``path`` (new names, a task group's command), from the tables."""
    module = dict(TASKS)[path[0]]
    table = module.COMMANDS if len(path) == 2 else module.GROUPS[path[1]][1]
    return defined_command(path[-1], table[path[-1]][0], getattr(module, "ANNOUNCED", {}).get(path[-1]))


def announcing(inner, what: str):
    """``inner`` wrapped so that, past a few seconds, it says ``what`` it is doing and when it is done."""

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        from simulator.report.report_table import job

        with job(what, after_s=3.0):
            return inner(*args, **kwargs)

    return wrapper


@functools.cache
def defined_command(name: str, where: str, announced: str | None = None):
    """The click command of the typer function ``where`` ("module:function", the module under
    ``specsim_cli.commands`` unless dotted), imported now; ``announced``: what it says it is doing past a few seconds
    (``report_table.job``)."""
    import importlib

    import typer
    from typer.models import CommandInfo

    module, _, function = where.partition(":")
    callback = getattr(importlib.import_module(module if "." in module else f"specsim_cli.commands.{module}"), function)
    if announced:
        callback = announcing(callback, announced)
    return typer.main.get_command_from_info(CommandInfo(name=name, callback=callback), pretty_exceptions_short=True,
                                            rich_markup_mode=typer.core.DEFAULT_MARKUP_MODE)


class LazyGroup(TyperGroup):
    """A group whose commands are made on first use (:meth:`make`); ``commands`` (click's dict, walked by tools and
    typer's "did you mean") makes them all."""

    def __init__(self, **kwargs):
        self._commands = {}
        super().__init__(**kwargs)

    @property
    def commands(self) -> dict:
        for name in self.lazy_names():
            self.get_command(None, name)
        return self._commands

    @commands.setter
    def commands(self, value) -> None:
        self._commands = dict(value or {})

    def lazy_names(self) -> list[str]:
        return []

    def make(self, name: str):
        return None

    def list_commands(self, ctx) -> list[str]:
        return [*self.lazy_names(), *(n for n in self._commands if n not in self.lazy_names())]

    def get_command(self, ctx, name: str):
        if name not in self._commands and name in self.lazy_names():
            self._commands[name] = self.make(name)
        return self._commands.get(name)


class TaskGroup(LazyGroup):
    """A task group: its module's table of commands (each imported on first use), sub-groups, and ``default``: the
    command a path or an option as first word runs (with a note), for a group that was a command."""

    def __init__(self, name: str, module=None, *, help: str | None = None, table: dict | None = None):
        super().__init__(name=name, help=help or module.HELP, no_args_is_help=True)
        self.table = dict(table if table is not None else module.COMMANDS)
        self.announced = dict(getattr(module, "ANNOUNCED", {}))
        self.default = getattr(module, "DEFAULT", None)
        for sub, (sub_help, sub_table) in getattr(module, "GROUPS", {}).items():
            self._commands[sub] = TaskGroup(sub, help=sub_help, table=sub_table)

    def lazy_names(self) -> list[str]:
        return list(self.table)

    def make(self, name: str):
        return defined_command(name, self.table[name][0], self.announced.get(name))

    def parse_args(self, ctx, args):
        if self.default and args and self.former_call(ctx, args[0]):
            note(f"{self.name} RUN...", f"{self.name} {self.default} RUN...")
            args = [self.default, *args]
        return super().parse_args(ctx, args)

    def former_call(self, ctx, first: str) -> bool:
        """``first`` opens a call of the former command (an option, or a path), not a sub-command (a misspelt one
        stays a usage error)."""
        from pathlib import Path

        if first in self.list_commands(ctx) or first in ctx.help_option_names:
            return False
        return first.startswith("-") or "/" in first or Path(first).exists()


class FormerGroup(LazyGroup):
    """A former group (``calibrate``, ``calibrate gpu``, ``study``), hidden: each of its commands is the new one,
    :func:`noted`."""

    def __init__(self, path: tuple[str, ...], names: dict):
        super().__init__(name=path[-1], help="Former group: its commands moved to the task groups (specsim --help).",
                         no_args_is_help=True, hidden=True)
        self.path = path
        self.names = {old[len(path)]: new for old, new in names.items()
                      if old[:len(path)] == path and len(old) == len(path) + 1}
        for sub in dict.fromkeys(old[len(path)] for old in names if old[:len(path)] == path and len(old) > len(path) + 1):
            self._commands[sub] = FormerGroup((*path, sub), names)

    def lazy_names(self) -> list[str]:
        return list(self.names)

    def make(self, name: str):
        return noted(command_at(self.names[name]), (*self.path, name), self.names[name])


class RootGroup(TyperGroup):
    """``specsim``: the task groups, then list/show/init; former top-level names resolve as hidden aliases."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        names = former_names()
        for group, module in TASKS:
            self.add_command(TaskGroup(group, module))
        for first in dict.fromkeys(old[0] for old in names if len(old) > 1):
            self.add_command(FormerGroup((first,), names))
        self.former = {old[0]: new for old, new in names.items() if len(old) == 1 and old[0] not in self.commands}

    def list_commands(self, ctx) -> list[str]:
        return [n for n in (*(g for g, _ in TASKS), *TOP) if n in self.commands]

    def get_command(self, ctx, name: str):
        if name in self.commands:
            return self.commands[name]
        if name in self.former:
            return noted(command_at(self.former[name]), (name,), self.former[name])
        return None
