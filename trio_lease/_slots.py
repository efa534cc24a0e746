"""Slots for requests in flight, served renewals first.

The remote backends (Kubernetes, etcd) cap the unary requests one client has in flight (4: see
tools/benchmarks/README.md). When more requests wait than there are slots, which happens when a
process acquires hundreds of leases at once, the requests that keep held leases held go first:
a renewal that waits behind acquisitions until its deadline passes loses a lease that was fine,
while an acquisition that waits a little longer loses nothing.

Which requests are urgent is said by the caller's context, not by the backend: the core marks
its renewal loop and its releases with :func:`urgent` (a context variable, so it follows the
task and nothing else), and every backend that takes :class:`Slots` serves them first.

Urgent requests are served earliest deadline first: a renewal carries its lease's deadline (on
the event loop's clock), so a lease whose renewal already failed, and whose deadline is
therefore the nearest, overtakes the renewals of leases that still have time. Served in
arrival order instead, the renewals of a process whose leases all fall due on the same tick
(``_algorithm.next_renewal``) queue behind each other whenever replies slow down; the retry of
one that timed out then waits behind the next round of all the others, and again, until its
lease is lost, while the renewals ahead of it had a second or more to spare. An urgent request
without a deadline (a release) goes after those with one, in arrival order.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ._loops import Waiter, current

__all__ = ["Slots", "Urgency", "urgent", "urgent_deadline"]

class Urgency:
    """The deadline of a task's urgent requests, moved by its owner between them.

    A holder's renewal task marks itself urgent once, with one of these, and sets
    :attr:`deadline` before each renewal: marking each renewal anew (a context variable set
    and reset) left a few objects per renewal to the garbage collector.
    """

    __slots__ = ("deadline",)

    def __init__(self, deadline: float = math.inf) -> None:
        #: On :func:`anyio.current_time`'s clock; ``math.inf``: urgent, no deadline.
        self.deadline = deadline


#: The urgency of the current context's requests; None when they are not urgent.
_URGENT: ContextVar[Urgency | None] = ContextVar("trio_lease_urgent", default=None)


@contextmanager
def urgent(deadline: float | Urgency = math.inf) -> Iterator[None]:
    """Requests made in this block (in this task) take free slots before the others.

    ``deadline`` (on :func:`anyio.current_time`'s clock) orders urgent waiters: the nearest
    deadline is served first, and those without one after every one that has one. An
    :class:`Urgency` is read when a request waits, so its owner may move it within the block.
    """
    token = _URGENT.set(deadline if isinstance(deadline, Urgency) else Urgency(deadline))
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_urgent() -> bool:
    """Whether the current context was marked with :func:`urgent`."""
    return _URGENT.get() is not None


def urgent_deadline() -> float | None:
    """The current context's urgent deadline (``math.inf``: none), or None if not urgent."""
    urgency = _URGENT.get()
    return None if urgency is None else urgency.deadline


class Slots:
    """A semaphore whose waiters are served urgent first (nearest deadline first, then in
    arrival order), then the others in arrival order.

    A free slot is taken without a checkpoint (the request that follows is one). A released
    slot goes straight to the next waiter, so a later arrival cannot overtake it; a waiter
    cancelled after it was handed a slot passes the slot on.

    A waiter is the event loop's own (:func:`trio_lease._loops.current`): a bare future on
    asyncio, a parked task on trio (most renewals wait for a slot when a process holds hundreds
    of leases: an anyio Event cost twice as much per wait).
    """

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"slots must be at least 1, not {total}")
        self.total = total
        self._free = total
        #: Urgent waiters as a heap of [deadline, arrival, waiter]; a waiter that left the
        #: queue is None until its entry reaches the top.
        self._urgent: list[list[Any]] = []
        #: The urgent waiters still queued, each with its heap entry (so that one leaving is
        #: found at once: a stalled server's bound cancels hundreds of waits together).
        self._entries: dict[Waiter, list[Any]] = {}
        self._arrivals = itertools.count()
        self._normal: collections.deque[Waiter] = collections.deque()

    def __repr__(self) -> str:
        return f"<Slots {self._free}/{self.total} free, {self.waiting} waiting>"

    @property
    def waiting(self) -> int:
        return len(self._entries) + len(self._normal)

    def try_acquire(self) -> bool:
        """Take a free slot if there is one (no wait, no checkpoint); False if none is."""
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiter = self.join()
        try:
            await waiter
        except BaseException:
            self.leave(waiter)
            raise

    def join(self) -> Waiter:
        """Queue for the next released slot (there is no free one: :meth:`try_acquire` said
        so); the slot is the caller's once ``await waiter`` returns.

        A caller whose wait ends in an exception (cancelled) calls :meth:`leave` before it
        propagates. What :meth:`acquire` does; a hot path writes it out inline, so that a
        request waiting for a slot holds no coroutine of ``acquire`` (what the requests
        waiting hold sets off the garbage collector's collections of new objects,
        tools/benchmarks/README.md)."""
        waiter = current().waiter()
        urgency = _URGENT.get()
        if urgency is None:
            self._normal.append(waiter)
        else:
            entry = self._entries[waiter] = [urgency.deadline, next(self._arrivals), waiter]
            heapq.heappush(self._urgent, entry)
        return waiter

    def leave(self, waiter: Waiter) -> None:
        """Take ``waiter`` (of :meth:`join`, its wait ended in an exception) out of the queue;
        a slot handed to it just as it was cancelled is passed on."""
        if waiter.done() and not waiter.cancelled():  # handed just as it was cancelled
            self.release()
            return
        entry = self._entries.pop(waiter, None)
        if entry is not None:
            entry[2] = None  # left the queue; skipped when it reaches the top
        elif waiter in self._normal:
            self._normal.remove(waiter)

    def release(self) -> None:
        urgent = self._urgent
        while urgent:
            entry = heapq.heappop(urgent)
            waiter = entry[2]
            if waiter is not None:
                entry[2] = None  # out of the queue, whether or not it takes the slot
                del self._entries[waiter]
                if _hand(waiter):
                    return
        normal = self._normal
        while normal:
            if _hand(normal.popleft()):
                return
        self._free += 1


def _hand(waiter: Waiter) -> bool:
    """Hand a slot to ``waiter``; False if it already left (cancelled), so it took nothing."""
    if waiter.done():
        return False
    waiter.set_result(None)
    return True
