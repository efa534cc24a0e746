"""The seam on trio: trio's own objects, not anyio's wrappers around them.

- Clock: :func:`trio.current_time` (anyio's ``current_time`` looks the loop up on each call).
- Waiter: the waiting task itself, parked and rescheduled by trio's low-level API
  (:class:`TaskWaiter`): a :class:`trio.Event` per wait cost about a tenth more per contended
  slot (tools/benchmarks/README.md, "A slot wait on trio").
- Sleeping until a time (:func:`sleep_until`): the tasks that sleep until the same instant
  share one trio sleep. A trio sleep is a cancel scope whose deadline cancels it, and waking
  from one costs the whole cancellation (a ``Cancelled`` raised and caught, the scope's status
  recomputed): renewals fall due on a grid (:func:`trio_lease._algorithm.next_renewal`), so
  one sleep wakes the dozens due at that instant.
- Safety timer and write bounds: scope deadlines (:class:`~trio_lease._loops.ScopeDeadlines`,
  :class:`~trio_lease._loops._scopes.ScopeBound`): trio keeps deadlines in its own heap, and
  moving one is cheap.
- Connection: plain TCP is :class:`SocketConnection`, a non-blocking socket driven by trio's
  own waits (:func:`trio.lowlevel.wait_readable`): a request costs one wait for its reply and
  no other trip through the scheduler. trio's socket stream (under anyio's, or alone) spends a
  scheduler pass after every successful send and receive, an exception for every receive that
  would block, and a conflict detector and error translation on each call. TLS is
  :class:`TrioConnection`: :class:`trio.SSLStream` over trio's socket stream. trio reads in
  the task that asks: nothing runs outside a task.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Generator
from typing import Any

import anyio
import trio

from .._connect import HandshakeClosed
from ._quiet import quiet
from ._scopes import ScopeBound, ScopeDeadlines

__all__ = [
    "FAILURES",
    "SocketConnection",
    "TaskWaiter",
    "TrioConnection",
    "checkpoint_if_cancelled",
    "clock",
    "connect",
    "deadline_keeper",
    "effective_deadline",
    "sleep_until",
    "waiter",
    "write_bound",
]

_READ_SIZE = 65536
FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    ssl.SSLError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)


def clock() -> Callable[[], float]:
    # The run's clock itself: trio.current_time looks the run up and calls it on every read.
    return trio.lowlevel.current_clock().current_time


#: trio's own (anyio's look the running library up on every call).
checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
effective_deadline = trio.current_effective_deadline


class TaskWaiter:
    """A :class:`~trio_lease._loops.Waiter` on trio's own parking: the waiting task is
    rescheduled by :meth:`set_result` (:func:`trio.lowlevel.reschedule`). A
    :class:`trio.Event` per wait cost an event, its task set and an abort closure on every
    slot wait; this costs one bound method.

    It is never :meth:`cancelled`: a waiter whose wait was cancelled is taken out of the queue
    (``Slots.leave``) before anyone can hand it anything; one cancelled after it was handed
    is :meth:`done`, so the giver's slot is passed on.
    """

    __slots__ = ("_handed", "_task")

    def __init__(self) -> None:
        self._task: trio.lowlevel.Task | None = None
        self._handed = False

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        if self._handed:
            await trio.lowlevel.checkpoint()
            return
        self._task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._task = None  # cancelled: trio reschedules the task with the cancellation
        return trio.lowlevel.Abort.SUCCEEDED

    def done(self) -> bool:
        return self._handed

    def cancelled(self) -> bool:
        return False

    def set_result(self, result: None, /) -> None:
        self._handed = True
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)


def waiter() -> TaskWaiter:
    return TaskWaiter()


class _Sleepers:
    """The tasks sleeping until one instant: one of them (the leader) sleeps, the others are
    parked until it wakes them."""

    __slots__ = ("leader", "parked")

    def __init__(self, leader: trio.lowlevel.Task) -> None:
        self.leader = leader
        self.parked: dict[trio.lowlevel.Task, None] = {}


#: The sleepers of the running trio run, by the instant they sleep until.
_SLEEPERS: trio.lowlevel.RunVar[dict[float, _Sleepers]] = trio.lowlevel.RunVar(
    "trio_lease_sleepers"
)


async def sleep_until(deadline: float) -> None:
    """Sleep until trio's clock reads ``deadline`` (a checkpoint, as :func:`trio.sleep_until`).

    The first task to sleep until an instant sleeps; the others that come before it wakes
    park and are woken by it. A leader cancelled first hands the sleep on to a parked task; a
    parked task cancelled leaves the others be.
    """
    try:
        groups = _SLEEPERS.get()
    except LookupError:
        groups = {}
        _SLEEPERS.set(groups)
    task = trio.lowlevel.current_task()
    sleepers = groups.get(deadline)
    if sleepers is None:
        sleepers = groups[deadline] = _Sleepers(task)
    else:
        parked = sleepers.parked
        parked[task] = None

        def abort(_: object) -> trio.lowlevel.Abort:
            del parked[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if sleepers.leader is not task:
            return  # woken by the leader at the deadline
    try:
        await trio.sleep_until(deadline)
    except BaseException:
        if sleepers.parked:  # the sleep goes on in a parked task
            sleepers.leader = next(iter(sleepers.parked))
            del sleepers.parked[sleepers.leader]
            trio.lowlevel.reschedule(sleepers.leader)
        elif groups.get(deadline) is sleepers:
            del groups[deadline]
        raise
    if groups.get(deadline) is sleepers:
        del groups[deadline]
    parked, sleepers.parked = sleepers.parked, {}
    for other in parked:
        trio.lowlevel.reschedule(other)


def deadline_keeper(
    scopes: list[anyio.CancelScope], ring: Callable[[float], float | None]
) -> ScopeDeadlines:
    return ScopeDeadlines(scopes)


def write_bound(scope: anyio.CancelScope) -> ScopeBound:
    return ScopeBound(scope)


#: Reads in a row that found bytes already there before one yields to the scheduler (a
#: watch read from a server that sends without pause must not starve the other tasks).
_READS_BEFORE_YIELD = 16


class SocketConnection:
    """One plain TCP connection: a non-blocking socket and trio's low-level waits.

    As trio's streams: a send checks for cancellation first (no byte leaves a scope that is
    already cancelled); closing wakes a task waiting on the socket with
    :class:`trio.ClosedResourceError`. Unlike them, a send the kernel takes whole and a read
    that finds bytes waiting do not pass through the scheduler: the wait for the reply does.
    """

    __slots__ = ("_reads_in_row", "_sent", "fd", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd: int = sock.fileno()
        self._sent = False  # a request went out since the last read: its reply is not in yet
        self._reads_in_row = 0

    def is_alive(self) -> bool:
        return quiet(self.fd)

    async def send(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        sock = self.sock
        view = memoryview(data)
        while view:
            try:
                sent = sock.send(view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            view = view[sent:]
        self._sent = True

    async def receive(self) -> bytes:
        sock = self.sock
        if self._sent:
            # The reply to what was just sent cannot have come without a trip through the
            # loop: wait for it rather than ask the kernel first.
            self._sent = False
            self._reads_in_row = 0
            await trio.lowlevel.wait_readable(sock)
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        while True:  # noqa: ASYNC913  it returns, or waits for the socket and reads again
            try:
                data = sock.recv(_READ_SIZE)
            except BlockingIOError:
                self._reads_in_row = 0
                await trio.lowlevel.wait_readable(sock)
                continue
            self._reads_in_row += 1
            if self._reads_in_row >= _READS_BEFORE_YIELD:
                self._reads_in_row = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return data

    async def close(self) -> None:
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


class TrioConnection:
    """One connection on a trio stream (a socket stream, or TLS over one)."""

    __slots__ = ("fd", "stream")

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        socket_stream = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
        self.fd: int = socket_stream.socket.fileno()

    def is_alive(self) -> bool:
        return quiet(self.fd)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)  # checks for cancellation before sending

    async def receive(self) -> bytes:
        data = await self.stream.receive_some(_READ_SIZE)
        return data if type(data) is bytes else bytes(data)

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)


async def connect(
    host: str, port: int, ssl_context: ssl.SSLContext | None, server_hostname: str | None
) -> SocketConnection | TrioConnection:
    # trio's opening (happy eyeballs over every address, TCP_NODELAY); plain TCP then leaves
    # the stream for its socket alone.
    stream = await trio.open_tcp_stream(host, port)
    if ssl_context is None:
        sock = socket.socket(fileno=stream.socket.detach())
        sock.setblocking(False)
        return SocketConnection(sock)
    tls = trio.SSLStream(
        stream, ssl_context, server_hostname=server_hostname, https_compatible=False
    )
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        if isinstance(exc.__cause__, (ssl.SSLEOFError, ConnectionResetError)):
            closed = "the server closed the connection during the TLS handshake"
            raise HandshakeClosed(closed) from exc
        raise
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return TrioConnection(tls)
