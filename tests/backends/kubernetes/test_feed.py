"""The shared watch (KubernetesFeed): one label watch per backend, fallbacks, resume, pacing.

On the in-process emulator, on virtual time, asyncio and trio. Label selection on LIST and
WATCH (a change that takes an object out of the selection is DELETED) is the emulator's
``_watch.py``/``_collection.py``, which follow the apiserver's ``cacheWatcher`` and
``etcd3/store.go``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from trio_lease import Lease, LeaseLost, LeaseRecord, LeaseSettings
from trio_lease._abc import Watched
from trio_lease._shared_watch import _feeds
from trio_lease.backends.kubernetes import KubernetesBackend
from trio_lease.backends.kubernetes._feed import KubernetesFeed
from trio_lease.testing.kube import KubeEmulator

from ._helpers import CountingTransport, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
LABEL = "app.kubernetes.io/managed-by"
SELECTOR = f"{LABEL}=trio-lease"
#: L = 15 s, R = 1.5 s, T = 0.5 s.
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
#: A renewal every 20 s: a loss seen within a second cannot be the renewal's doing.
SLOW = LeaseSettings(heartbeat_timeout=60, heartbeat_interval=20, lease_operation_timeout=0.5)
SA = "system:serviceaccount:default:app"


def _label_watches(emulator: KubeEmulator) -> list[Any]:
    return [w for w in emulator.open_watches() if w.selection is not None and w.name is None]


def _name_watches(emulator: KubeEmulator) -> list[Any]:
    return [w for w in emulator.open_watches() if w.name is not None]


def _foreign_lease(emulator: KubeEmulator, name: str, holder: str, **spec: Any) -> None:
    """A Lease as client-go or kubectl writes it: no trio-lease label."""
    emulator.apply({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, **spec},
    })


def _rewrite(emulator: KubeEmulator, name: str, **spec: Any) -> None:
    """An administrator's update of the Lease (keeps its labels)."""
    lease = emulator.get_lease(name)
    assert lease is not None
    lease["spec"].update(spec)
    emulator.apply(lease)


def _feed(backend: KubernetesBackend) -> KubernetesFeed:
    feed = backend.watch_feed()
    assert isinstance(feed, KubernetesFeed)
    return feed


