"""``python -m calibrate ...``: the ``specsim calibrate`` commands without the rest of the CLI.

Same error contract as ``specsim`` (``specsim_cli.main.run_app``): an InputError or a usage mistake
becomes one line on stderr and exit code 2. The group's commands are composed in ``specsim_cli.main``
(``fit``, ``fit-workload``, ``serve-run``, ... live in their own modules), so this entry point runs it from there.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from specsim_cli.main import calibrate_main

    return calibrate_main(argv)


if __name__ == "__main__":
    sys.exit(main())
