"""docs/design.md §8.2 and §8.3: URLs, ?timeout=, and the semantics of each verb."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import AKKA, LEASE_YML, LEASES, akka_lease, client, create, lease, with_akka_crd

pytestmark = pytest.mark.anyio


async def test_item_and_collection_urls() -> None:
    """POST and list use the collection URL, GET the item URL; a list has LeaseList kind."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a", holderIdentity="x")
        item = await http.get(f"{LEASES}/a")
        listed = await http.get(LEASES)
        everywhere = await http.get("/apis/coordination.k8s.io/v1/leases")
    assert item.status_code == 200
    assert item.json()["metadata"]["name"] == "a"
    body = listed.json()
    assert body["kind"] == "LeaseList"
    assert body["apiVersion"] == "coordination.k8s.io/v1"
    assert [i["metadata"]["name"] for i in body["items"]] == ["a"]
    assert body["metadata"]["resourceVersion"] == emulator.resource_version
    assert [i["metadata"]["name"] for i in everywhere.json()["items"]] == ["a"]


async def test_get_reads_the_latest_write() -> None:
    """GET without resourceVersion returns the latest committed object."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="x")
        created["spec"]["holderIdentity"] = "y"
        put = await http.put(f"{LEASES}/a", json=created)
        got = await http.get(f"{LEASES}/a")
    assert got.json() == put.json()
    assert got.json()["spec"]["holderIdentity"] == "y"


async def test_post_conflicts_and_missing_namespace() -> None:
    """POST: 201; again 409 AlreadyExists; into a missing namespace 404 kind namespaces."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        first = await http.post(LEASES, json=lease("a"))
        again = await http.post(LEASES, json=lease("a"))
        missing = await http.post(
            "/apis/coordination.k8s.io/v1/namespaces/nope/leases", json=lease("a")
        )
    assert first.status_code == 201
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"
    assert missing.status_code == 404
    assert missing.json()["message"] == 'namespaces "nope" not found'
    assert missing.json()["details"] == {"name": "nope", "kind": "namespaces"}


async def test_put_needs_resource_version() -> None:
    """PUT without metadata.resourceVersion on an existing Lease is 422 (0x0, kind leases)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        response = await http.put(f"{LEASES}/a", json=lease("a", holderIdentity="x"))
    assert response.status_code == 422
    body = response.json()
    assert body["message"] == (
        'leases.coordination.k8s.io "a" is invalid: metadata.resourceVersion: Invalid value: '
        "0x0: must be specified for an update"
    )
    assert body["details"]["kind"] == "leases"
    assert body["details"]["group"] == "coordination.k8s.io"


async def test_put_with_stale_resource_version_conflicts() -> None:
    """PUT with an old resourceVersion is 409 Conflict; the current one is 200 with a new RV."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a")
        created["spec"]["holderIdentity"] = "x"
        ok = await http.put(f"{LEASES}/a", json=created)
        stale = await http.put(f"{LEASES}/a", json=created)
    assert ok.status_code == 200
    assert ok.json()["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"
    assert "the object has been modified" in stale.json()["message"]


async def test_put_with_mismatched_name_is_bad_request() -> None:
    """A PUT whose body name differs from the URL name is 400 BadRequest."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a")
        response = await http.put(f"{LEASES}/b", json=created)
    assert response.status_code == 400
    assert response.json()["message"] == (
        "the name of the object (a) does not match the name on the URL (b)"
    )


async def test_identical_put_keeps_resource_version() -> None:
    """A PUT that changes nothing is 200 with the same resourceVersion (no write)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="x")
        response = await http.put(f"{LEASES}/a", json=created)
    assert response.status_code == 200
    assert response.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_put_to_a_missing_lease_creates_it() -> None:
    """The trap: a PUT with a stale resourceVersion to a deleted Lease is 201 Created."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me", leaseTransitions=4)
        assert (await http.delete(f"{LEASES}/a")).status_code == 200
        del created["metadata"]["uid"]
        renewal = await http.put(f"{LEASES}/a", json=created)
    assert renewal.status_code == 201
    body = renewal.json()
    assert body["spec"]["holderIdentity"] == "me"
    assert body["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]


async def test_uid_precondition_defends_against_create_on_update() -> None:
    """A PUT carrying metadata.uid to a deleted (or re-created) Lease is 409, not a create."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me")
        uid = created["metadata"]["uid"]
        await http.delete(f"{LEASES}/a")
        missing = await http.put(f"{LEASES}/a", json=created)
        assert emulator.get_lease("a") is None
        recreated = await create(http, "a", holderIdentity="other")
        created["metadata"]["resourceVersion"] = recreated["metadata"]["resourceVersion"]
        replaced = await http.put(f"{LEASES}/a", json=created)
    assert missing.status_code == 409
    # The storage layer's StorageError, wrapped by InterpretUpdateError into a Conflict
    # (apiserver/pkg/storage/errors.go, apiserver/pkg/registry/generic/registry/store.go).
    assert missing.json()["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "a": StorageError: invalid '
        "object, Code: 4, Key: /registry/leases/default/a, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object "
        "meta: "
    )
    assert replaced.status_code == 409
    assert "Precondition failed: UID in precondition" in replaced.json()["message"]
    assert recreated["metadata"]["uid"] in replaced.json()["message"]


