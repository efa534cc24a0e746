"""The lean HTTP/1.1 client (trio_lease._lean_http) against a scripted server on real sockets.

The server reads each request and answers with raw bytes chosen by the test, so framings that a
well-behaved server rarely sends (chunk extensions, one byte per write, no length, a close in the
middle) are exercised as well as keep-alive reuse, a server closing idle connections, and a
request cancelled while its reply is still on the way.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from tests.conftest import REAL_LOOPS
from trio_lease import BackendProtocolError
from trio_lease._http import HttpxUnary, Unary
from trio_lease._http_errors import ConnectFailed, MalformedReply, NotEncodable
from trio_lease._lean_http import LeanClient
from trio_lease._loops import _asyncio as asyncio_seam


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (real sockets) on asyncio, asyncio on uvloop, and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


#: What the server does with one request: bytes to write (one write each), then "close" to
#: close the connection, or "wait" to wait for the test's ``release`` event before writing.
Script = Callable[[str, int], list[bytes | str]]


@dataclass
class Server:
    port: int
    requests: list[tuple[int, str]] = field(default_factory=list)  # (connection, request line)
    bodies: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed: int = 0  # connections the server closed
    release: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_request(stream: anyio.abc.ByteStream, buffer: bytearray) -> tuple[str, bytes]:
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    lines = head.decode().split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            length = int(value)
    while len(buffer) < length:
        buffer += await stream.receive()
    body = bytes(buffer[:length])
    del buffer[:length]
    return lines[0], body


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[Server]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = Server(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def handle(stream: anyio.abc.SocketStream) -> None:
        number = server.connections
        server.connections += 1
        buffer = bytearray()
        try:
            async with stream:  # closed when the script ends or the server stops
                while True:
                    line, body = await _read_request(stream, buffer)
                    server.requests.append((number, line))
                    server.bodies.append(body)
                    for step in script(line, number):
                        if step == "close":
                            await stream.aclose()
                            server.closed += 1
                            return
                        if step == "wait":
                            await server.release.wait()
                        else:
                            assert isinstance(step, bytes)
                            await stream.send(step)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield server
        tg.cancel_scope.cancel()


def echo(line: str, connection: int) -> list[bytes | str]:
    """A JSON reply naming the request line and the connection that carried it."""
    body = f'{{"line": "{line}", "connection": {connection}}}'.encode()
    return [reply(body, "Content-Type: application/json")]


@pytest.mark.anyio
async def test_requests_reuse_one_keep_alive_connection() -> None:
    """Three requests in a row share one keep-alive connection."""
    async with scripted(echo) as server:
        client = LeanClient(server.url, headers=[("Accept", "application/json")])
        answers = [await client.request("GET", f"/x/{i}?a=1") for i in range(3)]
        await client.aclose()
    assert [a.json()["line"] for a in answers] == [f"GET /x/{i}?a=1 HTTP/1.1" for i in range(3)]
    assert client.connections_opened == 1
    assert {number for number, _ in server.requests} == {0}


@pytest.mark.anyio
async def test_body_and_headers_are_sent() -> None:
    """A request's body and headers reach the server; reply headers read case-insensitively."""
    async with scripted(echo) as server:
        client = LeanClient(server.url)
        answer = await client.request(
            "PUT", "/obj", headers=[("Content-Type", "application/json")], body=b'{"a": 1}'
        )
        await client.aclose()
    assert answer.status_code == 200
    assert answer.headers["content-type"] == answer.headers["Content-Type"] == "application/json"
    assert server.bodies == [b'{"a": 1}']


@pytest.mark.anyio
async def test_a_chunked_reply_written_one_byte_at_a_time_is_read_whole() -> None:
    """A chunked reply with extensions and trailers, one byte per write, is read whole."""
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: y\r\n\r\n"
    )

    def script(line: str, connection: int) -> list[bytes | str]:
        return [raw[i : i + 1] for i in range(len(raw))]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        first = await client.request("GET", "/")
        second = await client.request("GET", "/")
        await client.aclose()
    assert first.content == second.content == b"hello world"
    assert client.connections_opened == 1


