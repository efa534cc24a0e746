"""The in-process httpx transport: no sockets, no threads, safe under virtual time.

``httpx.AsyncClient(transport=emulator.transport(), base_url="https://kube.test")`` sends every
request straight to the emulator's handler. The transport also carries the unary request seam
(:meth:`KubeTransport.unary`, :mod:`._unary`): a backend given the transport sends its unary
requests there, through its production request code, and only its watches through httpx.

The transport also plays the network: it honours the client's read timeout
(``httpx.ReadTimeout`` when a paused or partitioned request does not answer in time, per chunk
for watches), turns a dropped reply into ``httpx.RemoteProtocolError`` and an abruptly cut
watch into the error httpx raises for an incomplete chunked body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx

from ..._http import Unary
from ..._wire import MAX_BODY_BYTES
from ._api import handle
from ._cluster import Cluster
from ._http import DropReply, Request
from ._unary import InProcessUnary
from ._watch import WatchCut, WatchStream

__all__ = ["KubeTransport"]


def _read_timeout(request: httpx.Request) -> float | None:
    timeouts = request.extensions.get("timeout") or {}
    value = timeouts.get("read")
    return None if value is None else float(value)


class _WatchBody(httpx.AsyncByteStream):
    def __init__(self, stream: WatchStream, request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def _next(self) -> bytes | None:
        timeout = _read_timeout(self._request)
        try:
            with anyio.fail_after(timeout):
                return await self._stream.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            await self._stream.aclose()
            raise httpx.ReadTimeout("timed out reading the watch", request=self._request) from None
        except WatchCut:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                "(incomplete chunked read)",
                request=self._request,
            ) from None

    def __aiter__(self) -> AsyncIterator[bytes]:
        # An iterator object, not an async generator: httpx leaves it unfinished when its
        # reader stops early, and an unfinished async generator is the GC's to finalize.
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._next()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class KubeTransport(httpx.AsyncBaseTransport):
    """Serves httpx requests from a :class:`KubeEmulator` in the calling task."""

    #: The emulator served.
    emulator: Cluster

    def __init__(self, emulator: Cluster) -> None:
        self.emulator = emulator

    def unary(self, url: str, *, max_body: int = MAX_BODY_BYTES) -> Unary:
        """The in-process unary seam to ``url`` (:class:`trio_lease._http.CarriesUnary`)."""
        return InProcessUnary(self.emulator, url, max_body=max_body)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        params = list(request.url.params.multi_items())
        listed = [(k.lower(), v) for k, v in request.headers.multi_items()]
        req = Request(
            request.method, request.url.path, dict(params), dict(listed), body, listed, params
        )
        try:
            with anyio.fail_after(_read_timeout(request)):
                response = await handle(self.emulator, req)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out waiting for the emulator", request=request) from None
        except DropReply:
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            ) from None
        if response.stream is not None:
            return httpx.Response(
                response.status, headers=response.headers,
                stream=_WatchBody(response.stream, request), request=request,
            )
        return httpx.Response(
            response.status, headers=response.headers, content=response.body, request=request
        )
