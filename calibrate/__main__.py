"""``python -m calibrate ...``: the ``specsim calibrate`` commands without the rest of the CLI.

Same error contract as ``specsim`` (``simulator.cli.run_app``): an InputError or a usage mistake
becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from calibrate.cli import app
    from simulator.cli import _hide_flag_types, ensure_registered, quiet_engines, run_app

    argv = quiet_engines(argv)
    _hide_flag_types()
    ensure_registered()  # fit, fit-workload, serve-run, ... are added to this app there
    return run_app(app, argv, "specsim calibrate")


if __name__ == "__main__":
    sys.exit(main())
