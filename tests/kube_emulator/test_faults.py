"""Fault injection: latency, dropped replies, error codes, pause and partition."""

from __future__ import annotations

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, create, lease

pytestmark = pytest.mark.anyio


def _two_clients() -> KubeEmulator:
    emulator = KubeEmulator()
    emulator.add_token("token-a", "a", groups=("system:masters",))
    emulator.add_token("token-b", "b", groups=("system:masters",))
    return emulator


async def test_delay_before_commit() -> None:
    """A pre-commit delay slows the request; if the client gives up first, nothing commits."""
    emulator = KubeEmulator()
    emulator.faults.delay(3, verbs={"create"})
    async with client(emulator, timeout=10) as patient, client(emulator, timeout=1) as hasty:
        started = anyio.current_time()
        await create(patient, "slow")
        assert anyio.current_time() - started == pytest.approx(3, abs=0.1)
        with pytest.raises(httpx.ReadTimeout):
            await hasty.post(LEASES, json=lease("abandoned"))
    assert emulator.get_lease("abandoned") is None


async def test_delay_after_commit_leaves_the_outcome_unknown() -> None:
    """A post-commit delay longer than the client's timeout: ReadTimeout, but the write is in."""
    emulator = KubeEmulator()
    emulator.faults.delay(5, after_commit=True, verbs={"create"})
    async with client(emulator, timeout=1) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(LEASES, json=lease("a"))
    assert emulator.get_lease("a") is not None


async def test_drop_reply_commits_then_disconnects() -> None:
    """drop_reply: the write commits and the client sees a disconnect without a response."""
    emulator = KubeEmulator()
    emulator.faults.drop_reply(verbs={"create"}, times=1)
    async with client(emulator) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(LEASES, json=lease("a"))
        again = await http.post(LEASES, json=lease("a"))
    assert again.status_code == 409
    assert emulator.get_lease("a") is not None


async def test_error_after_commit_hides_a_successful_write() -> None:
    """fail(500, after_commit=True): the client sees 500 though the update happened."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me")
        emulator.faults.fail(500, after_commit=True, verbs={"update"}, times=1)
        created["spec"]["renewTime"] = "2026-01-01T00:00:00.000000Z"
        response = await http.put(f"{LEASES}/a", json=created)
    assert response.status_code == 500
    stored = emulator.get_lease("a")
    assert stored is not None
    assert stored["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"


async def test_error_before_commit_changes_nothing() -> None:
    """An injected 409 / 503 without after_commit answers before anything is written."""
    emulator = KubeEmulator()
    emulator.faults.fail(409, verbs={"create"}, times=1)
    emulator.faults.fail(503, verbs={"create"}, times=1)
    async with client(emulator) as http:
        conflict = await http.post(LEASES, json=lease("a"))
        unavailable = await http.post(LEASES, json=lease("a"))
        assert emulator.get_lease("a") is None
        created = await http.post(LEASES, json=lease("a"))
    assert conflict.status_code == 409
    assert conflict.json()["reason"] == "Conflict"
    assert unavailable.status_code == 503
    assert created.status_code == 201


async def test_faults_target_one_client_by_token() -> None:
    """A fault with token= affects only the client sending that token."""
    emulator = _two_clients()
    emulator.faults.fail(503, token="token-a")
    async with client(emulator, "token-a") as a, client(emulator, "token-b") as b:
        assert (await a.get(LEASES)).status_code == 503
        assert (await b.get(LEASES)).status_code == 200


async def test_fault_filters_times_and_remove() -> None:
    """verbs, name and times narrow a fault; remove() ends it."""
    emulator = KubeEmulator()
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "x"}})
    named = emulator.faults.fail(500, verbs={"get"}, name="x")
    counted = emulator.faults.fail(504, verbs={"list"}, times=2)
    async with client(emulator) as http:
        assert (await http.get(f"{LEASES}/x")).status_code == 500
        assert (await http.get(f"{LEASES}/y")).status_code == 404
        codes = [(await http.get(LEASES)).status_code for _ in range(3)]
        emulator.faults.remove(named)
        assert (await http.get(f"{LEASES}/x")).status_code == 200
    assert codes == [504, 504, 200]
    assert counted.times == 0


async def test_pause_hangs_requests_until_resumed() -> None:
    """pause(): requests hang until resume(); a request timeout ends a paused one in 504."""
    emulator = KubeEmulator()
    results: list[int] = []
    emulator.faults.pause()
    async with client(emulator, timeout=None) as http, anyio.create_task_group() as group:

        async def request() -> None:
            results.append((await http.get(LEASES)).status_code)

        group.start_soon(request)
        bounded = await http.get(LEASES, params={"timeout": "2s"})
        assert results == []
        emulator.faults.resume()
    assert bounded.status_code == 504
    assert results == [200]


async def test_partition_times_out_one_client() -> None:
    """partition(token): that client's requests time out, others work; heal() restores it."""
    emulator = _two_clients()
    emulator.faults.partition("token-a")
    async with client(emulator, "token-a", timeout=2) as a, client(emulator, "token-b") as b:
        started = anyio.current_time()
        with pytest.raises(httpx.ReadTimeout):
            await a.get(LEASES)
        assert anyio.current_time() - started == pytest.approx(2, abs=0.1)
        assert (await b.get(LEASES)).status_code == 200
        emulator.faults.heal("token-a")
        assert (await a.get(LEASES)).status_code == 200


async def test_clear_removes_everything() -> None:
    """faults.clear() removes errors, resumes and heals."""
    emulator = KubeEmulator()
    emulator.faults.fail(500)
    emulator.faults.pause()
    emulator.faults.partition()
    emulator.faults.clear()
    async with client(emulator, timeout=1) as http:
        assert (await http.get(LEASES)).status_code == 200


def test_fault_validation_and_repr_hide_the_token() -> None:
    """fail() rejects unsupported codes; a Fault's repr never shows its token."""
    emulator = KubeEmulator()
    with pytest.raises(ValueError, match="status must be one of"):
        emulator.faults.fail(418)
    fault = emulator.faults.fail(503, token="s3cr3t-token")
    assert "s3cr3t" not in repr(fault)
    assert "s3cr3t" not in repr(emulator.add_token("s3cr3t-token", "u"))


async def test_html_error_page_from_a_proxy() -> None:
    """fail(502, html=True) answers an HTML page, not a Status, as a proxy in front does."""
    emulator = KubeEmulator()
    emulator.faults.fail(502, html=True, times=1)
    async with client(emulator) as http:
        response = await http.get(LEASES)
    assert response.status_code == 502
    assert response.headers["content-type"] == "text/html"
    assert response.text.startswith("<html>")


async def test_default_server_timeout_is_60_seconds() -> None:
    """Without ?timeout=, a paused request ends in 504 after the server's 60 s default."""
    emulator = KubeEmulator()
    emulator.faults.pause()
    async with client(emulator, timeout=None) as http:
        started = anyio.current_time()
        response = await http.get(LEASES)
        elapsed = anyio.current_time() - started
    assert response.status_code == 504
    assert elapsed == pytest.approx(60, abs=0.5)
