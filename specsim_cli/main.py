"""The ``specsim`` console script (`specsim --help`): the whole command tree and its error contract.

The tree, by task (``specsim_cli/commands/``, one module per group): ``simulate`` (whatif, capacity, report, pass-time,
serve-workload), ``measure`` (every command that runs an engine or a real system), ``import`` (every importer),
``fit`` (every fitter), ``validate`` (every validation), plus ``list``, ``show`` and ``init``. Every former name keeps
working for one release as a hidden alias that names its new command on stderr (docs/cli.md has the table). No other
module has a ``python -m`` entry point except two that must run outside the tree (docs/cli.md):
``calibrate/measure/vllm_cli.py`` and ``calibrate/measure/gpu_step_bench.py``. A task group imports its commands'
modules on first use, and those import heavy engines lazily, inside the commands.

Error contract (:func:`run_app`): exit 0 success, 1 a quality bar failed (``validate``), 2 bad
input, a usage mistake or a case the tool cannot judge -- always one line ``error: ...`` on
stderr, never a traceback (``SPECSIM_DEBUG=1`` re-raises unexpected errors).
"""

from __future__ import annotations

import re
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception (:func:`interrupts`) so that it unwinds like Ctrl-C: workers stopped, no
    partial file (writes are atomic), one line, exit 143."""


_SIGNALS: list[int] = []  # the interrupts main() received (typer turns them into a silent exit code 130)
_SAID: list[bool] = []  # the interrupt's line was printed (once per main())


def _interrupted(e: BaseException | None = None) -> int:
    """The one line (printed once) and exit code of an interrupt: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    term = isinstance(e, Terminated) or (e is None and signal.SIGTERM in _SIGNALS)
    if not _SAID:
        print(f"{'terminated (SIGTERM)' if term else 'interrupted (Ctrl-C)'}: stopped; no partial file written",
              file=sys.stderr, flush=True)
        _SAID.append(True)
    return 128 + (signal.SIGTERM if term else signal.SIGINT)


try:  # Ctrl-C while the command tree imports: the one line, not a traceback through the import machinery
    import typer

    from simulator.errors import InputError
    from specsim_cli.commands.top import app as top_app
    from specsim_cli.commands.tree import RootGroup
except KeyboardInterrupt as _e:
    sys.exit(_interrupted(_e))

APP_HELP = ("Simulate, fit and validate speculative reasoning (SpecReason) and speculative decoding on "
            "reasoning models: what-if grids, capacity planning, real runs, validation.")
app = typer.Typer(cls=RootGroup, no_args_is_help=True, add_completion=False, help=APP_HELP)
app.add_typer(top_app)  # list, show, init; the task groups are RootGroup's own