async def _woken_after(
    backend: KubernetesBackend, name: str, free: Callable[[], Awaitable[None]]
) -> float:
    """A contender waits for lease ``name`` of ``backend``; 10 s on, ``free()`` (which may check
    the watches first) frees it; returns how long after that the contender was granted it."""
    got: list[float] = []

    async def contend() -> None:
        async with Lease(name, "w", backend, SETTINGS).held():
            got.append(anyio.current_time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(contend)
        await anyio.sleep(10)
        await free()
        freed = anyio.current_time()
    assert got
    return got[0] - freed


async def test_created_objects_carry_the_label_and_foreign_ones_do_not_get_it() -> None:
    """create() labels the object; an update of an unlabelled object leaves its labels alone."""
    emulator = emulator_with_crd()
    _foreign_lease(emulator, "theirs", "")
    async with make_backend(emulator.transport()) as backend:
        await backend.create(LeaseRecord("ours", holder="a", lease_duration=15))
        theirs = await backend.get("theirs")
        assert theirs is not None
        await backend.update(LeaseRecord("theirs", holder="a", lease_duration=15), theirs.version)
    ours, foreign = emulator.get_lease("ours"), emulator.get_lease("theirs")
    assert ours is not None
    assert foreign is not None
    assert ours["metadata"]["labels"] == {LABEL: "trio-lease"}
    assert "labels" not in foreign["metadata"]
    assert foreign["spec"]["holderIdentity"] == "a"


async def test_watch_disabled_has_no_feed() -> None:
    """With watch=False there is no label feed: the core polls each lease through watch()."""
    async with make_backend(emulator_with_crd().transport(), watch=False) as backend:
        assert backend.watch_feed() is None


async def test_thousand_waiters_share_one_watch_stream() -> None:
    """1,000 contenders waiting on 1,000 leases open one watch; a release wakes its waiter."""
    count = 1000
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    got: list[tuple[str, float]] = []
    async with make_backend(emulator.transport()) as owner, \
            make_backend(transport, watch_poll_interval=1000) as waiting:
        for i in range(count):
            await owner.create(LeaseRecord(f"job-{i}", holder="a", lease_duration=3600))

        async def contend(name: str) -> None:
            async with Lease(name, "w", waiting, SETTINGS).held():
                got.append((name, anyio.current_time()))
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(contend, f"job-{i}")
            await anyio.sleep(10)
            assert len(emulator.open_watches()) == 1
            assert len(_label_watches(emulator)) == 1
            released = await owner.get("job-7")
            assert released is not None
            await owner.update(LeaseRecord("job-7", lease_duration=1), released.version)
            freed = anyio.current_time()
            await anyio.sleep(1)
            assert [name for name, _ in got] == ["job-7"]
            assert got[0][1] - freed < 0.1
            tg.cancel_scope.cancel()
    watches = [q for _, _, q in transport.requests if q.get("watch") == "1"]
    assert len(watches) == 1
    assert watches[0]["labelSelector"] == SELECTOR
    assert "fieldSelector" not in watches[0]


@pytest.mark.parametrize("how", ["takeover", "delete"])
async def test_foreign_write_cancels_the_holder_at_once(how: str) -> None:
    """A takeover or deletion seen on the shared watch ends the grant with LeaseLost at once."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    marks: list[float] = []
    async with make_backend(transport) as backend:
        lease = Lease("job", "a", backend, SLOW)

        async def hold() -> None:
            async with lease.held():
                await anyio.sleep(1)
                if how == "takeover":
                    _rewrite(emulator, "job", holderIdentity="intruder", leaseTransitions=99)
                else:
                    emulator.delete("coordination.k8s.io/v1", "leases", "job", "default")
                marks.append(anyio.current_time())
                await anyio.sleep(3600)

        with pytest.raises(LeaseLost):
            await hold()
        lost_after = anyio.current_time() - marks[0]
    assert lost_after < 0.1  # the renewal was 19 s away
    assert [m for m, _, _ in transport.requests].count("PUT") == 0  # no renewal ran
    assert len([q for _, _, q in transport.requests if q.get("labelSelector")]) >= 2


async def test_unlabelled_lease_is_followed_by_its_own_watch() -> None:
    """A lease created without the label gets a field-selector watch; its release wakes at once."""
    emulator = emulator_with_crd()
    _foreign_lease(emulator, "theirs", "client-go-pod")
    async with make_backend(emulator.transport(), watch_poll_interval=1000) as backend:

        async def free() -> None:
            assert len(_label_watches(emulator)) == 1
            assert [w.name for w in _name_watches(emulator)] == ["theirs"]
            _rewrite(emulator, "theirs", holderIdentity="")

        assert await _woken_after(backend, "theirs", free) < 0.1


async def test_own_watch_of_a_missing_lease_stops_once_it_is_labelled() -> None:
    """A watched lease that does not exist has its own watch until it shows up labelled."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as owner, \
            make_backend(emulator.transport(), watch_poll_interval=1000) as backend:
        feed = _feed(backend)
        watched, seen = Watched(), []
        watched.add("job")
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed.run, watched, lambda name, state: seen.append((name, state)))
            await anyio.sleep(1)
            assert feed.individual == {"job"}
            assert len(_name_watches(emulator)) == 1
            await owner.create(LeaseRecord("job", holder="a", lease_duration=15))
            await anyio.sleep(1)
            assert feed.individual == set()
            assert _name_watches(emulator) == []
            assert len(_label_watches(emulator)) == 1
            tg.cancel_scope.cancel()
    states = [state for _, state in seen]
    assert states[0] is None
    assert states[-1] is not None
    assert states[-1].holder == "a"