@pytest.mark.anyio
async def test_asyncio_uses_its_own_transport_and_trio_its_bare_socket(
    anyio_backend: str | tuple[str, dict[str, Any]], anyio_backend_name: str
) -> None:
    """On asyncio the connection is asyncio's transport with reading left on (anyio's streams
    switch reading on and off around each receive: two epoll_ctl calls per read); on trio,
    plain TCP is a bare socket on trio's low-level waits (no stream wrapper). Both kinds run
    every test in this file, the native one on asyncio's own event loop and on uvloop's (whose
    transports are not asyncio.Transport subclasses)."""
    async with scripted(echo) as server:
        client = LeanClient(server.url)
        await client.request("GET", "/")
        kinds = [type(conn).__name__ for conn in client._idle]
        native = [conn for conn in client._idle if isinstance(conn, asyncio_seam.NativeConnection)]
        transports = [type(conn.transport) for conn in native]
        await client.aclose()
    assert kinds == [
        "NativeConnection" if anyio_backend_name == "asyncio" else "SocketConnection"
    ]
    if anyio_backend_name == "asyncio":
        # The "uvloop" run really is on uvloop, with a transport that is not asyncio's class
        # (the lean client once asserted it was, and failed every request there).
        on_uvloop = isinstance(anyio_backend, tuple) and anyio_backend[1].get("use_uvloop")
        loop = asyncio.get_running_loop()
        assert type(loop).__module__.startswith("uvloop") == bool(on_uvloop)
        assert issubclass(transports[0], asyncio.Transport) != bool(on_uvloop), transports


@pytest.mark.anyio
async def test_a_request_from_a_cancelled_scope_sends_nothing() -> None:
    """A task whose scope was cancelled while it ran on (its wait had completed: the one step
    asyncio allows after an event-loop stall) must not put its request on the wire, even on a
    kept-alive connection that needs no await to reach."""
    async with scripted(echo) as server:
        client = LeanClient(server.url)
        await client.request("GET", "/warm")  # leaves an idle connection to reuse
        with anyio.CancelScope() as scope:
            scope.cancel()
            await client.request("GET", "/never")
        await anyio.sleep(0.05)
        await client.aclose()
    assert scope.cancelled_caught
    assert [line for _, line in server.requests] == ["GET /warm HTTP/1.1"]


@pytest.mark.anyio
async def test_a_reply_larger_than_the_read_buffer_is_read_whole_in_one_piece() -> None:
    """A 3 MiB reply sent in one write, larger than the bytes held unparsed before reading
    pauses (``_BUFFER_LIMIT``): reading pauses and resumes, nothing is lost or reordered,
    and the connection is reused after."""
    body = bytes(range(256)) * (3 * 4096)

    def script(line: str, connection: int) -> list[bytes | str]:
        return [reply(body)] if line.startswith("GET /big") else echo(line, connection)

    async with scripted(script) as server:
        client = LeanClient(server.url, max_body=len(body))
        big = await client.request("GET", "/big")
        after = await client.request("GET", "/after")
        await client.aclose()
    assert len(body) > 4 * asyncio_seam._BUFFER_LIMIT
    assert big.content == body
    assert after.json()["line"] == "GET /after HTTP/1.1"
    assert client.connections_opened == 1


@pytest.mark.anyio
async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    """An idle connection the server closed silently is replaced, not reported."""
    def script(line: str, connection: int) -> list[bytes | str]:
        return [*echo(line, connection), "close"]  # no "Connection: close": a silent close

    async with scripted(script) as server:
        client = LeanClient(server.url)
        first = await client.request("GET", "/a")
        while not server.closed:  # the server closes after writing the reply
            await anyio.sleep(0.01)
        second = await client.request("GET", "/b")
        await client.aclose()
    assert (first.json()["connection"], second.json()["connection"]) == (0, 1)
    assert client.connections_opened == 2


@pytest.mark.anyio
@pytest.mark.parametrize("separate_write", [False, True])
async def test_bytes_after_a_reply_are_never_read_as_the_next_answer(separate_write: bool) -> None:
    """A server that answers a request twice: the second copy, sent with the first (one write)
    or just after it, must not become the answer to the next request on that connection."""

    def script(line: str, connection: int) -> list[bytes | str]:
        answer = echo(line, connection)[0]
        assert isinstance(answer, bytes)
        return [answer, answer] if separate_write else [answer + answer]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        first = await client.request("GET", "/a")
        await anyio.sleep(0.05)  # the second copy reaches the idle connection
        second = await client.request("GET", "/b")
        await client.aclose()
    assert first.json()["line"] == "GET /a HTTP/1.1"
    assert second.json()["line"] == "GET /b HTTP/1.1"
    assert client.connections_opened == 2


@pytest.mark.anyio
async def test_connection_close_in_the_reply_is_honoured() -> None:
    """A reply with Connection: close is not reused for the next request."""
    def script(line: str, connection: int) -> list[bytes | str]:
        return [reply(b"{}", "Connection: close")]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        await client.request("GET", "/a")
        await client.request("GET", "/b")
        await client.aclose()
    assert [number for number, _ in server.requests] == [0, 1]


