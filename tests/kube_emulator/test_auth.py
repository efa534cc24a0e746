"""Authentication (bearer tokens, expiry, rotation) and RBAC in the emulator."""

from __future__ import annotations

import anyio
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import AKKA, LEASE_YML, LEASES, akka_lease, client, lease, with_akka_crd

pytestmark = pytest.mark.anyio

SA = "system:serviceaccount:default:default"


async def test_require_auth_rejects_anonymous() -> None:
    """With require_auth, a request without a token is 401; an admin token is allowed."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin-token", "alice", groups=("system:masters",))
    async with client(emulator) as anonymous, client(emulator, "admin-token") as admin:
        assert (await anonymous.get(LEASES)).status_code == 401
        assert (await admin.get(LEASES)).status_code == 200


async def test_unknown_token_is_401_even_without_require_auth() -> None:
    """A token the server does not know is 401 whatever the anonymous policy."""
    emulator = KubeEmulator()
    async with client(emulator, "who-knows") as http:
        response = await http.get(LEASES)
    assert response.status_code == 401


async def test_token_expires_on_the_clock() -> None:
    """A token with expires_at works before that time and is 401 after it."""
    emulator = KubeEmulator()
    emulator.add_token("short", "bob", groups=("system:masters",),
                       expires_at=anyio.current_time() + 60)
    async with client(emulator, "short") as http:
        assert (await http.get(LEASES)).status_code == 200
        await anyio.sleep(61)
        assert (await http.get(LEASES)).status_code == 401


async def test_token_rotation() -> None:
    """Rotation: the old token expires while the new one, for the same user, is valid."""
    emulator = KubeEmulator()
    emulator.add_service_account_token("old", "default", "default")
    emulator.add_service_account_token("new", "default", "default")
    emulator.grant(SA, ["get", "list"])
    emulator.expire_token("old")
    async with client(emulator, "old") as old, client(emulator, "new") as new:
        assert (await old.get(LEASES)).status_code == 401
        assert (await new.get(LEASES)).status_code == 200


async def test_rbac_verbs_are_checked_one_by_one() -> None:
    """A Role granting get and create allows those verbs and forbids update and delete."""
    emulator = KubeEmulator()
    emulator.add_service_account_token("t", "default", "default")
    emulator.grant(SA, ["get", "create"])
    async with client(emulator, "t") as http:
        created = await http.post(LEASES, json=lease("a"))
        got = await http.get(f"{LEASES}/a")
        updated = await http.put(f"{LEASES}/a", json=got.json())
        deleted = await http.delete(f"{LEASES}/a")
        listed = await http.get(LEASES)
    assert (created.status_code, got.status_code) == (201, 200)
    assert (updated.status_code, deleted.status_code, listed.status_code) == (403, 403, 403)
    assert listed.json()["message"] == (
        f'leases.coordination.k8s.io is forbidden: User "{SA}" cannot list resource "leases" in '
        'API group "coordination.k8s.io" in the namespace "default"'
    )


async def test_rbac_is_per_namespace_and_group() -> None:
    """A grant in one namespace and API group does not reach another namespace or group."""
    emulator = KubeEmulator(namespaces=["default", "other"])
    emulator.apply(LEASE_YML.read_text())
    emulator.add_token("t", "carol")
    emulator.grant("carol", ["get", "list"])
    async with client(emulator, "t") as http:
        here = await http.get(LEASES)
        there = await http.get("/apis/coordination.k8s.io/v1/namespaces/other/leases")
        akka = await http.get(AKKA)
    assert here.status_code == 200
    assert there.status_code == 403
    assert 'in the namespace "other"' in there.json()["message"]
    assert akka.status_code == 403
    assert 'in API group "akka.io"' in akka.json()["message"]


async def test_resource_names_cannot_grant_create() -> None:
    """resourceNames restricts get/update to named objects and never allows create."""
    emulator = KubeEmulator()
    emulator.add_token("t", "dave")
    emulator.grant("dave", ["get", "create", "update"], resource_names=["mine"])
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "mine"}})
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "theirs"}})
    async with client(emulator, "t") as http:
        mine = await http.get(f"{LEASES}/mine")
        theirs = await http.get(f"{LEASES}/theirs")
        create = await http.post(LEASES, json=lease("new"))
    assert mine.status_code == 200
    assert theirs.status_code == 403
    assert create.status_code == 403
    assert create.json()["message"].startswith("leases.coordination.k8s.io is forbidden: ")


async def test_lease_yml_grants_the_service_account_both_lease_kinds() -> None:
    """Applying lease.yml lets the placeholder service account use both kinds of lease."""
    emulator = with_akka_crd()
    emulator.add_service_account_token("t", "default", "default")
    emulator.add_service_account_token("u", "default", "someone-else")
    akka = akka_lease("a", owner="", time=0)
    async with client(emulator, "t") as http, client(emulator, "u") as stranger:
        assert (await http.post(LEASES, json=lease("a"))).status_code == 201
        assert (await http.post(AKKA, json=akka)).status_code == 201
        got = await http.get(f"{AKKA}/a")
        assert (await http.put(f"{AKKA}/a", json=got.json())).status_code == 200
        assert (await http.get(LEASES, params={"watch": "1", "timeoutSeconds": "1"})).status_code == 200  # noqa: E501
        assert (await http.delete(f"{LEASES}/a")).status_code == 403
        assert (await stranger.get(f"{LEASES}/a")).status_code == 403


async def test_discovery_needs_authentication_only() -> None:
    """Discovery documents need a valid token (401 otherwise) but no RBAC grant."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("t", "erin")
    async with client(emulator, "t") as http, client(emulator) as anonymous:
        assert (await http.get("/apis")).status_code == 200
        assert (await anonymous.get("/apis")).status_code == 401
