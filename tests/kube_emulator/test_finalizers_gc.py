"""Deletion with finalizers and owner-reference garbage collection, over a real socket.

Follows staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go (``Delete``:
``deletionTimestamp`` while finalizers remain; ``Update`` deletes once the last is removed),
staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go (``BeforeDelete``),
staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go
(``ValidateNoNewFinalizers``), staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/
validation.go (``ValidateDeleteOptions``) and pkg/controller/garbagecollector/
garbagecollector.go (``attemptToDeleteItem``: dependents whose owners are all gone are deleted,
dangling references are removed; orphan and foreground propagation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
MERGE = {"Content-Type": "application/merge-patch+json"}


def _owned(name: str, *owners: JSON, finalizers: list[str] | None = None) -> JSON:
    body = lease(name, holderIdentity="x")
    refs = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]} for o in owners]
    if refs:
        body["metadata"]["ownerReferences"] = refs
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    return body


async def _create(http: httpx.AsyncClient, body: JSON) -> JSON:
    response = await http.post(LEASES, json=body)
    assert response.status_code == 201, response.text
    created: JSON = response.json()
    return created


async def test_finalizers_keep_a_deleted_object_until_removed() -> None:
    """DELETE sets deletionTimestamp and keeps the object; no new finalizer may be added;
    removing the last one deletes it (MODIFIED, then DELETED for a watcher)."""
    emulator = KubeEmulator()
    events: list[JSON] = []
    async with served(emulator) as (_, http):
        created = await _create(http, _owned("held", finalizers=["example.com/hold"]))
        params = {"watch": "1", "resourceVersion": created["metadata"]["resourceVersion"],
                  "timeoutSeconds": "30"}
        async with http.stream("GET", LEASES, params=params) as watch:
            lines = watch.aiter_lines()
            deleted = await http.delete(f"{LEASES}/held")
            kept = await http.get(f"{LEASES}/held")
            body = kept.json()
            body["metadata"]["finalizers"].append("example.com/late")
            added = await http.put(f"{LEASES}/held", json=body)
            released = await http.patch(f"{LEASES}/held", headers=MERGE,
                                        content=json.dumps({"metadata": {"finalizers": None}}))
            with anyio.fail_after(10):
                for _ in range(3):
                    events.append(json.loads(await anext(lines)))
        gone = await http.get(f"{LEASES}/held")
    assert deleted.status_code == 200
    meta = deleted.json()["metadata"]
    assert meta["finalizers"] == ["example.com/hold"]
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["deletionTimestamp"].endswith("Z")
    assert kept.status_code == 200
    assert kept.json()["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    assert added.status_code == 422
    assert added.json()["message"] == (
        'Lease.coordination.k8s.io "held" is invalid: metadata.finalizers: Forbidden: no new '
        'finalizers can be added if the object is being deleted, found new finalizers '
        '[]string{"example.com/late"}'
    )
    assert released.status_code == 200
    assert gone.status_code == 404
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]


async def test_background_propagation_collects_dependents() -> None:
    """Deleting an owner deletes dependents whose owners are all gone (and theirs in turn);
    a dependent with another live owner only loses the dangling reference."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        owner = await _create(http, _owned("owner"))
        other = await _create(http, _owned("other"))
        child = await _create(http, _owned("child", owner))
        await _create(http, _owned("grandchild", child))
        await _create(http, _owned("shared", owner, other))
        deleted = await http.delete(f"{LEASES}/owner")
        names = [i["metadata"]["name"] for i in (await http.get(LEASES)).json()["items"]]
        shared = (await http.get(f"{LEASES}/shared")).json()
    assert deleted.status_code == 200
    assert deleted.json()["status"] == "Success"
    assert names == ["other", "shared"]
    assert shared["metadata"]["ownerReferences"] == [{
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "other",
        "uid": other["metadata"]["uid"],
    }]


async def test_orphan_and_foreground_propagation() -> None:
    """Orphan keeps the dependents without the reference; Foreground deletes them first;
    an unknown policy is 422 on DeleteOptions."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        parent = await _create(http, _owned("parent"))
        await _create(http, _owned("orphan", parent))
        await http.request("DELETE", f"{LEASES}/parent",
                           content=json.dumps({"propagationPolicy": "Orphan"}))
        orphan = (await http.get(f"{LEASES}/orphan")).json()
        boss = await _create(http, _owned("boss"))
        await _create(http, _owned("worker", boss))
        foreground = await http.request("DELETE", f"{LEASES}/boss",
                                        params={"propagationPolicy": "Foreground"})
        left = [i["metadata"]["name"] for i in (await http.get(LEASES)).json()["items"]]
        bogus = await http.request("DELETE", f"{LEASES}/orphan",
                                   params={"propagationPolicy": "Later"})
    assert "ownerReferences" not in orphan["metadata"]
    assert foreground.status_code == 200
    assert left == ["orphan"]
    assert bogus.status_code == 422
    assert bogus.json()["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"Later": supported values: "Foreground", "Background", "Orphan", "nil"'
    )


@needs_kubectl
async def test_kubectl_delete_waits_on_a_finalizer_and_cascades(tmp_path: Path) -> None:
    """kubectl delete --wait=false leaves a finalized Lease Terminating until a patch removes
    the finalizer; kubectl delete --cascade=orphan keeps the dependent."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    async with served(emulator) as (server, http):
        await _create(http, _owned("kept", finalizers=["example.com/hold"]))
        parent = await _create(http, _owned("parent"))
        await _create(http, _owned("child", parent))
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        deleted = await run_kubectl(config, "delete", "lease", "kept", "--wait=false")
        stamp = await run_kubectl(config, "get", "lease", "kept", "-o",
                                  "jsonpath={.metadata.deletionTimestamp}")
        patched = await run_kubectl(config, "patch", "lease", "kept", "--type=json", "-p",
                                    '[{"op": "remove", "path": "/metadata/finalizers"}]')
        orphaned = await run_kubectl(config, "delete", "lease", "parent", "--cascade=orphan")
        left = await run_kubectl(config, "get", "leases", "-o", "name")
    assert deleted.stdout.strip() == 'lease.coordination.k8s.io "kept" deleted'
    assert stamp.stdout.endswith("Z")
    assert patched.returncode == 0, patched.stderr
    assert emulator.get_lease("kept") is None
    assert orphaned.returncode == 0, orphaned.stderr
    assert left.stdout.split() == ["lease.coordination.k8s.io/child"]