async def test_resource_names_only_rbac_uses_own_watches() -> None:
    """With list/watch only on named leases, each lease has its own watch and still wakes."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.add_token("admin", "admin", ["system:masters"])
    emulator.grant(SA, ["get", "create", "update"])
    emulator.grant(SA, ["list", "watch"], resource_names=["job"])
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport(), token="admin") as owner, \
            make_backend(transport, token="tok", watch_poll_interval=1000) as backend:
        await owner.create(LeaseRecord("job", holder="a", lease_duration=3600))

        async def free() -> None:
            assert _label_watches(emulator) == []
            assert [w.name for w in _name_watches(emulator)] == ["job"]
            current = await owner.get("job")
            assert current is not None
            await owner.update(LeaseRecord("job", lease_duration=1), current.version)

        assert await _woken_after(backend, "job", free) < 0.1
    label_lists = [q for _, _, q in transport.requests if q.get("labelSelector")]
    assert len(label_lists) == 1  # refused once; retried only after FORBIDDEN_RETRY


@pytest.mark.parametrize("http_status", [False, True])
async def test_expired_resume_point_relists_and_publishes_deletions(http_status: bool) -> None:
    """A rerun resumes from its version; when that expired (410) it re-lists, gone → None."""
    emulator = emulator_with_crd(watch_expired_status=http_status)
    transport = CountingTransport(emulator.transport())
    async with make_backend(emulator.transport()) as owner, \
            make_backend(transport, watch_poll_interval=1000) as backend:
        await owner.create(LeaseRecord("job", holder="a", lease_duration=15))
        await owner.create(LeaseRecord("other", holder="b", lease_duration=15))
        feed, watched, seen = _feed(backend), Watched(), list[tuple[str, LeaseRecord | None]]()
        watched.add("job")
        watched.add("other")
        publish = lambda name, state: seen.append((name, state))  # noqa: E731
        with anyio.move_on_after(1):
            await feed.run(watched, publish)
        assert feed.lists == 1
        assert {name for name, _ in seen} == {"job", "other"}
        seen.clear()
        with anyio.move_on_after(1):
            await feed.run(watched, publish)  # the rerun resumes: no LIST
        assert feed.lists == 1
        assert seen == []
        emulator.delete("coordination.k8s.io/v1", "leases", "job", "default")
        emulator.compact()  # the deletion is no longer in the history: the resume point is 410
        with anyio.move_on_after(1):
            await feed.run(watched, publish)
        assert feed.lists == 2
        assert ("job", None) in seen
        assert [name for name, state in seen if state is not None] == ["other"]
    lists = [q for m, _, q in transport.requests if q.get("labelSelector") and "watch" not in q]
    assert len(lists) == 2
    assert all(q["limit"] == "500" for q in lists)


class HostileWatch(httpx.AsyncBaseTransport):
    """Answers every label watch with ``body`` (then the stream ends); counts requests."""

    def __init__(self, inner: httpx.AsyncBaseTransport, body: bytes) -> None:
        self.inner = inner
        self.body = body
        self.watches = 0
        self.lists = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.watches + self.lists > 200:
            await anyio.sleep_forever()  # a tight loop: stop it here, the counts tell
        if request.url.params.get("labelSelector"):
            if request.url.params.get("watch") != "1":
                self.lists += 1
            else:
                self.watches += 1
                return httpx.Response(200, content=self.body)
        return await self.inner.handle_async_request(request)


BOOKMARK = json.dumps({"type": "BOOKMARK", "object": {
    "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
    "metadata": {"resourceVersion": "5"}}}).encode()


@pytest.mark.parametrize("body", [
    BOOKMARK + b"\n" + BOOKMARK + b"\n",
    b"",
    b"not json\n",
    b'{"type": "MODIFIED", "object": {"kind": "ConfigMap"}}\n',
    b'{"type": "SURPRISE", "object": {}}\n',
], ids=["bookmarks", "empty", "garbage", "other-kind", "bad-type"])
async def test_hostile_label_stream_does_not_loop(body: bytes) -> None:
    """Streams that end with bookmarks, nothing or garbage are reopened a few times a period."""
    transport = HostileWatch(emulator_with_crd().transport(), body)
    async with make_backend(transport, watch_poll_interval=5) as backend:
        watched = Watched()
        watched.add("job")
        with anyio.move_on_after(60):
            await _feed(backend).run(watched, lambda name, state: None)
    assert 2 <= transport.watches <= 2 * 60 / 5 + 2
    assert transport.lists <= 2 * 60 / 5 + 2


class Unreliable(httpx.AsyncBaseTransport):
    """Label watch streams that drop every other event and replay the previous one after each."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.params.get("watch") != "1" or not request.url.params.get("labelSelector"):
            return response
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_Replaying(response)
        )


class _Replaying(httpx.AsyncByteStream):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        kept: list[bytes] = []
        count = 0
        async for chunk in self.response.aiter_raw():
            for line in chunk.splitlines():
                if b'"BOOKMARK"' in line:
                    yield line + b"\n"
                    continue
                count += 1
                if count % 2:
                    continue  # dropped
                yield line + b"\n"
                if kept:
                    yield kept[-1] + b"\n"  # the previous event again, after the new one
                kept.append(line)

    async def aclose(self) -> None:
        await self.response.aclose()