@pytest.mark.anyio
async def test_a_reply_cut_short_raises_a_protocol_error_and_the_connection_is_dropped() -> None:
    """A body short of its Content-Length is RemoteProtocolError; the next request reconnects."""
    def script(line: str, connection: int) -> list[bytes | str]:
        if connection == 0:
            return [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"par", "close"]
        return echo(line, connection)

    async with scripted(script) as server:
        client = LeanClient(server.url)
        with pytest.raises(MalformedReply):
            await client.request("GET", "/a")
        answer = await client.request("GET", "/b")
        await client.aclose()
    assert answer.json() == {"line": "GET /b HTTP/1.1", "connection": 1}


@pytest.mark.anyio
async def test_a_reply_that_is_not_http_raises_a_protocol_error() -> None:
    """A reply that is not HTTP at all is RemoteProtocolError (malformed)."""
    def script(line: str, connection: int) -> list[bytes | str]:
        return [b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "close"]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        with pytest.raises(MalformedReply, match="malformed"):
            await client.request("GET", "/")
        await client.aclose()


@pytest.mark.anyio
async def test_a_cancelled_request_never_hands_its_late_reply_to_the_next_one() -> None:
    """A request cancelled mid-reply closes its connection: its late reply is never read."""
    def script(line: str, connection: int) -> list[bytes | str]:
        if line.startswith("GET /slow"):
            return ["wait", *echo(line, connection)]
        return echo(line, connection)

    async with scripted(script) as server:
        client = LeanClient(server.url)
        with anyio.move_on_after(0.2) as scope:
            await client.request("GET", "/slow")
        assert scope.cancelled_caught
        server.release.set()  # the late reply is written now, to the first connection
        answer = await client.request("GET", "/next")
        await client.aclose()
    assert answer.json() == {"line": "GET /next HTTP/1.1", "connection": 1}


