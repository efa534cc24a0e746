"""The lean HTTP/1.1 client: the production :class:`~trio_lease._http.Unary` seam.

Why it exists: a renewal is one small request, and in the benchmarks (tools/benchmarks/README.md,
"Design measurements") httpx spent about four times the CPU of a bare HTTP/1.1 exchange per request:
URL parsing and merging, cookie extraction, header models, auth flows, and a connection pool
that scans every pooled connection with system calls on each request. The renewal CPU is what
limits how many leases one process can hold, so the hot path speaks HTTP/1.1 itself
(:mod:`._http11`: the request's bytes, and a strict reader of the reply), and keeps httpx for
proxies and injected test transports.

What it does: keep-alive connections (a LIFO stack of idle ones, at most ``max_idle``), TLS
through an :class:`ssl.SSLContext` with an optional server name, Content-Length and chunked
responses, and streamed replies (:meth:`LeanClient.open_stream`: a watch, read piece by piece as
it arrives, on its own connection). What it does not do: proxies, redirects, cookies,
compression, HTTP/2.

Connections (:mod:`._lean_io`): on asyncio, asyncio's own transport with reading left on; on
trio, an anyio stream.

Connection reuse: an idle connection whose socket is readable (the server closed it, or sent
something unasked) is discarded before use, found by one non-blocking ``poll``. A
connection is reused only after a complete exchange that both sides keep alive; any error or
cancellation in the middle of a request closes it, so a late reply can never be read as the
answer to the next request.

Errors are httpx's exception types, as the seam's contract says (:mod:`trio_lease._http`):
:class:`httpx.ConnectError` / :class:`httpx.ConnectTimeout` (the connection could not be made:
nothing was sent), :class:`httpx.WriteError`, :class:`httpx.ReadError` and
:class:`httpx.RemoteProtocolError` (after sending: the outcome is unknown),
:class:`httpx.LocalProtocolError` (a header value or the target cannot be encoded: nothing was
sent, and the message quotes neither). Timeouts other than connecting are the caller's cancel
scope.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence

import anyio
import anyio.abc
import httpx
import sniffio

from ._http import CappedBody, Headers, Reply, ServerURL, request_head
from ._http11 import END, Head, ReplyReader
from ._lean_io import (
    NOT_SENT,
    AnyConnection,
    NativeConnection,
    Reader,
    StreamConnection,
    next_piece,
    send_request,
)
from ._wire import MAX_BODY_BYTES

__all__ = ["LeanClient", "LeanStream"]

class LeanClient:
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
        self._prefix = server.prefix
        self._headers = [("Host", server.netloc), *headers]
        self.origin = server.origin
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._max_body = max_body
        self._idle: list[AnyConnection] = []
        self._closed = False
        self.connections_opened = 0

    def __repr__(self) -> str:
        return f"<LeanClient {self.origin} idle={len(self._idle)}>"

    async def request(
        self,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> Reply:
        """Send one request (``target``: path and query, below the URL's prefix); the reply.

        The caller's cancel scope bounds it; cancelled midway, its connection is closed.
        ``connect_timeout`` overrides the client's for this request, if a new connection is
        needed.
        """
        data = self._encode(method, target, headers, body)
        conn = await self._connection(connect_timeout or self._connect_timeout)
        reader = ReplyReader()
        try:
            await send_request(conn, data)
            reply = await self._receive(
                conn, reader, CappedBody.describe(method, target, self.origin)
            )
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
        data = self._encode(method, target, headers, body)
        conn = await self._connection(connect_timeout or self._connect_timeout, reuse=False)
        reader = ReplyReader()
        what = CappedBody.describe(method, target, self.origin)
        try:
            await send_request(conn, data)
            while True:
                event = await next_piece(conn, reader)
                if isinstance(event, Head):
                    return LeanStream(event, conn, reader, what)
                if event is END:  # pragma: no cover - the reader gives the head first
                    raise httpx.RemoteProtocolError("malformed response: no head")
        except BaseException:
            await conn.close()  # noqa: ASYNC102  closes at once (abort, no wait)
            raise

    def _encode(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> bytes:
        """The request's bytes: this client's headers, then ``headers``, then ``body``."""
        if self._closed:
            raise RuntimeError("this client is closed")
        all_headers = [*self._headers, *headers]
        if body is not None:
            all_headers.append(("Content-Length", str(len(body))))
        data = request_head(method, self._prefix + target, all_headers)
        return data + body if body else data

    async def _connection(self, connect_timeout: float, *, reuse: bool = True) -> AnyConnection:
        while reuse and self._idle:
            idle = self._idle.pop()
            if idle.is_alive():
                return idle
            await idle.close()
        conn: AnyConnection
        try:
            with anyio.fail_after(connect_timeout):
                if sniffio.current_async_library() == "asyncio":
                    conn = await self._connect_native()
                else:
                    conn = StreamConnection(await self._connect_stream())
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connecting to the server timed out") from exc
        except NOT_SENT as exc:
            raise httpx.ConnectError(f"could not connect ({type(exc).__name__}: {exc})") from exc
        self.connections_opened += 1
        return conn

    async def _connect_stream(self) -> anyio.abc.ByteStream:
        if self._ssl is None:
            return await anyio.connect_tcp(self._host, self._port)
        return await anyio.connect_tcp(
            self._host,
            self._port,
            ssl_context=self._ssl,
            tls_hostname=self._tls_hostname,
            tls_standard_compatible=False,
        )

    async def _connect_native(self) -> NativeConnection:
        loop = asyncio.get_running_loop()
        transport, reader = await loop.create_connection(
            Reader,
            self._host,
            self._port,
            ssl=self._ssl,
            server_hostname=self._tls_hostname if self._ssl is not None else None,
        )
        # No isinstance check on the transport: uvloop's do not derive from asyncio.Transport.
        return NativeConnection(transport, reader)

    async def _receive(self, conn: AnyConnection, reader: ReplyReader, what: str) -> Reply:
        head: Head | None = None
        body = CappedBody(self._max_body, what)
        while True:
            event = await next_piece(conn, reader)
            if type(event) is bytes:
                body.add(event)  # over the cap: the caller closes the connection
            elif isinstance(event, Head):
                head = event
            else:  # END
                assert head is not None
                return Reply(head.status_code, Headers(head.headers), body.content)

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

    def __init__(self, conn: AnyConnection, reader: ReplyReader) -> None:
        self._conn = conn
        self._reader = reader
        self._ended = False

    def __aiter__(self) -> BodyPieces:
        return self

    async def __anext__(self) -> bytes:
        while not self._ended:
            event = await next_piece(self._conn, self._reader)
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
    (:mod:`trio_lease._http11`); errors are httpx's types (:class:`httpx.ReadError`,
    :class:`httpx.RemoteProtocolError`). Close it with :meth:`aclose` (it closes the connection).
    """

    __slots__ = ("_conn", "_reader", "description", "raw_headers", "status_code")

    def __init__(self, head: Head, conn: AnyConnection, reader: ReplyReader, what: str) -> None:
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

    def screen(self, consume: Callable[[bytes], bool] | None) -> bool:
        """Offer ``consume`` the body's bytes as they arrive, before the reader wakes.

        While the reader waits at a chunk boundary with nothing buffered, each arrival is
        given to ``consume`` first; when it returns True, it has taken the bytes (whole chunks:
        the reader's framing is left as it was) and the reader is not woken. None removes it.
        Only on asyncio's native connection (False elsewhere: nothing is offered).
        """
        conn = self._conn
        if not isinstance(conn, NativeConnection):
            return False
        if consume is None:
            conn.reader.screen = None
            return True
        reader = self._reader

        def screen(data: bytes) -> bool:
            return reader.at_chunk_boundary() and consume(data)

        conn.reader.screen = screen
        return True

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
