"""A small, strict HTTP/1.1 server for probes and scrapes: one GET, one answer, then it closes.

It serves :mod:`trio_lease.health` (``/healthz``, ``/readyz``, ``/metrics``) with h11 (httpx's
parser), on anyio listeners, so it runs on asyncio and trio alike and adds no dependency. A
probe port can be reached by anything on its network, and it runs in the holder's event loop,
so every client's work is bounded and no failure leaves it:

- at most :data:`MAX_CONNECTIONS` connections at once. Each new one is accepted; when all are
  taken, the oldest connection still sending its request is closed to make room (*shed*), so a
  probe gets in however many clients sit idle, and memory stays bounded (no per-connection
  state outlives its connection);
- :data:`TIMEOUT` seconds from accept to the end of the answer, then the connection is closed;
- a request head of at most :data:`MAX_REQUEST_BYTES`; a GET or HEAD announcing a body gets 413
  at once; only ``HTTP/1.0`` and ``HTTP/1.1`` (else 505), only origin-form targets (``/path``);
- an error from ``accept()`` (out of file descriptors, buffers or memory, an aborted connection)
  is logged and accepting backs off, from :data:`ACCEPT_BACKOFF` doubling up to
  :data:`ACCEPT_BACKOFF_MAX` (as asyncio's server and Go's ``net/http`` do). Out of file
  descriptors, the server also closes its oldest waiting connections and serves at most
  :data:`FD_RESERVE` fewer at once from then on, so the rest of the process keeps its own;
- any other failure stops the server and is logged; it never reaches the caller's tasks.

Shed connections, timeouts and accept errors are counted (:class:`ServerStats`) and logged at
WARNING, at most once per :data:`WARNING_INTERVAL` seconds with the counts since the last line.
Every answer says ``Connection: close``: probes and scrapes open one connection per request.
"""

from __future__ import annotations

import dataclasses
import errno
import http
import logging
import os
from collections.abc import Callable

import anyio
import anyio.abc
import h11

from ._backoff import Backoff

__all__ = [
    "ACCEPT_BACKOFF",
    "ACCEPT_BACKOFF_MAX",
    "FD_RESERVE",
    "MAX_CONNECTIONS",
    "MAX_REQUEST_BYTES",
    "TIMEOUT",
    "WARNING_INTERVAL",
    "Answer",
    "ProbeServer",
    "ServerStats",
    "serve_http",
]

logger = logging.getLogger("trio_lease")

#: The longest request head (request line and headers) accepted, in bytes.
MAX_REQUEST_BYTES = 4096
#: Seconds a connection may take from accept to the end of the answer.
TIMEOUT = 2.0
#: Connections open at once; a new one beyond closes the oldest still sending its request.
MAX_CONNECTIONS = 128
#: First pause after an accept error, in seconds; it doubles on each error in a row.
ACCEPT_BACKOFF = 0.005
#: Longest pause after accept errors, in seconds.
ACCEPT_BACKOFF_MAX = 1.0
#: Connections given up for good when the process runs out of file descriptors.
FD_RESERVE = 8
#: Seconds between two WARNING lines about shed connections, timeouts or accept errors.
WARNING_INTERVAL = 10.0
#: What the connection cap never goes below.
_MIN_CONNECTIONS = 4
#: Bytes read and thrown away after the answer, so the close does not reset the connection.
_LINGER_BYTES = 65536
#: Seconds given to the client to close its side once answered.
_LINGER_TIME = 0.5
_READ_SIZE = 4096
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)

#: An answer: (status, content type, body).
Answer = tuple[int, str, bytes]
#: Answers a GET or HEAD of ``target`` (path and query, as sent).
Handler = Callable[[str], Answer]

_TEXT = "text/plain; charset=utf-8"
#: Reason phrases of RFC 9110 that older Pythons name otherwise.
_REASONS = {413: b"Content Too Large"}


@dataclasses.dataclass
class ServerStats:
    """What a :class:`ProbeServer` had to refuse, since it started."""

    #: Connections closed unanswered to make room for a newer one.
    shed: int = 0
    #: Connections closed at their deadline (:data:`TIMEOUT` after accept).
    timeouts: int = 0
    #: Errors from ``accept()``.
    accept_errors: int = 0
    #: Connections open now.
    open: int = 0
    #: Connections served at once at most (lowered when file descriptors run out).
    capacity: int = MAX_CONNECTIONS


class _Connection:
    """One accepted connection: its stream, its deadline's scope, and whether it may be shed."""

    __slots__ = ("answered", "answering", "scope", "shed", "stream")

    def __init__(self, stream: anyio.abc.ByteStream, deadline: float) -> None:
        self.stream = stream
        self.scope = anyio.CancelScope(deadline=deadline)
        #: The request head is in: the answer is being made and sent (it is not shed then).
        self.answering = False
        #: The answer was sent (the client may still be closing its side).
        self.answered = False
        self.shed = False


