"""What each event loop's module of the seam offers (:mod:`trio_lease._loops`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

    import anyio

__all__ = ["Connection", "DeadlineKeeper", "LoopKit", "Waiter", "WriteBound"]


class Waiter(Protocol):
    """One task waiting to be handed something (a request slot) by another task: the part of
    a future's interface the slots use. asyncio's own future is one (a waiting request holds
    nothing else); trio's parks the task.

    The waiting task awaits it (cancellable); another task of the loop (never a thread) hands
    it over with :meth:`set_result` unless it is :meth:`done`. A waiter whose wait was
    cancelled is done and :meth:`cancelled`, or is taken out of the queue before anyone can
    hand it anything; one handed, then cancelled at once, is done and not cancelled, so the
    giver's slot is passed on.
    """

    def __await__(self) -> Generator[Any, None, None]:
        """Block until handed (cancellable)."""
        ...

    def done(self) -> bool:
        """Handed, or left (cancelled)."""
        ...

    def cancelled(self) -> bool:
        """Left: its wait was cancelled before it was handed."""
        ...

    def set_result(self, result: None, /) -> None:
        """Hand it over (it is not done)."""
        ...


class DeadlineKeeper(Protocol):
    """The per-loop part of the safety timer: brings a deadline to a set of cancel scopes.

    The owner (:class:`trio_lease._bodies.BodyScopes`) keeps the scopes and the deadline and
    decides; a keeper only arranges that the owner's ``ring`` runs (a loop timer), or that the
    scopes cancel themselves (scope deadlines), once the loop's clock reaches the deadline it
    was last given. Either way the cancellation comes with the loop's other expired timers,
    also after a stall.
    """

    #: Loop timers set so far (for tests and the benchmarks; 0 for scope deadlines).
    timers_set: int

    def start(self, deadline: float) -> None:
        """The first body opened: keep ``deadline`` (on the loop's clock)."""
        ...

    def add(self, scope: anyio.CancelScope, deadline: float) -> None:
        """Another body's scope joins (the deadline as :meth:`start`'s, possibly moved)."""
        ...

    def moved(self, deadline: float) -> None:
        """A renewal moved the deadline later."""
        ...

    def stop(self) -> None:
        """The last body left: nothing is cancelled any more."""
        ...

    @property
    def reads_on_ring(self) -> bool:
        """True if the keeper reads the deadline itself when it fires (then :meth:`moved` is
        never needed: the owner skips reading the deadline on every renewal)."""
        ...


class WriteBound(Protocol):
    """The bound of one holder's writes: the deadline of a cancel scope the holder keeps entered,
    set while a write is in flight and cleared after it.

    While set, the scope's ``deadline`` (and so :func:`anyio.current_effective_deadline` inside
    it, which the backends read to bound their requests) is the bound, and the scope is
    cancelled once the loop's clock reaches it, with the loop's other expired timers, as a
    deadline of its own would be. The scope has no deadline of its own besides.
    """

    def set(self, deadline: float) -> None:
        """A write starts: cancel the scope at ``deadline`` (on the loop's clock) unless
        :meth:`clear` comes first. A deadline already past cancels it at once."""
        ...

    def clear(self) -> None:
        """The write ended: nothing is cancelled."""
        ...


class Connection(Protocol):
    """One client connection: bytes out, bytes in (``b""`` at the end), read in the calling
    task. Failures are the loop's own types (:data:`LoopKit.FAILURES`); the caller translates
    them (:mod:`trio_lease._http_errors`)."""

    fd: int

    def is_alive(self) -> bool:
        """False if the idle connection was closed by the server or has unasked bytes."""
        ...

    def send(self, data: bytes) -> Awaitable[None]:
        """Send ``data`` whole (awaited: a loop may make it a coroutine, or hand back one that
        is done at once); no byte leaves a scope that is already cancelled."""
        ...

    async def receive(self) -> bytes:
        """The next bytes the server sent; ``b""`` once it closed its side."""
        ...

    async def close(self) -> None:
        """Close at once (no wait for the peer)."""
        ...


class LoopKit(Protocol):
    """A seam module (``_asyncio``, ``_trio``): the same names on every loop."""

    @property
    def FAILURES(self) -> tuple[type[BaseException], ...]:
        """The errors a connection of this loop raises when the network or TLS fails."""
        ...

    def clock(self) -> Callable[[], float]:
        """The running loop's clock (what :func:`anyio.current_time` reads), bound once."""
        ...

    def effective_deadline(self) -> float:
        """:func:`anyio.current_effective_deadline` without looking the loop up (a request
        reads it each time)."""
        ...

    def checkpoint_if_cancelled(self) -> Awaitable[None]:
        """:func:`anyio.lowlevel.checkpoint_if_cancelled` without looking the loop up."""
        ...

    def waiter(self) -> Waiter:
        """A new :class:`Waiter`."""
        ...

    def sleep_until(self, deadline: float) -> Awaitable[None]:
        """Sleep until the loop's clock (:meth:`clock`) reads ``deadline``; a checkpoint.
        Many tasks sleep until the same instant (renewals fall due on a grid). Awaited at
        once by the caller (it may start the sleep when called)."""
        ...

    def write_bound(self, scope: anyio.CancelScope) -> WriteBound:
        """The :class:`WriteBound` of ``scope`` (entered, with no deadline of its own)."""
        ...

    def deadline_keeper(
        self, scopes: list[anyio.CancelScope], ring: Callable[[float], float | None]
    ) -> DeadlineKeeper:
        """The loop's keeper for ``scopes``. A keeper with a loop timer calls ``ring`` with
        the loop's time when it fires: ``ring`` returns the deadline to wait for next, or None
        (it cancelled the scopes, or none is left)."""
        ...

    async def connect(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> Connection:
        """A new connection (TLS when ``ssl_context`` is given)."""
        ...
