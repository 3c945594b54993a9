"""The command line a ``specsim`` command ran with, as parsed, for the provenance a profile or a report records.

``sys.argv`` is not the command when ``specsim`` runs in-process (the tests call ``specsim_cli.main.main(argv)``),
so the command is rebuilt from the command's own parsed parameters (its ``typer.Context``)."""

from __future__ import annotations

import shlex


def _words(param, value) -> list[str]:
    """One parameter's words on a command line: an argument's values; an option's name and value (a repeatable
    option once per value, a list of integers once as ``--gamma 1-8``, a flag by the name that sets it)."""
    from simulator.option_values import IntValues

    if isinstance(value, IntValues) and param.param_type_name != "argument":
        return [param.opts[0], value.text()]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if param.param_type_name == "argument":
        return [str(v) for v in values if v is not None]
    if getattr(param, "is_flag", False) and isinstance(value, bool):
        names = param.opts if value else param.secondary_opts
        return names[:1]
    return [w for v in values if v is not None for w in (param.opts[0], str(v))]


def command_line(ctx) -> str:
    """``specsim fit engine --report R --date D``: the command's path, its arguments, then each option
    given on the command line (options left at their defaults are left out), shell-quoted.

    ``ctx``: the ``typer.Context`` of the running command (a command takes it as a ``ctx: typer.Context``
    parameter)."""
    words = ctx.command_path.split()
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name)
        if p.param_type_name == "argument" or (source is not None and source.name == "COMMANDLINE"):
            words += _words(p, ctx.params.get(p.name))
    return shlex.join(words)
