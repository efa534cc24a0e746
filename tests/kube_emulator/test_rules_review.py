"""SelfSubjectRulesReview (kubectl auth can-i --list) over a real socket.

Follows pkg/registry/authorization/selfsubjectrulesreview/rest.go (400 without a namespace;
the rules of the requesting user), plugin/pkg/auth/authorizer/rbac/rbac.go (``RulesFor``: the
ClusterRoles and the namespace's Roles bound to the user), plugin/pkg/auth/authorizer/rbac/
bootstrappolicy/policy.go (what every authenticated user has) and kubectl's staging/src/
k8s.io/kubectl/pkg/cmd/auth/cani.go (``--list``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

SSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"


def _emulator() -> KubeEmulator:
    emulator = KubeEmulator(require_auth=True, namespaces=("default", "other"))
    emulator.add_service_account_token("sa-token", "default", "default")
    emulator.apply(LEASE_YML.read_text())  # binds its Role to default/default
    return emulator


async def test_rules_review_lists_the_bound_roles_rules() -> None:
    """The Role from lease.yml in its namespace, the basic rules everywhere; 400 without one."""
    emulator = _emulator()
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview"}
    async with served(emulator, "sa-token") as (_, http):
        here = await http.post(SSRR, json={**body, "spec": {"namespace": "default"}})
        there = await http.post(SSRR, json={**body, "spec": {"namespace": "other"}})
        nowhere = await http.post(SSRR, json=body)
    assert here.status_code == 201
    status = here.json()["status"]
    assert status["incomplete"] is False
    assert status["resourceRules"][:2] == [
        {"verbs": ["get", "create", "update", "watch", "list"],
         "apiGroups": ["coordination.k8s.io", "akka.io"], "resources": ["leases"]},
        {"verbs": ["create"], "apiGroups": ["events.k8s.io"], "resources": ["events"]},
    ]
    others = there.json()["status"]["resourceRules"]
    assert {r["apiGroups"][0] for r in others} == {"authorization.k8s.io",
                                                   "authentication.k8s.io"}
    assert (nowhere.status_code, nowhere.json()["message"]) == (400, "no namespace on request")


@needs_kubectl
async def test_kubectl_auth_can_i_list(tmp_path: Path) -> None:
    """kubectl auth can-i --list prints the service account's lease rules in its namespace."""
    emulator = _emulator()
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="sa-token")
        listed = await run_kubectl(config, "auth", "can-i", "--list")
        elsewhere = await run_kubectl(config, "auth", "can-i", "--list", "-n", "other")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]
            if not line.startswith(" ")}
    assert rows["leases.coordination.k8s.io"][-5:] == ["[get", "create", "update", "watch",
                                                       "list]"]
    assert rows["leases.akka.io"][-5:] == ["[get", "create", "update", "watch", "list]"]
    assert rows["events.events.k8s.io"][-1] == "[create]"
    assert "leases.akka.io" not in elsewhere.stdout
    assert "selfsubjectrulesreviews.authorization.k8s.io" in elsewhere.stdout
