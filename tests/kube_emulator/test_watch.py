"""docs/design.md §8.6: watch streams, resume, bookmarks, 410 Expired, timeouts, cuts."""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, create

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


async def _watch(http: httpx.AsyncClient, events: list[JSON], **params: str) -> None:
    """Collect the events of one watch until the server ends it."""
    query = {"watch": "1", **params}
    async with http.stream("GET", LEASES, params=query) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            events.append(json.loads(line))


async def test_watch_streams_changes_of_one_name() -> None:
    """fieldSelector metadata.name: MODIFIED and DELETED of that Lease only, one JSON per line."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        created = await create(http, "a", holderIdentity="x")
        await create(http, "b")
        rv = created["metadata"]["resourceVersion"]
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: _watch(http, events, fieldSelector="metadata.name=a", resourceVersion=rv,
                               timeoutSeconds="10")
            )
            await anyio.sleep(1)
            created["spec"]["holderIdentity"] = "y"
            await http.put(f"{LEASES}/a", json=created)
            await http.delete(f"{LEASES}/b")
            await http.delete(f"{LEASES}/a")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"), ("DELETED", "a")
    ]
    modified = events[0]["object"]
    assert modified["kind"] == "Lease"
    assert modified["apiVersion"] == "coordination.k8s.io/v1"
    assert modified["spec"]["holderIdentity"] == "y"
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(
        modified["metadata"]["resourceVersion"]
    )


async def test_watch_without_resource_version_starts_with_added() -> None:
    """A watch without resourceVersion first sends ADDED for each existing object."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        await create(http, "a")
        await create(http, "b")
        await _watch(http, events, timeoutSeconds="1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b")
    ]


async def test_watch_resumes_after_a_resource_version() -> None:
    """Watching from resourceVersion R replays exactly the changes after R."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        first = await create(http, "a", holderIdentity="1")
        first["spec"]["holderIdentity"] = "2"
        second = (await http.put(f"{LEASES}/a", json=first)).json()
        second["spec"]["holderIdentity"] = "3"
        await http.put(f"{LEASES}/a", json=second)
        await _watch(http, events, resourceVersion=second["metadata"]["resourceVersion"],
                     timeoutSeconds="1")
    assert [e["object"]["spec"]["holderIdentity"] for e in events] == ["3"]


async def test_bookmarks_carry_only_the_resource_version() -> None:
    """allowWatchBookmarks: BOOKMARK events with the current resourceVersion, nothing else."""
    emulator = KubeEmulator(bookmark_interval=10)
    events: list[JSON] = []
    plain: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        await create(http, "a")
        rv = emulator.resource_version
        await _watch(http, events, resourceVersion=rv, allowWatchBookmarks="true",
                     timeoutSeconds="25")
        await _watch(http, plain, resourceVersion=rv, timeoutSeconds="25")
    # At 10 s and 20 s, and 2 s before the 25 s timeout (cacher's nextBookmarkTime).
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK", "BOOKMARK"]
    assert events[0]["object"] == {
        "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"resourceVersion": rv, "creationTimestamp": None}, "spec": {},
    }
    assert plain == []


async def test_send_bookmarks_on_demand() -> None:
    """send_bookmarks() sends a BOOKMARK at once on watches that allow them."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http, anyio.create_task_group() as group:
        group.start_soon(lambda: _watch(http, events, resourceVersion=emulator.resource_version,
                                        allowWatchBookmarks="1", timeoutSeconds="5"))
        await anyio.sleep(1)
        emulator.send_bookmarks()
    # The one asked for at 1 s, then the one 2 s before the timeout (cacher's nextBookmarkTime).
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]