async def test_custom_resource_put_to_missing_is_not_found() -> None:
    """Custom resources do not create on update: PUT to a missing akka.io Lease is 404."""
    emulator = with_akka_crd()
    body = akka_lease("a", owner="x", time=1)
    async with client(emulator) as http:
        response = await http.put(f"{AKKA}/a", json=body)
    assert response.status_code == 404
    assert response.json()["message"] == 'leases.akka.io "a" not found'


async def test_delete_with_preconditions() -> None:
    """DELETE: mismatched uid or resourceVersion 409; success is a Success Status; then 404."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a")
        meta = created["metadata"]

        async def delete(preconditions: dict[str, str]) -> tuple[int, dict[str, object]]:
            options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions}
            response = await http.request("DELETE", f"{LEASES}/a", content=json.dumps(options))
            return response.status_code, response.json()

        bad_uid = await delete({"uid": "nope"})
        bad_rv = await delete({"resourceVersion": "1"})
        ok = await delete({"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
        gone = await delete({})
    # rest.BeforeDelete (apiserver/pkg/registry/rest/delete.go): a Conflict on the kind.
    assert bad_uid[0] == 409
    assert bad_uid[1]["message"] == (
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "a": the UID in the '
        f"precondition (nope) does not match the UID in record ({meta['uid']}). The object "
        "might have been deleted and then recreated"
    )
    assert bad_uid[1]["details"] == {"name": "a", "group": "coordination.k8s.io", "kind": "Lease"}
    assert bad_rv[0] == 409
    assert bad_rv[1]["message"] == (
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "a": the ResourceVersion in '
        f"the precondition (1) does not match the ResourceVersion in record "
        f"({meta['resourceVersion']}). The object might have been modified"
    )
    assert ok == (200, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": "a", "group": "coordination.k8s.io", "kind": "leases",
                    "uid": meta["uid"]},
    })
    assert gone[0] == 404


async def test_release_by_delete_resets_transitions_release_by_put_keeps() -> None:
    """Releasing by PUT (holder "") keeps leaseTransitions; by DELETE the next create restarts."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="me", leaseTransitions=7)
        created["spec"]["holderIdentity"] = ""
        released = (await http.put(f"{LEASES}/a", json=created)).json()
        assert released["spec"]["leaseTransitions"] == 7
        await http.delete(f"{LEASES}/a")
        again = await create(http, "a", holderIdentity="you")
    assert "leaseTransitions" not in again["spec"]
    assert again["metadata"]["uid"] != created["metadata"]["uid"]


async def test_merge_patch_with_resource_version_precondition() -> None:
    """A merge PATCH with a stale metadata.resourceVersion is 409; a current one applies."""
    emulator = KubeEmulator()
    headers = {"Content-Type": "application/merge-patch+json"}
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="x", leaseDurationSeconds=10)
        rv = created["metadata"]["resourceVersion"]
        ok = await http.patch(
            f"{LEASES}/a", headers=headers,
            content=json.dumps({"metadata": {"resourceVersion": rv},
                                "spec": {"holderIdentity": "y"}}),
        )
        stale = await http.patch(
            f"{LEASES}/a", headers=headers,
            content=json.dumps({"metadata": {"resourceVersion": rv},
                                "spec": {"holderIdentity": "z"}}),
        )
        unconditional = await http.patch(
            f"{LEASES}/a", headers=headers, content=json.dumps({"spec": {"holderIdentity": None}})
        )
    assert ok.status_code == 200
    assert ok.json()["spec"] == {
        "holderIdentity": "y", "leaseDurationSeconds": 10
    }
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"
    assert unconditional.status_code == 200
    assert unconditional.json()["spec"] == {"leaseDurationSeconds": 10}


