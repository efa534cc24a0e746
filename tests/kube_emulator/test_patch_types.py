"""PATCH content types as the apiserver accepts them (apiserver/pkg/endpoints/handlers/patch.go)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import AKKA, LEASES, akka_lease, client, create, with_akka_crd

pytestmark = pytest.mark.anyio

JSON_PATCH = {"Content-Type": "application/json-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


async def _json_patch(http: httpx.AsyncClient, path: str, ops: list[Any]) -> httpx.Response:
    return await http.patch(path, headers=JSON_PATCH, content=json.dumps(ops))


async def test_json_patch_operations() -> None:
    """add, remove, replace, move, copy and test apply in order (evanphx/json-patch v4)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a", holderIdentity="me", leaseDurationSeconds=10)
        response = await _json_patch(http, f"{LEASES}/a", [
            {"op": "test", "path": "/spec/holderIdentity", "value": "me"},
            {"op": "replace", "path": "/spec/holderIdentity", "value": "you"},
            {"op": "add", "path": "/metadata/labels", "value": {"app": "x"}},
            {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/b"},
            {"op": "move", "from": "/metadata/labels/b", "path": "/metadata/labels/c"},
            {"op": "remove", "path": "/spec/leaseDurationSeconds"},
        ])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["spec"] == {"holderIdentity": "you"}
    assert body["metadata"]["labels"] == {"app": "x", "c": "x"}


async def test_json_patch_failed_test_is_422_with_the_generic_message() -> None:
    """A failed test op is 422 Invalid, message from NewGenericServerResponse (patch.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me")
        response = await _json_patch(http, f"{LEASES}/a", [
            {"op": "test", "path": "/spec/holderIdentity", "value": "someone-else"},
            {"op": "replace", "path": "/spec/holderIdentity", "value": "you"},
        ])
        missing = await _json_patch(http, f"{LEASES}/a", [
            {"op": "remove", "path": "/spec/nothing"},
        ])
        bad_path = await _json_patch(http, f"{LEASES}/a", [
            {"op": "add", "path": "/no/such/parent", "value": 1},
        ])
    assert response.status_code == 422
    assert response.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid", "details": {}, "code": 422,
    }
    assert missing.status_code == 422
    assert bad_path.status_code == 422
    after = emulator.get_lease("a")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_json_patch_test_on_resource_version_is_compare_and_swap() -> None:
    """A test op on metadata.resourceVersion guards the patch; a stale one fails (patch.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me")
        rv = created["metadata"]["resourceVersion"]
        guarded = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/spec/holderIdentity", "value": "you"},
        ]
        first = await _json_patch(http, f"{LEASES}/a", guarded)
        second = await _json_patch(http, f"{LEASES}/a", guarded)
        stale = await _json_patch(http, f"{LEASES}/a", [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
        ])
    assert first.status_code == 200
    assert second.status_code == 422
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"


async def test_json_patch_on_a_missing_object_is_404() -> None:
    """JSON patch never creates: jsonPatcher.createNewObject is NotFound (patch.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await _json_patch(http, f"{LEASES}/nope", [])
    assert response.status_code == 404
    assert response.json()["reason"] == "NotFound"


async def test_json_patch_that_is_not_a_list_is_400() -> None:
    """A body that is not an RFC 6902 list is 400 BadRequest (jsonpatch.DecodePatch error)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        response = await http.patch(f"{LEASES}/a", headers=JSON_PATCH, content=b'{"op": 1}')
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"


async def test_strategic_merge_patch_on_a_custom_resource_is_415() -> None:
    """Custom resources accept JSON, merge and apply patches only (customresource_handler.go)."""
    emulator = with_akka_crd()
    async with client(emulator) as http:
        made = await http.post(AKKA, json={
            "apiVersion": "akka.io/v1", "kind": "Lease", "metadata": {"name": "a"},
            "spec": {"owner": "me", "time": 1},
        })
        assert made.status_code == 201, made.text
        response = await http.patch(
            f"{AKKA}/a", headers={"Content-Type": "application/strategic-merge-patch+json"},
            content=b'{"spec": {"owner": "you"}}',
        )
        merged = await http.patch(
            f"{AKKA}/a", headers={"Content-Type": "application/merge-patch+json"},
            content=b'{"spec": {"owner": "you"}}',
        )
    assert response.status_code == 415
    assert response.json()["reason"] == "UnsupportedMediaType"
    assert response.json()["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    assert merged.status_code == 200
    assert merged.json()["spec"] == {"owner": "you", "time": 1}


async def test_strategic_merge_patch_on_a_lease_merges() -> None:
    """Built-in Leases accept strategic merge patch (installer.go lists it for built-ins)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a", holderIdentity="me", leaseDurationSeconds=5)
        response = await http.patch(
            f"{LEASES}/a", headers={"Content-Type": "application/strategic-merge-patch+json"},
            content=b'{"spec": {"holderIdentity": "you"}}',
        )
    assert response.status_code == 200
    assert response.json()["spec"] == {"holderIdentity": "you", "leaseDurationSeconds": 5}


async def test_apply_needs_a_field_manager() -> None:
    """Apply without ?fieldManager= is 422 on PatchOptions (ValidatePatchOptions, patch.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.patch(
            f"{LEASES}/a", headers=APPLY,
            content=b"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: a}\n",
        )
        forced_merge = await http.patch(
            f"{LEASES}/a", params={"force": "true"},
            headers={"Content-Type": "application/merge-patch+json"}, content=b"{}",
        )
    assert response.status_code == 422
    body = response.json()
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
        "is required for apply patch"
    )
    assert body["details"]["causes"] == [{
        "reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
        "field": "fieldManager",
    }]
    assert forced_merge.status_code == 422
    assert "force: Forbidden: may not be specified for non-apply patch" in (
        forced_merge.json()["message"]
    )


def _apply_body(name: str, **spec: Any) -> bytes:
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name}, "spec": spec}
    return json.dumps(body).encode()


