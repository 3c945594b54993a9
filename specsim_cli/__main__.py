"""``python -m specsim_cli ...``: the same as the ``specsim`` console script."""

import sys

from specsim_cli.main import main

sys.exit(main())
