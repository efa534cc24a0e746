"""One hostile HTTP/1.1 server, two ways in: a real socket on 127.0.0.1, and an httpx transport.

Both call the same handler with a :class:`Request` and send back the :class:`Reply` it returns,
so the replies a fake generates reach the production code paths: the socket server is what the
lean HTTP/1.1 client (``trio_lease._http``) and httpx's own connections talk to when a backend
has no injected transport; :class:`HostileTransport` is what a backend built with
``transport=...`` talks to.

The socket server writes responses byte by byte itself (no HTTP library), so it can also send
what no library would: a body cut short (``truncate``), a reply trickled a few bytes at a time
(``drip``), a closed connection instead of a reply (``close``), a status line that is not HTTP
(``broken``), a second, unasked response after the body (``trailing``, then closed; ``stale``,
kept open). Those modes exist only on the socket.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any, Literal, Protocol, Self
from urllib.parse import parse_qsl

import anyio
import anyio.abc
import httpx

__all__ = [
    "SOCKET_ONLY",
    "HostileServer",
    "HostileTransport",
    "Reply",
    "Request",
    "StreamCut",
]

Mode = Literal["normal", "stream", "truncate", "drip", "close", "broken", "trailing", "stale"]
#: Modes only a real socket can carry.
SOCKET_ONLY = frozenset({"truncate", "drip", "close", "broken", "trailing", "stale"})
#: A complete second response nobody asked for (``trailing`` and ``stale`` send it).
UNASKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
_MAX_HEAD = 64 * 1024


class StreamCut(Exception):
    """Raised by a stream's chunk iterator: drop the connection without the final chunk."""


@dataclasses.dataclass
class Request:
    """One request as the fakes see it: ``path`` without the query, lower-case header names."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    arrived: float

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


@dataclasses.dataclass
class Reply:
    """What to send back; ``sent`` is called with the time the reply was completely sent."""

    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    mode: Mode = "normal"
    chunks: AsyncIterator[bytes] | None = None
    drip_seconds: float = 0.0
    sent: Callable[[float], None] | None = None
    #: What ``trailing`` and ``stale`` send after the reply (default :data:`UNASKED`);
    #: ``b"repeat"``: the same response again.
    unasked: bytes = b""

    def done(self) -> None:
        if self.sent is not None:
            self.sent(anyio.current_time())


class Handler(Protocol):
    def __call__(self, request: Request, *, socket: bool) -> Awaitable[Reply]: ...


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Whatever"


def _head(reply: Reply, extra: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {reply.status} {_reason(reply.status)}"]
    lines += [f"{k}: {v}" for k, v in [*reply.headers, *extra]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_request(
    stream: anyio.abc.ByteStream, buffer: bytes
) -> tuple[Request | None, bytes]:
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > _MAX_HEAD:
            return None, b""
        try:
            buffer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return None, b""
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        try:
            rest += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return None, b""
    body, rest = rest[:length], rest[length:]
    path, _, query = target.partition("?")
    request = Request(
        method,
        path,
        dict(parse_qsl(query, keep_blank_values=True)),
        headers,
        body,
        anyio.current_time(),
    )
    return request, rest


async def _close(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


async def _send_reply(stream: anyio.abc.ByteStream, reply: Reply) -> bool:
    """Send ``reply``; True if the connection may serve another request."""
    mode = reply.mode
    if mode == "close":
        return False
    if mode == "broken":
        await stream.send(reply.body or b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        return False
    if mode == "stream":
        assert reply.chunks is not None
        try:
            await stream.send(_head(reply, [("Transfer-Encoding", "chunked")]))
            async for chunk in reply.chunks:
                if chunk:
                    await stream.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        except StreamCut:
            return False
        finally:
            await _close(reply.chunks)
        await stream.send(b"0\r\n\r\n")
        reply.done()
        return True
    data = _head(reply, [("Content-Length", str(len(reply.body)))]) + reply.body
    if mode == "truncate":
        await stream.send(data[: len(data) - max(1, len(reply.body) // 2)])
        return False
    if mode == "drip":
        pieces = 40
        size = max(1, len(data) // pieces)
        pause = reply.drip_seconds / max(1, len(data) // size)
        for start in range(0, len(data), size):
            await stream.send(data[start : start + size])
            await anyio.sleep(pause)
        reply.done()
        return True
    if mode in ("trailing", "stale"):
        # trailing: then close (the client may notice); stale: keep the connection open, so
        # whatever the client sends next on it finds the unasked response waiting.
        extra = data if reply.unasked == b"repeat" else reply.unasked or UNASKED
        await stream.send(data + extra)
        reply.done()
        return mode == "stale"
    await stream.send(data)
    reply.done()
    return True


class HostileServer:
    """Serves ``handler`` on 127.0.0.1 (a free port) while the ``async with`` block runs."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.port = 0
        #: Exceptions raised by the handler (a bug in a fake): tests assert there are none.
        self.errors: list[BaseException] = []
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._serve, listener)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    async def _serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        async with listener:
            await listener.serve(self._connection)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:  # one per client
        buffer = b""
        async with stream:
            while True:
                request, buffer = await _read_request(stream, buffer)
                if request is None:
                    return
                try:
                    reply = await self._handler(request, socket=True)
                except Exception as exc:
                    self.errors.append(exc)
                    return
                try:
                    keep = await _send_reply(stream, reply)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                except Exception as exc:
                    self.errors.append(exc)
                    return
                if not keep:
                    return


class _Body(httpx.AsyncByteStream):
    """A reply's chunks as an httpx response body: an iterator object, not an async generator,
    so a reader that stops early leaves nothing for the garbage collector (:meth:`aclose`
    closes the chunks)."""

    def __init__(self, reply: Reply, request: httpx.Request) -> None:
        self._reply = reply
        self._request = request

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        assert self._reply.chunks is not None
        try:
            return await anext(self._reply.chunks)
        except StreamCut:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body",
                request=self._request,
            ) from None
        except StopAsyncIteration:
            self._reply.done()
            raise

    async def aclose(self) -> None:
        assert self._reply.chunks is not None
        await _close(self._reply.chunks)


class HostileTransport(httpx.AsyncBaseTransport):
    """The same handler behind an httpx transport (``KubernetesBackend(transport=...)``)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.errors: list[BaseException] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        ours = Request(
            request.method,
            request.url.path,
            dict(request.url.params.multi_items()),
            {k.lower(): v for k, v in request.headers.multi_items()},
            body,
            anyio.current_time(),
        )
        try:
            reply = await self._handler(ours, socket=False)
        except Exception as exc:
            self.errors.append(exc)
            raise
        if reply.mode in SOCKET_ONLY:
            error = AssertionError(f"socket-only reply mode {reply.mode!r} on the transport")
            self.errors.append(error)
            raise error
        # Header values as bytes: a server may send any latin-1 text (a "½" in Retry-After).
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        if reply.mode == "stream":
            return httpx.Response(
                reply.status, headers=headers, stream=_Body(reply, request), request=request
            )
        reply.done()
        return httpx.Response(reply.status, headers=headers, content=reply.body, request=request)