@pytest.mark.anyio
async def test_a_refused_connection_is_a_connect_error() -> None:
    """A refused connection is ConnectFailed (nothing was sent)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        client = LeanClient(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectFailed):
            await client.request("GET", "/")


async def _refused_bearer(secret: str) -> tuple[NotEncodable, LeanClient]:
    """A request with ``Authorization: Bearer <secret>`` is refused with NotEncodable that does
    not quote the secret (its first six characters), and nothing reaches the server; returns
    the error and the (closed) client."""
    async with scripted(echo) as server:
        client = LeanClient(server.url)
        with pytest.raises(NotEncodable) as caught:
            await client.request("GET", "/", headers=[("Authorization", f"Bearer {secret}")])
        await client.aclose()
    assert secret[:6] not in str(caught.value)
    assert server.requests == []
    return caught.value, client


@pytest.mark.anyio
async def test_an_invalid_header_value_is_refused_without_quoting_it() -> None:
    """A CRLF in a header value is NotEncodable, nothing sent, the value not quoted."""
    await _refused_bearer("sekrit-token\r\nX-Injected: 1")


@pytest.mark.anyio
async def test_a_non_ascii_header_value_is_refused_without_quoting_it() -> None:
    """A header h11 cannot encode (non-ASCII) is NotEncodable, not UnicodeError."""
    refused, client = await _refused_bearer("sekrit-t\u00f8ken")
    assert "\u00f8" not in str(refused)
    assert refused.__cause__ is None
    assert client.connections_opened == 0


@pytest.mark.anyio
async def test_the_url_path_prefix_is_kept() -> None:
    """A path prefix in the base URL is kept in front of every target."""
    async with scripted(echo) as server:
        client = LeanClient(server.url + "/k8s/clusters/c-1/")
        answer = await client.request("GET", "/api/v1?x=1")
        await client.aclose()
    assert answer.json()["line"] == "GET /k8s/clusters/c-1/api/v1?x=1 HTTP/1.1"


def test_bad_urls_are_refused_with_what_to_fix() -> None:
    """Unsupported schemes and https without an SSL context are ValueErrors saying what to fix."""
    with pytest.raises(ValueError, match="http or https"):
        LeanClient("ftp://127.0.0.1/")
    with pytest.raises(ValueError, match="SSL context"):
        LeanClient("https://127.0.0.1/")


@pytest.mark.anyio
async def test_reprs_show_no_header_values() -> None:
    """Reprs of the client, a reply and its headers show no credentials or header values."""
    async with scripted(lambda line, n: [reply(b"{}", "Set-Cookie: session=sekrit")]) as server:
        url = server.url.replace("//", "//user:sekrit@")
        client = LeanClient(url, headers=[("Authorization", "Bearer sekrit")])
        answer = await client.request("GET", "/")
        await client.aclose()
    assert "sekrit" not in repr(client) + repr(answer) + repr(answer.headers)
    assert answer.headers["set-cookie"] == "session=sekrit"


@pytest.mark.anyio
async def test_a_reply_body_over_the_cap_is_refused_while_reading() -> None:
    """A body past max_body raises BackendProtocolError mid-read; the connection is dropped."""

    def script(line: str, connection: int) -> list[bytes | str]:
        if connection == 0:  # an endless chunked body: never read whole into memory
            chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
            return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", *[chunk] * 64]
        return echo(line, connection)

    async with scripted(script) as server:
        client = LeanClient(server.url, max_body=16 * 1024)
        with pytest.raises(BackendProtocolError, match="over 16,384 bytes"):
            await client.request("GET", "/a")
        answer = await client.request("GET", "/b")
        await client.aclose()
    assert answer.json() == {"line": "GET /b HTTP/1.1", "connection": 1}


# -- the seam's contract, kept by the lean client and the httpx adapter alike ------------------


@asynccontextmanager
async def seam(kind: str, url: str, *, max_body: int = 4 * 1024 * 1024) -> AsyncIterator[Unary]:
    """A :class:`Unary` of ``kind`` ("lean" or "httpx") sending to ``url``."""
    if kind == "lean":
        client = LeanClient(url, max_body=max_body)
        yield client
        await client.aclose()
        return
    async with httpx.AsyncClient() as http:
        yield HttpxUnary(http, url, max_body=max_body)


SEAMS = pytest.mark.parametrize("kind", ["lean", "httpx"])


@pytest.mark.anyio
@SEAMS
async def test_every_seam_sends_the_target_below_the_prefix_with_its_headers(kind: str) -> None:
    """The URL's prefix, the target's query, the body and the headers reach the server."""
    async with scripted(echo) as server, seam(kind, server.url + "/k8s/") as unary:
        answer = await unary.request(
            "PUT", "/obj?a=1", headers=[("Content-Type", "application/json")], body=b"{}"
        )
    assert answer.status_code == 200
    assert answer.json()["line"] == "PUT /k8s/obj?a=1 HTTP/1.1"
    assert answer.headers["Content-Type"] == "application/json"
    assert server.bodies == [b"{}"]


@pytest.mark.anyio
@SEAMS
async def test_every_seam_refuses_a_bad_header_value_before_sending(kind: str) -> None:
    """A header HTTP cannot carry is NotEncodable on every seam, unquoted, unsent."""
    async with scripted(echo) as server, seam(kind, server.url) as unary:
        for secret in ("sekrit\r\nX-Injected: 1", "sekrit-t\u00f8ken"):
            with pytest.raises(NotEncodable) as caught:
                await unary.request("GET", "/", headers=[("Authorization", f"Bearer {secret}")])
            assert "sekrit" not in str(caught.value)
    assert server.requests == []


@pytest.mark.anyio
@SEAMS
async def test_every_seam_refuses_a_body_over_its_cap_while_reading(kind: str) -> None:
    """An endless body is BackendProtocolError on every seam, naming the request and cap."""

    def script(line: str, connection: int) -> list[bytes | str]:
        chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
        return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", *[chunk] * 64]

    async with scripted(script) as server, seam(kind, server.url, max_body=16 * 1024) as unary:
        with pytest.raises(BackendProtocolError) as caught:
            await unary.request("GET", "/big?x=1")
    assert str(caught.value) == (
        f"the reply to GET /big from {server.url} is over 16,384 bytes; the outcome is unknown"
    )


# -- streamed replies (LeanClient.open_stream: watches) -------------------------------------


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.mark.anyio
async def test_a_streamed_reply_yields_each_piece_as_it_arrives() -> None:
    """The head comes first; each chunk is handed over before the server sends the next."""
    seen: list[bytes] = []

    def script(line: str, connection: int) -> list[bytes | str]:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        return [head, _chunk(b"one\n"), "wait", _chunk(b"two\n"), b"0\r\n\r\n"]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        stream = await client.open_stream("GET", "/watch?w=1", headers=[("X-A", "b")])
        assert stream.status_code == 200
        assert stream.headers["transfer-encoding"] == "chunked"
        async for piece in stream.aiter_bytes():
            seen.append(piece)
            if piece == b"one\n":  # the second chunk is sent only after the first was read
                server.release.set()
        await stream.aclose()
        again = await client.open_stream("GET", "/watch?w=2")
        await again.aclose()
        await client.aclose()
    assert seen == [b"one\n", b"two\n"]
    assert server.requests == [(0, "GET /watch?w=1 HTTP/1.1"), (1, "GET /watch?w=2 HTTP/1.1")]
    assert client.connections_opened == 2  # a stream's connection is never reused


@pytest.mark.anyio
async def test_a_stream_takes_no_idle_connection_and_leaves_the_pool_alone() -> None:
    """A unary request's kept-alive connection stays for unary requests; a stream opens one."""
    async with scripted(echo) as server:
        client = LeanClient(server.url)
        await client.request("GET", "/a")
        stream = await client.open_stream("GET", "/b")
        body = await stream.read(1000)
        await client.request("GET", "/c")
        await client.aclose()
    assert body.json()["connection"] == 1
    assert [number for number, _ in server.requests] == [0, 1, 0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tail", "error"),
    [
        (b"zz\r\nqzq\r\n", MalformedReply),  # not a chunk size
        (b"5\r\nqz", MalformedReply),  # cut short, then closed
    ],
)
async def test_a_broken_stream_raises_a_seam_error_that_quotes_no_server_bytes(
    tail: bytes, error: type[Exception]
) -> None:
    """A stream's bad or cut chunk is the seam's MalformedReply, quoting none of the server's
    bytes, raised after the pieces that arrived whole were handed over."""

    def script(line: str, connection: int) -> list[bytes | str]:
        return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", _chunk(b"ok\n"), tail,
                "close"]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        stream = await client.open_stream("GET", "/watch")
        pieces: list[bytes] = []
        with pytest.raises(error) as caught:
            async for piece in stream.aiter_bytes():
                pieces.append(piece)
        await stream.aclose()
        await client.aclose()
    assert pieces[0] == b"ok\n"  # what arrived whole was handed over before the error
    assert server.connections == 1
    assert "qz" not in str(caught.value)


