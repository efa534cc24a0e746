"""docs/design.md §8.3: LIST with labelSelector, fieldSelector, limit and continue."""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, lease

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]


async def _labelled(http: httpx.AsyncClient, name: str, **labels: str) -> JSON:
    body = lease(name)
    body["metadata"]["labels"] = labels
    response = await http.post(LEASES, json=body)
    assert response.status_code == 201, response.text
    created: JSON = response.json()
    return created


async def _names(http: httpx.AsyncClient, **params: str) -> list[str]:
    response = await http.get(LEASES, params=params)
    assert response.status_code == 200, response.text
    return [item["metadata"]["name"] for item in response.json()["items"]]


async def test_label_selector_equality_and_set_based() -> None:
    """labelSelector =, ==, !=, in, notin, exists and !key (apimachinery/pkg/labels/selector.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await _labelled(http, "a", app="web", tier="front")
        await _labelled(http, "b", app="db", tier="back")
        await _labelled(http, "c", app="web")
        await _labelled(http, "d")
        assert await _names(http, labelSelector="app=web") == ["a", "c"]
        assert await _names(http, labelSelector="app==web,tier=front") == ["a"]
        assert await _names(http, labelSelector="app!=web") == ["b", "d"]
        assert await _names(http, labelSelector="app in (db, web),tier") == ["a", "b"]
        assert await _names(http, labelSelector="tier notin (front)") == ["b", "c", "d"]
        assert await _names(http, labelSelector="!tier") == ["c", "d"]
        assert await _names(http, labelSelector="") == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app web", "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, "
                    "gt, lt"),
        ("app=web,", "found '', expected: identifier after ','"),
        ("app in web", "unable to parse requirement: found 'web' expected: '('"),
        ("app=a b", "found 'b', expected: ',' or 'end of string'"),
    ],
)
async def test_malformed_label_selector_is_400_with_the_parser_text(
    selector: str, message: str
) -> None:
    """A label selector that does not parse is 400 BadRequest with labels.Parse's error text."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.get(LEASES, params={"labelSelector": selector})
        watch = await http.get(LEASES, params={"labelSelector": selector, "watch": "1"})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert response.json()["message"] == message
    assert watch.status_code == 400


