"""The etcd backend under member failures, quorum loss and cancellation (real etcd)."""

from __future__ import annotations

import contextlib
import dataclasses

import anyio
import pytest

from tests.etcd_server import EtcdCluster
from trio_lease import BackendUnavailable, ConflictError, LeaseRecord
from trio_lease.backends.etcd import EtcdBackend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_dead_endpoints_are_skipped(etcd_cluster3: EtcdCluster, etcd_prefix: str) -> None:
    """With the first listed member killed, reads and writes go to the next endpoint."""
    first = etcd_cluster3.members[0]
    first.kill()
    etcd_cluster3.wait_for_leader()
    async with EtcdBackend(etcd_cluster3.endpoints, prefix=etcd_prefix) as backend:
        with anyio.fail_after(20):
            created = await backend.create(LeaseRecord(name="x", holder="a"))
            moved = dataclasses.replace(created, holder="b")
            updated = await backend.update(moved, created.version)
            read = await backend.get("x")
    assert read == updated


async def test_no_reachable_endpoint_is_unavailable(etcd_server: EtcdCluster) -> None:
    """When no endpoint accepts connections, calls raise BackendUnavailable naming each one."""
    from tests.etcd_server import free_ports

    urls = [f"http://127.0.0.1:{port}" for port in free_ports(2)]
    async with EtcdBackend(urls) as backend:
        with pytest.raises(BackendUnavailable) as info:
            await backend.create(LeaseRecord(name="x"))
    assert all(url in str(info.value) for url in urls)


async def test_quorum_loss_makes_writes_unknown_and_a_reread_resolves_them(
    etcd_cluster3: EtcdCluster, etcd_prefix: str
) -> None:
    """Without quorum a write fails as BackendUnavailable; after recovery a read tells the truth."""
    async with EtcdBackend(etcd_cluster3.endpoints, prefix=etcd_prefix) as backend:
        with anyio.fail_after(20):
            created = await backend.create(LeaseRecord(name="x", holder="a", fencing_token=1))
        survivor = etcd_cluster3.members[2]
        for member in etcd_cluster3.members[:2]:
            member.kill()
        attempted = dataclasses.replace(created, holder="b", fencing_token=2)
        # Bounded like the core bounds it: a cancelled or failed write is an unknown outcome.
        outcome = "cancelled"
        with anyio.move_on_after(3):
            try:
                await backend.update(attempted, created.version)
            except BackendUnavailable:
                outcome = "unavailable"
            else:
                outcome = "committed without quorum"
        assert outcome in {"cancelled", "unavailable"}
        assert survivor.alive
        for member in etcd_cluster3.members[:2]:
            member.start()
        etcd_cluster3.wait_for_leader()
        with anyio.fail_after(20):
            truth = await backend.get("x")
        assert truth is not None
        # Either the write never landed or it did, completely; nothing in between.
        assert (truth.holder, truth.fencing_token) in {("a", 1), ("b", 2)}
        if truth.version == created.version:
            assert truth.holder == "a"
        with anyio.fail_after(20):
            again = await backend.update(dataclasses.replace(truth, holder="c"), truth.version)
        assert again.holder == "c"


async def test_cancelled_write_leaves_the_client_usable(
    etcd_server: EtcdCluster, etcd_prefix: str
) -> None:
    """A write cancelled mid-flight is abandoned cleanly; the next calls work and see one state.

    A cancelled write's outcome is unknown: sent, it may still be applied after the next read
    (etcd orders the streams of one connection only by when it commits them), so the next write
    may meet it as a conflict. That is the right answer, and a re-read then writes.
    """
    async with EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix) as backend:
        created = await backend.create(LeaseRecord(name="x", holder="a"))
        late = 0  # conflicts with a cancelled write that landed after the read
        for delay in (0, 0.0005, 0.002, 0.01):
            current = await backend.get("x")
            assert current is not None
            try:
                with anyio.move_on_after(delay), contextlib.suppress(BackendUnavailable):
                    # Cancelled locally, or refused by etcd once the Grpc-Timeout we sent ran out.
                    new = dataclasses.replace(current, holder=f"d{delay}")
                    await backend.update(new, current.version)
            except ConflictError:
                late += 1
        for _ in range(5):  # each cancelled write can land late once
            final = await backend.get("x")
            assert final is not None
            assert final.holder == "a" or final.version != created.version
            try:
                again = await backend.update(dataclasses.replace(final, holder="z"), final.version)
                break
            except ConflictError:
                late += 1
        else:
            pytest.fail("five re-read writes in a row met a conflict")
        assert again.holder == "z"
        assert late <= 4  # at most one per cancelled write (each may have been sent)
        assert await backend.get("x") == again
        with pytest.raises(ConflictError):
            await backend.update(again, final.version)


async def test_watch_follows_changes_across_a_member_kill(
    etcd_cluster3: EtcdCluster, etcd_prefix: str
) -> None:
    """A watch whose member is killed reconnects to another member and still sees later changes."""
    endpoints = etcd_cluster3.endpoints
    async with (
        EtcdBackend(endpoints, prefix=etcd_prefix) as watcher,
        EtcdBackend(endpoints[1:], prefix=etcd_prefix) as writer,
    ):
        seen: list[str | None] = []
        first = anyio.Event()
        done = anyio.Event()

        async def follow() -> None:
            async with watcher.watch("x") as records:
                async for state in records:
                    seen.append(None if state is None else state.holder)
                    first.set()
                    if state is not None and state.holder == "after-kill":
                        done.set()
                        return

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await first.wait()
                created = await writer.create(LeaseRecord(name="x", holder="before-kill"))
                while "before-kill" not in seen:
                    await anyio.sleep(0.01)
                etcd_cluster3.members[0].kill()  # the member the watch is connected to
                await anyio.to_thread.run_sync(etcd_cluster3.wait_for_leader)
                while True:
                    try:
                        await writer.update(
                            dataclasses.replace(created, holder="after-kill"), created.version
                        )
                        break
                    except BackendUnavailable:  # an election may be under way: read, retry
                        current = await writer.get("x")
                        if current is not None and current.holder == "after-kill":
                            break
                        await anyio.sleep(0.1)
                await done.wait()
    assert seen[0] is None
    assert seen[-1] == "after-kill"


async def test_watch_reports_a_deleted_key_as_none(
    etcd_server: EtcdCluster, etcd_prefix: str
) -> None:
    """A DELETE event (an operator removing the key) is yielded as None."""
    import httpx

    from trio_lease.backends.etcd._codec import b64

    async with EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix) as backend:
        await backend.create(LeaseRecord(name="x", holder="a"))
        states: list[str | None] = []
        with anyio.fail_after(20):
            async with backend.watch("x") as records:
                async for state in records:
                    states.append(None if state is None else state.holder)
                    if state is None:
                        break
                    async with httpx.AsyncClient() as http:
                        url = f"{etcd_server.endpoints[0]}/v3/kv/deleterange"
                        response = await http.post(url, json={"key": b64(f"{etcd_prefix}x")})
                        assert response.status_code == 200
    assert states == ["a", None]
