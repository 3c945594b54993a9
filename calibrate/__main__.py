"""``python -m calibrate ...``: the ``specsim calibrate`` commands without the rest of the CLI.

Same error contract as ``specsim``: an InputError becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    import click
    import typer

    from calibrate.cli import app
    from simulator.errors import InputError

    try:
        app(args=argv, standalone_mode=False, prog_name="specsim calibrate")
    except InputError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except click.exceptions.ClickException as e:
        e.show()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
