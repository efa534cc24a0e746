"""The emulator on a real loopback socket: HTTPS with a fresh CA, HTTP/1.1, chunked watch."""

from __future__ import annotations

import json
import os
import ssl
import stat
from pathlib import Path

import anyio
import anyio.abc
import h11
import httpx
import pytest
import yaml

from trio_lease.testing.kube import KubeEmulator, KubeServer
from trio_lease.testing.kube._server import _serve_connection

from ._helpers import LEASES, lease
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio


def _client(server: KubeServer, token: str | None = None) -> httpx.AsyncClient:
    verify: ssl.SSLContext | bool = False
    if server.tls:
        verify = ssl.create_default_context(cadata=server.ca_pem.decode())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=server.url, verify=verify, headers=headers, timeout=10)


async def test_https_server_verifies_with_its_ca() -> None:
    """The HTTPS server's certificate verifies against the CA it generated; CRUD works."""
    emulator = KubeEmulator()
    async with emulator.serve() as server, _client(server) as http:
        assert server.url.startswith("https://127.0.0.1:")
        created = await http.post(LEASES, json=lease("a", holderIdentity="x"))
        got = await http.get(f"{LEASES}/a")
    assert created.status_code == 201
    assert got.json() == created.json()


async def test_untrusted_client_fails_tls() -> None:
    """A client that does not trust the emulator's CA fails the TLS handshake."""
    emulator = KubeEmulator()
    async with emulator.serve() as server, httpx.AsyncClient(base_url=server.url) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(LEASES)


async def test_plain_http_option() -> None:
    """tls=False serves plain HTTP."""
    emulator = KubeEmulator()
    async with emulator.serve(tls=False) as server, _client(server) as http:
        assert server.url.startswith("http://")
        response = await http.get(LEASES)
    assert response.status_code == 200


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    """Three requests on one TCP connection get three complete responses (keep-alive)."""
    emulator = KubeEmulator()
    statuses: list[int] = []
    async with (
        emulator.serve(tls=False) as server,
        await anyio.connect_tcp("127.0.0.1", server.port) as stream,
    ):
        conn = h11.Connection(h11.CLIENT)
        for path in (LEASES, f"{LEASES}/missing", LEASES):
            request = h11.Request(method="GET", target=path, headers=[("Host", "x")])
            await stream.send(conn.send(request) + conn.send(h11.EndOfMessage()))
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    with anyio.fail_after(5):
                        conn.receive_data(await stream.receive())
                elif isinstance(event, h11.Response):
                    statuses.append(event.status_code)
                elif isinstance(event, h11.EndOfMessage):
                    break
            conn.start_next_cycle()
    assert statuses == [200, 404, 200]


class _RecordingStream(anyio.abc.ByteStream):
    """A connection fed from a list of request bytes that records each write separately."""

    def __init__(self, incoming: list[bytes]) -> None:
        self.incoming = incoming
        self.writes: list[bytes] = []

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.incoming:
            raise anyio.EndOfStream
        return self.incoming.pop(0)

    async def send(self, item: bytes) -> None:
        self.writes.append(item)

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_reply_is_one_write_as_the_api_servers_net_http_sends_it() -> None:
    """A unary reply's head and body go out in one write, not one for each.

    The API server answers through Go's net/http, which buffers a handler's writes
    (``bufferBeforeChunkingSize`` and the connection's 4 KB ``bufio.Writer`` in
    ``net/http/server.go``) and flushes head and body together when the handler returns. A
    client reading our emulator should not be woken twice per reply when the real server wakes
    it once (the benchmarks' CPU per renewal counts those wake-ups).
    """
    emulator = KubeEmulator()
    emulator.apply(lease("a", holderIdentity="x"))
    request = h11.Connection(h11.CLIENT)
    asked = request.send(
        h11.Request(method="GET", target=f"{LEASES}/a", headers=[("Host", "x")])
    )
    stream = _RecordingStream([asked + (request.send(h11.EndOfMessage()) or b"")])
    await _serve_connection(emulator, stream)
    assert len(stream.writes) == 1
    reply = h11.Connection(h11.CLIENT)
    reply.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    reply.send(h11.EndOfMessage())
    reply.receive_data(stream.writes[0])
    head, body, end = reply.next_event(), reply.next_event(), reply.next_event()
    assert isinstance(head, h11.Response) and head.status_code == 200
    assert isinstance(body, h11.Data) and json.loads(body.data)["spec"]["holderIdentity"] == "x"
    assert isinstance(end, h11.EndOfMessage)


class _GoneClient(_RecordingStream):
    """A client that sent its request and hung up: every write fails."""

    async def send(self, item: bytes) -> None:
        raise anyio.BrokenResourceError


async def test_a_watch_whose_client_left_before_its_head_is_closed() -> None:
    """A watch whose client is gone before the reply's head could be written is closed (its
    event buffer released), not left for the garbage collector to warn about."""
    emulator = KubeEmulator()
    request = h11.Connection(h11.CLIENT)
    asked = request.send(
        h11.Request(method="GET", target=f"{LEASES}?watch=1", headers=[("Host", "x")])
    )
    ended = request.send(h11.EndOfMessage()) or b""
    await _serve_connection(emulator, _GoneClient([asked + ended]))
    (watch,) = emulator.watches
    assert watch.closed


async def test_watch_is_chunked_and_streams_events() -> None:
    """A watch over the network is a chunked stream of events, ended after timeoutSeconds."""
    emulator = KubeEmulator()
    events: list[str] = []
    async with (
        emulator.serve() as server,
        _client(server) as http,
        anyio.create_task_group() as group,
    ):

        async def watch() -> None:
            params = {"watch": "1", "timeoutSeconds": "2"}
            async with http.stream("GET", LEASES, params=params) as response:
                assert response.headers["transfer-encoding"] == "chunked"
                async for line in response.aiter_lines():
                    events.append(json.loads(line)["type"])

        group.start_soon(watch)
        await anyio.sleep(0.5)
        await http.post(LEASES, json=lease("a"))
    assert events == ["ADDED"]


async def test_network_faults_drop_and_cut() -> None:
    """Over the network, drop_reply closes without a response and cut_watches breaks a watch."""
    emulator = KubeEmulator()
    emulator.faults.drop_reply(verbs={"create"}, times=1)
    async with emulator.serve() as server, _client(server) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(LEASES, json=lease("a"))
        assert emulator.get_lease("a") is not None
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("GET", LEASES, params={"watch": "1"}) as response:
                async for _ in response.aiter_lines():
                    emulator.cut_watches()


async def test_kubeconfig_is_private_and_complete(tmp_path: Path) -> None:
    """write_kubeconfig: mode 0600, server URL, CA data, token and namespace."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        path = server.write_kubeconfig(tmp_path / "config", token="tok", namespace="jobs")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == server.url
    assert "certificate-authority-data" in config["clusters"][0]["cluster"]
    assert config["users"][0]["user"] == {"token": "tok"}
    assert config["contexts"][0]["context"]["namespace"] == "jobs"
