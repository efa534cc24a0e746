"""The ``trio-lease`` console script's entry point, outside the ``trio_lease`` package.

Importing the package takes a while (a second on a loaded machine); Python's own SIGINT
handler would turn a Ctrl-C meanwhile into a ``KeyboardInterrupt`` traceback. This module
imports nothing of the package until it has made SIGINT end the process quietly (exit 130,
as shells report it); :func:`trio_lease._cli.main` then keeps it so until the event loop
handles SIGINT itself (``trio_lease/_cli/_interrupt.py``).

The handler is installed when this module is imported, not when :func:`main` is called: the
console script's wrapper runs code of its own between the two (it rewrites ``sys.argv[0]``
with a regular expression, compiled then), and a Ctrl-C there would print a traceback.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # C module: `signal` imports enum, slow
import os
import sys

__all__ = ["main"]


def _interrupted(signum: int, frame: object) -> None:
    # Nothing has started yet (no lease, no child): end at once. A SystemExit raised here could
    # be lost: CPython's compile() of a module being imported may swallow it.
    print("trio-lease: interrupted", file=sys.stderr, flush=True)
    os._exit(128 + signum)


try:  # noqa: SIM105  (contextlib is an import more before the handler is in place)
    _signal.signal(_signal.SIGINT, _interrupted)
except ValueError:  # imported off the main thread: not as the console script, nothing to guard
    pass


def main() -> int:
    """Run ``trio-lease``; a Ctrl-C while it starts exits 130 with one line."""
    _signal.signal(_signal.SIGINT, _interrupted)  # again: the caller may have replaced it
    from trio_lease._cli._main import main as cli_main

    code: int = cli_main()
    return code


if __name__ == "__main__":
    sys.exit(main())