async def test_dropped_and_replayed_events_cause_no_loss_and_no_extra_requests() -> None:
    """A lossy, replaying watch: the holder keeps renewing with one PUT each, never lost."""
    emulator = emulator_with_crd()
    transport = CountingTransport(Unreliable(emulator.transport()))
    async with make_backend(emulator.transport()) as other, make_backend(transport) as backend:
        await other.create(LeaseRecord("job", holder="old", lease_duration=1, fencing_token=3))
        current = await other.get("job")
        assert current is not None
        await other.update(LeaseRecord("job", lease_duration=1, fencing_token=3), current.version)
        lease = Lease("job", "a", backend, SETTINGS)
        async with lease.held() as grant:
            start = len(transport.requests)
            await anyio.sleep(60)
            assert grant.fencing_token == 4
        during = [m for m, _, q in transport.requests[start:] if "watch" not in q]
    renewals = during.count("PUT") - 1  # the last PUT is the release
    assert renewals >= 60 / SETTINGS.heartbeat_interval - 2
    assert during.count("GET") <= 2  # the release's read, and at most one confirmation


async def test_lagging_event_does_not_touch_the_object_cache() -> None:
    """An event older than our last write leaves the cached object: the next PUT needs no GET."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    async with make_backend(transport) as backend:
        first = await backend.create(LeaseRecord("job", holder="a", lease_duration=15))
        stale = emulator.get_lease("job")
        assert stale is not None
        second = await backend.update(
            LeaseRecord("job", holder="a", lease_duration=15), first.version
        )
        feed, watched, seen = _feed(backend), Watched(), list[LeaseRecord | None]()
        watched.add("job")
        feed._apply("MODIFIED", "job", stale, watched, lambda n, s: seen.append(s))
        before = len(transport.requests)
        await backend.update(LeaseRecord("job", holder="a", lease_duration=15), second.version)
    assert seen[0] is not None
    assert seen[0].version == first.version
    assert [m for m, _, _ in transport.requests[before:]] == ["PUT"]


async def _run_feed(
    backend: KubernetesBackend, watched: Watched, seen: list[tuple[str, LeaseRecord | None]],
    seconds: float,
) -> KubernetesFeed:
    feed = _feed(backend)
    with anyio.move_on_after(seconds):
        await feed.run(watched, lambda name, state: seen.append((name, state)))
    return feed


async def test_unwatched_names_lose_their_own_watch() -> None:
    """Own watches start and stop with the watched set; names cover only their own lease."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), watch_poll_interval=1000) as backend:
        feed, watched = _feed(backend), Watched()
        watched.add("a")
        watched.add("b")
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed.run, watched, lambda name, state: None)
            await anyio.sleep(1)
            assert feed.individual == {"a", "b"}
            assert sorted(w.name for w in _name_watches(emulator)) == ["a", "b"]
            watched.discard("a")
            await anyio.sleep(1)
            assert feed.individual == {"b"}
            assert [w.name for w in _name_watches(emulator)] == ["b"]
            tg.cancel_scope.cancel()
        assert feed.individual == set()


