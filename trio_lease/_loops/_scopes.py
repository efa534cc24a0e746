"""Scope deadlines: the safety timer kept by the bodies' cancel scopes themselves, and a
holder's write bound kept by its scope's own deadline (:class:`ScopeBound`).

Every scope carries the grant's deadline and every renewal moves it. On trio this is the cheap
way (trio keeps deadlines in its own heap, and moving one is an update there), so it is
``_trio``'s keeper. It is also the keeper wherever the deadline must not be read from a loop
timer's callback: a holder's injected clock may need a running task (``anyio.current_time()``
does), and a callback runs outside any task.

A write bound as a scope's own deadline is trio's (moving a deadline updates trio's heap). On
asyncio each such move arms a loop timer, so asyncio keeps the bounds of every holder by one
timer instead (``_asyncio.SharedBound``).
"""

from __future__ import annotations

import math

import anyio

__all__ = ["ScopeBound", "ScopeDeadlines"]


class ScopeDeadlines:
    """A :class:`~trio_lease._loops.DeadlineKeeper` that sets each scope's deadline."""

    __slots__ = ("_scopes", "timers_set")

    reads_on_ring = False

    def __init__(self, scopes: list[anyio.CancelScope]) -> None:
        self._scopes = scopes
        self.timers_set = 0

    def start(self, deadline: float) -> None:
        for scope in self._scopes:
            self.add(scope, deadline)

    def add(self, scope: anyio.CancelScope, deadline: float) -> None:
        scope.deadline = deadline

    def moved(self, deadline: float) -> None:
        for scope in self._scopes:
            scope.deadline = deadline

    def stop(self) -> None:
        """Nothing to undo: the scopes left carry their deadlines with them."""


class ScopeBound:
    """A :class:`~trio_lease._loops.WriteBound` that sets the scope's own deadline."""

    __slots__ = ("_scope",)

    def __init__(self, scope: anyio.CancelScope) -> None:
        self._scope = scope

    def set(self, deadline: float) -> None:
        self._scope.deadline = deadline

    def clear(self) -> None:
        self._scope.deadline = math.inf
