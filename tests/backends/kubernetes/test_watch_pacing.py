"""Watch pacing (``_pacing.py``): replayed versions and short streams never reopen at once.

A fake API server (tests/hostile's handler behind an httpx transport) answers the LIST with the
lease at resourceVersion "1" and every watch with one MODIFIED event, after a given life, then
ends the stream. Both watches are driven for a minute of virtual time, on asyncio and trio; the
number of watch requests in that minute is the measure (no wall-clock timing).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from tests.hostile._server import HostileTransport, Reply, Request
from trio_lease._abc import Watched
from trio_lease.backends.kubernetes import KubernetesBackend
from trio_lease.backends.kubernetes._pacing import FIRST_BACKOFF, SEEN_VERSIONS, Cursor

from ._helpers import make_backend

pytestmark = pytest.mark.anyio
POLL = 5.0
MINUTE = 60.0
#: Reopenings a minute may cost when every stream is useless: the backoff reaches POLL after a
#: few doublings, and each wait is at least half of it.
PACED = 2 * MINUTE / POLL + 8
#: Past this many watch requests the server stops answering: without pacing, a loop that never
#: sleeps would otherwise never let virtual time reach the minute.
LIMIT = 2000


def _lease(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "job",
            "namespace": "default",
            "uid": "uid-1",
            "resourceVersion": version,
            "labels": {"app.kubernetes.io/managed-by": "trio-lease"},
        },
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 1},
    }


def _json(body: object) -> Reply:
    return Reply(200, json.dumps(body).encode(), [("Content-Type", "application/json")])


class OneEventServer:
    """Every watch: ``life`` seconds, then one MODIFIED event at ``versions()``'s next, then
    the end of the stream. Records when each watch request came."""

    def __init__(self, versions: Callable[[], str], life: float) -> None:
        self.versions = versions
        self.life = life
        self.watches: list[float] = []

    async def __call__(self, request: Request, *, socket: bool) -> Reply:
        if request.query.get("watch") != "1":
            if request.path.endswith("/leases"):
                listing = {"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                           "metadata": {"resourceVersion": "1"}, "items": [_lease("1")]}
                return _json(listing)
            return _json(_lease("1"))
        self.watches.append(anyio.current_time())
        if len(self.watches) > LIMIT:
            await anyio.sleep_forever()  # a tight loop: stop it here, the count tells
        event = json.dumps({"type": "MODIFIED", "object": _lease(self.versions())}).encode()

        async def chunks() -> AsyncIterator[bytes]:
            await anyio.sleep(self.life)
            yield event + b"\n"

        return Reply(200, headers=[("Content-Type", "application/json")], mode="stream",
                     chunks=chunks())


def _replayed() -> Callable[[], str]:
    """Versions that go back: "2", "1", "2", "1", …"""
    return itertools.cycle(["2", "1"]).__next__


def _invented() -> Callable[[], str]:
    """A version never seen before, every time: "2", "3", "4", …"""
    return map(str, itertools.count(2)).__next__


async def _watch_lease(backend: KubernetesBackend) -> None:
    async with backend.watch("job") as states:
        async for _ in states:
            pass


async def _watch_feed(backend: KubernetesBackend) -> None:
    feed = backend.watch_feed()
    assert feed is not None
    watched = Watched()
    watched.add("job")
    await feed.run(watched, lambda key, state: None)


WATCHES = [_watch_lease, _watch_feed]
IDS = ["watch_lease", "label-feed"]


async def _serve(server: OneEventServer, follow: Callable[[KubernetesBackend], Any]) -> None:
    """Run ``follow`` on a backend talking to ``server`` for a minute of virtual time."""
    async with make_backend(HostileTransport(server), watch_poll_interval=POLL) as backend:
        with anyio.move_on_after(MINUTE):
            await follow(backend)


@pytest.mark.parametrize("follow", WATCHES, ids=IDS)
async def test_replayed_versions_are_no_news(follow: Callable[[KubernetesBackend], Any]) -> None:
    """Streams that live, each bringing an older version again ("2", "1", …), are paced."""
    server = OneEventServer(_replayed(), life=2 * FIRST_BACKOFF)
    await _serve(server, follow)
    assert 2 <= len(server.watches) <= PACED  # unpaced: one every 0.2 s, 300 a minute


@pytest.mark.parametrize("follow", WATCHES, ids=IDS)
async def test_short_streams_never_reset_the_backoff(
    follow: Callable[[KubernetesBackend], Any],
) -> None:
    """Streams that end at once are paced even when each brings a version never seen."""
    server = OneEventServer(_invented(), life=0.0)
    await _serve(server, follow)
    assert 2 <= len(server.watches) <= PACED  # unpaced: a loop that never sleeps


@pytest.mark.parametrize("follow", WATCHES, ids=IDS)
async def test_news_in_a_stream_that_lived_resumes_at_once(
    follow: Callable[[KubernetesBackend], Any],
) -> None:
    """An honest server: a stream that lived and brought a change is reopened without a wait."""
    server = OneEventServer(_invented(), life=1.0)
    await _serve(server, follow)
    gaps = [later - earlier for earlier, later in itertools.pairwise(server.watches)]
    assert len(gaps) >= MINUTE - 2
    assert gaps == pytest.approx([1.0] * len(gaps))


@pytest.mark.parametrize(("seen", "version", "news"), [
    ([], "7", True),
    (["7"], "7", False),  # a repeat
    (["2", "1"], "2", False),  # a replay of an older version
    (["1"], "", False),  # no version: never progress
    ([str(i) for i in range(SEEN_VERSIONS + 1)], "0", True),  # forgotten: the ring is bounded
    ([str(i) for i in range(SEEN_VERSIONS)], "0", False),
])
def test_news_is_a_version_not_seen_lately(seen: list[str], version: str, news: bool) -> None:
    """A cursor counts an event as useful only at a version it has not met among its last few
    (opaque strings: equality only, never "higher")."""
    cursor = Cursor("", None)
    for earlier in seen:
        cursor.moved_to(earlier)
    before = cursor.useful
    cursor.moved_to(version)
    assert cursor.useful - before == news
    assert cursor.version == version