def package_version() -> str:
    """The installed distribution's version (package metadata), ``unknown`` when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specreason-sim")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        print(f"specsim {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version and exit"),
          verbose: bool = typer.Option(False, "--verbose", help="show the engines' own logs (vLLM INFO lines, "
                                       "weight loading); accepted anywhere on the line; also SPECSIM_VERBOSE=1")) -> None:
    """Simulate, fit and validate speculative reasoning and speculative decoding on reasoning models."""


def full_app() -> typer.Typer:
    """The whole ``specsim`` tree (e.g. for ``typer.testing.CliRunner``)."""
    return app


def command_tree(groups: bool = False) -> list[tuple[tuple[str, ...], object]]:
    """Every command of the ``specsim`` tree as (path, click command), depth first in the order listed, former names
    (hidden aliases) left out; with ``groups``, the groups too (the root's path is ``()``). What the help, naming
    and usage-error checks walk."""
    root = typer.main.get_command(full_app())
    ctx = root.make_context("specsim", [], resilient_parsing=True)
    out = []

    def walk(cmd, path):
        subs = cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []
        if groups or not subs:
            out.append((path, cmd))
        for name in subs:
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                walk(sub, (*path, name))

    walk(root, ())
    return out


def former_commands() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every former command path with its new path (the hidden aliases)."""
    from specsim_cli.commands.tree import former_names

    return list(former_names().items())


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _input_name(argv: list[str] | None, prog_name: str) -> str:
    """What an unexpected error is about: the input files on the command line (existing paths), else the command."""
    from pathlib import Path

    args = list(sys.argv[1:] if argv is None else argv)
    files = [a for a in args if not a.startswith("-") and Path(a).exists()]
    if files:
        return ", ".join(files[:3])
    words = [a for a in args if not a.startswith("-")][:2]
    return " ".join([prog_name, *words])


def run_app(typer_app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run ``typer_app`` under the error contract (module docstring): InputError and every usage
    mistake (unknown command or option -- with typer's "did you mean" --, missing argument, bad
    value) -> one line ``error: ...`` and 2; an unexpected exception -> one line and 2 as well
    (the tool cannot judge this input), re-raised with ``SPECSIM_DEBUG=1``."""
    import os

    try:
        rc = typer_app(args=argv, standalone_mode=False, prog_name=prog_name)
    except InputError as e:
        print(f"error: {_one_line(e.one_line())}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except SystemExit as e:  # a command's sys.exit(code) (validate: 1 above the bar, 2 cannot judge)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt as e:
        return _interrupted(e)
    except typer.Abort as e:
        return _interrupted(e.__cause__ if isinstance(e.__cause__, KeyboardInterrupt) else KeyboardInterrupt())
    except typer.TyperException as e:  # typer's (vendored click) usage errors
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare group: its help was printed; not a mistake
            return 0
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
        print(f"error: {where}{_one_line(e.format_message())}", file=sys.stderr)
        return 2 if getattr(e, "exit_code", 1) in (1, 2) else e.exit_code
    except UnicodeDecodeError as e:  # a binary or non-UTF-8 file where text was expected
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        print(f"error: {_input_name(argv, prog_name)}: not UTF-8 text (byte {e.start}): expected a text file "
              "(YAML, CSV or JSON)", file=sys.stderr)
        return 2
    except OSError as e:  # a file that cannot be read or written: name it
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        name = e.filename if e.filename else _input_name(argv, prog_name)
        print(f"error: {name}: {e.strerror or _one_line(e) or type(e).__name__}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the contract: no traceback for any input
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        print(f"error: {_input_name(argv, prog_name)}: cannot handle this input ({type(e).__name__}: "
              f"{_one_line(e) or 'no message'}); rerun with SPECSIM_DEBUG=1 for the traceback", file=sys.stderr)
        return 2
    return rc if isinstance(rc, int) else 0


def quiet_engines(argv: list[str] | None) -> list[str]:
    """Engine logs (vLLM INFO lines, config dumps, weight-loading bars) off unless ``--verbose`` (anywhere
    on the command line; taken out of it here) or ``SPECSIM_VERBOSE=1``; set before any engine is imported
    (engine subprocesses inherit it). Returns the arguments without ``--verbose``."""
    import os

    args = list(sys.argv[1:] if argv is None else argv)
    if "--verbose" in args:
        os.environ["SPECSIM_VERBOSE"] = "1"
        args = [a for a in args if a != "--verbose"]
    if os.environ.get("SPECSIM_VERBOSE"):
        return args
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return args


def _element_type(shown):
    """``<list[Path]>`` -> ``<path>``: a list's element type, lower case as typer writes a single path."""
    return re.sub(r"list\[([^\]]*)\]", lambda m: m.group(1).lower(), shown) if isinstance(shown, str) else shown


def _one_line_warnings() -> None:
    """The project's own warnings (their category defined in simulator/, calibrate/ or validate/: an unknown
    config.json architecture read as a known one, ...) as one ``warning: ...`` line on stderr, like the errors; any
    other warning as Python shows it."""
    import warnings

    shown = warnings.showwarning
    if getattr(shown, "specsim", False):  # installed by an earlier call in this process
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] in ("simulator", "calibrate", "validate"):
            print(f"warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    show.specsim = True
    warnings.showwarning = show


def _hide_flag_types() -> None:
    """Help lists a flag as ``--gemma / --no-gemma``, without typer's ``<bool>`` type column."""
    from typer.core import TyperOption

    if getattr(TyperOption, "_specsim_flags_plain", False):
        return
    orig = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False):
            return None
        shown = orig(self, ctx)
        # a repeatable option shows its element's type (<str>), not typer's "<list[str]>"
        return _element_type(shown)

    TyperOption.display_type_rich = display_type_rich
    TyperOption._specsim_flags_plain = True
    from typer.core import TyperArgument

    def usage_name(self) -> str:
        """A required argument reads SCENARIO in the usage line (typer writes {scenario}); optional ones [NAME]."""
        name = (self.metavar or self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    TyperArgument._usage_display_name = usage_name
    arg_type = TyperArgument.display_type_rich

    def argument_type(self, ctx):
        """A variadic argument shows its element's type (``RUN_DIRS...  <path>``), not typer's ``<list[Path]>``."""
        return _element_type(arg_type(self, ctx))

    TyperArgument.display_type_rich = argument_type


def _dates_checked() -> None:
    """Every ``--date`` option (the provenance date a command records) takes a calendar date, YYYY-MM-DD: anything
    else is a usage error (one line, exit 2) before the command runs, not a date written into a report."""
    import datetime

    from typer.core import TyperOption

    if getattr(TyperOption, "_specsim_dates", False):
        return
    orig = TyperOption.process_value

    def process_value(self, ctx, value):
        value = orig(self, ctx, value)
        if self.name == "date" and value is not None:
            try:
                ok = re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(value)) and datetime.date.fromisoformat(str(value))
            except ValueError:
                ok = False
            if not ok:
                raise typer.BadParameter(f"expected a calendar date YYYY-MM-DD (got {value!r})", ctx=ctx, param=self)
        return value

    TyperOption.process_value = process_value
    TyperOption._specsim_dates = True


_KEEP_BREAK = re.compile(r"\s|[-*•]\s|\d+[.)]\s")  # a line that starts an indented block, a bullet or a numbered item


def reflow(paragraph: str) -> str:
    """One help paragraph with its source line breaks joined (a line starting an indented block, a bullet or a
    numbered item keeps its break; a paragraph opening with ``\\b`` is left as written)."""
    if paragraph.startswith("\b"):
        return paragraph
    lines = paragraph.split("\n")
    out = lines[0]
    for line in lines[1:]:
        out += ("\n" + line) if _KEEP_BREAK.match(line) else (" " + line.strip())
    return out


def _reflow_help() -> None:
    """Help paragraphs read as paragraphs: typer keeps every line break of a docstring, so rich wrapped each
    source line on its own (ragged lines); here each paragraph is joined (:func:`reflow`) and wrapped once."""
    from typer import rich_utils

    if getattr(rich_utils, "_specsim_reflow", False):
        return
    orig = rich_utils._fix_linebreaks
    rich_utils._fix_linebreaks = lambda paragraphs, markup_mode: orig([reflow(p) for p in paragraphs], markup_mode)
    rich_utils._specsim_reflow = True


def interrupts() -> dict:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt and SIGTERM :class:`Terminated`, both recorded (typer reports either
    as a bare exit code 130); set by :func:`main` only (never on import), inherited by no worker
    (``simulator.studies.capacity.parallel.worker_signals`` restores the defaults there). Returns the handlers replaced."""
    def on_signal(signum, frame):
        _SIGNALS.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return {}
    return {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}


def stop_children() -> None:
    """After an interrupt: any ``multiprocessing`` child still running (a pool the interrupted code did not close
    itself) is stopped, so no worker outlives the command."""
    import multiprocessing

    children = multiprocessing.active_children()
    if not children:  # nothing to stop; importing now could meet a module the interrupt left half imported
        return
    from simulator.studies.capacity.parallel import stop_processes  # imported already: it started the children

    stop_processes(children)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point (:func:`run_app` over the whole ``specsim`` command tree). Ctrl-C or SIGTERM, at any
    point (the groups' imports included): every worker process stopped, one line, exit 130 / 143."""
    del _SIGNALS[:], _SAID[:]
    previous = interrupts()
    try:
        argv = quiet_engines(argv)
        _one_line_warnings()
        _hide_flag_types()
        _dates_checked()
        _reflow_help()
        rc = run_app(app, argv, "specsim")
        if _SIGNALS or _SAID:
            rc = _interrupted()
    except KeyboardInterrupt as e:
        rc = _interrupted(e)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if _SIGNALS or _SAID:
        try:
            stop_children()
        except KeyboardInterrupt:  # a second Ctrl-C while stopping: stop harder, say nothing more
            import multiprocessing

            for p in multiprocessing.active_children():
                p.kill()
    return rc


if __name__ == "__main__":
    sys.exit(main())
