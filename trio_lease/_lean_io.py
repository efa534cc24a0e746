"""The lean client's connections (:mod:`._lean_http`): one per event loop kind, one interface.

On asyncio, asyncio's own transport with reading left on (:class:`NativeConnection`; anyio's
stream switches reading on and off around every receive, two ``epoll_ctl`` calls each, plus a
checkpoint: about 60 to 90 µs per request on the benchmark machine, a quarter of the request,
tools/benchmarks/README.md); on trio, an anyio stream (:class:`StreamConnection`). Both send bytes,
receive bytes (``b""`` at the end), tell whether an idle connection is still usable, and close.
:func:`next_piece` reads one piece of a reply through :mod:`._http11`, mapping failures to
httpx's types.
"""

from __future__ import annotations

import asyncio
import collections
import select
import ssl
from collections.abc import Callable
from typing import cast

import anyio
import anyio.abc
import anyio.lowlevel
import httpx

from ._http11 import NEED_DATA, Head, ReplyError, ReplyReader

__all__ = [
    "NOT_SENT",
    "AnyConnection",
    "NativeConnection",
    "Reader",
    "StreamConnection",
    "next_piece",
    "send_request",
]

_READ_SIZE = 65536
_BUFFER_LIMIT = 4 * _READ_SIZE
_poll = getattr(select, "poll", None)  # select.select where there is no poll (Windows)
NOT_SENT = (OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream)


class StreamConnection:
    """One connection over an anyio byte stream (on trio)."""

    __slots__ = ("fd", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self.fd = raw.fileno() if raw is not None else -1

    def is_alive(self) -> bool:
        """False if the idle socket is readable: the server closed it or sent something."""
        return _quiet(self.fd)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def receive(self) -> bytes:
        """The next bytes; b"" at the end of the stream."""
        try:
            return await self.stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            return b""

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)


class Reader(asyncio.Protocol):
    """asyncio's side of a :class:`NativeConnection`: received bytes, the end, and a waiter.

    Reading stays on for the connection's life (anyio's streams switch it on and off around
    every receive, two ``epoll_ctl`` calls each), paused only while more than
    ``_BUFFER_LIMIT`` bytes wait to be parsed.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.ended = False
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        #: Called with bytes that arrive while the reading task waits and nothing is buffered;
        #: True: they were consumed there and the task is not woken (a watch's own events).
        self.screen: Callable[[bytes], bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport by construction (create_connection). Not an isinstance check:
        # other event loops' transports (uvloop's) do not derive from asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        screen, waiter = self.screen, self.waiter
        waiting = waiter is not None and not waiter.done() and not self.chunks
        if screen is not None and waiting and screen(data):
            return  # taken by the screen: the waiting reader has nothing new to read
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _BUFFER_LIMIT and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class NativeConnection:
    """One connection on asyncio's own transport: the lean path's hot loop, on asyncio.

    Measured (tools/benchmarks/README.md, "Design measurements"): per request, anyio's stream
    costs a checkpoint, a resource guard and two ``epoll_ctl`` system calls on top of the
    transport; this class costs a future.
    """

    __slots__ = ("fd", "reader", "transport")

    def __init__(self, transport: asyncio.Transport, reader: Reader) -> None:
        self.transport = transport
        self.reader = reader
        raw = transport.get_extra_info("socket")
        self.fd = raw.fileno() if raw is not None else -1

    def is_alive(self) -> bool:
        """False if the server closed the connection or sent something unasked."""
        reader = self.reader
        if reader.ended or reader.chunks or self.transport.is_closing():
            return False
        return _quiet(self.fd)

    async def send(self, data: bytes) -> None:
        # As anyio's streams do: no byte leaves a scope that is already cancelled (a task that
        # runs on after an event-loop stall, its wait having completed, must not write).
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self.transport.is_closing() or self.reader.ended:
            raise anyio.BrokenResourceError("the connection is closed")
        self.transport.write(data)  # a request is small: the kernel takes it whole or buffers

    async def receive(self) -> bytes:
        """The next bytes; b"" at the end of the stream."""
        reader = self.reader
        while not reader.chunks:
            if reader.ended:
                return b""
            waiter = reader.waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                reader.waiter = None
        data = reader.chunks.popleft()
        reader.buffered -= len(data)
        if reader.paused and reader.buffered <= _BUFFER_LIMIT // 2:
            reader.paused = False
            self.transport.resume_reading()
        return data

    async def close(self) -> None:
        self.transport.abort()


AnyConnection = StreamConnection | NativeConnection


def _quiet(fd: int) -> bool:
    """True unless the socket ``fd`` is readable (closed by the server, or unasked bytes)."""
    if fd < 0:
        return True
    try:
        if _poll is not None:
            poller = _poll()
            poller.register(fd, select.POLLIN)
            return not poller.poll(0)
        return not select.select([fd], [], [], 0)[0]
    except (OSError, ValueError):
        return False



async def send_request(conn: AnyConnection, data: bytes) -> None:
    """Send a request's bytes; a failure is :class:`httpx.WriteError` (the outcome unknown)."""
    try:
        await conn.send(data)
    except NOT_SENT as exc:
        raise httpx.WriteError(f"sending the request failed ({type(exc).__name__})") from exc


async def next_piece(conn: AnyConnection, reader: ReplyReader) -> Head | bytes | object:
    """The reply's next piece (a :class:`Head`, body bytes or ``END``), reading as needed."""
    while True:
        try:
            event = reader.next_event()
        except ReplyError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc}") from None
        if event is not NEED_DATA:
            return event
        try:
            data = await conn.receive()
        except NOT_SENT as exc:
            raise httpx.ReadError(f"reading the reply failed ({type(exc).__name__})") from exc
        reader.receive_data(data)
