"""When a new CustomResourceDefinition starts being served: the establishing window.

On a real server a new CRD is stored with an empty status; the naming controller then accepts
its names (``NamesAccepted``, reason ``NoConflicts``) and the establishing controller sets
``Established`` (reason ``InitialNamesAccepted``), each a status write that watchers see. The
custom-resource handler (``apiextensions-apiserver/pkg/apiserver/customresource_handler.go``)
serves the resource only once ``NamesAccepted`` or ``Established`` is True, and discovery lists
it only once it is established; until then its URLs fall through to the not-found handler
(``text/plain`` ``404 page not found``). ``kubectl wait --for=condition=Established`` exists for
that window.

The emulator sets both conditions in one status write, ``delay`` seconds (on
:func:`anyio.current_time`'s clock) after the CRD was created: 0 (the default) establishes it
at once, still as a second write after the create. A positive delay is kept by a background
task while the emulator is served on a socket (:meth:`Establisher.run`) and otherwise checked
at the start of every request, so an in-process client sees it on its next request.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import anyio

__all__ = ["Establisher"]


class Establisher:
    """CRD names waiting to be established, with the moment each one will be."""

    #: Seconds between a CRD's creation and its ``Established`` condition.
    delay: float

    def __init__(self, delay: float) -> None:
        self.delay = delay
        # name -> deadline; None until first seen inside an event loop (``apply`` may run
        # before any loop exists).
        self._pending: dict[str, float | None] = {}
        self._wake: anyio.Event | None = None

    def schedule(self, name: str) -> None:
        if name not in self._pending:
            self._pending[name] = None
            if self._wake is not None:
                self._wake.set()

    def forget(self, name: str) -> None:
        self._pending.pop(name, None)

    def due(self, now: float | None) -> list[str]:
        """The names whose window is over (all of them when ``delay`` is 0)."""
        if self.delay <= 0:
            ready = list(self._pending)
        elif now is None:
            return []
        else:
            for name, deadline in self._pending.items():
                if deadline is None:
                    self._pending[name] = now + self.delay
            ready = [n for n, d in self._pending.items() if d is not None and d <= now]
        for name in ready:
            del self._pending[name]
        return ready

    def _next_wait(self, now: float) -> float:
        deadlines = [d for d in self._pending.values() if d is not None]
        if any(d is None for d in self._pending.values()):
            return 0.0
        return max(0.0, min(deadlines) - now) if deadlines else math.inf

    async def run(self, settle: Callable[[], None]) -> None:
        """Call ``settle`` whenever a window ends (runs until cancelled)."""
        while True:
            self._wake = anyio.Event()
            with anyio.move_on_after(self._next_wait(anyio.current_time())):
                await self._wake.wait()
            settle()
