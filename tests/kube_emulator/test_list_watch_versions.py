"""List and watch resourceVersion semantics over a real socket.

Follows staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go
(``ValidateListOptions``: 422 on ``ListOptions.meta.k8s.io``), staging/src/k8s.io/apiserver/pkg/
storage/cacher/cacher.go (``shouldDelegateList``: ``resourceVersion=0`` is served whole from
the watch cache, ``limit`` or not; ``isListWatchRequest``), staging/src/k8s.io/apiserver/pkg/
storage/cacher/watch_cache.go (``waitUntilFreshAndBlock``: 3 s, then 504), staging/src/k8s.io/
apiserver/pkg/storage/errors.go (``NewTooLargeResourceVersionError``) and staging/src/k8s.io/
apiserver/pkg/storage/etcd3/store.go (the legacy exact read of a paginated list).
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


def _names(response: httpx.Response) -> list[str]:
    return [item["metadata"]["name"] for item in response.json()["items"]]


async def test_list_options_are_validated() -> None:
    """resourceVersionMatch without resourceVersion, sendInitialEvents on a list, and a watch's
    resourceVersionMatch without sendInitialEvents are 422 on ListOptions."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        no_rv = await http.get(LEASES, params={"resourceVersionMatch": "NotOlderThan"})
        initial = await http.get(LEASES, params={"sendInitialEvents": "true"})
        watch = await http.get(LEASES, params={"watch": "1", "resourceVersionMatch": "Exact"})
    assert no_rv.status_code == 422
    assert no_rv.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                   "resourceVersionMatch is forbidden unless resourceVersion is provided",
        "reason": "Invalid",
        "details": {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{
            "reason": "FieldValueForbidden",
            "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion "
                       "is provided",
            "field": "resourceVersionMatch"}]},
        "code": 422,
    }
    assert initial.json()["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
        "sendInitialEvents is forbidden for list"
    )
    assert watch.status_code == 422
    assert watch.json()["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, "
        'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"]'
    )


async def test_resource_version_0_is_served_whole_and_a_version_with_limit_exactly() -> None:
    """rv=0&limit=2 is the whole list without continue; rv=N&limit=2 pages the list as at N."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        for index in range(5):
            await http.post(LEASES, json=lease(f"l{index}"))
        before = emulator.resource_version
        await http.post(LEASES, json=lease("later"))
        cached = await http.get(LEASES, params={"resourceVersion": "0", "limit": "2"})
        latest = await http.get(LEASES, params={"limit": "2"})
        first = await http.get(LEASES, params={"resourceVersion": before, "limit": "2"})
        rest = await http.get(LEASES, params={"continue": first.json()["metadata"]["continue"],
                                              "limit": "2"})
        rest2 = await http.get(LEASES, params={"continue": rest.json()["metadata"]["continue"],
                                               "limit": "2"})
    assert _names(cached) == ["l0", "l1", "l2", "l3", "l4", "later"]
    assert "continue" not in cached.json()["metadata"]
    assert _names(latest) == ["l0", "l1"]
    assert "continue" in latest.json()["metadata"]
    assert first.json()["metadata"]["resourceVersion"] == before
    assert _names(first) + _names(rest) + _names(rest2) == ["l0", "l1", "l2", "l3", "l4"]
    assert "continue" not in rest2.json()["metadata"]


async def test_a_version_from_the_future_waits_then_is_504() -> None:
    """A list at a version not reached yet waits (fresh_wait), then 504 Too large resource
    version; a write during the wait answers it."""
    emulator = KubeEmulator(fresh_wait=0.5)
    async with served(emulator) as (_, http):
        current = int(emulator.resource_version)
        started = time.monotonic()
        refused = await http.get(LEASES, params={"resourceVersion": str(current + 100)})
        waited = time.monotonic() - started
        at_once = await http.get(LEASES, params={
            "resourceVersion": str(current + 100), "resourceVersionMatch": "NotOlderThan",
            "limit": "5",
        })
        answered: list[httpx.Response] = []

        async def list_ahead() -> None:
            answered.append(await http.get(LEASES, params={"resourceVersion": str(current + 1)}))

        async with anyio.create_task_group() as group:
            group.start_soon(list_ahead)
            await anyio.sleep(0.1)
            await http.post(LEASES, json=lease("arrives"))
    assert refused.status_code == 504
    assert waited >= 0.5
    assert refused.headers["retry-after"] == "1"
    assert refused.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"Timeout: Too large resource version: {current + 100}, current: {current}",
        "reason": "Timeout",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version"}],
                    "retryAfterSeconds": 1},
        "code": 504,
    }
    assert at_once.status_code == 504  # from etcd: checked at once, no retry advice
    assert "retryAfterSeconds" not in at_once.json()["details"]
    assert answered[0].status_code == 200
    assert _names(answered[0]) == ["arrives"]


async def test_send_initial_events_ends_with_the_annotated_bookmark() -> None:
    """sendInitialEvents=true: ADDED for each object, then a BOOKMARK annotated
    k8s.io/initial-events-end at the list's revision, then live events."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        await http.post(LEASES, json=lease("a"))
        await http.post(LEASES, json=lease("b"))
        revision = emulator.resource_version
        events: list[JSON] = []
        params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "30"}
        with anyio.fail_after(10):
            async with http.stream("GET", LEASES, params=params) as response:
                lines = response.aiter_lines()
                for _ in range(3):
                    events.append(json.loads(await anext(lines)))
                await http.post(LEASES, json=lease("c"))
                events.append(json.loads(await anext(lines)))
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None), ("ADDED", "c"),
    ]
    assert events[2]["object"] == {
        "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"resourceVersion": revision, "creationTimestamp": None,
                     "annotations": {"k8s.io/initial-events-end": "true"}},
        "spec": {},
    }


async def test_a_watch_from_a_future_version_sends_only_later_events() -> None:
    """A watch from a version not reached yet starts, and sends only events after it
    (cache_watcher.go process: "only send events newer than resourceVersion")."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        ahead = str(int(emulator.resource_version) + 2)
        params = {"watch": "1", "resourceVersion": ahead, "timeoutSeconds": "30"}
        async with http.stream("GET", LEASES, params=params) as response:
            for name in ("a", "b", "c"):
                await http.post(LEASES, json=lease(name))
            with anyio.fail_after(10):
                first = json.loads(await anext(response.aiter_lines()))
    assert response.status_code == 200
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "c")
    assert int(first["object"]["metadata"]["resourceVersion"]) == int(ahead) + 1
