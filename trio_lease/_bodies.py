"""The cancel scopes of one grant's ``held()`` bodies, and the grant's deadline on them: the
safety timer.

Every body runs in a cancel scope that is cancelled once the grant's deadline passes, also when
the event loop stalled past it: the cancellation then comes with the other timers that expired
in the stall, not later, when the heartbeat's watchdog gets its turn (docs/design.md §4.5,
tests/core/test_stall.py). The deadline moves later with every confirmed renewal.

This is the timer's one definition: which scopes, which deadline, when it is read, and what
happens when it has passed (:meth:`BodyScopes.ring`). How the deadline reaches the scopes is
the event loop's part, a :class:`~trio_lease._loops.DeadlineKeeper` from the seam: on trio each
scope carries the deadline (trio's cheap deadline scopes); on asyncio one loop timer per grant
fires at the deadline it last read and calls :meth:`~BodyScopes.ring`, which either cancels
every body's scope or names the new deadline (see :mod:`trio_lease._loops._asyncio` for why).
A holder with an injected clock gets scope deadlines on every loop: its deadline is read
through that clock, which may need a running task (``anyio.current_time()`` does), and a
timer callback runs outside any task. tests/core/test_bodies.py runs the same tests on every
keeper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio

from ._loops import DeadlineKeeper, ScopeDeadlines, current

__all__ = ["BodyScopes"]


class BodyScopes:
    """The bodies' scopes of one grant; ``deadline(loop_now)`` is the grant's deadline on the
    event loop's clock, given the loop's time now (the holder's clock may be an injected one).

    ``alarm``: use the event loop's own keeper (a loop timer on asyncio); only when
    ``deadline`` needs no running task (the holder's clock is the event loop's). Otherwise
    scope deadlines.
    """

    def __init__(self, deadline: Callable[[float], float], *, alarm: bool = True) -> None:
        self._deadline = deadline
        self._use_alarm = alarm
        self._scopes: list[anyio.CancelScope] = []
        self._keeper: DeadlineKeeper | None = None
        self._now: Callable[[], float] = anyio.current_time

    def __bool__(self) -> bool:
        return bool(self._scopes)

    def __iter__(self) -> Iterator[anyio.CancelScope]:
        return iter(self._scopes)

    @property
    def alarms_set(self) -> int:
        """How many loop timers this grant set (0 with scope deadlines)."""
        return 0 if self._keeper is None else self._keeper.timers_set

    def open(self) -> anyio.CancelScope:
        """A new body's scope, cancelled once the grant's deadline passes."""
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        keeper = self._keeper
        if keeper is None:
            keeper = self._keeper = self._new_keeper()
        deadline = self._deadline(self._now())
        if len(self._scopes) == 1:
            keeper.start(deadline)
        else:
            keeper.add(scope, deadline)
        return scope

    def close(self, scope: anyio.CancelScope) -> None:
        """The body has exited: its scope is no longer cancelled at the deadline."""
        self._scopes.remove(scope)
        if not self._scopes and self._keeper is not None:
            self._keeper.stop()

    def moved(self) -> None:
        """The grant's deadline moved later (a confirmed renewal)."""
        keeper = self._keeper
        if keeper is None or keeper.reads_on_ring or not self._scopes:
            return  # a loop timer reads the deadline when it fires
        keeper.moved(self._deadline(self._now()))

    def ring(self, now: float) -> float | None:
        """A loop timer fired at ``now`` (the loop's time): cancel every body if the deadline
        has passed (None), else the deadline to wait for (renewed since the timer was set)."""
        if not self._scopes:
            return None
        deadline = self._deadline(now)
        if now < deadline:
            return deadline
        for scope in self._scopes:
            scope.cancel()
        return None

    def _new_keeper(self) -> DeadlineKeeper:
        if not self._use_alarm:
            return ScopeDeadlines(self._scopes)
        kit = current()
        self._now = kit.clock()
        return kit.deadline_keeper(self._scopes, self.ring)
