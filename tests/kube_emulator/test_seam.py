"""The unary request seam on the emulator: the production request code runs in-process.

A backend given ``emulator.transport()`` sends its unary requests through the transport's own
seam (:class:`~trio_lease.testing.kube._unary.InProcessUnary`), with the code above the seam
that runs in production: the retry after a 401 and the body cap are exercised here on virtual
time. On real sockets, the lean HTTP/1.1 client, the httpx adapter and the in-process seam give
the same reply to the same request, and the emulator records the same request from the lean
client and from the in-process seam.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from trio_lease import BackendProtocolError, LeaseRecord
from trio_lease._http import HttpxUnary, Reply, Unary
from trio_lease._http_errors import MalformedReply, NotEncodable
from trio_lease._lean_http import LeanClient
from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend, _client
from trio_lease.testing.kube import KubeEmulator
from trio_lease.testing.kube._unary import InProcessUnary

from ._helpers import LEASES, lease

pytestmark = pytest.mark.anyio

SERVER = "https://kube.test"


def _backend(emulator: KubeEmulator, **credentials: Any) -> KubernetesBackend:
    config = ClusterConfig(server=SERVER, credentials=Credentials(**credentials))
    return KubernetesBackend(config, transport=emulator.transport())


async def test_the_emulator_transport_gives_the_client_its_in_process_seam() -> None:
    """The pooled client for the emulator's transport sends unary requests in-process."""
    emulator = KubeEmulator()
    lease_ = _client.acquire_client(ClusterConfig(server=SERVER), emulator.transport())
    try:
        assert isinstance(lease_._entry.unary, InProcessUnary)
        assert lease_._entry.lean is None
    finally:
        await lease_.release()


async def test_a_401_is_retried_once_with_the_token_read_again(tmp_path: Path) -> None:
    """After a 401 the backend reads its token file again and resends, through the seam."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("first", "u", groups=("system:masters",))
    token_file = tmp_path / "token"
    token_file.write_text("first")
    async with _backend(emulator, token_file=token_file) as backend:
        made = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        emulator.add_token("second", "u", groups=("system:masters",))
        token_file.write_text("second")
        emulator.expire_token("first")
        got = await backend.get("job")
    assert got is not None and got.version == made.version
    assert [(r.method, r.status) for r in emulator.requests] == [
        ("POST", 201), ("GET", 401), ("GET", 200)
    ]
    # The seam's requests, not httpx's (httpx would add its own Accept-Encoding).
    assert all("accept-encoding" not in r.headers for r in emulator.requests)


async def test_a_reply_over_the_body_cap_is_a_protocol_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seam refuses a reply body over the client's cap, on the in-process emulator too."""
    emulator = KubeEmulator()
    async with _backend(emulator) as backend:
        await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
    size = len(json.dumps(emulator.get_lease("job"), separators=(",", ":")))
    monkeypatch.setattr(_client, "MAX_BODY", size - 1)
    async with _backend(emulator) as backend:
        with pytest.raises(BackendProtocolError, match=f"over {size - 1:,} bytes"):
            await backend.get("job")
    monkeypatch.setattr(_client, "MAX_BODY", size)
    async with _backend(emulator) as backend:
        got = await backend.get("job")
    assert got is not None and got.holder == "me"


async def test_a_dropped_reply_is_a_closed_connection_and_a_watch_is_refused() -> None:
    """In-process, a dropped reply raises what a socket gives; a watch is not a unary request."""
    emulator = KubeEmulator()
    emulator.faults.drop_reply(verbs={"list"}, times=1)
    seam = emulator.transport().unary(SERVER)
    with pytest.raises(MalformedReply, match="without a reply"):
        await seam.request("GET", LEASES)
    with pytest.raises(RuntimeError, match="stream"):
        await seam.request("GET", f"{LEASES}?watch=1")
    assert [r.status for r in emulator.requests] == [0, 200]
    assert all(watch.closed for watch in emulator.watches)


async def test_a_header_http_cannot_carry_is_refused_before_it_reaches_the_emulator() -> None:
    """The seam checks the head as the lean client does: nothing sent, the value not quoted."""
    emulator = KubeEmulator()
    seam = emulator.transport().unary(SERVER)
    with pytest.raises(NotEncodable) as caught:
        await seam.request("GET", LEASES, headers=[("Authorization", "Bearer x\r\nY: sekrit")])
    assert "sekrit" not in str(caught.value)
    assert emulator.requests == []


# -- one reply, whichever seam carries the request -----------------------------------------------


def _emulator() -> KubeEmulator:
    """A fresh emulator whose timestamps do not depend on when the test runs."""
    return KubeEmulator(wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))


