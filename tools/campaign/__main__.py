"""Command line: ``python -m tools.campaign --help``."""

from __future__ import annotations

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