async def test_apply_creates_then_updates() -> None:
    """Apply creates a missing object (201) then updates it (200): patch.go, forceAllowCreate."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        made = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                content=_apply_body("a", holderIdentity="me"))
        again = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                 content=_apply_body("a", holderIdentity="you"))
    assert made.status_code == 201, made.text
    assert again.status_code == 200, again.text
    entries = again.json()["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [("ops", "Apply")]
    assert entries[0]["fieldsV1"] == {"f:spec": {"f:holderIdentity": {}}}


async def test_apply_yaml_body() -> None:
    """The apply body is YAML; kubectl sends JSON, also YAML (patch.go, applyPatcher, yaml)."""
    emulator = KubeEmulator()
    yaml_body = (
        b"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: a\n"
        b"  labels:\n    app: x\nspec:\n  leaseDurationSeconds: 15\n"
    )
    async with client(emulator) as http:
        made = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                content=yaml_body)
    assert made.status_code == 201
    assert made.json()["spec"] == {"leaseDurationSeconds": 15}
    assert made.json()["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:leaseDurationSeconds": {}},
    }


async def test_apply_conflict_names_the_manager_and_field() -> None:
    """Apply over another manager's field is 409 naming both, unless force (conflict.go)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "elector/1.0 (linux)"}) as http:
        await create(http, "a", holderIdentity="me", leaseDurationSeconds=10)
        clash = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                 content=_apply_body("a", holderIdentity="ops"))
        same = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                content=_apply_body("a", leaseDurationSeconds=10))
        forced = await http.patch(
            f"{LEASES}/a", params={"fieldManager": "ops", "force": "true"}, headers=APPLY,
            content=_apply_body("a", holderIdentity="ops", leaseDurationSeconds=10),
        )
    assert clash.status_code == 409
    assert clash.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "elector" using '
                   "coordination.k8s.io/v1: .spec.holderIdentity",
        "reason": "Conflict",
        "details": {"causes": [{
            "reason": "FieldManagerConflict",
            "message": 'conflict with "elector" using coordination.k8s.io/v1',
            "field": ".spec.holderIdentity",
        }]},
        "code": 409,
    }
    assert same.status_code == 200  # the same value is shared ownership, not a conflict
    assert forced.status_code == 200
    assert forced.json()["spec"]["holderIdentity"] == "ops"
    by_manager = {
        e["manager"]: e["fieldsV1"] for e in forced.json()["metadata"]["managedFields"]
    }
    assert by_manager["ops"] == {
        "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}
    }
    assert by_manager["elector"] == {"f:spec": {"f:leaseDurationSeconds": {}}}