class _Warnings:
    """WARNING lines about refused work, at most one per :data:`WARNING_INTERVAL` seconds."""

    def __init__(self) -> None:
        self._last = -float("inf")
        self._pending: dict[str, int] = {}

    def note(self, what: str, detail: str = "") -> None:
        self._pending[what] = self._pending.get(what, 0) + 1
        now = anyio.current_time()
        if now - self._last < WARNING_INTERVAL:
            return
        self._last = now
        counts = ", ".join(f"{kind}: {count}" for kind, count in sorted(self._pending.items()))
        self._pending.clear()
        logger.warning(
            "probe server: %s (since the last such warning, at most one every %.0f s)%s; "
            "the lease is not affected",
            counts,
            WARNING_INTERVAL,
            f"; last: {detail}" if detail else "",
        )


class ProbeServer:
    """Serves ``handler`` on listeners with the bounds of this module; :attr:`stats` counts."""

    def __init__(self, handler: Handler, *, stats: ServerStats | None = None) -> None:
        self.handler = handler
        #: Counted as the server runs (give one to read it from elsewhere).
        self.stats = ServerStats() if stats is None else stats
        #: Connections counted against the cap, oldest first (a dict keeps the order).
        self._open: dict[_Connection, None] = {}
        self._warnings = _Warnings()

    async def serve(self, listener: anyio.abc.Listener[anyio.abc.ByteStream]) -> None:
        """Serve until cancelled (the listener is closed then). Never raises anything else:
        a failure is logged at WARNING and ends the serving, not the caller's task group."""
        try:
            async with listener, anyio.create_task_group() as tg:
                listeners = getattr(listener, "listeners", [listener])
                for one in listeners:
                    if not callable(getattr(one, "accept", None)):
                        raise TypeError(f"cannot accept from a {type(one).__name__}")
                for one in listeners:
                    tg.start_soon(self._accept_loop, one, tg)
        except Exception:  # a probe server never raises into the program whose lease it reports
            logger.warning(
                "probe server: stopped by an error; the lease goes on without it", exc_info=True
            )

    async def _accept_loop(
        self, listener: anyio.abc.Listener[anyio.abc.ByteStream], tg: anyio.abc.TaskGroup
    ) -> None:
        backoff = Backoff(ACCEPT_BACKOFF, ACCEPT_BACKOFF_MAX)
        while True:  # noqa: ASYNC913  each pass awaits an accept, or returns
            try:
                stream = await _accept(listener)
            except anyio.ClosedResourceError:
                return
            except Exception as exc:  # out of fds, buffers, memory; an aborted connection
                self.stats.accept_errors += 1
                delay = backoff.failed()
                self._warnings.note(
                    "accept errors",
                    f"{_describe(exc)}; accepting again in {delay * 1000:.0f} ms",
                )
                if _errno(exc) in _OUT_OF_FILES:
                    self._lower_capacity()
                await anyio.sleep(delay)
                continue
            backoff.reset()
            if not self._make_room():
                self.stats.shed += 1
                self._warnings.note("connections shed", "every connection was being answered")
                await anyio.aclose_forcefully(stream)
                continue
            connection = _Connection(stream, anyio.current_time() + TIMEOUT)
            self._open[connection] = None
            self.stats.open = len(self._open)
            tg.start_soon(self._serve_one, connection)

    def _make_room(self) -> bool:
        """Shed the oldest connections still sending their request until one more fits;
        False if every open connection is being answered."""
        while len(self._open) >= self.stats.capacity:
            victim = next((c for c in self._open if not c.answering), None)
            if victim is None:
                return False
            self._shed(victim)
        return True

    def _shed(self, connection: _Connection) -> None:
        del self._open[connection]
        self.stats.open = len(self._open)
        connection.shed = True
        connection.scope.cancel()
        self.stats.shed += 1
        self._warnings.note(
            "connections shed", f"{self.stats.capacity} connections open, the oldest closed"
        )

    def _lower_capacity(self) -> None:
        """Out of file descriptors: serve fewer at once from now on, and give some back."""
        capacity = max(_MIN_CONNECTIONS, min(self.stats.capacity, len(self._open)) - FD_RESERVE)
        self.stats.capacity = capacity
        for connection in list(self._open):
            if len(self._open) <= capacity:
                break
            if not connection.answering:
                self._shed(connection)

    async def _serve_one(self, connection: _Connection) -> None:
        stream = connection.stream
        try:
            with connection.scope:
                await _exchange(connection, self.handler)
            if connection.scope.cancelled_caught and not (connection.shed or connection.answered):
                self.stats.timeouts += 1
                self._warnings.note(
                    "timeouts", f"a connection took over {TIMEOUT:g} s from accept to answer"
                )
        except Exception as exc:  # one bad connection never stops the server
            logger.debug("probe server: a connection failed: %r", exc)
        finally:
            if connection in self._open:  # not shed: still counted
                del self._open[connection]
                self.stats.open = len(self._open)
            await anyio.aclose_forcefully(stream)  # not shielded: forceful, no wait


