"""Watch-based waiting: events, resume, 410, cuts, and the polling fallback."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from trio_lease import LeaseRecord
from trio_lease.backends.kubernetes import KubernetesBackend

from ._helpers import CountingTransport, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
SA = "system:serviceaccount:default:app"


async def _next(
    states: AsyncIterator[LeaseRecord | None], limit: float = 1.0
) -> LeaseRecord | None:
    with anyio.fail_after(limit):
        return await states.__anext__()


async def _release(backend: KubernetesBackend, name: str) -> None:
    current = await backend.get(name)
    assert current is not None
    await backend.update(dataclasses.replace(current, holder="", lease_duration=1), current.version)


@pytest.mark.parametrize("kind", ["coordination.k8s.io/v1", "akka.io/v1"])
async def test_release_and_delete_wake_the_watcher_at_once(kind: str) -> None:
    """A watcher sees the current state, then a release and a delete without polling."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport(), kind=kind) as writer, \
            make_backend(transport, kind=kind, watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with watcher.watch("job") as states:
            first = await _next(states)
            assert first is not None
            assert first.holder == "a"
            await _release(writer, "job")
            released = await _next(states)
            assert released is not None
            assert released.is_free
            rt = emulator.resource_type(kind, "leases")
            assert rt is not None
            emulator.store.delete(rt, "default", "job", {})
            assert await _next(states) is None
    watch_requests = [q for m, _, q in transport.requests if q.get("watch") == "1"]
    assert watch_requests[0]["fieldSelector"] == "metadata.name=job"
    assert watch_requests[0]["allowWatchBookmarks"] == "true"
    assert watch_requests[0]["resourceVersion"] != "0"


async def test_watch_of_a_missing_lease_sees_its_creation() -> None:
    """Watching a lease that does not exist yields None, then the created record."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as writer, \
            make_backend(emulator.transport()) as watcher, watcher.watch("job") as states:
        assert await _next(states) is None
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        created = await _next(states)
        assert created is not None
        assert created.holder == "a"


async def _collect(backend: KubernetesBackend, name: str, out: list[LeaseRecord | None],
                   changed: anyio.Event) -> None:
    async with backend.watch(name) as states:
        async for state in states:
            out.append(state)
            changed.set()


async def _wait_for_free(seen: list[LeaseRecord | None], limit: float) -> None:
    with anyio.fail_after(limit):
        while not (seen and seen[-1] is not None and seen[-1].is_free):
            await anyio.sleep(0.01)


async def test_expired_watch_rereads_and_continues() -> None:
    """A 410 Expired (in-stream ERROR) makes the watcher re-GET and keep delivering changes."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    seen: list[LeaseRecord | None] = []
    async with make_backend(emulator.transport()) as writer, \
            make_backend(transport, watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, watcher, "job", seen, anyio.Event())
            await anyio.sleep(0.1)
            assert emulator.expire_watches() == 1
            await anyio.sleep(0.1)
            await _release(writer, "job")
            await _wait_for_free(seen, 1)
            tg.cancel_scope.cancel()
    gets = [m for m, _, q in transport.requests if m == "GET" and q.get("watch") != "1"]
    assert len(gets) == 2  # the first read and the re-read after 410
    assert [q.get("watch") for _, _, q in transport.requests].count("1") == 2


async def test_cut_stream_resumes_from_the_last_version() -> None:
    """An abruptly cut stream is re-opened and later changes still arrive."""
    emulator = emulator_with_crd()
    seen: list[LeaseRecord | None] = []
    async with make_backend(emulator.transport()) as writer, \
            make_backend(emulator.transport(), watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, watcher, "job", seen, anyio.Event())
            await anyio.sleep(0.1)
            assert emulator.cut_watches() == 1  # resynced at once, not after the poll interval
            await _release(writer, "job")
            await _wait_for_free(seen, 5)
            tg.cancel_scope.cancel()


