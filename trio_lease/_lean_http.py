"""The lean HTTP/1.1 client: the production :class:`~trio_lease._http.Unary` seam.

Why it exists: a renewal is one small request, and in the benchmarks (tools/benchmarks/README.md,
"Lean HTTP path") httpx spent about four times the CPU of h11 on a bare socket per request:
URL parsing and merging, cookie extraction, header models, auth flows, and a connection pool
that scans every pooled connection with system calls on each request. The renewal CPU is what
limits how many leases one process can hold, so the hot path speaks HTTP/1.1 itself, with h11
(the parser httpcore uses) on anyio streams, and keeps httpx for everything that is not a small
unary request (watch streams, proxies, injected test transports).

What it does: keep-alive connections (a LIFO stack of idle ones, at most ``max_idle``), TLS
through an :class:`ssl.SSLContext` with an optional server name, Content-Length and chunked
responses. What it does not do: proxies, redirects, cookies, compression, HTTP/2, streaming.

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

import select
import ssl
from collections.abc import Sequence

import anyio
import anyio.abc
import h11
import httpx

from ._http import CappedBody, Headers, Reply, ServerURL, request_head
from ._wire import MAX_BODY_BYTES

__all__ = ["LeanClient"]

_READ_SIZE = 65536
_poll = getattr(select, "poll", None)  # select.select where there is no poll (Windows)
_NOT_SENT = (OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream)


class _Connection:
    __slots__ = ("fd", "h11", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self.fd = raw.fileno() if raw is not None else -1

    def is_alive(self) -> bool:
        """False if the idle socket is readable: the server closed it or sent something."""
        if self.fd < 0:
            return True
        try:
            if _poll is not None:
                poller = _poll()
                poller.register(self.fd, select.POLLIN)
                return not poller.poll(0)
            return not select.select([self.fd], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)


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
        self._idle: list[_Connection] = []
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
        if self._closed:
            raise RuntimeError("this client is closed")
        all_headers = [*self._headers, *headers]
        if body is not None:
            all_headers.append(("Content-Length", str(len(body))))
        request = request_head(method, self._prefix + target, all_headers)
        conn = await self._connection(connect_timeout or self._connect_timeout)
        try:
            data = conn.h11.send(request)
            assert data is not None
            if body:
                data += conn.h11.send(h11.Data(data=body)) or b""
            data += conn.h11.send(h11.EndOfMessage()) or b""
            try:
                await conn.stream.send(data)
            except _NOT_SENT as exc:
                what = type(exc).__name__
                raise httpx.WriteError(f"sending the request failed ({what})") from exc
            reply = await self._receive(conn, CappedBody.describe(method, target, self.origin))
        except BaseException:
            await conn.close()
            raise
        # Reuse the connection only if the reply ended cleanly and nothing followed it: bytes
        # the server sent beyond the reply (a second copy of it, say) would otherwise be read
        # as the answer to the next request.
        unasked, _ = conn.h11.trailing_data
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE and not unasked:
            conn.h11.start_next_cycle()
            if len(self._idle) < self._max_idle and not self._closed:
                self._idle.append(conn)
                return reply
        await conn.close()
        return reply

    async def _connection(self, connect_timeout: float) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.is_alive():
                return conn
            await conn.close()
        try:
            with anyio.fail_after(connect_timeout):
                stream: anyio.abc.ByteStream
                if self._ssl is None:
                    stream = await anyio.connect_tcp(self._host, self._port)
                else:
                    stream = await anyio.connect_tcp(
                        self._host,
                        self._port,
                        ssl_context=self._ssl,
                        tls_hostname=self._tls_hostname,
                        tls_standard_compatible=False,
                    )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connecting to the server timed out") from exc
        except _NOT_SENT as exc:
            raise httpx.ConnectError(f"could not connect ({type(exc).__name__}: {exc})") from exc
        self.connections_opened += 1
        return _Connection(stream)

    async def _receive(self, conn: _Connection, what: str) -> Reply:
        status = 0
        headers: Headers | None = None
        body = CappedBody(self._max_body, what)
        parser = conn.h11
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(f"malformed response: {exc}") from None
            if event is h11.NEED_DATA:
                try:
                    data = await conn.stream.receive(_READ_SIZE)
                except anyio.EndOfStream:
                    data = b""
                except _NOT_SENT as exc:
                    failure = type(exc).__name__
                    raise httpx.ReadError(f"reading the reply failed ({failure})") from exc
                parser.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = Headers(event.headers)
            elif isinstance(event, h11.Data):
                body.add(bytes(event.data))  # over the cap: the caller closes the connection
            elif isinstance(event, h11.EndOfMessage):
                assert headers is not None
                return Reply(status, headers, body.content)
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection without a reply")
            # h11.InformationalResponse (100 Continue and the like): keep reading

    async def aclose(self) -> None:
        """Close every idle connection; requests in flight close theirs when they finish."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
