"""Impersonation over a real socket: headers, kubectl --as, and a kubeconfig's as:.

Follows staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go (each impersonated
user, group, uid or extra needs the ``impersonate`` verb; the request then runs as the
impersonated user) and staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
errors.go (``forbiddenMessage``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trio_lease import BackendAuthError, LeaseRecord
from trio_lease.backends.kubernetes import KubernetesBackend, load_kubeconfig
from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

HAVE_KUBECTL = shutil.which("kubectl") is not None
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _allow_impersonating(
    emulator: KubeEmulator, user: str, resource: str, names: list[str], namespace: str = ""
) -> None:
    """A (Cluster)Role and binding letting ``user`` impersonate ``names`` of ``resource``."""
    rule = {"apiGroups": [""], "resources": [resource], "verbs": ["impersonate"],
            "resourceNames": names}
    kind = "Role" if namespace else "ClusterRole"
    meta = {"name": f"impersonate-{resource}", **({"namespace": namespace} if namespace else {})}
    emulator.apply([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
         "rules": [rule]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding", "metadata": meta,
         "subjects": [{"kind": "User", "name": user}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": meta["name"]}},
    ])


def _emulator() -> KubeEmulator:
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("alice-token", "alice")
    emulator.add_token("admin-token", "admin", ("system:masters",))
    emulator.grant("bob", ["get", "list"])
    emulator.grant("alice", ["get", "list", "create", "update", "delete"])
    emulator.apply(lease("l3"))
    return emulator


async def test_impersonating_a_user_needs_the_impersonate_verb() -> None:
    """Without `impersonate` on users: 403 naming the requester; with it, bob's rights apply."""
    emulator = _emulator()
    async with served(emulator, "alice-token", **{"Impersonate-User": "bob"}) as (_, http):
        refused = await http.delete(f"{LEASES}/l3")
        _allow_impersonating(emulator, "alice", "users", ["bob"])
        as_bob_delete = await http.delete(f"{LEASES}/l3")
        as_bob_get = await http.get(f"{LEASES}/l3")
        review = await http.post(WHOAMI, json={"apiVersion": "authentication.k8s.io/v1",
                                               "kind": "SelfSubjectReview"})
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API '
        'group "" at the cluster scope'
    )
    assert refused.json()["details"] == {"name": "bob", "kind": "users"}
    assert as_bob_delete.status_code == 403
    assert as_bob_delete.json()["message"] == (
        'leases.coordination.k8s.io "l3" is forbidden: User "bob" cannot delete resource '
        '"leases" in API group "coordination.k8s.io" in the namespace "default"'
    )
    assert emulator.get_lease("l3") is not None
    assert as_bob_get.status_code == 200
    assert review.json()["status"]["userInfo"] == {
        "username": "bob", "groups": ["system:authenticated"]
    }


async def test_every_group_and_a_service_account_are_checked() -> None:
    """Each Impersonate-Group header is its own check; a service account is checked in its
    namespace and gets its groups."""
    emulator = _emulator()
    _allow_impersonating(emulator, "alice", "users", ["bob"])
    _allow_impersonating(emulator, "alice", "groups", ["devs"])
    async with served(emulator, "alice-token") as (_, http):
        two_groups = await http.get(LEASES, headers=[
            ("Impersonate-User", "bob"), ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "system:masters"),
        ])
        one_group = await http.post(WHOAMI, headers=[
            ("Impersonate-User", "bob"), ("Impersonate-Group", "devs"),
        ], json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        sa = "system:serviceaccount:default:app"
        sa_refused = await http.get(LEASES, headers={"Impersonate-User": sa})
        _allow_impersonating(emulator, "alice", "serviceaccounts", ["app"], "default")
        sa_review = await http.post(WHOAMI, headers={"Impersonate-User": sa}, json={
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        no_user = await http.get(LEASES, headers={"Impersonate-Group": "devs"})
    assert two_groups.status_code == 403
    assert two_groups.json()["message"] == (
        'groups "system:masters" is forbidden: User "alice" cannot impersonate resource '
        '"groups" in API group "" at the cluster scope'
    )
    assert one_group.json()["status"]["userInfo"]["groups"] == ["devs", "system:authenticated"]
    assert sa_refused.json()["message"] == (
        'serviceaccounts "app" is forbidden: User "alice" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "default"'
    )
    assert sa_review.json()["status"]["userInfo"] == {
        "username": sa,
        "groups": ["system:serviceaccounts", "system:serviceaccounts:default",
                   "system:authenticated"],
    }
    assert (no_user.status_code, no_user.json()["reason"]) == (500, "InternalError")


@needs_kubectl
async def test_kubectl_as_runs_with_the_impersonated_users_rights(tmp_path: Path) -> None:
    """kubectl delete --as=nobody is refused as nobody; --as-group adds the groups."""
    emulator = _emulator()
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        deleted = await run_kubectl(config, "delete", "lease", "l3", "--as=nobody")
        whoami = await run_kubectl(config, "auth", "whoami", "--as=bob", "--as-group=devs",
                                   "--as-group=ops")
    assert deleted.returncode == 1
    assert deleted.stderr.strip() == (
        'Error from server (Forbidden): leases.coordination.k8s.io "l3" is forbidden: User '
        '"nobody" cannot delete resource "leases" in API group "coordination.k8s.io" in the '
        'namespace "default"'
    )
    assert emulator.get_lease("l3") is not None
    rows = {line.split()[0]: line.split(None, 1)[1] for line in whoami.stdout.splitlines()[1:]}
    assert rows["Username"] == "bob"
    assert rows["Groups"] == "[devs ops system:authenticated]"


async def test_a_kubeconfig_as_impersonates_for_trio_lease_and_kubectl(tmp_path: Path) -> None:
    """A kubeconfig's as: (Impersonate-User from trio_lease's backend) acts as that user."""
    emulator = _emulator()
    _allow_impersonating(emulator, "alice", "users", ["bob"])
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="alice-token",
                                         impersonate="bob")
        async with KubernetesBackend(load_kubeconfig([config])) as backend:
            got = await backend.get("l3")
            with pytest.raises(BackendAuthError, match='User "bob" cannot create'):
                await backend.create(LeaseRecord("new", holder="me", lease_duration=15))
        listed = await run_kubectl(config, "get", "leases", "-o", "name") if HAVE_KUBECTL else None
        deleted = await run_kubectl(config, "delete", "lease", "l3") if HAVE_KUBECTL else None
    assert got is not None
    if listed is not None and deleted is not None:  # kubectl reads the same as:
        assert listed.stdout.split() == ["lease.coordination.k8s.io/l3"]
        assert 'User "bob" cannot delete resource "leases"' in deleted.stderr
    assert emulator.get_lease("new") is None
    sent = [r.headers.get("impersonate-user") for r in emulator.requests[-2:]]
    assert sent == ["bob", "bob"]