async def test_apply_with_a_stale_resource_version_is_409() -> None:
    """An applied resourceVersion is a precondition (generic/registry/store.go, Update)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me")
        await http.put(f"{LEASES}/a", json={**created, "spec": {"holderIdentity": "x"}})
        body = json.loads(_apply_body("a", holderIdentity="ops"))
        body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        response = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"},
                                    headers=APPLY, content=json.dumps(body))
    assert response.status_code == 409
    assert response.json()["reason"] == "Conflict"


async def test_apply_drops_fields_it_no_longer_applies() -> None:
    """Fields applied before and omitted now go if unowned (structured-merge-diff, prune)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        params = {"fieldManager": "ops"}
        await http.patch(f"{LEASES}/a", params=params, headers=APPLY,
                         content=_apply_body("a", holderIdentity="me", leaseDurationSeconds=5))
        response = await http.patch(f"{LEASES}/a", params=params, headers=APPLY,
                                    content=_apply_body("a", holderIdentity="me"))
    assert response.json()["spec"] == {"holderIdentity": "me"}


async def test_apply_on_a_custom_resource() -> None:
    """Apply works on akka.io leases and records the CRD's spec as owned (structuredmerge)."""
    emulator = with_akka_crd()
    body = akka_lease("a", owner="me", time=5)
    async with client(emulator) as http:
        response = await http.patch(f"{AKKA}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                    content=json.dumps(body))
        wrong = await http.patch(f"{AKKA}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                 content=json.dumps({**body, "apiVersion": "akka.io/v2"}))
    assert response.status_code == 201, response.text
    assert response.json()["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:spec": {"f:owner": {}, "f:time": {}}
    }
    assert wrong.status_code == 400
    assert wrong.json()["message"] == (
        "Incorrect version specified in apply patch. Specified patch version: akka.io/v2, "
        "expected: akka.io/v1"
    )


async def test_apply_conflicts_are_listed_per_manager() -> None:
    """Several conflicts: one line per field under each manager (managedfields conflict.go)."""
    emulator = KubeEmulator()
    async with client(emulator, headers={"User-Agent": "elector/1.0"}) as http:
        lease_with_labels = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"holderIdentity": "me"},
        }
        await http.post(LEASES, json=lease_with_labels)
        body = {**lease_with_labels, "metadata": {"name": "a", "labels": {"x": "2"}},
                "spec": {"holderIdentity": "ops"}}
        clash = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"}, headers=APPLY,
                                 content=json.dumps(body))
    assert clash.status_code == 409
    assert clash.json()["message"] == (
        'Apply failed with 2 conflicts: conflicts with "elector" using coordination.k8s.io/v1:\n'
        "- .metadata.labels.x\n- .spec.holderIdentity"
    )
    assert [c["field"] for c in clash.json()["details"]["causes"]] == [
        ".metadata.labels.x", ".spec.holderIdentity"
    ]


async def test_apply_body_that_is_not_an_object_is_400() -> None:
    """An apply body that is not a YAML object is 400 (patch.go, "error decoding YAML")."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.patch(f"{LEASES}/a", params={"fieldManager": "ops"},
                                    headers=APPLY, content=b"- a\n- b\n")
    assert response.status_code == 400
    assert response.json()["message"] == (
        "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
        "unmarshal array into Go value of type map[string]interface {}"
    )


async def test_json_patch_pointer_escapes() -> None:
    """~1 is '/' and ~0 is '~' in a JSON pointer (RFC 6901, evanphx/json-patch decodePatchKey)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        response = await _json_patch(http, f"{LEASES}/a", [
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": "/metadata/annotations/example.com~1owner~0x", "value": "me"},
            # "~" is no valid annotation key character (IsQualifiedName): the move finds the
            # key only if ~0 decoded to "~", and leaves a key the server accepts.
            {"op": "move", "from": "/metadata/annotations/example.com~1owner~0x",
             "path": "/metadata/annotations/example.com~1owner"},
        ])
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["annotations"] == {"example.com/owner": "me"}