async def test_mapped_names_and_collisions_on_the_label_stream() -> None:
    """A mapped key is found by its object name; an object storing another key is unreadable."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as owner, \
            make_backend(emulator.transport(), watch_poll_interval=1000) as backend:
        key = "Jobs/Nightly"
        object_name = backend.object_name(key)
        assert object_name != key
        watched, seen = Watched(), list[tuple[str, LeaseRecord | None]]()
        watched.add(key)
        watched.add("clash")
        async with anyio.create_task_group() as tg:
            tg.start_soon(_run_feed, backend, watched, seen, 1000)
            await anyio.sleep(1)
            await owner.create(LeaseRecord(key, holder="a", lease_duration=15))
            emulator.apply({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "clash", "namespace": "default",
                             "labels": {LABEL: "trio-lease"},
                             "annotations": {"trio-lease.io/key": "Some Other Key"}},
                "spec": {"holderIdentity": "z", "leaseDurationSeconds": 15},
            })
            await anyio.sleep(1)
            tg.cancel_scope.cancel()
    mapped = [state for name, state in seen if name == key and state is not None]
    assert mapped[-1].holder == "a"
    clash = [state for name, state in seen if name == "clash" and state is not None]
    assert clash[-1].unreadable
    assert clash[-1].holder == ""


async def test_akka_leases_are_followed_by_label() -> None:
    """akka.io/v1 objects carry the label too, and a release wakes the waiter by the label watch."""
    emulator = emulator_with_crd()
    got: list[float] = []
    async with make_backend(emulator.transport(), kind="akka.io/v1") as owner, \
            make_backend(emulator.transport(), kind="akka.io/v1", watch_poll_interval=1000) as w:
        await owner.create(LeaseRecord("job", holder="a", lease_duration=3600))

        async def contend() -> None:
            settings = LeaseSettings(
                heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5,
                holder_deadline=10,
            )
            async with Lease("job", "w", w, settings).held():
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(contend)
            await anyio.sleep(10)
            assert len(_label_watches(emulator)) == 1
            assert _name_watches(emulator) == []
            current = await owner.get("job")
            assert current is not None
            await owner.update(LeaseRecord("job", lease_duration=1), current.version)
            freed = anyio.current_time()
        assert got
        assert got[0] - freed < 0.1


async def test_own_renewals_are_skipped_undecoded_and_a_takeover_is_still_seen() -> None:
    """The label stream's events of this process's own renewals are skipped before decoding
    (the resume point still moves to them); a foreign takeover after them is seen at once."""
    emulator = emulator_with_crd()
    marks: list[float] = []
    async with make_backend(emulator.transport()) as backend:
        lease = Lease("job", "a", backend, SETTINGS)
        with pytest.raises(LeaseLost, match="intruder"):
            async with lease.held():
                await anyio.sleep(15.2)  # 10 renewals
                feed = _feeds[backend]
                assert isinstance(feed, KubernetesFeed)
                assert feed.own_skipped >= 9
                stored = emulator.get_lease("job")
                assert stored is not None
                assert feed.cursor.version == stored["metadata"]["resourceVersion"]
                _rewrite(emulator, "job", holderIdentity="intruder", leaseTransitions=99)
                marks.append(anyio.current_time())
                await anyio.sleep(3600)
        assert anyio.current_time() - marks[0] < 0.1


async def test_a_release_in_this_process_wakes_a_waiter_of_this_process_at_once() -> None:
    """A holder's release is never skipped as an own write: a waiter on the same backend sees
    it on the label stream and takes the lease at once, not at its next poll (60 s here)."""
    emulator = emulator_with_crd()
    settings = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5,
                             lease_operation_timeout=0.5, poll_interval=60)
    released: list[float] = []
    running: list[float] = []
    async with make_backend(emulator.transport()) as backend:
        holding = anyio.Event()

        async def hold() -> None:
            async with Lease("job", "a", backend, settings).held():
                holding.set()
                await anyio.sleep(5)  # three renewals, skipped as own writes, while b waits
            released.append(anyio.current_time())  # held() has released the lease

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await holding.wait()
            async with Lease("job", "b", backend, settings).held(timeout=120):
                running.append(anyio.current_time())
        feed = _feeds[backend]
        assert isinstance(feed, KubernetesFeed) and feed.own_skipped >= 3
    assert released and running
    assert running[0] - released[0] < 0.1


@pytest.mark.parametrize("second", ["bookmark", "replay"])
async def test_two_lines_at_one_own_version_in_one_read_go_to_the_reader(second: str) -> None:
    """Our write's event and, in the same read, a BOOKMARK at its version (the API server's
    bookmark carries the latest version, which may be our write's) or a replay of the event:
    the reader skips the first as ours and decodes the second (taking both as our write once
    failed with a KeyError)."""
    event = (b'{"type":"MODIFIED","object":{"metadata":{"name":"job",'
             b'"resourceVersion":"7"},"spec":{"holderIdentity":"a"}}}')
    bookmark = (b'{"type":"BOOKMARK","object":{"kind":"Lease","metadata":'
                b'{"resourceVersion":"7"}}}')
    objects = type("Objects", (), {"own_writes": {"7": "job"}})()
    feed = KubernetesFeed(type("Api", (), {"objects": objects})(), poll_interval=60)
    feed.labelled["job"] = "6"
    lines = [event, bookmark if second == "bookmark" else event]
    assert objects.own_writes == {"7": "job"}
    assert [feed._own_write(line) for line in lines] == [True, False]
    assert feed.own_skipped == 1 and feed.labelled["job"] == "7"