async def test_too_old_resource_version_is_an_expired_error_event() -> None:
    """After compaction, a watch from an old RV gets 200 then one ERROR 410 Expired and ends."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        old = (await create(http, "a"))["metadata"]["resourceVersion"]
        await create(http, "b")
        emulator.compact()
        await _watch(http, events, resourceVersion=old, timeoutSeconds="60")
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {old} ({emulator.resource_version})",
        "reason": "Expired", "code": 410,
    }


async def test_history_limit_and_http_410_option() -> None:
    """Beyond `history` events an RV is too old; watch_expired_status answers HTTP 410."""
    emulator = KubeEmulator(history=2, watch_expired_status=True)
    async with client(emulator, timeout=None) as http:
        old = (await create(http, "a"))["metadata"]["resourceVersion"]
        for name in ("b", "c", "d"):
            await create(http, name)
        response = await http.get(LEASES, params={"watch": "1", "resourceVersion": old})
        recent = await http.get(LEASES, params={
            "watch": "1", "resourceVersion": str(int(emulator.resource_version) - 1),
            "timeoutSeconds": "1",
        })
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"
    assert recent.status_code == 200
    assert [json.loads(line)["object"]["metadata"]["name"] for line in recent.text.splitlines()] == ["d"]  # noqa: E501


async def test_timeout_seconds_ends_the_stream_cleanly() -> None:
    """The server closes a watch after timeoutSeconds with a clean end of stream."""
    emulator = KubeEmulator()
    async with client(emulator, timeout=None) as http:
        started = anyio.current_time()
        await _watch(http, [], resourceVersion=emulator.resource_version, timeoutSeconds="300")
        assert anyio.current_time() - started == pytest.approx(300, abs=1)


async def test_cut_watches_drops_one_clients_stream() -> None:
    """cut_watches(token): that client's stream breaks mid-body; other watches continue."""
    emulator = KubeEmulator()
    emulator.add_token("ta", "a", groups=("system:masters",))
    emulator.add_token("tb", "b", groups=("system:masters",))
    outcome: dict[str, str] = {}
    async with client(emulator, "ta", timeout=None) as a, client(emulator, "tb", timeout=None) as b:

        async def watch(name: str, http: httpx.AsyncClient) -> None:
            try:
                await _watch(http, [], resourceVersion=emulator.resource_version,
                             timeoutSeconds="10")
                outcome[name] = "clean"
            except httpx.RemoteProtocolError:
                outcome[name] = "cut"

        async with anyio.create_task_group() as group:
            group.start_soon(watch, "a", a)
            group.start_soon(watch, "b", b)
            await anyio.sleep(1)
            assert emulator.cut_watches("ta") == 1
    assert outcome == {"a": "cut", "b": "clean"}


async def test_expire_watches_sends_410_to_open_streams() -> None:
    """expire_watches() sends open watches a 410 ERROR; fail(410) forces it on the next watch."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with client(emulator, timeout=None) as http:
        rv = (await create(http, "a"))["metadata"]["resourceVersion"]
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _watch(http, events, resourceVersion=rv, timeoutSeconds="60"))
            await anyio.sleep(1)
            assert emulator.expire_watches() == 1
        again: list[JSON] = []
        emulator.faults.fail(410, verbs={"watch"}, times=1)
        await _watch(http, again, resourceVersion=rv, timeoutSeconds="60")
        third: list[JSON] = []
        await _watch(http, third, resourceVersion=rv, timeoutSeconds="1")
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    assert events[0]["object"]["message"] == f"too old resource version: {rv} ({rv})"
    assert [e["type"] for e in again] == ["ERROR"]
    assert again[0]["object"]["reason"] == "Expired"
    assert third == []


async def test_unsupported_field_selector_is_bad_request() -> None:
    """A fieldSelector on a field other than metadata.name/namespace is 400."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.get(LEASES, params={"watch": "1", "fieldSelector": "spec.x=1"})
    assert response.status_code == 400


async def test_a_change_is_encoded_once_for_all_its_watches_and_each_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit seen by several watches is serialized once; each watch still gets the change."""
    from trio_lease.testing.kube import _cluster

    dumped: list[Any] = []
    real = json.dumps

    class _Counting:
        loads = staticmethod(json.loads)

        @staticmethod
        def dumps(obj: Any) -> str:
            dumped.append(obj)
            return real(obj)

    emulator = KubeEmulator()
    streams: list[list[JSON]] = [[], [], []]
    async with client(emulator, timeout=None) as http:
        created = await create(http, "a", holderIdentity="x")
        rv = created["metadata"]["resourceVersion"]
        async with anyio.create_task_group() as group:
            for events in streams:
                group.start_soon(
                    functools.partial(
                        _watch, http, events, fieldSelector="metadata.name=a",
                        resourceVersion=rv, timeoutSeconds="3",
                    )
                )
            await anyio.sleep(1)
            monkeypatch.setattr(_cluster, "json", _Counting)
            created["spec"]["holderIdentity"] = "y"
            assert (await http.put(f"{LEASES}/a", json=created)).status_code == 200
            monkeypatch.setattr(_cluster, "json", json)
    assert len(dumped) == 1
    for events in streams:
        assert [(e["type"], e["object"]["spec"]["holderIdentity"]) for e in events] == [
            ("MODIFIED", "y")
        ]
