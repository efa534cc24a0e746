"""The etcd shared watch against scripted gateway answers, on virtual time (no etcd needed).

Each watch request gets the next scripted stream body (then the last one again); a body's lines
end, so the stream ends after them and the feed opens the next one. The pages of the range read
that (re)starts the feed are checked to move forward (no tight request loop).
"""

from __future__ import annotations

import base64
import functools
import json
import re
from typing import Any

import anyio
import httpx
import pytest

from tests.backends.etcd._mock import MockTransport
from trio_lease import BackendAuthError, BackendProtocolError, LeaseRecord
from trio_lease._abc import Watched
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._codec import encode_record
from trio_lease.backends.etcd._feed import EtcdFeed
from trio_lease.backends.etcd._replies import PrefixPage, read_answer, read_prefix_range
from trio_lease.testing import virtual_time_backends

pytestmark = pytest.mark.anyio

PREFIX = "leases/"
Line = dict[str, Any]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Virtual time: backoff pauses cost nothing and are counted, not timed."""
    name: str = request.param
    return name, dict(virtual_time_backends())[name]


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def put(name: str, revision: int, *, key: str | None = None) -> Line:
    """A PUT event of lease ``name`` at ``revision`` (under another ``key`` if given)."""
    record = LeaseRecord(name=name, holder="h")
    kv = {
        "key": b64(key if key is not None else PREFIX + name),
        "create_revision": "2",
        "mod_revision": str(revision),
        "version": "1",
        "value": b64(encode_record(record)),
    }
    return {"result": {"header": {"revision": str(revision)}, "events": [{"kv": kv}]}}


CREATED: Line = {"result": {"header": {"revision": "10"}, "created": True}}


class Gateway:
    """Answers ranges (no keys) at the next of ``revisions``, watches with scripted streams."""

    def __init__(
        self, *streams: list[Line] | httpx.Response, revisions: tuple[int, ...] = (10,)
    ) -> None:
        self.streams = list(streams)
        self.revisions = revisions
        #: The create_request of each watch, and how many range reads came.
        self.watches: list[dict[str, Any]] = []
        self.ranges = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            self.ranges += 1
            revision = self.revisions[min(self.ranges, len(self.revisions)) - 1]
            return httpx.Response(200, json={"header": {"revision": str(revision)}})
        assert request.url.path == "/v3/watch"
        self.watches.append(json.loads(request.content)["create_request"])
        stream = self.streams[min(len(self.watches), len(self.streams)) - 1]
        if isinstance(stream, httpx.Response):
            return stream
        return httpx.Response(
            200, content=b"".join(json.dumps(line).encode() + b"\n" for line in stream)
        )

    def feed(self) -> EtcdFeed:
        backend = EtcdBackend(
            ["http://etcd.invalid:2379"], prefix=PREFIX, transport=MockTransport(self)
        )
        return backend.watch_feed()


async def follow(
    feed: EtcdFeed, seconds: float, *names: str
) -> list[tuple[str, LeaseRecord | None]]:
    """Run ``feed`` on ``names`` for ``seconds`` of virtual time; what it published."""
    watched = Watched()
    for name in names:
        watched.add(name)
    published: list[tuple[str, LeaseRecord | None]] = []
    with anyio.move_on_after(seconds):
        await feed.run(watched, lambda name, state: published.append((name, state)))
    return published


async def test_streams_that_fail_are_reopened_after_a_growing_pause() -> None:
    """A gateway failing every watch: the feed keeps trying, ~1 a second at most, never raises."""
    unavailable = httpx.Response(503, json={"code": 14, "message": "etcdserver: no leader"})
    gateway = Gateway(unavailable)
    feed = gateway.feed()
    await follow(feed, 60, "job")
    # 0.05 s doubling to 2 s, jittered x 0.5-1: about 40 attempts in 60 s; a tight loop, millions.
    assert 10 <= len(gateway.watches) <= 70
    assert {w["start_revision"] for w in gateway.watches} == {"11"}  # resumed, never re-listed
    assert gateway.ranges == 1


async def test_an_event_resumes_after_it_and_a_progress_notification_moves_on() -> None:
    """The next stream starts after the last event seen, or after a progress notification."""
    progress: Line = {"result": {"header": {"revision": "50"}}}
    gateway = Gateway([CREATED, put("job", 12)], [CREATED, progress], [CREATED])
    feed = gateway.feed()
    published = await follow(feed, 5, "job", "other")
    starts = [w["start_revision"] for w in gateway.watches[:3]]
    assert starts == ["11", "13", "51"]
    assert gateway.watches[0]["range_end"] == b64("leases0")
    assert published[:2] == [("job", None), ("other", None)]  # the first read: no keys
    assert published[2][0] == "job" and published[2][1] is not None
    assert published[2][1].version == "12"
    assert published[3:] == []


async def test_a_key_outside_the_prefix_is_refused_and_not_skipped_past() -> None:
    """An event of a key outside the prefix is a protocol error: not published, not resumed past."""
    gateway = Gateway([CREATED, put("job", 12, key="elsewhere/job")])
    feed = gateway.feed()
    published = await follow(feed, 5, "job")
    assert published == [("job", None)]
    assert {w["start_revision"] for w in gateway.watches} == {"11"}


async def test_a_compacted_watch_reads_the_keys_again() -> None:
    """A compacted answer makes the feed read the prefix again and watch from that read."""
    compacted: Line = {
        "result": {"header": {"revision": "30"}, "compact_revision": "20", "canceled": True}
    }
    gateway = Gateway([CREATED, compacted], [CREATED], revisions=(10, 30))
    feed = gateway.feed()
    published = await follow(feed, 5, "job")
    assert published == [("job", None), ("job", None)]  # the first read, and the second
    assert [w["start_revision"] for w in gateway.watches[:2]] == ["11", "31"]
    assert (gateway.ranges, feed.reads) == (2, 2)


async def test_a_refused_watch_ends_the_run() -> None:
    """Permission denied on the watch is not retried: run() raises BackendAuthError."""
    denied = httpx.Response(403, json={"code": 7, "message": "etcdserver: permission denied"})
    gateway = Gateway(denied)
    with pytest.raises(BackendAuthError):
        await follow(gateway.feed(), 60, "job")
    assert len(gateway.watches) == 1


async def test_a_key_under_the_prefix_that_is_no_name_is_skipped_and_passed() -> None:
    """A key under the prefix that is not UTF-8 names no lease: not published, resumed past."""
    foreign = put("x", 12)
    foreign["result"]["events"][0]["kv"]["key"] = b64(PREFIX.encode() + b"\xff")
    gateway = Gateway([CREATED, foreign], [CREATED])
    feed = gateway.feed()
    published = await follow(feed, 5, "job")
    assert published == [("job", None)]  # the first read only
    assert [w["start_revision"] for w in gateway.watches[:2]] == ["11", "13"]


async def test_only_lines_whose_events_are_all_own_held_writes_are_skipped_undecoded() -> None:
    """A line of a revision this process wrote as a held state moves the resume point without
    being decoded or published; a line that also carries another write, a line of a revision
    not written here, and a compaction line are decoded as before."""
    both = put("job", 14)
    both["result"]["events"] += put("other", 15)["result"]["events"]
    compacted: Line = {"result": {"header": {"revision": "30"}, "compact_revision": "20"}}
    compacted["result"]["events"] = put("job", 16)["result"]["events"]
    gateway = Gateway([CREATED, put("job", 12), put("job", 13), both, compacted], [CREATED])
    feed = gateway.feed()
    feed.own_writes.update({12: "job", 14: "job", 16: "job"})
    published = await follow(feed, 5, "job", "other")
    assert feed.own_skipped == 1
    assert 12 not in feed.own_writes  # used once, then forgotten
    seen = [(name, None if state is None else state.version) for name, state in published]
    # The first read (no keys), then 13 (foreign), 14 and 15 (one line, with a foreign write),
    # 16 (a compaction line is decoded), and the keys read again after it (no keys).
    assert seen[:8] == [
        ("job", None), ("other", None), ("job", "13"), ("job", "14"), ("other", "15"),
        ("job", "16"), ("job", None), ("other", None),
    ]
    assert gateway.watches[1]["start_revision"] == "11"  # after the compaction: read at 10 again


async def test_the_backend_remembers_its_held_writes_but_not_a_release() -> None:
    """update() records the revision of a held state it wrote (for the feed to skip); a
    release (no holder) is not recorded, so this process's waiters see it on the watch."""
    revisions = iter([21, 22])

    def gateway(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v3/kv/txn"
        return httpx.Response(200, json={"header": {"revision": str(next(revisions))},
                                         "succeeded": True})

    backend = EtcdBackend(["http://etcd.invalid:2379"], prefix=PREFIX,
                          transport=MockTransport(gateway))
    async with backend:
        feed = backend.watch_feed()
        held = await backend.update(LeaseRecord(name="job", holder="me"), "20")
        await backend.update(LeaseRecord(name="job", holder=""), held.version)
    assert feed.own_writes == {21: "job"}


def range_page(*keys: bytes, more: bool) -> dict[str, Any]:
    """A kv/range answer at revision 10 holding lease records under ``keys``, in that order."""
    kvs = []
    for key in keys:
        kv = put("x", 5)["result"]["events"][0]["kv"]
        kvs.append({**kv, "key": b64(key)})
    return {"header": {"revision": "10"}, "kvs": kvs, "more": more}


def read_page(answer: dict[str, Any], start: bytes) -> PrefixPage:
    reader = functools.partial(read_prefix_range, prefix=PREFIX.encode(), start=start)
    return read_answer(json.dumps(answer).encode(), "kv/range", reader, write=False)


UNADVANCING_PAGES = {
    "the same page again": (b"leases/a\0", [b"leases/a"], "kvs[0].key"),
    "a page from before the start": (b"leases/m", [b"leases/b", b"leases/z"], "kvs[0].key"),
    "keys out of order": (b"leases/", [b"leases/b", b"leases/a"], "kvs[1].key"),
    "a key twice": (b"leases/", [b"leases/a", b"leases/a"], "kvs[1].key"),
}


@pytest.mark.parametrize(
    ("start", "keys", "field"), UNADVANCING_PAGES.values(), ids=UNADVANCING_PAGES.keys()
)
def test_a_range_page_that_would_not_advance_the_read_is_a_protocol_error(
    start: bytes, keys: list[bytes], field: str
) -> None:
    """A page whose keys go back before the key it was asked from, or not forward, is refused."""
    with pytest.raises(BackendProtocolError, match=re.escape(field)):
        read_page(range_page(*keys, more=True), start)


def test_range_pages_that_advance_are_read() -> None:
    """Keys in order from the start key on (inclusive) read; the last one is where to go on."""
    page = read_page(range_page(b"leases/a", b"leases/b", more=True), b"leases/")
    assert ([name for name, _ in page.states], page.last_key) == (["a", "b"], b"leases/b")
    assert read_page(range_page(b"leases/a", more=True), b"leases/a").last_key == b"leases/a"
    assert read_page(range_page(more=False), b"leases/a\0").states == []


async def test_a_repeated_range_page_is_asked_again_only_after_a_pause() -> None:
    """A gateway answering every page with the same last key and more=true: the feed backs off
    between reads instead of asking for the same page again at once (no tight request loop)."""
    asked: list[tuple[float, bytes]] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v3/kv/range", "watched before the read completed"
        asked.append((anyio.current_time(), base64.b64decode(json.loads(request.content)["key"])))
        if len(asked) >= 400:  # without the check the loop never sleeps: end it here
            return httpx.Response(503, json={"code": 14, "message": "enough"})
        return httpx.Response(200, json=range_page(b"leases/a", more=True))

    backend = EtcdBackend(
        ["http://etcd.invalid:2379"], prefix=PREFIX, transport=MockTransport(gateway)
    )
    async with backend:
        feed = backend.watch_feed()
        published = await follow(feed, 60, "a")
    # Each read asks from the prefix, then once after "a"; that page is refused, and the next
    # read waits the backoff (0.05 s doubling to 2 s, jittered): about 40 reads in 60 s.
    assert [key for _, key in asked[:4]] == [b"leases/", b"leases/a\0"] * 2
    assert asked[1][0] == asked[0][0] < asked[2][0]
    assert [key for _, key in asked] == [b"leases/", b"leases/a\0"] * feed.reads
    assert 10 <= feed.reads <= 70
    assert ("a", None) not in published  # a read that failed says nothing of absent keys
