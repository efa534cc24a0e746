"""A server that speaks another protocol than the URL says: messages say what happened.

Real servers on loopback: Python's HTTP server in plain HTTP, the same behind TLS (a trustme
CA). An ``https://`` URL to the plain server said "ConnectError" (etcd) or "could not connect"
(Kubernetes); an ``http://`` URL to the TLS server "RemoteProtocolError"; an HTTP server that is
not etcd "UNIMPLEMENTED, HTTP 501". Each now names the server and what to change.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conftest import REAL_LOOPS
from tests.etcd_server import EtcdCluster
from trio_lease import LeaseBackend, LeaseError
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes import KubernetesBackend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time on asyncio, asyncio on uvloop, and trio: the servers are real sockets."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


class _Quiet(http.server.BaseHTTPRequestHandler):
    """Python's HTTP server as it is (501 to a POST, 404 to a GET), without its log lines."""

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(context: ssl.SSLContext | None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def plain_port() -> Iterator[int]:
    """The port of a plain-HTTP server on 127.0.0.1."""
    yield from _serve(None)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_port(ca: trustme.CA) -> Iterator[int]:
    """The port of an HTTPS server on 127.0.0.1 (certificate from ``ca``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    yield from _serve(context)


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


async def _get_error(backend: LeaseBackend) -> str:
    """The text of the LeaseError a read of ``backend`` raises (the backend closed after)."""
    try:
        with pytest.raises(LeaseError) as caught:
            await backend.get("job")
    finally:
        await backend.aclose()
    return str(caught.value)


async def _etcd_error(endpoint: str, **options: Any) -> str:
    return await _get_error(
        EtcdBackend([endpoint], connect_timeout=5, request_timeout=5, **options)
    )


async def _kube_error(server: str, **options: Any) -> str:
    section = {"server": server, "token": "t", "namespace": "default", **options}
    return await _get_error(KubernetesBackend.from_config(section))


async def test_etcd_https_to_a_plain_http_server_says_use_http(plain_port: int) -> None:
    """https:// on a plain-HTTP port: the handshake got no TLS; use http:// or check the port."""
    message = await _etcd_error(f"https://127.0.0.1:{plain_port}")
    assert f"the server at 127.0.0.1:{plain_port} answered the TLS handshake with" in message
    assert "use http://" in message and "nothing was sent" in message


async def test_etcd_http_to_a_tls_server_says_use_https(tls_port: int, ca_file: Path) -> None:
    """http:// on a TLS port: the server closed without a reply, as TLS servers do; use https."""
    message = await _etcd_error(f"http://127.0.0.1:{tls_port}")
    assert f"the server at 127.0.0.1:{tls_port} closed the connection without a reply" in message
    assert "use https://" in message
    # And the fix it names works: the same server over https:// with its CA answers (a 501:
    # it is no etcd, which is said next).
    fixed = await _etcd_error(f"https://127.0.0.1:{tls_port}", ca_file=str(ca_file))
    assert "HTTP 501" in fixed


async def test_etcd_at_an_http_server_that_is_not_etcd_says_so(plain_port: int) -> None:
    """A plain HTTP server answering 501 without etcd's JSON: "not etcd's gRPC gateway"."""
    message = await _etcd_error(f"http://127.0.0.1:{plain_port}")
    assert "UNIMPLEMENTED, HTTP 501" in message
    assert "not etcd's gRPC gateway" in message and "port 2379 by default" in message


async def test_kubernetes_https_to_a_plain_http_server_says_use_http(plain_port: int) -> None:
    """A Kubernetes server URL with https:// on a plain-HTTP port: use http://, nothing sent."""
    message = await _kube_error(f"https://127.0.0.1:{plain_port}")
    assert f"the server at 127.0.0.1:{plain_port} answered the TLS handshake with" in message
    assert "use http://" in message and "outcome is unknown" not in message


async def test_kubernetes_http_to_a_tls_server_says_use_https(tls_port: int) -> None:
    """A Kubernetes server URL with http:// on a TLS port: it speaks TLS, use https://."""
    message = await _kube_error(f"http://127.0.0.1:{tls_port}")
    assert f"the server at 127.0.0.1:{tls_port} closed the connection without a reply" in message
    assert "use https://" in message


def test_a_tls_alert_where_a_status_line_belongs_is_named() -> None:
    """The HTTP/1.1 reader names a TLS record (an alert) in place of a reply: use https://."""
    from trio_lease._connect import reply_problem
    from trio_lease._reply import ReplyError, ReplyReader

    reader = ReplyReader()
    reader.receive_data(b"\x15\x03\x03\x00\x02\x02\x46")  # a TLS alert: protocol_version
    with pytest.raises(ReplyError) as caught:
        reader.next_event()
    problem = reply_problem(caught.value, "http://127.0.0.1:6443")
    assert problem is not None and "answered in TLS" in problem and "use https://" in problem


#: What the message says when the server closed the connection on the ClientHello.
CLOSED_IN_HANDSHAKE = "closed the connection during the TLS handshake"


async def test_etcd_https_to_a_real_plain_etcd_says_it_closed_in_the_handshake(
    etcd_server: EtcdCluster,
) -> None:
    """https:// on a real plain-HTTP etcd (it closes on a ClientHello): likely plain, use http."""
    plain = etcd_server.endpoints[0]
    port = plain.rsplit(":", 1)[1]
    message = await _etcd_error("https://" + plain.split("://", 1)[1])
    assert f"the server at 127.0.0.1:{port} {CLOSED_IN_HANDSHAKE}" in message
    assert "a plain-HTTP server does this" in message and "use http://" in message
    assert "Traceback" not in message and "ConnectFailed" not in message


async def test_kubernetes_https_to_the_plain_http_emulator_says_it_closed_in_the_handshake() -> (
    None
):
    """https:// on the emulator serving plain HTTP (trio + h11 close on a ClientHello): use http."""
    from trio_lease.testing.kube import KubeEmulator

    async with KubeEmulator().serve(tls=False) as server:
        url = "https://" + server.url.split("://", 1)[1]
        message = await _kube_error(url)
    assert CLOSED_IN_HANDSHAKE in message and "a plain-HTTP server does this" in message
    assert "use http://" in message and "outcome is unknown" not in message
