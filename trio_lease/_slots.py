"""Slots for requests in flight, served renewals first.

The remote backends (Kubernetes, etcd) cap the unary requests one client has in flight (4: see
tools/benchmarks/README.md). When more requests wait than there are slots, which happens when a
process acquires hundreds of leases at once, the requests that keep held leases held go first:
a renewal that waits behind acquisitions until its deadline passes loses a lease that was fine,
while an acquisition that waits a little longer loses nothing.

Which requests are urgent is said by the caller's context, not by the backend: the core marks
its renewal loop and its releases with :func:`urgent` (a context variable, so it follows the
task and nothing else), and every backend that takes :class:`Slots` serves them first.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio
import sniffio

__all__ = ["Slots", "urgent"]

_URGENT: ContextVar[bool] = ContextVar("trio_lease_urgent", default=False)


@contextmanager
def urgent() -> Iterator[None]:
    """Requests made in this block (in this task) take free slots before the others."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_urgent() -> bool:
    """Whether the current context was marked with :func:`urgent`."""
    return _URGENT.get()


class Slots:
    """A semaphore whose waiters are served urgent first, then in arrival order.

    A free slot is taken without a checkpoint (the request that follows is one). A released
    slot goes straight to the next waiter, so a later arrival cannot overtake it; a waiter
    cancelled after it was handed a slot passes the slot on.

    On asyncio a waiter is a bare future (most renewals wait for a slot when a process holds
    hundreds of leases: an anyio Event cost twice as much per wait); on trio, an anyio Event.
    """

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"slots must be at least 1, not {total}")
        self.total = total
        self._free = total
        self._urgent: collections.deque[_Waiter] = collections.deque()
        self._normal: collections.deque[_Waiter] = collections.deque()

    def __repr__(self) -> str:
        waiting = len(self._urgent) + len(self._normal)
        return f"<Slots {self._free}/{self.total} free, {waiting} waiting>"

    @property
    def waiting(self) -> int:
        return len(self._urgent) + len(self._normal)

    async def acquire(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        queue = self._urgent if _URGENT.get() else self._normal
        if sniffio.current_async_library() != "asyncio":
            await self._wait_event(queue)
            return
        waiter = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            elif waiter in queue:
                queue.remove(waiter)
            raise

    async def _wait_event(self, queue: collections.deque[_Waiter]) -> None:
        waiter = anyio.Event()
        queue.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            if waiter.is_set():
                self.release()  # handed a slot just as we were cancelled: pass it on
            else:
                queue.remove(waiter)
            raise

    def release(self) -> None:
        for queue in (self._urgent, self._normal):
            while queue:
                waiter = queue.popleft()
                if isinstance(waiter, anyio.Event):
                    waiter.set()
                    return
                if not waiter.done():  # a future cancelled with its task is skipped
                    waiter.set_result(None)
                    return
        self._free += 1


#: A waiting acquirer: a future on asyncio, an anyio Event elsewhere.
_Waiter = asyncio.Future[None] | anyio.Event
