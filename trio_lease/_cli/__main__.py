"""``python -m trio_lease._cli``: the ``trio-lease`` command without its console script."""

from __future__ import annotations

import sys

from ._main import main

sys.exit(main())
