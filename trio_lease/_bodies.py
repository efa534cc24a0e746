"""The cancel scopes of one grant's ``held()`` bodies, and the grant's deadline on them.

Every body runs in a cancel scope that is cancelled once the grant's deadline passes, also when
the event loop stalled past it: the cancellation then comes with the other timers that expired
in the stall, not later, when the heartbeat's watchdog gets its turn (docs/design.md §4.5,
tests/core/test_stall.py). The deadline moves later with every confirmed renewal.

On trio (and any loop but asyncio) each scope carries the deadline itself, and every renewal
moves it: trio keeps deadlines in its own heap, and moving one is cheap. So does a holder with an
injected clock on asyncio: its deadline is read through that clock, which may need a running task
(``anyio.current_time()`` does), and a timer callback runs outside any task.

On asyncio, anyio arms a loop timer for a scope's deadline and, when the deadline moves, cancels
that timer and arms a new one. The cancelled timer stays in the loop's heap until its time (the
deadline is L ahead, so some L / R of them per grant), and each is a few objects the garbage
collector promotes and walks: at 1,000 leases that was about a tenth of the client's CPU per
renewal (tools/benchmarks/README.md, "Design measurements"). There the scopes carry no deadline;
one loop timer per grant, the alarm, fires at the deadline it last read, reads the deadline again,
and either cancels every body's scope or sets itself for the new deadline: about one timer per
lease duration instead of one per renewal, with the same timing (a timer callback like anyio's
own, run with the other expired timers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import anyio
import sniffio

__all__ = ["BodyScopes"]


class BodyScopes:
    """The bodies' scopes of one grant; ``deadline(loop_now)`` is the grant's deadline on the
    event loop's clock, given the loop's time now (the holder's clock may be an injected one).

    ``alarm``: on asyncio, keep the deadline with one loop timer per grant; only when
    ``deadline`` needs no running task (the holder's clock is the event loop's).
    """

    def __init__(self, deadline: Callable[[float], float], *, alarm: bool = True) -> None:
        self._deadline = deadline
        self._use_alarm = alarm
        self._scopes: list[anyio.CancelScope] = []
        #: The asyncio loop of the alarm; None on other loops.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._alarm: asyncio.TimerHandle | None = None
        #: How many times the alarm was set (the timers this grant put on the loop).
        self.alarms_set: int = 0

    def __bool__(self) -> bool:
        return bool(self._scopes)

    def __iter__(self) -> Iterator[anyio.CancelScope]:
        return iter(self._scopes)

    def open(self) -> anyio.CancelScope:
        """A new body's scope, cancelled once the grant's deadline passes."""
        if not self._use_alarm or sniffio.current_async_library() != "asyncio":
            scope = anyio.CancelScope(deadline=self._deadline(anyio.current_time()))
            self._scopes.append(scope)
            return scope
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        if self._alarm is None:
            self._loop = asyncio.get_running_loop()
            self._set_alarm(self._loop)
        return scope

    def close(self, scope: anyio.CancelScope) -> None:
        """The body has exited: its scope is no longer cancelled at the deadline."""
        self._scopes.remove(scope)
        if not self._scopes and self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None

    def moved(self) -> None:
        """The grant's deadline moved later (a confirmed renewal)."""
        if self._loop is not None or not self._scopes:
            return  # asyncio: the alarm reads the deadline when it fires
        deadline = self._deadline(anyio.current_time())
        for scope in self._scopes:
            scope.deadline = deadline

    def _set_alarm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._alarm = loop.call_at(self._deadline(loop.time()), self._ring, loop)
        self.alarms_set += 1

    def _ring(self, loop: asyncio.AbstractEventLoop) -> None:
        self._alarm = None
        if not self._scopes:
            return
        now = loop.time()
        if now < self._deadline(now):
            self._set_alarm(loop)  # renewed since the alarm was set
            return
        for scope in self._scopes:
            scope.cancel()
