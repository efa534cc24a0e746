"""``trio-lease`` as its console script runs it, with a SIGINT sent at one chosen moment of its
start (the first argument), for tests of where Python itself loses or garbles a Ctrl-C:

- ``finaliser``: inside a weak-reference callback while the command builds its parser (as the
  import system's module-lock callbacks run during imports). Python reports an exception raised
  there as ignored and goes on.
- ``loop``: inside the asyncio event loop's constructor. A KeyboardInterrupt there leaves a
  half-built loop whose finaliser prints a traceback.

The signal goes to this process, and the handler in place runs at the next bytecode check: in
the callback, or in the constructor.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import weakref
from typing import Any

import _trio_lease_cli
from trio_lease._cli import _main


def _interrupt_here() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100):  # the pending signal's handler runs in this loop, here
        pass


def _in_a_finaliser() -> None:
    build_parser = _main.build_parser

    def building() -> Any:
        doomed = type("Doomed", (), {})()
        ref = weakref.ref(doomed, lambda ref: _interrupt_here())
        del doomed  # the callback runs now, while ``ref`` lives
        del ref
        return build_parser()

    _main.build_parser = building


def _in_the_loops_constructor() -> None:
    loop_class: Any = asyncio.SelectorEventLoop
    init = loop_class.__init__

    def constructing(self: Any, *args: Any, **kwargs: Any) -> None:
        _interrupt_here()
        init(self, *args, **kwargs)

    loop_class.__init__ = constructing


if __name__ == "__main__":
    {"finaliser": _in_a_finaliser, "loop": _in_the_loops_constructor}[sys.argv.pop(1)]()
    sys.exit(_trio_lease_cli.main())
