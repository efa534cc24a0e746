"""Server-side dry run (``?dryRun=All``) over a real socket, with httpx and kubectl.

Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go, update.go, patch.go
and delete.go (the options are decoded and validated first), staging/src/k8s.io/apimachinery/
pkg/apis/meta/v1/validation/validation.go (``ValidateDryRun``) and staging/src/k8s.io/
apiserver/pkg/registry/generic/registry/dryrun.go (``DryRunnableStorage``: nothing stored).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio


async def test_dry_run_all_validates_and_answers_without_storing() -> None:
    """dryRun=All: create/update/patch/delete answer as if stored; nothing is (dryrun.go)."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        created = await http.post(LEASES, json=lease("dry", holderIdentity="a"),
                                  params={"dryRun": "All"})
        assert emulator.get_lease("dry") is None
        real = await http.post(LEASES, json=lease("wet", holderIdentity="a"))
        revision = emulator.store.revision
        body = real.json()
        body["spec"]["holderIdentity"] = "b"
        updated = await http.put(f"{LEASES}/wet", json=body, params={"dryRun": "All"})
        patched = await http.patch(
            f"{LEASES}/wet", params={"dryRun": "All"},
            content=json.dumps({"spec": {"holderIdentity": "c"}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        deleted = await http.request(
            "DELETE", f"{LEASES}/wet",
            content=json.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                                "dryRun": ["All"]}),
        )
        listed = await http.get(LEASES)
    assert created.status_code == 201
    assert created.json()["metadata"]["name"] == "dry"
    assert "resourceVersion" not in created.json()["metadata"]  # Create never reached etcd
    assert created.json()["metadata"]["uid"]
    assert (updated.status_code, updated.json()["spec"]["holderIdentity"]) == (200, "b")
    assert updated.json()["metadata"]["resourceVersion"] == real.json()["metadata"][
        "resourceVersion"
    ]
    assert (patched.status_code, patched.json()["spec"]["holderIdentity"]) == (200, "c")
    assert deleted.status_code == 200
    assert deleted.json()["status"] == "Success"
    stored = emulator.get_lease("wet")
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == "a"
    assert emulator.store.revision == revision  # no write, so no new resourceVersion
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["wet"]


async def test_dry_run_still_validates_and_checks_conflicts() -> None:
    """A dry run is refused exactly as the write would be: 422, 409 (rest.go BeforeCreate)."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        invalid = await http.post(LEASES, json=lease("bad", leaseDurationSeconds=0),
                                  params={"dryRun": "All"})
        await http.post(LEASES, json=lease("taken"))
        exists = await http.post(LEASES, json=lease("taken"), params={"dryRun": "All"})
        missing = await http.request("DELETE", f"{LEASES}/absent", params={"dryRun": "All"})
    assert invalid.status_code == 422
    assert "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0" in (
        invalid.json()["message"]
    )
    assert (exists.status_code, exists.json()["reason"]) == (409, "AlreadyExists")
    assert missing.status_code == 404


async def test_any_other_dry_run_value_is_422_on_the_options() -> None:
    """dryRun=Bogus: 422 Invalid on CreateOptions/DeleteOptions.meta.k8s.io (ValidateDryRun)."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        created = await http.post(LEASES, json=lease("x"), params={"dryRun": "Bogus"})
        await http.post(LEASES, json=lease("y"))
        deleted = await http.request(
            "DELETE", f"{LEASES}/y", content=json.dumps({"dryRun": ["All", "Server"]})
        )
        bad_validation = await http.post(LEASES, json=lease("z"),
                                         params={"fieldValidation": "Loose"})
    assert created.status_code == 422
    assert created.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                   '[]string{"Bogus"}: supported values: "All"',
        "reason": "Invalid",
        "details": {"group": "meta.k8s.io", "kind": "CreateOptions", "causes": [
            {"reason": "FieldValueNotSupported",
             "message": 'Unsupported value: []string{"Bogus"}: supported values: "All"',
             "field": "dryRun"}]},
        "code": 422,
    }
    assert emulator.get_lease("x") is None
    assert deleted.status_code == 422
    assert deleted.json()["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
        '[]string{"All", "Server"}: supported values: "All"'
    )
    assert emulator.get_lease("y") is not None
    assert bad_validation.json()["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loose": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )


@needs_kubectl
async def test_kubectl_dry_run_server_stores_nothing(tmp_path: Path) -> None:
    """kubectl create/patch/apply --server-side/delete --dry-run=server: "(server dry run)"."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    manifest = (
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: kd\n"
        "spec:\n  holderIdentity: pod-a\n"
    )
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        created = await run_kubectl(config, "create", "-f", "-", "--dry-run=server",
                                    stdin=manifest)
        assert emulator.get_lease("kd") is None
        await run_kubectl(config, "create", "-f", "-", stdin=manifest)
        revision = emulator.store.revision
        patched = await run_kubectl(config, "patch", "lease", "kd", "--dry-run=server",
                                    "--type=merge", "-p", '{"spec":{"holderIdentity":"pod-b"}}')
        applied = await run_kubectl(config, "apply", "--server-side", "--force-conflicts",
                                    "--dry-run=server", "-f", "-",
                                    stdin=manifest.replace("pod-a", "pod-c"))
        deleted = await run_kubectl(config, "delete", "lease", "kd", "--dry-run=server")
    assert created.stdout.strip() == "lease.coordination.k8s.io/kd created (server dry run)"
    # kubectl patch prints no "(server dry run)" suffix; it sends dryRun=All all the same.
    assert patched.stdout.strip() == "lease.coordination.k8s.io/kd patched", patched.stderr
    patches = [r for r in emulator.requests if r.method == "PATCH"]
    assert [r.query.get("dryRun") for r in patches] == ["All", "All"]
    assert applied.stdout.strip() == (
        "lease.coordination.k8s.io/kd serverside-applied (server dry run)"
    ), applied.stderr
    assert deleted.stdout.strip() == 'lease.coordination.k8s.io "kd" deleted (server dry run)'
    assert emulator.store.revision == revision
    stored = emulator.get_lease("kd")
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == "pod-a"
