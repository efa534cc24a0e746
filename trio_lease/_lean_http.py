"""The lean HTTP/1.1 client: the production :class:`~trio_lease._http.Unary` seam.

Why it exists: a renewal is one small request, and in the benchmarks (tools/benchmarks/README.md,
"Design measurements") httpx spent about four times the CPU of a bare HTTP/1.1 exchange per request:
URL parsing and merging, cookie extraction, header models, auth flows, and a connection pool
that scans every pooled connection with system calls on each request. The renewal CPU is what
limits how many leases one process can hold, so the hot path speaks HTTP/1.1 itself
(:mod:`._reply`: the request's bytes checked by h11, the reply read by llhttp), and keeps httpx for
proxies and injected test transports.

What it does: keep-alive connections (a LIFO stack of idle ones, at most ``max_idle``), TLS
through an :class:`ssl.SSLContext` with an optional server name, Content-Length and chunked
responses, and streamed replies (:meth:`LeanClient.open_stream`: a watch, read piece by piece as
it arrives, on its own connection). What it does not do: proxies, redirects, cookies,
compression, HTTP/2.

Connections come from the event loop's seam (:func:`trio_lease._loops.current`): asyncio's own
transport with reading left on, trio's socket stream. Replies are read by
:class:`~trio_lease._reply.ReplyReader` (llhttp) in the task that awaits them.

Connection reuse: an idle connection whose socket is readable (the server closed it, or sent
something unasked) is discarded before use, found by one non-blocking ``poll``. A
connection is reused only after a complete exchange that both sides keep alive; any error or
cancellation in the middle of a request closes it, so a late reply can never be read as the
answer to the next request.

Errors are the seam's own (:mod:`trio_lease._http_errors`), translated from the loop's, the
socket's and the parser's by :func:`~trio_lease._http_errors.translate`:
:class:`~trio_lease._http_errors.ConnectFailed` / ``ConnectTimedOut`` (nothing was sent),
``SendFailed``, ``ReceiveFailed`` and ``MalformedReply`` (after sending: the outcome is
unknown), ``NotEncodable`` (a header value or the target cannot be encoded: nothing was sent,
and the message quotes neither). Timeouts other than connecting are the caller's cancel scope.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import anyio

from ._http import CappedBody, Headers, Outgoing, Reply, ServerURL, Unary
from ._http_errors import MalformedReply, translate
from ._loops import Connection, current
from ._reply import END, NEED_DATA, Head, ReplyError, ReplyReader
from ._wire import MAX_BODY_BYTES

__all__ = ["LeanClient", "LeanStream"]


async def _send_request(conn: Connection, data: bytes) -> None:
    """Send a request's bytes; a failure is ``SendFailed`` (the outcome unknown). (A unary
    exchange does the same inline: no coroutine of its own per request.)"""
    try:
        await conn.send(data)
    except current().FAILURES as exc:
        raise translate(exc, "send") from exc


def _bytes(out: Outgoing) -> bytes:
    """The request's bytes: its head, then its body."""
    return out.head + out.body if out.body else out.head


async def _next_piece(conn: Connection, reader: ReplyReader) -> Head | bytes | object:
    """The reply's next piece (a :class:`Head`, body bytes or ``END``), reading as needed;
    every byte is parsed here, in the calling task."""
    while True:
        try:
            event = reader.next_event()
        except ReplyError as exc:
            error = translate(exc)
        else:
            if event is not NEED_DATA:
                return event
            try:
                data = await conn.receive()
            except current().FAILURES as exc:
                raise translate(exc, "receive") from exc
            try:
                reader.receive_data(data)
                continue
            except ReplyError as exc:
                error = translate(exc)
        raise error from None  # the library's own words; nothing of the reply is kept


