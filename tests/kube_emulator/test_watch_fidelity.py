"""docs/design.md §8.3, §8.6: resourceNames for list/watch, selectors on watches, the bookmark
cadence and the time-based compaction window."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, create, lease

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


async def _watch(http: httpx.AsyncClient, events: list[tuple[float, JSON]], **params: str) -> None:
    """Collect (arrival time, event) of one watch until the server ends it."""
    async with http.stream("GET", LEASES, params={"watch": "1", **params}) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            events.append((anyio.current_time(), json.loads(line)))


async def test_resource_names_allow_list_and_watch_narrowed_to_the_name() -> None:
    """A resourceNames rule allows list/watch with fieldSelector metadata.name=<its name> only
    (plugin/pkg/auth/authorizer/rbac ResourceNameMatches; requestinfo.go names the request)."""
    emulator = KubeEmulator()
    emulator.add_token("t", "dave")
    emulator.grant("dave", ["get", "list", "watch"], resource_names=["mine"])
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "mine"}})
    async with client(emulator, "t") as http:
        narrowed = await http.get(LEASES, params={"fieldSelector": "metadata.name=mine"})
        double = await http.get(LEASES, params={"fieldSelector": "metadata.name==mine"})
        watch = await http.get(LEASES, params={
            "watch": "1", "fieldSelector": "metadata.name=mine", "timeoutSeconds": "1",
        })
        everything = await http.get(LEASES)
        other = await http.get(LEASES, params={"fieldSelector": "metadata.name=theirs"})
        negated = await http.get(LEASES, params={"fieldSelector": "metadata.name!=theirs"})
    assert narrowed.status_code == 200
    assert [i["metadata"]["name"] for i in narrowed.json()["items"]] == ["mine"]
    assert double.status_code == 200
    assert watch.status_code == 200
    assert everything.status_code == 403
    assert everything.json()["message"] == (
        'leases.coordination.k8s.io is forbidden: User "dave" cannot list resource "leases" in '
        'API group "coordination.k8s.io" in the namespace "default"'
    )
    assert other.status_code == 403
    assert other.json()["message"].startswith('leases.coordination.k8s.io "theirs" is forbidden')
    assert negated.status_code == 403


async def test_label_selector_on_a_watch_turns_label_changes_into_added_and_deleted() -> None:
    """A watch with labelSelector sees an object entering the selection as ADDED and leaving it
    as DELETED (apiserver/pkg/storage/cacher/cache_watcher.go convertToWatchEvent)."""
    emulator = KubeEmulator()
    events: list[tuple[float, JSON]] = []
    async with client(emulator, timeout=None) as http:
        body = lease("a")
        created = (await http.post(LEASES, json=body)).json()
        await create(http, "b")
        rv = emulator.resource_version
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _watch(http, events, resourceVersion=rv,
                                            labelSelector="app=web", timeoutSeconds="10"))
            await anyio.sleep(1)
            created["metadata"]["labels"] = {"app": "web"}
            created = (await http.put(f"{LEASES}/a", json=created)).json()
            created["spec"]["holderIdentity"] = "x"
            created = (await http.put(f"{LEASES}/a", json=created)).json()
            created["metadata"]["labels"] = {"app": "db"}
            left = (await http.put(f"{LEASES}/a", json=created)).json()
            await http.delete(f"{LEASES}/b")
    seen = [(e["type"], e["object"]["metadata"]["name"]) for _, e in events]
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    gone = events[2][1]["object"]
    assert gone["metadata"]["labels"] == {"app": "web"}  # the object as it last matched
    assert gone["metadata"]["resourceVersion"] == left["metadata"]["resourceVersion"]


async def test_bookmarks_every_minute_from_the_start_and_before_the_timeout() -> None:
    """allowWatchBookmarks: a BOOKMARK each minute from the watch's start, events or not, and
    one 2 s before timeoutSeconds (apiserver/pkg/storage/cacher/cache_watcher.go
    nextBookmarkTime, bookmarkFrequency one minute)."""
    emulator = KubeEmulator()
    events: list[tuple[float, JSON]] = []
    async with client(emulator, timeout=None) as http:
        current = await create(http, "a")
        start = anyio.current_time()
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _watch(
                http, events, resourceVersion=emulator.resource_version,
                allowWatchBookmarks="true", timeoutSeconds="150",
            ))
            for _ in range(4):  # a change every 30 s does not hold the bookmarks back
                await anyio.sleep(30)
                current["spec"]["holderIdentity"] = str(anyio.current_time())
                current = (await http.put(f"{LEASES}/a", json=current)).json()
    bookmarks = [round(at - start) for at, e in events if e["type"] == "BOOKMARK"]
    assert bookmarks == [60, 120, 148]
    assert [e["type"] for _, e in events].count("MODIFIED") == 4


async def test_no_bookmark_when_the_timeout_is_too_short() -> None:
    """A watch of 2 s or less gets no bookmark (nextBookmarkTime: the pre-timeout time passed)."""
    emulator = KubeEmulator()
    events: list[tuple[float, JSON]] = []
    async with client(emulator, timeout=None) as http:
        await _watch(http, events, resourceVersion=emulator.resource_version,
                     allowWatchBookmarks="true", timeoutSeconds="2")
    assert events == []


async def test_too_old_is_decided_by_the_compaction_window_not_an_event_count() -> None:
    """A resourceVersion survives any number of events until two compactor ticks pass it (every
    compaction_interval seconds, apiserver/pkg/storage/etcd3/compact.go), then it is 410."""
    emulator = KubeEmulator(compaction_interval=300)
    async with client(emulator, timeout=None) as http:
        current = await create(http, "a")
        old = current["metadata"]["resourceVersion"]
        for i in range(3000):  # far more than any count-based history would keep
            current["spec"]["holderIdentity"] = str(i)
            current = (await http.put(f"{LEASES}/a", json=current)).json()
        early: list[tuple[float, JSON]] = []
        await _watch(http, early, resourceVersion=old, timeoutSeconds="1")
        await anyio.sleep(301)  # the first tick (at 300 s) only records the revision
        await create(http, "b")
        still: list[tuple[float, JSON]] = []
        await _watch(http, still, resourceVersion=old, timeoutSeconds="1")
        await anyio.sleep(300)  # the second tick compacts to what the first recorded
        late: list[tuple[float, JSON]] = []
        await _watch(http, late, resourceVersion=old, timeoutSeconds="1")
        fresh: list[tuple[float, JSON]] = []
        await _watch(http, fresh, resourceVersion=emulator.resource_version, timeoutSeconds="1")
    assert len(early) == 3000
    assert len(still) == 3001
    assert [(e["type"], e["object"]["reason"]) for _, e in late] == [("ERROR", "Expired")]
    assert fresh == []


async def test_compaction_interval_none_keeps_history() -> None:
    """compaction_interval=None never compacts by time (only compact() or history=N do)."""
    emulator = KubeEmulator(compaction_interval=None)
    async with client(emulator, timeout=None) as http:
        old = (await create(http, "a"))["metadata"]["resourceVersion"]
        await anyio.sleep(3600)
        await create(http, "b")
        events: list[tuple[float, JSON]] = []
        await _watch(http, events, resourceVersion=old, timeoutSeconds="1")
    assert [e["type"] for _, e in events] == ["ADDED"]


async def test_field_selector_not_equal_on_a_watch() -> None:
    """A watch with fieldSelector metadata.name!=a sees every other object only
    (apimachinery/pkg/fields/selector.go notHasTerm)."""
    emulator = KubeEmulator()
    events: list[tuple[float, JSON]] = []
    async with client(emulator, timeout=None) as http:
        rv = emulator.resource_version
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _watch(http, events, resourceVersion=rv,
                                            fieldSelector="metadata.name!=a", timeoutSeconds="5"))
            await anyio.sleep(1)
            await create(http, "a")
            await create(http, "b")
    assert [(e["type"], e["object"]["metadata"]["name"]) for _, e in events] == [("ADDED", "b")]
