"""The one ``specsim`` command tree by task: ``simulate``, ``measure``, ``import``, ``fit``, ``validate`` (one module
each in ``specsim_cli/commands/``, each a table of its commands), plus ``list``, ``show`` and ``init``.

A task group loads its commands when one is asked for (``specsim --help`` imports no library). Every former name
(``specsim calibrate fit-workload``, ``specsim validate-serving``, ``specsim calibrate gpu fit-engine`` ...) keeps
working for one release as a hidden alias: it prints one line on stderr naming the new command, then runs it (same
options, output and exit code). ``specsim validate RUN...`` (the former command, now a group) runs ``validate runs``.
"""

from __future__ import annotations

import copy
import sys

from typer.core import TyperGroup

from specsim_cli.commands import fit, imports, measure, simulate, validate

TASKS = (("simulate", simulate), ("measure", measure), ("import", imports), ("fit", fit), ("validate", validate))
TOP = ("list", "show", "init")


def former_names() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every former command path -> its new path (the aliases; docs/cli.md has the same table)."""
    out = {}
    for group, module in TASKS:
        for new, old in module.COMMANDS.items():
            out[old] = (group, new)
        for sub, (_, table) in getattr(module, "GROUPS", {}).items():
            for new, old in table.items():
                out[old] = (group, sub, new)
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


def resolve(ctx, path: tuple[str, ...]):
    """The command at ``path`` (new names) in the tree ``ctx`` belongs to."""
    cmd = ctx.find_root().command
    for word in path:
        cmd = cmd.get_command(ctx, word)
    return cmd


def defined_command(name: str, where: str, announced: str | None = None):
    """The click command of the typer function ``where`` ("module:function"), imported now; ``announced``: what it
    says it is doing past a few seconds (``report_table.job``)."""
    import importlib

    import typer
    from typer.models import CommandInfo

    module, _, function = where.partition(":")
    callback = getattr(importlib.import_module(module), function)
    if announced:
        from specsim_cli.commands.legacy import announcing

        callback = announcing(callback, announced)
    return typer.main.get_command_from_info(CommandInfo(name=name, callback=callback), pretty_exceptions_short=True,
                                            rich_markup_mode=typer.core.DEFAULT_MARKUP_MODE)


class TaskGroup(TyperGroup):
    """A task group whose commands come from :mod:`specsim_cli.commands.legacy` by their former path, on first use;
    ``default``: the command an unknown first word runs (with a note), for a group that was a command."""

    def __init__(self, name: str, module=None, *, help: str | None = None, table: dict | None = None):
        super().__init__(name=name, help=help or module.HELP, no_args_is_help=True)
        self.table = dict(table if table is not None else module.COMMANDS)
        self.defined = dict(getattr(module, "DEFINED", {}))
        self.announced = dict(getattr(module, "ANNOUNCED", {}))
        self.default = getattr(module, "DEFAULT", None)
        for sub, (sub_help, sub_table) in getattr(module, "GROUPS", {}).items():
            self.add_command(TaskGroup(sub, help=sub_help, table=sub_table))

    def list_commands(self, ctx) -> list[str]:
        return [*self.table, *(n for n in self.commands if n not in self.table)]

    def get_command(self, ctx, name: str):
        if name not in self.commands and name in self.defined:
            self.commands[name] = defined_command(name, self.defined[name], self.announced.get(name))
        elif name not in self.commands and name in self.table:
            from specsim_cli.commands.legacy import command

            cmd = copy.copy(command(self.table[name]))
            cmd.name = name
            self.commands[name] = cmd
        return self.commands.get(name)

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands:  # typer's "did you mean" reads self.commands
            for name in self.table:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

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


class FormerGroup(TyperGroup):
    """A former group (``calibrate``, ``calibrate gpu``, ``study``), hidden: each of its commands is the new one,
    :func:`noted`."""

    def __init__(self, path: tuple[str, ...], names: dict):
        super().__init__(name=path[-1], help=f"Former group: its commands moved to the task groups (specsim --help).",
                         no_args_is_help=True, hidden=True)
        self.path = path
        self.names = {old[len(path)]: new for old, new in names.items()
                      if old[:len(path)] == path and len(old) == len(path) + 1}
        subs = {old[len(path)] for old in names if old[:len(path)] == path and len(old) > len(path) + 1}
        for sub in subs:
            self.add_command(FormerGroup((*path, sub), names))

    def list_commands(self, ctx) -> list[str]:
        return [*self.names, *self.commands]

    def get_command(self, ctx, name: str):
        if name in self.commands:
            return self.commands[name]
        if name in self.names:
            return noted(resolve(ctx, self.names[name]), (*self.path, name), self.names[name])
        return None


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
            return noted(resolve(ctx, self.former[name]), (name,), self.former[name])
        return None
