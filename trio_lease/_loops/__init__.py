"""What differs between event loops, behind one seam: one module per loop, as anyio's
``_backends/``.

The rest of the package is written against anyio; the few things that must differ per loop for
speed live here and nowhere else (tests/test_layout.py holds every other module to it):

- the clock (:func:`clock`): the running loop's own, bound once;
- sleeping until an instant of that clock (:func:`sleep_until`), shared on trio by the tasks
  that sleep until the same one;
- slot waiters (:func:`waiter`): what a request waiting for a free slot blocks on;
- the safety timer's per-loop part (:func:`deadline_keeper`): how the deadline of a grant
  reaches its bodies' cancel scopes (the decision, and when it is read, is
  :mod:`trio_lease._bodies`);
- the bound of a holder's writes (:func:`write_bound`): a cancel scope's deadline while a write
  is in flight;
- connections (:func:`connect`): a socket with the reply bytes read in the task that asks for
  them, never parsed in a callback;
- starting a loop (:func:`run_options`): a call made once the loop exists, before it installs
  its own SIGINT handling.

``_asyncio.py`` serves asyncio and every loop built on it (uvloop); ``_trio.py`` serves trio.
Each offers the same names; :func:`current` picks the running loop's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sniffio

from ._interface import Connection, DeadlineKeeper, LoopKit, Waiter, WriteBound
from ._scopes import ScopeDeadlines

__all__ = [
    "Connection",
    "DeadlineKeeper",
    "LoopKit",
    "ScopeDeadlines",
    "Waiter",
    "WriteBound",
    "current",
    "run_options",
]

#: The modules loaded so far, by the name sniffio gives their loop.
_LOADED: dict[str, LoopKit] = {}


def current() -> LoopKit:
    """The seam's module for the running event loop (loaded on first use)."""
    name = sniffio.current_async_library()
    kit = _LOADED.get(name)
    if kit is None:
        kit = _LOADED[name] = _load(name)
    return kit


def _load(name: str) -> LoopKit:
    """The module for the loop sniffio calls ``name``; imported lazily, so a program on one
    loop never imports the other's."""
    kit: LoopKit
    if name == "asyncio":
        from . import _asyncio

        kit = _asyncio
    elif name == "trio":
        from . import _trio

        kit = _trio
    else:
        raise RuntimeError(f"trio_lease runs on asyncio and trio, not on {name!r}")
    return kit


def run_options(library: str, loop_built: Callable[[], None]) -> dict[str, Any]:
    """``anyio.run``'s backend options for ``library`` that call ``loop_built`` once the loop
    exists and before it installs its own SIGINT handler: asyncio's runner installs it right
    after calling its loop factory; trio has no such hook, so ``loop_built`` is called now."""
    if library == "asyncio":
        from . import _asyncio

        return {"loop_factory": _asyncio.loop_factory(loop_built)}
    loop_built()
    return {}
