"""The ``specsim`` command line: thin entry points that parse, call one library function, print.

Sub-command groups living in other packages (``calibrate``, ``validate``) are registered
here; their modules import heavy engines lazily, inside the commands.
"""

from __future__ import annotations

import sys

import typer

from simulator.errors import InputError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.splitlines()[0])


def _register_subapps() -> None:
    from calibrate.cli import app as calibrate_app

    app.add_typer(calibrate_app, name="calibrate", help="Run the real systems, microbenchmark, fit profiles.")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: InputError -> one line on stderr, exit code 2."""
    _register_subapps()
    try:
        app(args=argv, standalone_mode=False)
    except InputError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
