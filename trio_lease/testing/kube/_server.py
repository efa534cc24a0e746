"""The emulator on a real socket: HTTP/1.1 (h11) over TLS (anyio), for multi-process tests.

Each connection is served by one task: keep-alive, ``Content-Length`` bodies, and chunked
transfer encoding for watch streams. TLS uses a CA made by ``trustme`` when the server starts
(the server certificate covers ``127.0.0.1``, ``::1`` and ``localhost``); plain HTTP on request.
:meth:`KubeServer.write_kubeconfig` writes a kubeconfig (mode 0600, since it holds the token)
that kubectl, the official Python client and our backend can use.

A dropped reply closes the connection without answering; a cut watch closes it without the
final chunk, as a network failure does. Only loopback use is intended.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import os
import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
import h11
import yaml
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSListener

from ..._exceptions import LeaseConfigError
from ..._outcome import Outcome
from ._api import handle
from ._cluster import Cluster
from ._http import MAX_REQUEST_BODY, DropReply, Request, Response
from ._watch import WatchCut

__all__ = ["KubeServer", "serve"]

logger = logging.getLogger(__name__)



@dataclasses.dataclass
class KubeServer:
    """A running emulator server: its URL and CA, and a kubeconfig writer."""

    host: str
    port: int
    tls: bool
    ca_pem: bytes

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def kubeconfig(
        self, token: str | None = None, namespace: str = "default", *,
        impersonate: str | None = None, impersonate_groups: Iterable[str] = (),
    ) -> dict[str, Any]:
        """A kubeconfig document (as a dict) for this server.

        ``impersonate`` and ``impersonate_groups`` become the user's ``as`` and ``as-groups``,
        which clients send as ``Impersonate-User`` and ``Impersonate-Group`` headers.
        """
        name = "trio-lease-emulator"
        cluster: dict[str, Any] = {"server": self.url}
        if self.tls:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        user: dict[str, Any] = {"token": token} if token else {}
        if impersonate:
            user["as"] = impersonate
        if impersonate_groups:
            user["as-groups"] = list(impersonate_groups)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
            ],
            "current-context": name,
        }

    def write_kubeconfig(
        self, path: str | os.PathLike[str], token: str | None = None, namespace: str = "default",
        *, impersonate: str | None = None, impersonate_groups: Iterable[str] = (),
    ) -> Path:
        """Write :meth:`kubeconfig` to ``path`` with mode 0600."""
        target = Path(path)
        document = self.kubeconfig(
            token, namespace, impersonate=impersonate, impersonate_groups=impersonate_groups
        )
        text = yaml.safe_dump(document, sort_keys=False)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle_:
            handle_.write(text)
        return target


def _phrase(response: Response) -> bytes:
    try:
        return HTTPStatus(response.status).phrase.encode()
    except ValueError:
        return b""


async def _send(conn: h11.Connection, stream: ByteStream, event: Any) -> None:
    data = conn.send(event)
    if data:
        await stream.send(data)


async def _next_request(conn: h11.Connection, stream: ByteStream) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:  # noqa: ASYNC913  each pass takes one h11 event
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                data = b""
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            # Keep one byte past the limit, so the handler answers 413 (``limitedReadBody``);
            # the rest is read and dropped, so the connection stays usable.
            body += event.data[: MAX_REQUEST_BODY + 1 - len(body)]
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = head.target.decode("latin-1")
            path, _, query = target.partition("?")
            listed = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in head.headers]
            params = parse_qsl(query, keep_blank_values=True)
            return Request(
                head.method.decode(), path, dict(params), dict(listed), bytes(body), listed,
                params,
            )
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _serve_connection(emulator: Cluster, stream: ByteStream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    async with stream:
        try:
            while True:
                request = await _next_request(conn, stream)
                if request is None:
                    return
                try:
                    response = await handle(emulator, request)
                except DropReply:
                    return
                except Exception:
                    # A bug in the emulator must not take the whole server down: log it and
                    # drop this connection, so the test that hit it sees a failure.
                    logger.exception("emulator request handler failed")
                    return
                headers = [(k.encode(), v.encode()) for k, v in response.headers]
                if response.stream is None:
                    headers.append((b"Content-Length", str(len(response.body)).encode()))
                    head = h11.Response(
                        status_code=response.status, headers=headers, reason=_phrase(response)
                    )
                    # One write, as the API server's net/http does for a reply that fits its
                    # buffers (head and body flushed together when the handler returns), so a
                    # client is not woken once for the head and again for the body. A larger
                    # reply the real server writes in pieces; clients read either way.
                    events = (head, h11.Data(data=response.body), h11.EndOfMessage())
                    await stream.send(b"".join(conn.send(event) or b"" for event in events))
                else:
                    headers.append((b"Transfer-Encoding", b"chunked"))
                    head = h11.Response(
                        status_code=response.status, headers=headers, reason=_phrase(response)
                    )
                    try:  # the stream is closed also when the client is gone before its head
                        await _send(conn, stream, head)
                        async for chunk in response.stream:
                            await _send(conn, stream, h11.Data(data=chunk))
                    except WatchCut:
                        return
                    finally:
                        await response.stream.aclose()  # not shielded: closes memory streams
                    await _send(conn, stream, h11.EndOfMessage())
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError,
                anyio.EndOfStream, ssl.SSLError, OSError):
            return


#: What the usual handshake failures mean, by OpenSSL's reason.
_HANDSHAKE_HINTS = {
    "HTTP_REQUEST": "a plain-HTTP request on the HTTPS port (use https://)",
    "TLSV1_ALERT_UNKNOWN_CA": (
        "the client does not trust the emulator's CA (TLSV1_ALERT_UNKNOWN_CA; the CA is the "
        "kubeconfig's certificate-authority-data)"
    ),
}


class _QuietTLSListener(TLSListener):
    """A TLS listener that logs a failed handshake as one line, not a traceback.

    A plain-HTTP client, one that does not trust the emulator's CA or one that hangs up
    mid-handshake is the client's problem: the line says which, and the server goes on.
    """

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: Any) -> None:
        peer = ""
        with contextlib.suppress(Exception):  # read before closing: a closed socket has none
            address = stream.extra(SocketAttribute.remote_address)
            peer = f" from {address[0]}:{address[1]}"
        await anyio.aclose_forcefully(stream)
        if isinstance(exc, anyio.get_cancelled_exc_class()) or not isinstance(exc, Exception):
            raise exc
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        if isinstance(exc, anyio.EndOfStream | anyio.BrokenResourceError):
            reason = "the client closed the connection during the handshake"
        reason = _HANDSHAKE_HINTS.get(str(reason), str(reason))
        logger.warning("TLS handshake%s failed: %s", peer, reason)


@asynccontextmanager
async def serve(
    emulator: Cluster, host: str = "127.0.0.1", port: int = 0, *, tls: bool = True
) -> AsyncIterator[KubeServer]:
    """Listen on ``host:port`` and serve ``emulator`` until the block exits."""
    try:
        import trustme  # the emulator's CA; an optional dependency
    except ImportError:
        raise LeaseConfigError(
            "serving the Kubernetes emulator needs the 'trustme' package: "
            "pip install 'trio_lease[emulator]'"
        ) from None
    ca = trustme.CA()
    listener: Any = await anyio.create_tcp_listener(local_host=host, local_port=port)
    bound_port = listener.extra(SocketAttribute.local_port)
    if tls:
        cert = ca.issue_cert("127.0.0.1", "::1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        context.set_alpn_protocols(["http/1.1"])
        listener = _QuietTLSListener(listener, context, standard_compatible=False)

    async def on_connection(stream: ByteStream) -> None:
        await _serve_connection(emulator, stream)

    server = KubeServer(host, bound_port, tls, ca.cert_pem.bytes())
    outcome = Outcome()  # the block's own error bare, also after the caller's deadline
    with outcome.settled():
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, on_connection)
            group.start_soon(emulator.establisher.run, emulator.settle_crds)
            try:
                with outcome.body():
                    yield server
            finally:
                group.cancel_scope.cancel()