async def test_bookmarks_are_not_yielded() -> None:
    """BOOKMARK events only move the resume point; no state is yielded for them."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as writer, \
            make_backend(emulator.transport(), watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        seen: list[LeaseRecord | None] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, watcher, "job", seen, anyio.Event())
            await anyio.sleep(0.1)
            emulator.send_bookmarks()
            await anyio.sleep(1)
            tg.cancel_scope.cancel()
        assert len(seen) == 1


async def test_forbidden_watch_falls_back_to_polling() -> None:
    """Without watch/list rights the watcher polls with GET and still sees the release."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["get", "create", "update"])
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport(), token="tok") as writer, \
            make_backend(transport, token="tok", watch_poll_interval=2) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with watcher.watch("job") as states:
            await _next(states)
            await _release(writer, "job")
            seen = await _next(states, limit=10)
            while seen is not None and not seen.is_free:
                seen = await _next(states, limit=10)
    assert seen is not None
    assert seen.is_free
    lists = [q for _, path, q in transport.requests if path.endswith("/leases")]
    assert len(lists) == 1  # the list was refused once; then GETs of the lease only


async def test_watch_disabled_polls() -> None:
    """With watch=False the iterator polls by GET every watch_poll_interval."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport()) as writer, \
            make_backend(transport, watch=False, watch_poll_interval=3) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with watcher.watch("job") as states:
            await _next(states)
            await _release(writer, "job")
            seen = await _next(states, limit=4)
    assert seen is not None
    assert seen.is_free
    assert all(q.get("watch") != "1" for _, _, q in transport.requests)


class EmptyWatchTransport(httpx.AsyncBaseTransport):
    """A proxy that answers every watch with an empty 200 body (the stream ends at once)."""

    def __init__(self, inner: CountingTransport) -> None:
        self.inner = inner
        self.watches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "1":
            self.watches += 1
            return httpx.Response(200, content=b"")
        return await self.inner.handle_async_request(request)


async def test_streams_that_end_at_once_do_not_spin() -> None:
    """A watch that keeps ending at once falls back to the poll interval (no tight loop)."""
    transport = EmptyWatchTransport(CountingTransport(emulator_with_crd().transport()))
    seen: list[LeaseRecord | None] = []
    async with make_backend(transport, watch_poll_interval=5) as watcher, \
            anyio.create_task_group() as tg:
        tg.start_soon(_collect, watcher, "job", seen, anyio.Event())
        await anyio.sleep(60)
        tg.cancel_scope.cancel()
    assert transport.watches <= 2 * 60 / 5 + 2
    assert seen[0] is None


async def test_http_410_at_watch_start_rereads() -> None:
    """A watch refused with HTTP 410 (too old) re-reads with a GET and watches from there."""
    emulator = emulator_with_crd(watch_expired_status=True)
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport()) as writer, \
            make_backend(transport, watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        async with watcher.watch("job") as states:
            with anyio.fail_after(1):  # the stream's task has listed and waits for us to read
                while not transport.requests:
                    await anyio.sleep(0.01)
            await writer.create(LeaseRecord("other", holder="x", lease_duration=15))
            emulator.compact()  # the version it listed is now too old to watch from
            first = await _next(states)
            assert first is not None
            again = await _next(states)  # the re-read after 410
            assert again is not None
            assert again.version == first.version
            await _release(writer, "job")
            released = await _next(states)
            assert released is not None
            assert released.is_free
    codes = [(m, q.get("watch")) for m, _, q in transport.requests]
    assert codes[:4] == [("GET", None), ("GET", "1"), ("GET", None), ("GET", "1")]


async def test_idle_lease_after_compaction_is_watched_without_polling() -> None:
    """An idle lease whose own version predates compaction is still watched (list version)."""
    emulator = emulator_with_crd(watch_expired_status=True)
    async with make_backend(emulator.transport()) as writer, \
            make_backend(emulator.transport(), watch_poll_interval=1000) as watcher:
        await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
        await writer.create(LeaseRecord("other", holder="x", lease_duration=15))
        emulator.compact()  # "job" keeps its old resourceVersion, now too old to watch from
        seen: list[LeaseRecord | None] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, watcher, "job", seen, anyio.Event())
            await anyio.sleep(0.1)
            await _release(writer, "job")
            await _wait_for_free(seen, 5)
            tg.cancel_scope.cancel()