async def test_patch_with_unknown_content_type_is_415() -> None:
    """PATCH with a content type the emulator does not implement is 415."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        response = await http.patch(
            f"{LEASES}/a", headers={"Content-Type": "text/plain"}, content=b"{}"
        )
    assert response.status_code == 415


async def test_server_side_timeout_is_504() -> None:
    """?timeout=5s bounds the request on the server: a 10 s stall becomes 504 after 5 s."""
    emulator = KubeEmulator()
    emulator.faults.delay(10, verbs={"create"})
    async with client(emulator, timeout=30) as http:
        started = anyio.current_time()
        response = await http.post(LEASES, params={"timeout": "5s"}, json=lease("a"))
        elapsed = anyio.current_time() - started
    assert response.status_code == 504
    assert response.json()["message"] == (
        "Timeout: request did not complete within requested timeout - context deadline exceeded"
    )
    assert 5 <= elapsed < 6
    assert emulator.get_lease("a") is None


async def test_malformed_timeout_is_bad_request() -> None:
    """?timeout=abc is 400 (a Go duration is required)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.get(LEASES, params={"timeout": "abc"})
    assert response.status_code == 400


async def test_unregistered_custom_resource_is_generic_404() -> None:
    """Before the CRD is applied, akka.io leases are text/plain 404 page not found
    (apiserver/pkg/util/notfoundhandler/not_found_handler.go, http.NotFound)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        before = await http.get(f"{AKKA}/a")
        emulator.apply(LEASE_YML.read_text())
        after = await http.get(f"{AKKA}/a")
    assert before.status_code == 404
    assert before.headers["content-type"] == "text/plain; charset=utf-8"
    assert before.text == "404 page not found\n"
    assert after.status_code == 404
    assert after.json()["details"] == {"name": "a", "group": "akka.io", "kind": "leases"}


async def test_custom_resource_crud_and_schema() -> None:
    """akka.io/v1 leases: create, schema type check (422), generation, update, list."""
    emulator = with_akka_crd()
    body = akka_lease("a", owner="", time=1700000000000, extra=1)
    async with client(emulator) as http:
        created = await http.post(AKKA, json=body)
        bad = await http.post(AKKA, json={**body, "metadata": {"name": "b"},
                                          "spec": {"owner": "x", "time": "soon"}})
        obj = created.json()
        obj["spec"]["owner"] = "me"
        updated = await http.put(f"{AKKA}/a", json=obj)
        listed = await http.get(AKKA)
    assert created.status_code == 201
    assert created.json()["spec"] == {"owner": "", "time": 1700000000000}
    assert created.json()["metadata"]["generation"] == 1
    assert bad.status_code == 422
    assert bad.json()["details"]["causes"][0]["field"] == "spec.time"
    assert updated.status_code == 200
    assert updated.json()["metadata"]["generation"] == 2
    assert listed.json()["kind"] == "LeaseList"
    assert listed.json()["items"][0]["apiVersion"] == "akka.io/v1"


async def test_crd_applied_through_the_api_is_served() -> None:
    """POSTing the CRD to apiextensions.k8s.io serves akka.io leases; deleting it unserves."""
    import yaml

    crd = next(iter(yaml.safe_load_all(LEASE_YML.read_text())))
    emulator = KubeEmulator()
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    async with client(emulator) as http:
        assert (await http.post(crds, json=crd)).status_code == 201
        assert (await http.get(AKKA)).status_code == 200
        assert (await http.delete(f"{crds}/leases.akka.io")).status_code == 200
        assert (await http.get(AKKA)).text == "404 page not found\n"


async def test_admin_delete_behind_the_clients_back() -> None:
    """KubeEmulator.delete removes an object (a later GET is 404); False when absent."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        assert emulator.delete("coordination.k8s.io/v1", "leases", "a", "default") is True
        assert emulator.delete("coordination.k8s.io/v1", "leases", "a", "default") is False
        assert emulator.delete("akka.io/v1", "leases", "a", "default") is False
        response = await http.get(f"{LEASES}/a")
    assert response.status_code == 404


async def test_requests_are_recorded_without_credentials() -> None:
    """KubeEmulator.requests keeps method, path, query, headers and status, never the token."""
    emulator = KubeEmulator()
    emulator.add_token("s3cr3t", "u", groups=("system:masters",))
    emulator.faults.drop_reply(verbs={"get"}, times=1)
    async with client(emulator, "s3cr3t", headers={"User-Agent": "trio-lease/0.1"}) as http:
        await http.post(LEASES, params={"timeout": "5s"}, json=lease("a"))
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"{LEASES}/a")
    first, second = emulator.requests
    assert (first.method, first.path, first.query, first.status) == (
        "POST", LEASES, {"timeout": "5s"}, 201
    )
    assert first.headers["user-agent"] == "trio-lease/0.1"
    assert first.headers["content-type"] == "application/json"
    assert "authorization" not in first.headers
    assert "s3cr3t" not in repr(emulator.requests)
    assert second.status == 0
