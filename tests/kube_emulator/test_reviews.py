"""SelfSubjectAccessReview and SelfSubjectReview, as kubectl auth can-i / whoami send them."""

from __future__ import annotations

from typing import Any

import pytest

from trio_lease.testing.kube import KubeEmulator
from trio_lease.testing.kube._reviews import review_from_protobuf

from ._helpers import client

pytestmark = pytest.mark.anyio

SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SA = "system:serviceaccount:default:app"


def _review(**attrs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }


def _emulator() -> KubeEmulator:
    emulator = KubeEmulator(require_auth=True)
    emulator.add_service_account_token("app-token", "default", "app")
    emulator.grant(SA, ["get", "update"], resource_names=["jobs-lock"])
    emulator.grant(SA, ["list"])
    return emulator


async def test_access_review_answers_the_rbac_decision() -> None:
    """SSAR is 201 with status.allowed from RBAC."""
    # Follows pkg/registry/authorization/selfsubjectaccessreview/rest.go.
    async with client(_emulator(), "app-token") as http:
        attrs = {"namespace": "default", "group": "coordination.k8s.io", "resource": "leases"}
        named = await http.post(SSAR, json=_review(verb="get", name="jobs-lock", **attrs))
        other = await http.post(SSAR, json=_review(verb="get", name="other", **attrs))
        listed = await http.post(SSAR, json=_review(verb="list", **attrs))
        created = await http.post(SSAR, json=_review(verb="create", **attrs))
        elsewhere = await http.post(SSAR, json=_review(verb="list", **{**attrs, "namespace": "x"}))
    assert named.status_code == 201
    body = named.json()
    assert body["kind"] == "SelfSubjectAccessReview"
    assert body["spec"]["resourceAttributes"]["name"] == "jobs-lock"
    assert body["status"] == {"allowed": True, "denied": False}
    assert [r.json()["status"]["allowed"] for r in (other, listed, created, elsewhere)] == [
        False, True, False, False,
    ]


async def test_access_review_needs_exactly_one_kind_of_attributes() -> None:
    """Neither or both attribute sets is 422 (pkg/apis/authorization/validation/validation.go)."""
    async with client(_emulator(), "app-token") as http:
        neither = await http.post(SSAR, json={"kind": "SelfSubjectAccessReview", "spec": {}})
        both = await http.post(SSAR, json={"spec": {"resourceAttributes": {"verb": "get"},
                                                    "nonResourceAttributes": {"verb": "get"}}})
        listing = await http.get(SSAR)
    assert neither.status_code == 422
    assert neither.json()["reason"] == "Invalid"
    assert "exactly one of nonResourceAttributes or resourceAttributes must be specified" in (
        neither.json()["message"]
    )
    assert both.status_code == 422
    assert "cannot be specified in combination with resourceAttributes" in both.json()["message"]
    assert listing.status_code == 405


async def test_non_resource_review_reads_cluster_role_urls() -> None:
    """nonResourceAttributes match ClusterRole nonResourceURLs, a trailing * as a prefix."""
    # Follows pkg/apis/rbac/v1/evaluation_helpers.go (NonResourceURLMatches).
    emulator = _emulator()
    emulator.apply([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "health"},
         "rules": [{"nonResourceURLs": ["/healthz", "/livez/*"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "health"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "health"},
         "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "default"}]},
    ])

    async def allowed(path: str, verb: str = "get") -> bool:
        body = {"spec": {"nonResourceAttributes": {"path": path, "verb": verb}}}
        response = await http.post(SSAR, json=body)
        assert response.status_code == 201
        return bool(response.json()["status"]["allowed"])

    async with client(emulator, "app-token") as http:
        assert await allowed("/healthz")
        assert await allowed("/livez/ping")
        assert not await allowed("/healthz", "post")
        assert not await allowed("/metrics")


async def test_self_subject_review_names_the_user() -> None:
    """SelfSubjectReview answers status.userInfo."""
    # Follows pkg/registry/authentication/selfsubjectreview/rest.go.
    async with client(_emulator(), "app-token") as http:
        response = await http.post(SSR, json={"apiVersion": "authentication.k8s.io/v1",
                                              "kind": "SelfSubjectReview"})
    assert response.status_code == 201
    info = response.json()["status"]["userInfo"]
    assert info["username"] == SA
    assert "system:serviceaccounts:default" in info["groups"]
    assert "system:authenticated" in info["groups"]


async def test_reviews_need_a_valid_token() -> None:
    """A review without credentials is 401 like any request."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go.
    async with client(_emulator()) as http:
        assert (await http.post(SSR, json={})).status_code == 401


async def test_reviews_are_discoverable() -> None:
    """Both groups are in /apis and list their resource (kubectl's RESTMapper reads them)."""
    # Follows pkg/controlplane/instance.go (the authentication and authorization groups).
    async with client(_emulator(), "app-token") as http:
        groups = (await http.get("/apis")).json()["groups"]
        authz = (await http.get("/apis/authorization.k8s.io/v1")).json()
        authn = (await http.get("/apis/authentication.k8s.io/v1")).json()
    names = [g["name"] for g in groups]
    assert "authorization.k8s.io" in names and "authentication.k8s.io" in names
    assert [r["name"] for r in authz["resources"]] == [
        "selfsubjectaccessreviews", "selfsubjectrulesreviews"
    ]
    assert authn["resources"][0]["kind"] == "SelfSubjectReview"
    assert authn["resources"][0]["verbs"] == ["create"]


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


async def test_protobuf_access_review_as_kubectl_sends_it() -> None:
    """kubectl's typed client sends the review as Kubernetes protobuf."""
    # Follows apimachinery/pkg/runtime/serializer/protobuf/protobuf.go and
    # staging/src/k8s.io/api/authorization/v1/generated.proto.
    attrs = _field(1, b"default") + _field(2, b"list") + _field(3, b"coordination.k8s.io")
    attrs += _field(5, b"leases")
    raw = _field(1, b"") + _field(2, _field(1, attrs))
    type_meta = _field(1, b"authorization.k8s.io/v1") + _field(2, b"SelfSubjectAccessReview")
    data = b"k8s\x00" + _field(1, type_meta) + _field(2, raw)
    assert review_from_protobuf(data)["spec"]["resourceAttributes"] == {
        "namespace": "default", "verb": "list", "group": "coordination.k8s.io",
        "resource": "leases",
    }
    async with client(_emulator(), "app-token") as http:
        response = await http.post(
            SSAR, content=data, headers={"Content-Type": "application/vnd.kubernetes.protobuf"}
        )
    assert response.status_code == 201
    assert response.json()["status"]["allowed"] is True