async def _receive(conn: Connection, body: CappedBody) -> tuple[Reply, ReplyReader]:
    """The whole reply to a unary request, and its reader (:func:`_next_piece`'s steps in one
    loop: a reply usually arrives in one piece, so this awaits once).

    The reader is made with the reply's first bytes: a request waiting for its reply holds
    none of it (what a renewal in flight holds is what sets off the garbage collector's
    collections of new objects, tools/benchmarks/README.md)."""
    head: Head | None = None
    reader: ReplyReader | None = None
    while True:
        try:
            event = NEED_DATA if reader is None else reader.next_event()
            while event is NEED_DATA:
                try:
                    data = await conn.receive()
                except current().FAILURES as exc:
                    raise translate(exc, "receive") from exc
                if reader is None:
                    reader = ReplyReader()
                reader.receive_data(data)
                event = reader.next_event()
        except ReplyError as exc:
            error = translate(exc)
        else:
            if type(event) is bytes:
                body.add(event)  # over the cap: the caller closes the connection
            elif isinstance(event, Head):
                head = event
            else:  # END
                assert head is not None and reader is not None
                return Reply(head.status_code, Headers(head.headers), body.content), reader
            continue
        raise error from None  # the library's own words; nothing of the reply is kept


class LeanClient(Unary):
    """Unary HTTP/1.1 requests to one server over a few keep-alive connections.

    Args:
        url: the server's base URL (``http://`` or ``https://``, an optional path prefix).
        ssl_context: for ``https``; required there.
        tls_hostname: the name to verify the server's certificate against (default: the host).
        headers: sent with every request (for example ``Accept`` and ``User-Agent``).
        connect_timeout: seconds to open a connection (and finish the TLS handshake).
        max_idle: idle connections kept for reuse.
        max_body: the largest reply body read; a longer one raises
            :class:`~trio_lease.BackendProtocolError` (default: ``_wire.MAX_BODY_BYTES``).

    Not safe for concurrent use beyond what ``max_idle`` connections carry well: callers cap
    the requests in flight (the backends' slots).
    """

    #: The server, without any user info the URL had (never shown).
    origin: str
    #: Connections opened so far (for tests and the benchmarks).
    connections_opened: int

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        headers: Sequence[tuple[str, str]] = (),
        connect_timeout: float = 30.0,
        max_idle: int = 4,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        server = ServerURL.parse(url)
        if server.scheme == "https" and ssl_context is None:
            raise ValueError("an https URL needs an SSL context")
        self._host = server.host
        self._port = server.port or (443 if server.scheme == "https" else 80)
        self._ssl = ssl_context if server.scheme == "https" else None
        self._tls_hostname = tls_hostname or server.host
        self.url = server
        self._headers = tuple(headers)
        self.origin = server.origin
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._max_body = max_body
        self._idle: list[Connection] = []
        self._closed = False
        self.connections_opened = 0

    def __repr__(self) -> str:
        return f"<LeanClient {self.origin} idle={len(self._idle)}>"

    async def _exchange(self, out: Outgoing) -> Reply:
        """Send ``out`` on a kept-alive connection (or a new one); its connection is closed
        if the exchange fails or is cancelled midway."""
        idle = self._idle
        if idle and idle[-1].is_alive():  # the usual case, without a coroutine of its own
            conn = idle.pop()
        else:
            conn = await self._connection(out.connect_timeout or self._connect_timeout)
        try:
            try:
                await conn.send(out.head + out.body if out.body else out.head)
            except current().FAILURES as exc:
                raise translate(exc, "send") from exc  # as _send_request, inline
            reply, reader = await _receive(conn, CappedBody(self._max_body, out))
        except BaseException:
            await conn.close()  # noqa: ASYNC102  closes at once (abort, no wait)
            raise
        # Reuse the connection only if the reply ended cleanly and nothing followed it: bytes
        # the server sent beyond the reply (a second copy of it, say) would otherwise be read
        # as the answer to the next request.
        if reader.reusable and len(self._idle) < self._max_idle and not self._closed:
            self._idle.append(conn)
            return reply
        await conn.close()
        return reply

    async def open_stream(
        self,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> LeanStream:
        """Send one request (with ``body``, if given) and read the reply's head; its body is
        read from the stream.

        The stream has a connection of its own for its whole life (a watch lasts minutes), is
        never put back for reuse, and must be closed (:meth:`LeanStream.aclose`). The caller's
        cancel scope bounds opening it and each read.
        """
        out = self._outgoing(method, target, headers, body, connect_timeout)
        conn = await self._connection(connect_timeout or self._connect_timeout, reuse=False)
        reader = ReplyReader()
        try:
            await _send_request(conn, _bytes(out))
            while True:
                event = await _next_piece(conn, reader)
                if isinstance(event, Head):
                    return LeanStream(event, conn, reader, out.what)
                if event is END:  # pragma: no cover - the reader gives the head first
                    raise MalformedReply("malformed response: no head")
        except BaseException:
            await conn.close()  # noqa: ASYNC102  closes at once (abort, no wait)
            raise

    async def _connection(self, connect_timeout: float, *, reuse: bool = True) -> Connection:
        while reuse and self._idle:
            idle = self._idle.pop()
            if idle.is_alive():
                return idle
            await idle.close()
        kit = current()
        failures: tuple[type[BaseException], ...] = (TimeoutError, *kit.FAILURES)
        try:
            with anyio.fail_after(connect_timeout):
                conn = await kit.connect(
                    self._host, self._port, self._ssl, self._tls_hostname if self._ssl else None
                )
        except failures as exc:
            raise translate(exc, "connect") from exc
        self.connections_opened += 1
        return conn

    async def aclose(self) -> None:
        """Close every idle connection; requests in flight close theirs when they finish."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class BodyPieces:
    """The pieces of a streamed reply's body as they arrive (:meth:`LeanStream.aiter_bytes`).

    An iterator object, not an async generator: one left unfinished (its reader cancelled or
    done early) holds nothing a finalizer must run, so it is never "garbage collected before it
    had been exhausted". :meth:`aclose` is there for owners that close what they iterate.
    """

    __slots__ = ("_conn", "_ended", "_reader")

    def __init__(self, conn: Connection, reader: ReplyReader) -> None:
        self._conn = conn
        self._reader = reader
        self._ended = False

    def __aiter__(self) -> BodyPieces:
        return self

    async def __anext__(self) -> bytes:
        while not self._ended:
            event = await _next_piece(self._conn, self._reader)
            if type(event) is bytes:
                return event
            if event is END:
                self._ended = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Nothing to release: the stream's :meth:`LeanStream.aclose` closes the connection."""
        self._ended = True


class LeanStream:
    """A streamed reply (:meth:`LeanClient.open_stream`): the head read, the body to come.

    The body is read with :meth:`aiter_bytes`, as strictly as a unary reply
    (:mod:`trio_lease._reply`); errors are the seam's (``ReceiveFailed``, ``MalformedReply``).
    Close it with :meth:`aclose` (it closes the connection).
    """

    __slots__ = ("_conn", "_reader", "description", "raw_headers", "status_code")

    def __init__(self, head: Head, conn: Connection, reader: ReplyReader, what: str) -> None:
        self.status_code: int = head.status_code
        self.raw_headers: list[tuple[bytes, bytes]] = head.headers
        #: The request, for messages (method, target, server; never server text).
        self.description: str = what
        self._conn = conn
        self._reader = reader

    def __repr__(self) -> str:
        return f"<LeanStream {self.status_code} {self.description}>"

    @property
    def headers(self) -> Headers:
        return Headers(self.raw_headers)

    def aiter_bytes(self) -> BodyPieces:
        """The body's pieces as they arrive, until the reply's end (httpx's form)."""
        return BodyPieces(self._conn, self._reader)

    async def read(self, cap: int) -> Reply:
        """The whole reply (a failure's Status body), then close; over ``cap`` bytes raises
        :class:`~trio_lease.BackendProtocolError`."""
        body = CappedBody(cap, self.description)
        try:
            async for piece in self.aiter_bytes():
                body.add(piece)
        finally:
            await self.aclose()  # not shielded: an abort, no wait
        return Reply(self.status_code, self.headers, body.content)

    async def aclose(self) -> None:
        await self._conn.close()