async def _script(seam: Unary, emulator: KubeEmulator) -> list[tuple[int, dict[str, str], Any]]:
    """The same requests through ``seam``: (status, headers, body without uids) of each."""
    emulator.faults.fail(429, verbs={"list"}, times=1, retry_after=3)
    json_headers = [("Accept", "application/json"), ("Content-Type", "application/json")]
    # managedFields name the User-Agent unless ?fieldManager= is given, and the seams' agents
    # differ (apiserver/pkg/endpoints/handlers/create.go, managerOrUserAgent).
    created = await seam.request(
        "POST", f"{LEASES}?timeout=5s&fieldManager=seam", headers=json_headers,
        body=json.dumps(lease("a", holderIdentity="me", extra=1)).encode(),
    )
    put_body = created.json()
    put_body["spec"]["holderIdentity"] = "you"
    replies: list[Reply] = [
        created,
        await seam.request("GET", f"{LEASES}/a"),
        await seam.request("PUT", f"{LEASES}/a?fieldManager=seam", headers=json_headers,
                           body=json.dumps(put_body).encode()),
        await seam.request("GET", f"{LEASES}/missing"),
        await seam.request("POST", LEASES, headers=json_headers, body=b"{not json"),
        await seam.request("GET", LEASES),  # the injected 429, in plain text
        await seam.request("GET", "/api", headers=[("Authorization", "Bearer unknown")]),
        await seam.request("DELETE", f"{LEASES}/a"),
    ]
    results = []
    for reply in replies:
        body = reply.json() if reply.headers.get("content-type") == "application/json" else None
        text = json.dumps(body) if body is not None else reply.text
        for uid in {event.obj["metadata"]["uid"] for event in emulator.store.history}:
            text = text.replace(uid, "<uid>")
        results.append((reply.status_code, dict(reply.headers), text))
    return results


class TestOnSockets:
    """Real sockets: the lean client and httpx against ``serve()``, beside the in-process seam."""

    @pytest.fixture
    def anyio_backend(self, real_time_backend: str) -> str:
        """Real time on both loops: these tests use real sockets."""
        return real_time_backend

    @asynccontextmanager
    async def _seams(self) -> AsyncIterator[dict[str, tuple[Unary, KubeEmulator]]]:
        """Each seam on its own fresh emulator, served on loopback where it needs a socket.

        The in-process seam is given the lean client's URL, so its requests name the same host.
        """
        async with AsyncExitStack() as stack:
            seams: dict[str, tuple[Unary, KubeEmulator]] = {}
            lean_url = ""
            for name in ("lean", "httpx", "httpx-transport", "in-process"):
                emulator = _emulator()
                server = await stack.enter_async_context(emulator.serve(tls=False))
                seam: Unary
                if name == "lean":
                    lean_url = server.url
                    seam = LeanClient(server.url)
                elif name == "httpx":
                    client = await stack.enter_async_context(httpx.AsyncClient())
                    seam = HttpxUnary(client, server.url)
                elif name == "httpx-transport":
                    client = await stack.enter_async_context(
                        httpx.AsyncClient(transport=emulator.transport())
                    )
                    seam = HttpxUnary(client, server.url)
                else:
                    seam = emulator.transport().unary(lean_url)
                stack.push_async_callback(seam.aclose)
                seams[name] = (seam, emulator)
            yield seams

    async def test_every_seam_gives_the_same_reply_to_the_same_request(self) -> None:
        """Status, headers and body match across lean, httpx (socket and transport), in-process."""
        async with self._seams() as seams:
            results = {name: await _script(seam, emu) for name, (seam, emu) in seams.items()}
        expected = results.pop("lean")
        assert [status for status, _, _ in expected] == [201, 200, 200, 404, 400, 429, 401, 200]
        assert expected[0][1]["warning"] == '299 - "unknown field \\"spec.extra\\""'
        assert expected[5][1]["retry-after"] == "3"
        for name, got in results.items():
            assert got == expected, name

    async def test_in_process_requests_are_recorded_as_the_lean_clients(self) -> None:
        """The emulator sees the same method, path, query, headers from lean and in-process."""
        async with self._seams() as seams:
            recorded = {}
            for name in ("lean", "in-process"):
                seam, emulator = seams[name]
                await _script(seam, emulator)
                recorded[name] = [
                    (r.method, r.path, r.query, r.headers, r.status) for r in emulator.requests
                ]
        assert recorded["lean"] == recorded["in-process"]
        assert recorded["lean"][0][3]["content-length"].isdigit()