async def serve_http(listener: anyio.abc.Listener[anyio.abc.ByteStream], handler: Handler) -> None:
    """Serve ``handler`` on ``listener`` until cancelled (the listener is closed then)."""
    await ProbeServer(handler).serve(listener)


async def _accept(listener: anyio.abc.Listener[anyio.abc.ByteStream]) -> anyio.abc.ByteStream:
    """The next connection (``serve`` checked that the listener has ``accept()``)."""
    stream: anyio.abc.ByteStream = await listener.accept()  # type: ignore[attr-defined]
    return stream


def _errno(exc: BaseException) -> int | None:
    """The errno of an accept error (trio's arrive as BrokenResourceError from the OSError)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return cause.errno
        cause = cause.__cause__
    return None


def _describe(exc: BaseException) -> str:
    code = _errno(exc)
    if code is not None:
        return f"accept() failed: {errno.errorcode.get(code, code)} ({os.strerror(code)})"
    return f"accept() failed: {exc!r}"


async def _exchange(connection: _Connection, handler: Handler) -> None:
    """Read one request head from the connection, send its answer, then linger until it closes."""
    stream = connection.stream
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
    try:
        request = await _read_head(stream, conn)
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            connection.answering = True
            await _send(stream, conn, _refusal(exc.error_status_hint), head_only=False)
            connection.answered, connection.answering = True, False
            await _linger(stream)
        return
    if request is None:  # the client left before sending a request
        return
    connection.answering = True
    method = request.method.decode("ascii", "replace")
    answer, headers = _check(request)
    if answer is None:
        answer = handler(request.target.decode("ascii", "replace"))
    await _send(stream, conn, answer, head_only=method == "HEAD", extra=headers)
    connection.answered, connection.answering = True, False
    await _linger(stream)


def _check(request: h11.Request) -> tuple[Answer | None, list[tuple[str, str]]]:
    """The refusal of a request this server does not serve (None: serve it), and its headers."""
    if request.http_version not in (b"1.0", b"1.1"):
        return _refusal(505), []
    if not request.target.startswith(b"/"):
        return (400, _TEXT, b"bad request: the target must be a path (/healthz), not a URL\n"), []
    if request.method not in (b"GET", b"HEAD"):
        return (405, _TEXT, b"method not allowed: only GET and HEAD are served\n"), [
            ("Allow", "GET, HEAD")
        ]
    for name, value in request.headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return _refusal(413), []
    return None, []


def _refusal(status: int) -> Answer:
    """The plain-text answer to a request refused with ``status``."""
    text = {
        413: "content too large: a GET or HEAD request here carries no body",
        431: f"request header fields too large: at most {MAX_REQUEST_BYTES} bytes of head",
        505: "HTTP version not supported: use HTTP/1.1 or HTTP/1.0",
    }.get(status, "bad request")
    return status, _TEXT, f"{text}\n".encode()


async def _read_head(stream: anyio.abc.ByteStream, conn: h11.Connection) -> h11.Request | None:
    """The request once its head is in; None if the peer left before."""
    while True:  # noqa: ASYNC913  each pass takes one h11 event; NEED_DATA reads
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            return event
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # pragma: no cover - h11 gives a request or a close first
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")


async def _send(
    stream: anyio.abc.ByteStream,
    conn: h11.Connection,
    answer: Answer,
    *,
    head_only: bool,
    extra: list[tuple[str, str]] | None = None,
) -> None:
    status, content_type, body = answer
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Connection", "close"),
        *(extra or []),
    ]
    reason = _REASONS.get(status) or http.HTTPStatus(status).phrase.encode("ascii")
    out = conn.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""
    if not head_only:
        out += conn.send(h11.Data(data=body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    await stream.send(out)


async def _linger(stream: anyio.abc.ByteStream) -> None:
    """Half-close, then read what the client still sends, for at most :data:`_LINGER_BYTES`
    and :data:`_LINGER_TIME`: closing with unread data resets the connection, and the reset
    may destroy the answer before the client reads it."""
    try:
        with anyio.move_on_after(_LINGER_TIME):  # noqa: ASYNC912  bounds the linger; its reads checkpoint
            if isinstance(stream, anyio.abc.SocketStream):
                await stream.send_eof()
            received = 0
            while received < _LINGER_BYTES:
                received += len(await stream.receive(_READ_SIZE))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
