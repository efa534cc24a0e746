"""A malformed reply quoting our token: no error of either HTTP path carries its bytes.

h11 (under httpx) quotes the bytes of a line it cannot parse in its error (``illegal header
line: bytearray(b'...')``), and that error is the cause of httpx's and, unless the error raised
in its place is raised outside the handler, its ``__context__``: where a traceback print, an
error reporter or a debugger would show it. A scripted server on 127.0.0.1 (real sockets, real
time) answers with such lines; the seams (the lean client and httpx) and the etcd backend on an
injected httpx transport (its unary calls and its watch stream) must raise errors that hold the
token nowhere, in str, repr, args, causes or contexts.
"""

from __future__ import annotations

import contextlib
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import pytest

from tests._chained import chained_texts
from tests.conftest import REAL_LOOPS
from tests.test_http import SEAMS, scripted, seam
from trio_lease import BackendError
from trio_lease._http_errors import MalformedReply
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes import ClusterConfig, KubernetesBackend
from trio_lease.backends.kubernetes._watch import _Lines

pytestmark = pytest.mark.anyio

SECRET = "Wire-t0ken-Quoted-9xQ"
#: Replies h11 refuses, each quoting SECRET in the line it refuses.
MALFORMED = {
    "status line": f"HTTP/1.1 200 OK {SECRET}\x00\r\nContent-Length: 0\r\n\r\n",
    "header line": f"HTTP/1.1 200 OK\r\nAuthorization {SECRET}\r\nContent-Length: 0\r\n\r\n",
    "chunk header": f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz {SECRET}\r\n",
}


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (real sockets) on asyncio, asyncio on uvloop, and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


def _answering(reply: str) -> Any:
    """A server script: ``reply`` to every request, then close the connection."""

    def script(line: str, connection: int) -> list[bytes | str]:
        return [reply.encode(), "close"]

    return script


def _clean(exc: BaseException) -> bool:
    return not any(SECRET in text for text in chained_texts(exc))


@SEAMS
@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
async def test_no_seam_error_carries_the_bytes_of_a_malformed_reply(kind: str, reply: str) -> None:
    """Both seams raise MalformedReply holding nothing of the reply's bytes."""
    async with scripted(_answering(reply)) as server, seam(kind, server.url) as unary:
        with anyio.fail_after(10), pytest.raises(MalformedReply) as info:
            await unary.request("GET", "/x")
    assert _clean(info.value)


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
async def test_etcd_on_an_httpx_transport_raises_no_reply_bytes(reply: str) -> None:
    """The etcd backend on an injected httpx transport: a malformed reply to a unary call and
    to a watch is a BackendError whose chain holds nothing of the reply."""
    async with scripted(_answering(reply)) as server:
        backend = EtcdBackend([server.url], transport=httpx.AsyncHTTPTransport())
        async with backend:
            with anyio.fail_after(10), pytest.raises(BackendError) as unary:
                await backend.get("x")
            stream = backend._client.watch(b"trio_lease/x", 1, read=lambda line: line)
            with anyio.fail_after(10), pytest.raises(BackendError) as watch:
                async with aclosing(stream) as lines:
                    async for _ in lines:
                        pass
    assert _clean(unary.value)
    assert _clean(watch.value)


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
async def test_kubernetes_watch_on_an_httpx_transport_raises_no_reply_bytes(reply: str) -> None:
    """The Kubernetes backend's streams on an injected httpx transport: a malformed reply, to
    the request or in the body, is a BackendError whose chain holds nothing of the reply."""
    async with scripted(_answering(reply)) as server:
        config = ClusterConfig(server=server.url)
        async with KubernetesBackend(config, transport=httpx.AsyncHTTPTransport()) as backend:
            api = backend._api
            with anyio.fail_after(10), pytest.raises(BackendError) as info:
                params = {"watch": "1"}
                ctx = api.ctx("watch")
                async with api.stream(api.collection_path(), params, ctx) as response:
                    assert isinstance(response, httpx.Response)
                    async with contextlib.aclosing(_Lines(response, ctx)) as lines:
                        async for _ in lines:  # every watch reads through it
                            pass
    assert _clean(info.value)
