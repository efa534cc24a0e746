"""The in-process unary request seam: the backends' request code, served without sockets.

:class:`InProcessUnary` is a :class:`trio_lease._http.Unary` that hands each request to the
emulator's handler in the calling task, so it works under virtual time. A backend given
``emulator.transport()`` sends its unary requests here (the transport is a
:class:`trio_lease._http.CarriesUnary`), and everything above the seam (credentials and the
retry after a 401, the time bound, the body cap, reading and mapping the reply) is the
production code. It keeps the seam's contract as the lean HTTP/1.1 client does on a socket:
``Host`` and ``Content-Length`` added, a head HTTP cannot carry refused before sending
(:func:`trio_lease._http.request_head`), the body read through the one cap
(:class:`trio_lease._http.CappedBody`), ``Content-Length`` in the reply's headers, and a
dropped reply raised as the seam's ``MalformedReply`` of a closed connection.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from ..._http import CappedBody, Headers, Outgoing, Reply, ServerURL, Unary
from ..._http_errors import MalformedReply
from ..._wire import MAX_BODY_BYTES
from ._api import handle
from ._cluster import Cluster
from ._http import DropReply, Request

__all__ = ["InProcessUnary"]


class InProcessUnary(Unary):
    """Unary requests to ``url``, answered by ``cluster``'s handler in the calling task."""

    #: The emulator that answers.
    cluster: Cluster

    def __init__(self, cluster: Cluster, url: str, *, max_body: int = MAX_BODY_BYTES) -> None:
        self.cluster = cluster
        self.url = ServerURL.parse(url)
        self._max_body = max_body

    def __repr__(self) -> str:
        return f"<InProcessUnary {self.url.origin}>"

    async def _exchange(self, out: Outgoing) -> Reply:
        """Answer ``out`` in-process, as the server would have read it off a socket."""
        path, _, query = (self.url.prefix + out.target).partition("?")
        params = parse_qsl(query, keep_blank_values=True)
        sent = out.sent
        request = Request(
            out.method,
            path,
            dict(params),
            {name.lower(): value for name, value in sent},
            out.body or b"",
            [(name.lower(), value) for name, value in sent],
            params,
        )
        try:
            response = await handle(self.cluster, request)
        except DropReply:
            raise MalformedReply("the server closed the connection without a reply") from None
        if response.stream is not None:
            await response.stream.aclose()
            raise RuntimeError("a watch is a stream, not a unary request: send it through httpx")
        capped = CappedBody(self._max_body, out)
        capped.add(response.body)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        raw.append((b"Content-Length", str(len(response.body)).encode()))
        return Reply(response.status, Headers(raw), capped.content)

    async def aclose(self) -> None:
        """Nothing to release: no connections."""
