"""The etcd backend's shared watch: one prefix watch per backend object (real etcd).

Watch streams are counted and cut by :class:`Tap`, an httpx transport in front of the real
server: it records each ``POST /v3/watch``, how many streams are open at once, and can drop a
stream's next chunk (the connection breaks as it carries an event) and hold new streams back.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest

from tests.backends._feed import (
    LIMIT,
    a_foreign_write_cancels_the_holder,
    running,
    start_waiters,
    until,
)
from tests.etcd_server import EtcdCluster
from trio_lease import LeaseRecord
from trio_lease._lean_http import LeanClient
from trio_lease._shared_watch import shared_watch
from trio_lease.backends.etcd import EtcdBackend, _feed
from trio_lease.backends.etcd._feed import EtcdFeed, prefix_end

pytestmark = pytest.mark.anyio


class _Cuttable(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, tap: Tap) -> None:
        self.inner, self.tap = inner, tap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            if self.tap.hold is not None:
                await self.tap.hold.wait()
            if self.tap.cut_next:
                self.tap.cut_next = False
                raise httpx.ReadError("connection cut by the test")
            yield chunk

    async def aclose(self) -> None:
        self.tap.open -= 1
        await self.inner.aclose()


class Tap(httpx.AsyncBaseTransport):
    """Real HTTP to etcd; counts watch streams, can cut one and hold new ones back."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        #: The create_request of every POST /v3/watch, in order.
        self.watches: list[dict[str, Any]] = []
        self.open = 0
        self.most_open = 0
        #: Break the connection of the open stream at its next chunk (dropping it).
        self.cut_next = False
        #: When set, new watch requests wait for it.
        self.gate: anyio.Event | None = None
        #: When set, the open stream's chunks wait for it (events queue up behind it).
        self.hold: anyio.Event | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v3/watch":
            return await self.inner.handle_async_request(request)
        self.watches.append(json.loads(request.content)["create_request"])
        if self.gate is not None:
            await self.gate.wait()
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        stream = _Cuttable(response.stream, self)
        return httpx.Response(response.status_code, headers=response.headers, stream=stream)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def tapped(etcd_server: EtcdCluster, etcd_prefix: str) -> tuple[Tap, EtcdBackend]:
    """A backend on the test's prefix whose HTTP goes through a fresh :class:`Tap`."""
    tap = Tap()
    return tap, EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix, transport=tap)


def b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


