"""Fidelity against clients nobody on this team wrote: kubernetes, kubernetes_asyncio, kubectl."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends on real time: the clients use real sockets and threads."""
    backend: str = request.param
    return backend


def _official_crud(kubeconfig: Path) -> dict[str, Any]:
    """Lease CRUD and its errors with the official (synchronous) client, in a worker thread."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    api = client.CoordinationV1Api(api_client)
    seen: dict[str, Any] = {}

    def error(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str, str]:
        try:
            call(*args, **kwargs)
        except ApiException as exc:
            return exc.status, exc.reason, json.loads(exc.body or "{}")["reason"]
        raise AssertionError("expected an ApiException")

    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="crud"),
        spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=15),
    )
    created = api.create_namespaced_lease("default", body)
    seen["created"] = created
    read = api.read_namespaced_lease("crud", "default")
    seen["read"] = read
    assert read.spec is not None
    read.spec.holder_identity = "you"
    replaced = api.replace_namespaced_lease("crud", "default", read)
    seen["replaced"] = replaced
    seen["conflict"] = error(api.replace_namespaced_lease, "crud", "default", read)
    seen["exists"] = error(api.create_namespaced_lease, "default", body)
    seen["invalid"] = error(
        api.create_namespaced_lease, "default",
        client.V1Lease(metadata=client.V1ObjectMeta(name="Bad_Name")),
    )
    seen["deleted"] = api.delete_namespaced_lease("crud", "default")
    seen["missing"] = error(api.read_namespaced_lease, "crud", "default")
    return seen


async def test_official_client_round_trips_lease_crud_and_errors(tmp_path: Path) -> None:
    """kubernetes.CoordinationV1Api: create/read/replace/delete; 404/409/422 as ApiException."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin", "admin", groups=("system:masters",))
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="admin")
        seen = await anyio.to_thread.run_sync(_official_crud, kubeconfig)
    assert seen["created"].spec.holder_identity == "me"
    assert seen["created"].metadata.uid == seen["read"].metadata.uid
    assert seen["replaced"].spec.holder_identity == "you"
    assert seen["replaced"].metadata.resource_version != seen["read"].metadata.resource_version
    assert seen["conflict"] == (409, "Conflict", "Conflict")
    assert seen["exists"] == (409, "Conflict", "AlreadyExists")
    assert seen["invalid"] == (422, "Unprocessable Entity", "Invalid")
    assert seen["deleted"]["status"] == "Success"
    assert seen["missing"] == (404, "Not Found", "NotFound")


def _official_forbidden(kubeconfig: Path) -> tuple[int, str, str]:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    api = client.CoordinationV1Api(api_client)
    try:
        api.create_namespaced_lease(
            "default", client.V1Lease(metadata=client.V1ObjectMeta(name="x"))
        )
    except ApiException as exc:
        return exc.status, exc.reason, json.loads(exc.body or "{}")["message"]
    raise AssertionError("expected 403")


async def test_official_client_sees_403(tmp_path: Path) -> None:
    """A service account without create gets ApiException 403 with the RBAC message."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_service_account_token("sa", "default", "app")
    emulator.grant("system:serviceaccount:default:app", ["get"])
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="sa")
        status, reason, message = await anyio.to_thread.run_sync(_official_forbidden, kubeconfig)
    assert (status, reason) == (403, "Forbidden")
    assert message == (
        'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:default:app" '
        'cannot create resource "leases" in API group "coordination.k8s.io" in the namespace '
        '"default"'
    )


def _run_electors(kubeconfig: Path) -> dict[str, Any]:
    """Two kubernetes_asyncio electors on one Lease lock, in their own asyncio loop."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
    from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

    async def scenario() -> dict[str, Any]:
        configuration = client.Configuration()
        await config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        leading = {"a": asyncio.Event(), "b": asyncio.Event()}
        record: dict[str, Any] = {}
        loop = asyncio.get_running_loop()

        async def elector(identity: str, api: client.ApiClient) -> None:
            async def started() -> None:
                record[f"{identity}_started"] = loop.time()
                leading[identity].set()

            async def stopped() -> None:
                record[f"{identity}_stopped"] = loop.time()

            lock = LeaseLock("elect", "default", identity, api)
            cfg = electionconfig.Config(
                lock, lease_duration=4, renew_deadline=3, retry_period=1,
                onstarted_leading=started, onstopped_leading=stopped,
            )
            await leaderelection.LeaderElection(cfg).run()

        api_a, api_b = client.ApiClient(configuration), client.ApiClient(configuration)
        async with api_a, api_b:
            reader = client.CoordinationV1Api(api_b)
            task_a = asyncio.create_task(elector("a", api_a))
            await asyncio.wait_for(leading["a"].wait(), 20)
            task_b = asyncio.create_task(elector("b", api_b))
            first = await reader.read_namespaced_lease("elect", "default")
            await asyncio.sleep(3)
            second = await reader.read_namespaced_lease("elect", "default")
            record["b_led_while_a_renewed"] = leading["b"].is_set()
            record["renewals"] = (first.spec.holder_identity, second.spec.holder_identity,
                                  first.spec.renew_time < second.spec.renew_time)
            task_a.cancel()
            record["a_cancelled"] = loop.time()
            await asyncio.wait_for(leading["b"].wait(), 20)
            task_b.cancel()
            final = await reader.read_namespaced_lease("elect", "default")
            record["final_holder"] = final.spec.holder_identity
        return record

    return asyncio.run(scenario())


