"""``python -m tools.benchmarks``: see :mod:`tools.benchmarks.run`."""

import sys

from .run import main

sys.exit(main())