async def etcd(server: EtcdCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A raw call to the gateway (another program's put, delete or compaction)."""
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{server.endpoints[0]}/v3/{path}", json=body)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer


def test_prefix_end_covers_exactly_the_prefix() -> None:
    """range_end is the prefix with its last byte plus one (0xff bytes carried over)."""
    assert prefix_end(b"leases/") == b"leases0"
    assert prefix_end(b"a\xff\xff") == b"b"
    assert prefix_end(b"\xff") == b"\0"


async def test_many_waiters_share_one_watch_stream(
    tapped: tuple[Tap, EtcdBackend],
    etcd_backend_factory: Callable[[], EtcdBackend],
    etcd_prefix: str,
) -> None:
    """200 waiters on 200 leases: one watch stream (never two open), all woken by it."""
    count, (tap, mine) = 200, tapped
    other = etcd_backend_factory()
    async with other, mine, anyio.create_task_group() as tg:
        with anyio.fail_after(LIMIT):
            records = [
                await other.create(LeaseRecord(name=f"job{i}", holder="other", lease_duration=3600))
                for i in range(count)
            ]
            acquired = start_waiters(tg, mine, count)
            hub = shared_watch(mine)
            assert hub is not None
            await until(lambda: hub.subscribers == count and tap.open == 1)
            assert len(tap.watches) == 1
            assert isinstance(hub.feed, EtcdFeed)
            feed: EtcdFeed = hub.feed
            for record in records:  # released by their holder: every waiter must wake
                released = dataclasses.replace(record, holder="", lease_duration=1.0)
                await other.update(released, record.version)
            await until(lambda: len(acquired) == count)
    # Waiters leaving hand the feed to another task: the stream reopens where it stopped.
    assert tap.most_open == 1
    assert feed.reads == 1
    assert tap.watches[0]["range_end"] == b64(etcd_prefix[:-1] + chr(ord(etcd_prefix[-1]) + 1))


async def test_a_foreign_write_cancels_the_holder_before_its_next_renewal(
    etcd_backend_factory: Callable[[], EtcdBackend],
) -> None:
    """Another client writing another holder ends the grant with LeaseLost, no renewal sent."""
    await a_foreign_write_cancels_the_holder(etcd_backend_factory(), etcd_backend_factory())


async def test_own_held_writes_are_skipped_undecoded_and_a_takeover_is_still_seen(
    tapped: tuple[Tap, EtcdBackend], etcd_backend_factory: Callable[[], EtcdBackend]
) -> None:
    """Real etcd's lines of this process's own renewals are skipped before decoding (the
    resume point still moves past them); a release written here and a foreign takeover after
    them are published. The stream is held while the renewals are written, so each renewal's
    answer has come before its event: the skip does not depend on who wins that race."""
    tap, mine = tapped
    async with mine, etcd_backend_factory() as other:
        created = await mine.create(LeaseRecord(name="job", holder="me"))
        feed = mine.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", created)] and tap.open == 1)
            tap.hold = anyio.Event()
            current, renewals = created, []
            for _ in range(5):
                current = await mine.update(current, current.version)
                renewals.append(int(current.version))
            assert all(revision in feed.own_writes for revision in renewals)
            tap.hold.set()
            await until(lambda: feed.revision == int(current.version))
            assert published == [("job", created)]  # none of the five decoded
            assert feed.own_skipped >= 1  # one line per revision, unless etcd batched them
            assert not any(revision in feed.own_writes for revision in renewals)
            released = await mine.update(
                LeaseRecord(name="job", holder="", fencing_token=current.fencing_token),
                current.version,
            )
            await until(lambda: len(published) == 2)
            taken = await other.update(
                dataclasses.replace(released, holder="intruder"), released.version
            )
            await until(lambda: len(published) == 3)
    assert published[1:] == [("job", released), ("job", taken)]


async def test_a_cut_stream_resumes_without_losing_a_change(
    tapped: tuple[Tap, EtcdBackend], etcd_backend_factory: Callable[[], EtcdBackend]
) -> None:
    """A stream cut as it carries a change reopens from the last revision seen: nothing lost."""
    tap, mine = tapped
    async with mine, etcd_backend_factory() as other:
        created = await other.create(LeaseRecord(name="job", holder="a"))
        feed = mine.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", created)])  # the first read
            first = await other.update(created, created.version)
            await until(lambda: len(published) == 2)  # the stream is live
            tap.gate, tap.cut_next = anyio.Event(), True
            dropped = await other.update(first, first.version)  # its chunk is cut
            await until(lambda: len(tap.watches) == 2)  # reconnecting, held back
            meanwhile = await other.update(dropped, dropped.version)
            tap.gate.set()
            await until(lambda: len(published) == 4)
    assert published[1:] == [("job", first), ("job", dropped), ("job", meanwhile)]
    assert tap.watches[1]["start_revision"] == str(int(first.version) + 1)
    assert feed.reads == 1  # resumed, not read again


async def test_compaction_reads_the_keys_again(
    etcd_server: EtcdCluster,
    etcd_backend_factory: Callable[[], EtcdBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resuming below etcd's compacted revision reads every key (in pages) and goes on."""
    monkeypatch.setattr(_feed, "PAGE", 1)  # one key per page: the read pages through all
    async with etcd_backend_factory() as mine, etcd_backend_factory() as other:
        a = await other.create(LeaseRecord(name="a", holder="x"))
        b = await other.create(LeaseRecord(name="b", holder="y"))
        feed = mine.watch_feed()
        with anyio.fail_after(LIMIT):
            async with running(feed, "a", "b", "c") as first:
                await until(lambda: len(first) == 3)
            renewed = await other.update(a, a.version)  # while no run follows
            deleted = await etcd(etcd_server, "kv/deleterange", {"key": b64(mine.prefix + "b")})
            latest = deleted["header"]["revision"]  # above the revision the feed resumes from
            await etcd(etcd_server, "kv/compaction", {"revision": latest})
            async with running(feed, "a", "b", "c") as again:
                await until(lambda: feed.reads == 2 and len(again) == 3)
                later = await other.update(renewed, renewed.version)
                await until(lambda: len(again) == 4)
    assert sorted(first, key=lambda item: item[0]) == [("a", a), ("b", b), ("c", None)]
    assert sorted(again[:3], key=lambda item: item[0]) == [("a", renewed), ("b", None), ("c", None)]
    assert again[3] == ("a", later)


async def test_a_deletion_is_published_as_none_and_foreign_data_as_unreadable(
    etcd_server: EtcdCluster, etcd_backend_factory: Callable[[], EtcdBackend]
) -> None:
    """A DELETE event publishes None; a PUT of data that is no record, an unreadable record."""
    async with etcd_backend_factory() as mine, etcd_backend_factory() as other:
        created = await other.create(LeaseRecord(name="job", holder="a"))
        feed = mine.watch_feed()
        key = b64(mine.prefix + "job")
        async with running(feed, "job") as published:
            await until(lambda: len(published) == 1)
            await etcd(etcd_server, "kv/deleterange", {"key": key})
            await until(lambda: len(published) == 2)
            await etcd(etcd_server, "kv/put", {"key": key, "value": b64("not json")})
            await until(lambda: len(published) == 3)
    assert published[:2] == [("job", created), ("job", None)]
    name, garbage = published[2]
    assert name == "job" and garbage is not None and garbage.unreadable and not garbage.holder


async def test_the_watch_stream_runs_on_the_lean_client_not_httpx(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an injected transport the stream opens on the lean client's own connection
    (the reader unary calls use): httpx is never asked, and changes still arrive."""
    async with etcd_backend_factory() as mine, etcd_backend_factory() as other:
        client = mine._client

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("the watch went through httpx")

        monkeypatch.setattr(client._http, "stream", refuse)
        created = await other.create(LeaseRecord(name="job", holder="a"))
        feed = mine.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: len(published) == 1)
            renewed = await other.update(created, created.version)
            await until(lambda: len(published) == 2)
        seam = client._seam(mine.endpoints[0])
    assert published == [("job", created), ("job", renewed)]
    assert feed.streams == 1
    assert isinstance(seam, LeanClient) and seam.connections_opened >= 2  # a read, the stream