@pytest.mark.anyio
async def test_a_streamed_failure_is_read_within_its_cap() -> None:
    """A stream that did not open (a 403's Status body) is read whole, or refused over the cap."""
    body = b'{"kind":"Status","code":403}'

    def script(line: str, connection: int) -> list[bytes | str]:
        return [reply(body, status="403 Forbidden")]

    async with scripted(script) as server:
        client = LeanClient(server.url)
        stream = await client.open_stream("GET", "/watch")
        answer = await stream.read(len(body))
        over = await client.open_stream("GET", "/watch")
        with pytest.raises(BackendProtocolError, match="GET /watch"):
            await over.read(len(body) - 1)
        await client.aclose()
    assert (answer.status_code, answer.content) == (403, body)
    assert server.connections == 2


def test_asyncio_protocol_callbacks_only_queue_bytes_and_wake_the_reader() -> None:
    """The asyncio connection's protocol callbacks parse and decide nothing: every arrival is
    queued in order and wakes the waiting task, which reads (and parses) it."""
    import asyncio

    async def main() -> None:
        reader = asyncio_seam._Reader()
        reader.data_received(b"early")  # no one waits: queued
        waiter = reader.waiter = asyncio.get_running_loop().create_future()
        reader.data_received(b"own 1")
        assert list(reader.chunks) == [b"early", b"own 1"] and waiter.done()
        reader.eof_received()
        assert reader.ended and list(reader.chunks) == [b"early", b"own 1"]

    asyncio.run(main())


@pytest.mark.anyio
async def test_a_request_waiting_for_its_reply_holds_no_reader_or_parser() -> None:
    """The reply's reader and llhttp's parser (with its bound callbacks) are made with the
    reply's first bytes: a request in flight holds neither, so many renewals waiting at once
    do not set off the garbage collector's collections of new objects; the reply is read whole
    when it comes, and the connection is reused after."""
    import gc

    import httptools

    from trio_lease._reply import ReplyReader

    def kinds() -> tuple[int, int]:
        objects = gc.get_objects()
        return (sum(type(o) is ReplyReader for o in objects),
                sum(type(o) is httptools.HttpResponseParser for o in objects))

    def script(line: str, connection: int) -> list[bytes | str]:
        return ["wait", *echo(line, connection)] if "/late" in line else echo(line, connection)

    async with scripted(script) as server:
        client = LeanClient(server.url)
        await client.request("GET", "/warm")
        gc.collect()
        before = kinds()
        async with anyio.create_task_group() as tg:
            answers = []

            async def late() -> None:
                answers.append(await client.request("GET", "/late"))

            tg.start_soon(late)
            while len(server.requests) < 2:  # sent: the send and the wait are one step
                await anyio.sleep(0.01)
            waiting = kinds()
            server.release.set()
        await client.aclose()
    assert waiting == before, (waiting, before)
    assert answers[0].json()["line"] == "GET /late HTTP/1.1"
    assert client.connections_opened == 1
