"""The seam on trio: trio's own objects, not anyio's wrappers around them.

- Clock: :func:`trio.current_time` (anyio's ``current_time`` looks the loop up on each call).
- Waiter: a :class:`trio.Event` (anyio's Event on trio wraps one).
- Safety timer: scope deadlines (:class:`~trio_lease._loops.ScopeDeadlines`): trio keeps
  deadlines in its own heap, and moving one is cheap.
- Connection (:class:`TrioConnection`): trio's socket stream (and :class:`trio.SSLStream`),
  without anyio's stream wrapper and its per-call checks. trio reads in the task that asks:
  nothing runs outside a task.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import anyio
import trio

from ._quiet import quiet
from ._scopes import ScopeDeadlines

__all__ = [
    "FAILURES",
    "EventWaiter",
    "TrioConnection",
    "clock",
    "connect",
    "deadline_keeper",
    "waiter",
]

_READ_SIZE = 65536
FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    ssl.SSLError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)


def clock() -> Callable[[], float]:
    return trio.current_time


class EventWaiter:
    """A :class:`~trio_lease._loops.Waiter` on a :class:`trio.Event`: handing never fails, as
    a waiter that left is taken out of the queue before anyone can hand it anything."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    def hand(self) -> bool:
        self._event.set()
        return True

    def handed(self) -> bool:
        return self._event.is_set()


def waiter() -> EventWaiter:
    return EventWaiter()


def deadline_keeper(
    scopes: list[anyio.CancelScope], ring: Callable[[float], float | None]
) -> ScopeDeadlines:
    return ScopeDeadlines(scopes)


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
) -> TrioConnection:
    stream = await trio.open_tcp_stream(host, port)
    if ssl_context is None:
        return TrioConnection(stream)
    tls = trio.SSLStream(
        stream, ssl_context, server_hostname=server_hostname, https_compatible=False
    )
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return TrioConnection(tls)