async def test_kubernetes_asyncio_leader_election(tmp_path: Path) -> None:
    """A kubernetes_asyncio elector leads and renews; a second takes over after it stops."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config")
        record = await anyio.to_thread.run_sync(_run_electors, kubeconfig)
        stored = emulator.get_lease("elect")
    assert record["renewals"] == ("a", "a", True)
    assert record["b_led_while_a_renewed"] is False
    # b waits out the 4 s lease from its last observed renewal (at most ~1 s before the stop)
    assert record["b_started"] - record["a_cancelled"] >= 2.5
    assert record["final_holder"] == "b"
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == "b"


async def test_emulate_command_serves_until_ctrl_c(tmp_path: Path) -> None:
    """`python -m trio_lease.testing.kube emulate`: kubeconfig works, SIGINT exits 0."""
    import signal
    import sys

    kubeconfig = tmp_path / "kubeconfig"
    command = [sys.executable, "-m", "trio_lease.testing.kube", "emulate",
               "--kubeconfig", str(kubeconfig), "--apply", str(LEASE_YML), "--token", "secret-tok"]
    async with await anyio.open_process(command) as process:
        assert process.stdout is not None
        output = b""
        with anyio.fail_after(30):
            while b"Ctrl-C" not in output:
                output += await process.stdout.receive()
        seen = await anyio.to_thread.run_sync(_official_crud, kubeconfig)
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(15):
            code = await process.wait()
            async for chunk in process.stdout:
                output += chunk
    assert seen["deleted"]["status"] == "Success"
    assert code == 0
    assert b"stopped" in output
    assert b"secret-tok" not in output


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_get_and_apply(tmp_path: Path) -> None:
    """kubectl: apply lease.yml (CRD + RBAC), then get and apply leases of both kinds."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("kubectl-admin", "admin", groups=("system:masters",))
    manifest = tmp_path / "lease.yaml"
    manifest.write_text(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: demo\n"
        "spec:\n  holderIdentity: me\n  leaseDurationSeconds: 15\n---\n"
        "apiVersion: akka.io/v1\nkind: Lease\nmetadata:\n  name: akka-demo\n"
        "spec:\n  owner: me\n  time: 1700000000000\n"
    )

    def kubectl(kubeconfig: Path, *args: str) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir",
             str(kubeconfig.parent / "kubectl-cache"), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="kubectl-admin")
        applied = await anyio.to_thread.run_sync(kubectl, kubeconfig, "apply", "-f", str(LEASE_YML))
        await anyio.to_thread.run_sync(kubectl, kubeconfig, "apply", "-f", str(manifest))
        listed = await anyio.to_thread.run_sync(kubectl, kubeconfig, "get", "leases")
        holder = await anyio.to_thread.run_sync(
            kubectl, kubeconfig, "get", "lease", "demo", "-o", "jsonpath={.spec.holderIdentity}"
        )
        akka = await anyio.to_thread.run_sync(kubectl, kubeconfig, "get", "leases.akka.io", "-A")
    assert "customresourcedefinition.apiextensions.k8s.io/leases.akka.io created" in applied
    assert "role.rbac.authorization.k8s.io/trio-lease created" in applied
    assert "demo" in listed
    assert holder == "me"
    assert "akka-demo" in akka
    assert "akka-demo" not in listed
    stored = emulator.get("akka.io/v1", "leases", "akka-demo", "default")
    assert stored is not None
    assert stored["spec"] == {"owner": "me", "time": 1700000000000}


def test_emulate_rejects_a_bad_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`emulate --apply` with a missing or invalid manifest exits 78 (configuration) before
    serving."""
    from trio_lease.testing.kube.__main__ import main

    bad = tmp_path / "bad.yml"
    bad.write_text("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: Bad_Name\n")
    assert main(["emulate", "--apply", str(tmp_path / "missing.yml")]) == 78
    assert main(["emulate", "--apply", str(bad)]) == 78
    assert capsys.readouterr().err.count("cannot apply it") == 2
