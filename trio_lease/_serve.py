"""A tiny HTTP/1.1 server for probes and scrapes: one GET, one answer, then the connection closes.

It serves :mod:`trio_lease.health` (``/healthz``, ``/readyz``, ``/metrics``) with h11 (httpx's
parser; the lean client has its own, :mod:`._http11`), on anyio listeners, so it runs on asyncio and
trio alike and adds no dependency. Bounded on purpose, since a probe port can be reached by
anything on its network: a request head of at most :data:`MAX_REQUEST_BYTES`, a body of at most
as much (a probe sends none), :data:`REQUEST_TIMEOUT` seconds per connection and at most
:data:`MAX_CONNECTIONS` at once (the others wait for the listener). Every answer says
``Connection: close``: probes and scrapes open one connection per request anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc
import h11

__all__ = ["MAX_CONNECTIONS", "MAX_REQUEST_BYTES", "REQUEST_TIMEOUT", "Answer", "serve_http"]

logger = logging.getLogger("trio_lease")

#: The longest request head (request line and headers) and body accepted, in bytes.
MAX_REQUEST_BYTES = 8192
#: Seconds a connection may take from accept to the end of the answer.
REQUEST_TIMEOUT = 10.0
#: Connections served at once.
MAX_CONNECTIONS = 32
_READ_SIZE = 4096

#: An answer: (status, content type, body).
Answer = tuple[int, str, bytes]
#: Answers a GET or HEAD of ``target`` (path and query, as sent).
Handler = Callable[[str], Answer]


async def serve_http(listener: anyio.abc.Listener[anyio.abc.ByteStream], handler: Handler) -> None:
    """Serve ``handler`` on ``listener`` until cancelled (the listener is closed then)."""
    limiter = anyio.CapacityLimiter(MAX_CONNECTIONS)

    async def serve_one(stream: anyio.abc.ByteStream) -> None:
        async with limiter:
            try:
                with anyio.move_on_after(REQUEST_TIMEOUT):
                    await _exchange(stream, handler)
            except Exception as exc:  # one bad connection never stops the server
                logger.debug("health server: a connection failed: %r", exc)
            finally:
                await anyio.aclose_forcefully(stream)

    async with listener:
        await listener.serve(serve_one)


async def _exchange(stream: anyio.abc.ByteStream, handler: Handler) -> None:
    """Read one request from ``stream`` and send its answer."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
    try:
        request = await _read_request(stream, conn)
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            status = exc.error_status_hint
            await _send(stream, conn, (status, "text/plain", b"bad request\n"), head_only=False)
        return
    if request is None:  # the client left before sending a request
        return
    method = request.method.decode("ascii", "replace")
    if method not in ("GET", "HEAD"):
        answer: Answer = (405, "text/plain", b"only GET and HEAD are served\n")
    else:
        answer = handler(request.target.decode("ascii", "replace"))
    await _send(stream, conn, answer, head_only=method == "HEAD")


async def _read_request(stream: anyio.abc.ByteStream, conn: h11.Connection) -> h11.Request | None:
    """The request once its body (discarded, bounded) has been read; None if the peer left."""
    request: h11.Request | None = None
    body = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += len(event.data)
            if body > MAX_REQUEST_BYTES:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _send(
    stream: anyio.abc.ByteStream, conn: h11.Connection, answer: Answer, *, head_only: bool
) -> None:
    status, content_type, body = answer
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("Connection", "close"),
    ]
    out = conn.send(h11.Response(status_code=status, headers=headers)) or b""
    if not head_only:
        out += conn.send(h11.Data(data=body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    await stream.send(out)
