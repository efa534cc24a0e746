"""metadata.managedFields on every write (apiserver/pkg/endpoints/handlers/fieldmanager)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import AKKA, LEASES, client, lease, with_akka_crd

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


def _by_manager(obj: JSON) -> dict[str, JSON]:
    return {e.get("manager", ""): e for e in obj["metadata"]["managedFields"]}


async def test_create_records_the_user_agent_prefix_as_an_update() -> None:
    """The manager is the User-Agent before its first '/' (create.go, prefixFromUserAgent)."""
    emulator = KubeEmulator()
    body = lease("a", holderIdentity="me", leaseDurationSeconds=10)
    body["metadata"]["labels"] = {"app": "x"}
    async with client(emulator, headers={"User-Agent": "kubectl-create/v1.32.0 (linux)"}) as http:
        response = await http.post(LEASES, json=body)
    created = response.json()
    meta = created["metadata"]
    assert list(meta)[-1] == "managedFields"  # last in ObjectMeta's field order
    assert meta["managedFields"] == [{
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": "coordination.k8s.io/v1",
        "time": meta["creationTimestamp"],
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}},
        },
    }]


async def test_field_manager_query_wins_over_the_user_agent() -> None:
    """?fieldManager= names the manager when given (create.go, managerOrUserAgent)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "agent/1"}) as http:
        response = await http.post(
            LEASES, params={"fieldManager": "mine"}, json=lease("a", holderIdentity="me")
        )
    assert list(_by_manager(response.json())) == ["mine"]


async def test_update_moves_changed_fields_to_the_writer() -> None:
    """An update takes the fields it changes from other managers (managedfieldsupdater.go)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "first/1"}) as http:
        created = (await http.post(
            LEASES, json=lease("a", holderIdentity="me", leaseDurationSeconds=10)
        )).json()
    async with client(emulator, headers={"User-Agent": "second/1"}) as http:
        created["spec"]["holderIdentity"] = "you"
        updated = (await http.put(f"{LEASES}/a", json=created)).json()
        # Same bytes again: no write, no new entry, same resourceVersion (GuaranteedUpdate).
        again = (await http.put(f"{LEASES}/a", json=updated)).json()
    managers = _by_manager(updated)
    assert managers["first"]["fieldsV1"] == {"f:spec": {"f:leaseDurationSeconds": {}}}
    assert managers["second"]["fieldsV1"] == {"f:spec": {"f:holderIdentity": {}}}
    assert again == updated


async def test_removed_fields_leave_every_entry() -> None:
    """A removed field is owned by no one afterwards (structured-merge-diff merge/update.go)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "first/1"}) as http:
        created = (await http.post(
            LEASES, json=lease("a", holderIdentity="me", leaseDurationSeconds=10)
        )).json()
        del created["spec"]["holderIdentity"]
        updated = (await http.put(f"{LEASES}/a", json=created)).json()
    assert _by_manager(updated)["first"]["fieldsV1"] == {
        "f:spec": {"f:leaseDurationSeconds": {}}
    }


async def test_a_custom_resource_owns_its_spec_object() -> None:
    """A custom resource's zero value has no spec, so f:spec itself is owned (typed/compare.go)."""
    emulator = with_akka_crd()
    async with client(emulator, headers={"User-Agent": "akka/2.9"}) as http:
        response = await http.post(AKKA, json={
            "apiVersion": "akka.io/v1", "kind": "Lease", "metadata": {"name": "a"},
            "spec": {"owner": "me", "time": 1},
        })
    assert _by_manager(response.json())["akka"]["fieldsV1"] == {
        "f:spec": {".": {}, "f:owner": {}, "f:time": {}}
    }


async def test_put_without_managed_fields_keeps_them() -> None:
    """An update without managedFields keeps the recorded ones (managedfields fieldmanager.go)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "first/1"}) as http:
        created = (await http.post(LEASES, json=lease("a", holderIdentity="me"))).json()
        del created["metadata"]["managedFields"]
        created["spec"]["leaseDurationSeconds"] = 5
        updated = (await http.put(f"{LEASES}/a", json=created)).json()
    assert _by_manager(updated)["first"]["fieldsV1"] == {
        "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}
    }


async def test_json_patch_records_an_update_entry() -> None:
    """A JSON patch is an Update by its manager (patch.go, jsonPatcher + UpdateNoErrors)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "first/1"}) as http:
        await http.post(LEASES, json=lease("a", holderIdentity="me"))
        response = await http.patch(
            f"{LEASES}/a", params={"fieldManager": "patcher"},
            headers={"Content-Type": "application/json-patch+json"},
            content=json.dumps([{"op": "add", "path": "/spec/leaseTransitions", "value": 1}]),
        )
    entries = response.json()["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [
        ("first", "Update"), ("patcher", "Update")
    ]
    assert entries[1]["fieldsV1"] == {"f:spec": {"f:leaseTransitions": {}}}


async def test_user_agent_without_a_slash_is_the_whole_manager() -> None:
    """A User-Agent with no '/' is used whole (create.go, prefixFromUserAgent)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "my-elector"}) as http:
        response = await http.post(LEASES, json=lease("a", holderIdentity="me"))
    assert list(_by_manager(response.json())) == ["my-elector"]


async def test_a_single_empty_entry_clears_managed_fields() -> None:
    """managedFields [{}] strips them; [] keeps them (server-side apply docs, fieldmanager.go)."""
    emulator = KubeEmulator()
    merge = {"Content-Type": "application/merge-patch+json"}
    async with client(emulator, headers={"User-Agent": "first/1"}) as http:
        await http.post(LEASES, json=lease("a", holderIdentity="me"))
        kept = await http.patch(f"{LEASES}/a", headers=merge,
                                content=b'{"metadata": {"managedFields": []}}')
        cleared = await http.patch(f"{LEASES}/a", headers=merge,
                                   content=b'{"metadata": {"managedFields": [{}]}}')
    assert list(_by_manager(kept.json())) == ["first"]
    assert "managedFields" not in cleared.json()["metadata"]