async def test_invalid_label_value_is_400() -> None:
    """A selector value that is not a valid label value is 400 (NewRequirement's validation)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.get(LEASES, params={"labelSelector": "app=a$b"})
    assert response.status_code == 400
    assert response.json()["message"].startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "a$b": a valid label must '
        "be an empty string"
    )


async def test_field_selector_name_namespace_and_not_equal() -> None:
    """fieldSelector metadata.name / metadata.namespace with = and != (fields/selector.go)."""
    emulator = KubeEmulator(namespaces=["default", "other"])
    async with client(emulator) as http:
        for name in ("a", "b"):
            await _labelled(http, name)
        other = await http.post(
            "/apis/coordination.k8s.io/v1/namespaces/other/leases", json=lease("a")
        )
        assert other.status_code == 201
        assert await _names(http, fieldSelector="metadata.name=a") == ["a"]
        assert await _names(http, fieldSelector="metadata.name!=a") == ["b"]
        assert await _names(http, fieldSelector="metadata.namespace=other") == []
        everywhere = await http.get(
            "/apis/coordination.k8s.io/v1/leases",
            params={"fieldSelector": "metadata.namespace=other"},
        )
        bad = await http.get(LEASES, params={"fieldSelector": "spec.holderIdentity=x"})
        garbled = await http.get(LEASES, params={"fieldSelector": "metadata.name"})
    assert [i["metadata"]["namespace"] for i in everywhere.json()["items"]] == ["other"]
    assert bad.status_code == 400
    assert bad.json()["message"] == (
        '"spec.holderIdentity" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )
    assert garbled.json()["message"] == (
        "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    )


async def test_limit_and_continue_page_through_a_consistent_snapshot() -> None:
    """limit/continue: pages in key order, remainingItemCount, all at the first page's
    revision (apiserver/pkg/storage/etcd3/store.go GetList, storage/continue.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        for name in ("a", "b", "c", "d", "e"):
            await _labelled(http, name)
        first = (await http.get(LEASES, params={"limit": "2"})).json()
        await _labelled(http, "bb")  # after the snapshot: must not show up in later pages
        await http.delete(f"{LEASES}/e")  # deleted after the snapshot: must still show up
        second = (await http.get(
            LEASES, params={"limit": "2", "continue": first["metadata"]["continue"]}
        )).json()
        third = (await http.get(
            LEASES, params={"limit": "2", "continue": second["metadata"]["continue"]}
        )).json()
    assert [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 3
    token = first["metadata"]["continue"]
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded == {"v": "meta.k8s.io/v1", "rv": int(first["metadata"]["resourceVersion"]),
                       "start": "b\x00"}
    assert [i["metadata"]["name"] for i in second["items"]] == ["c", "d"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["remainingItemCount"] == 1
    assert [i["metadata"]["name"] for i in third["items"]] == ["e"]
    assert "continue" not in third["metadata"]
    assert "remainingItemCount" not in third["metadata"]


async def test_a_page_copies_only_the_objects_it_serves_and_changes_none_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LIST page reads the stored objects in place and presents (copies) only those it
    returns: copying every object for every page made a paged label LIST of 5,000 Leases
    cost ~0.9 s a page, which delayed the benchmarks' failovers by seconds. The items served
    lose ``kind``/``apiVersion`` as a built-in List's items do, and the stored objects keep
    theirs: a later GET is unchanged."""
    emulator = KubeEmulator()
    presented: list[str] = []
    present = emulator.store.present

    def counting(rt: Any, obj: JSON) -> JSON:
        presented.append(obj["metadata"]["name"])
        return present(rt, obj)

    async with client(emulator) as http:
        for name in ("a", "b", "c", "d", "e"):
            await _labelled(http, name)
        before = (await http.get(f"{LEASES}/c")).json()
        monkeypatch.setattr(emulator.store, "present", counting)
        first = (await http.get(LEASES, params={"limit": "2"})).json()
        await _labelled(http, "bb")  # the next page is served from the first one's snapshot
        presented.clear()
        second = (await http.get(
            LEASES, params={"limit": "2", "continue": first["metadata"]["continue"]}
        )).json()
        assert presented == ["c", "d"]
        monkeypatch.undo()
        after = (await http.get(f"{LEASES}/c")).json()
    assert [i["metadata"]["name"] for i in second["items"]] == ["c", "d"]
    assert all("kind" not in item and "apiVersion" not in item for item in second["items"])
    assert after == before
    assert (after["kind"], after["apiVersion"]) == ("Lease", "coordination.k8s.io/v1")


async def test_limit_with_a_selector_fills_the_page_and_omits_the_count() -> None:
    """With a selector a page holds `limit` matches and no remainingItemCount (etcd3 GetList)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        for name, app in (("a", "x"), ("b", "y"), ("c", "x"), ("d", "y"), ("e", "x")):
            await _labelled(http, name, app=app)
        page = (await http.get(LEASES, params={"limit": "2", "labelSelector": "app=x"})).json()
        rest = (await http.get(LEASES, params={
            "limit": "2", "labelSelector": "app=x", "continue": page["metadata"]["continue"],
        })).json()
    assert [i["metadata"]["name"] for i in page["items"]] == ["a", "c"]
    assert "remainingItemCount" not in page["metadata"]
    assert [i["metadata"]["name"] for i in rest["items"]] == ["e"]


async def test_continue_token_after_compaction_is_410_with_a_fresh_token() -> None:
    """A continue token older than the compaction window is 410 Expired with the
    inconsistentContinue text and a token to go on at the latest revision (etcd3/errors.go)."""
    emulator = KubeEmulator(compaction_interval=300)
    async with client(emulator) as http:
        for name in ("a", "b", "c"):
            await _labelled(http, name)
        first = (await http.get(LEASES, params={"limit": "1"})).json()
        await _labelled(http, "d")
        await anyio.sleep(601)  # two compactor ticks: the first page's revision is gone
        await _labelled(http, "e")
        expired = await http.get(
            LEASES, params={"limit": "1", "continue": first["metadata"]["continue"]}
        )
        body = expired.json()
        onward = (await http.get(LEASES, params={"continue": body["metadata"]["continue"]}))
    assert expired.status_code == 410
    assert body["reason"] == "Expired"
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result. You "
        "can start a new list without the continue parameter, or use the continue token"
    )
    assert [i["metadata"]["name"] for i in onward.json()["items"]] == ["b", "c", "d", "e"]


async def test_bad_continue_token_is_400() -> None:
    """A continue token that does not decode is 400 "invalid continue token" (continue.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.get(LEASES, params={"continue": "not-a-token!"})
        with_rv = await http.get(LEASES, params={
            "continue": base64.urlsafe_b64encode(
                b'{"v":"meta.k8s.io/v1","rv":5,"start":"a"}'
            ).decode().rstrip("="),
            "resourceVersion": "3",
        })
    assert response.status_code == 400
    assert response.json()["message"].startswith(
        "invalid continue token: continue key is not valid"
    )
    assert with_rv.status_code == 400
    assert with_rv.json()["message"] == (
        "specifying resource version is not allowed when using continue"
    )


async def test_list_resource_version_is_the_latest_revision() -> None:
    """A list's metadata.resourceVersion is the store's latest revision, shared by all types."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await _labelled(http, "a")
        await http.post("/api/v1/namespaces", json={"metadata": {"name": "later"}})
        listed = (await http.get(LEASES)).json()
    assert listed["metadata"] == {"resourceVersion": emulator.resource_version}


async def test_pages_across_namespaces_follow_etcd_key_order() -> None:
    """A list across namespaces pages in etcd key order, <namespace>/<name> (etcd3 GetList)."""
    emulator = KubeEmulator(namespaces=["a", "a-b"])
    async with client(emulator) as http:
        for namespace in ("a", "a-b"):
            response = await http.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", json=lease("x")
            )
            assert response.status_code == 201
        first = (await http.get("/apis/coordination.k8s.io/v1/leases",
                                params={"limit": "1"})).json()
        second = (await http.get("/apis/coordination.k8s.io/v1/leases", params={
            "limit": "1", "continue": first["metadata"]["continue"],
        })).json()
    # "a-b/x" sorts before "a/x" because "-" (0x2d) is below "/" (0x2f).
    assert [i["metadata"]["namespace"] for i in first["items"]] == ["a-b"]
    assert [i["metadata"]["namespace"] for i in second["items"]] == ["a"]
    assert "continue" not in second["metadata"]
