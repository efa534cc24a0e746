"""KubernetesEvents: an events.k8s.io/v1 Event per acquire, release and loss.

Against the in-process emulator on virtual time, asyncio and trio. The Events are read back
through the API as any client lists them; their fields follow client-go's leader election
events (reason and note) in the events.k8s.io/v1 shape.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from trio_lease import Lease, LeaseConfigError, LeaseInfo, LeaseLost, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesEvents, lease_name_for
from trio_lease.testing.kube import KubeEmulator

from ._helpers import SERVER, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio

SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
AKKA_SETTINGS = LeaseSettings(heartbeat_timeout=30, heartbeat_interval=3, lease_operation_timeout=1)
EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"
SA = "system:serviceaccount:default:app"
INFO = LeaseInfo(name="job", owner="me", identity="me_1")


async def listed(emulator: KubeEmulator, **params: str) -> list[dict[str, Any]]:
    """The Events in namespace default, as a client lists them."""
    async with httpx.AsyncClient(transport=emulator.transport(), base_url=SERVER) as http:
        response = await http.get(EVENTS, params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return sorted(items, key=lambda item: item["eventTime"])


async def test_held_writes_acquired_then_released() -> None:
    """held() → an Acquired then a Released Normal Event regarding the Lease, sent by exit."""
    emulator = KubeEmulator()
    backend = make_backend(emulator.transport())
    events = KubernetesEvents(backend, reporting_instance="pod-1")
    lease = Lease("job", "me", backend, SETTINGS, observers=[events])
    async with backend, events, lease.held() as grant:
        await anyio.sleep(3)
        token = grant.fencing_token
    items = await listed(emulator)
    assert [(e["type"], e["reason"]) for e in items] == [
        ("Normal", "Acquired"),
        ("Normal", "Released"),
    ]
    stored = emulator.get_lease("job")
    assert stored is not None
    for item in items:
        assert item["regarding"] == {
            "kind": "Lease",
            "namespace": "default",
            "name": "job",
            "uid": stored["metadata"]["uid"],
            "apiVersion": "coordination.k8s.io/v1",
        }
        assert item["reportingController"] == "trio-lease"
        assert item["reportingInstance"] == "pod-1"
        assert item["action"] == "LeaderElection"
        assert item["metadata"]["name"].startswith("job.")
        assert f"fencing token {token}" in item["note"]
        assert item["note"].startswith(lease.identity)
    assert "became leader" in items[0]["note"]
    assert "stopped leading: released after 3.0 s" in items[1]["note"]
    assert (events.sent, events.failed, events.dropped) == (2, 0, 0)


async def test_akka_lease_with_a_mapped_name_is_regarded_by_its_object() -> None:
    """An akka.io/v1 lease: regarding names its CRD kind and the mapped object name."""
    emulator = emulator_with_crd()
    backend = make_backend(emulator.transport(), kind="akka.io/v1")
    events = KubernetesEvents(backend)
    lease = Lease("Jobs/Nightly", "me", backend, AKKA_SETTINGS, observers=[events])
    async with backend, events, lease.held():
        pass
    items = await listed(emulator)
    assert len(items) == 2
    regarding = {key: value for key, value in items[0]["regarding"].items() if key != "uid"}
    assert regarding == {
        "kind": "Lease",
        "namespace": "default",
        "name": lease_name_for("Jobs/Nightly"),
        "apiVersion": "akka.io/v1",
    }


async def test_takeover_writes_a_lost_warning() -> None:
    """Another holder overwriting the Lease → a Lost Warning Event naming the cause."""
    emulator = KubeEmulator()
    backend = make_backend(emulator.transport())
    events = KubernetesEvents(backend)
    lease = Lease("job", "me", backend, SETTINGS, observers=[events])
    async with backend, events:
        with pytest.raises(LeaseLost):
            async with lease.held():
                await anyio.sleep(1)
                await _take_over(emulator, "job")
                await anyio.sleep(30)
    items = await listed(emulator)
    assert [(e["type"], e["reason"]) for e in items] == [
        ("Normal", "Acquired"),
        ("Warning", "Lost"),
    ]
    assert "stopped leading: lost (" in items[1]["note"]


async def _take_over(emulator: KubeEmulator, name: str) -> None:
    """PUT the Lease with another holder, as a contender whose takeover won would."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    async with httpx.AsyncClient(transport=emulator.transport(), base_url=SERVER) as http:
        current = (await http.get(path)).json()
        current["spec"]["holderIdentity"] = "thief_1"
        current["spec"]["leaseTransitions"] = current["spec"].get("leaseTransitions", 0) + 1
        response = await http.put(path, json=current)
    assert response.status_code == 200, response.text


async def test_without_the_events_rule_the_lease_works_and_events_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Role without events: the lease is held and released, each Event fails at INFO."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["get", "create", "update", "watch", "list"])
    caplog.set_level(logging.INFO, "trio_lease")
    async with make_backend(emulator.transport(), token="tok") as backend:
        events = KubernetesEvents(backend)
        lease = Lease("job", "me", backend, SETTINGS, observers=[events])
        async with events, lease.held():
            await anyio.sleep(2)
        report = await backend.check()
    assert emulator.get_lease("job") is not None
    assert (events.sent, events.failed) == (0, 2)
    failures = [r for r in caplog.records if "Event not sent" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.levelno == logging.INFO for r in failures)
    assert "403" in failures[0].getMessage()
    assert "events.k8s.io" in failures[0].getMessage()
    assert "tok" not in caplog.text
    assert report.ok, str(report)
    (optional,) = report.optional
    assert "create on events.events.k8s.io" in optional.what
    assert 'apiGroups: ["events.k8s.io"]' in optional.rule
    assert "OPTIONAL" in str(report)


async def test_check_with_lease_yml_reports_no_optional_gap() -> None:
    """The Role in lease.yml grants create on events, so check reports nothing optional."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "default")
    async with make_backend(emulator.transport(), token="tok") as backend:
        report = await backend.check()
    assert report.ok, str(report)
    assert report.optional == []


async def test_a_full_queue_drops_the_oldest_and_counts_it() -> None:
    """Queued before the sender runs, beyond queue_size: the oldest dropped, the rest sent."""
    emulator = KubeEmulator()
    async with make_backend(emulator.transport()) as backend:
        events = KubernetesEvents(backend, queue_size=2)
        for token in (1, 2, 3):
            events.acquired(INFO, fencing_token=token, waited=0.0, valid_for=10.0)
        assert events.dropped == 1
        async with events:
            pass
    notes = [item["note"] for item in await listed(emulator)]
    assert notes == ["me_1 became leader (fencing token 2)", "me_1 became leader (fencing token 3)"]
    assert events.sent == 2


async def test_unreachable_server_never_reaches_the_lease(caplog: pytest.LogCaptureFixture) -> None:
    """Events POSTs failing in transport are logged at INFO; the hooks and exit never raise."""
    caplog.set_level(logging.INFO, "trio_lease")

    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    backend = make_backend(httpx.MockTransport(refuse))
    async with backend, KubernetesEvents(backend, flush_timeout=2) as events:
        events.lost(INFO, fencing_token=7, cause="taken over")
        await anyio.sleep(1)
    assert (events.sent, events.failed) == (0, 1)
    assert any(
        r.levelno == logging.INFO and "Event not sent" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize("controller", ["", "Bad Name", "a/b/c", "x" * 64])
async def test_reporting_controller_must_be_a_qualified_name(controller: str) -> None:
    """reportingController is refused at construction unless it is a qualified name."""
    backend = make_backend(KubeEmulator().transport())
    with pytest.raises(LeaseConfigError, match="qualified name"):
        KubernetesEvents(backend, reporting_controller=controller)


async def test_exit_flushes_queued_events_within_flush_timeout() -> None:
    """On exit, queued Events are still sent, but for at most flush_timeout seconds."""
    emulator = KubeEmulator()
    emulator.faults.delay(0.2, verbs=["create"])
    async with make_backend(emulator.transport()) as backend:
        async with KubernetesEvents(backend) as events:
            for token in (1, 2):
                events.acquired(INFO, fencing_token=token, waited=0.0, valid_for=10.0)
        assert events.sent == 2
        bounded = KubernetesEvents(backend, flush_timeout=0.3)
        for token in (3, 4):
            bounded.acquired(INFO, fencing_token=token, waited=0.0, valid_for=10.0)
        start = anyio.current_time()
        async with bounded:
            pass
        assert anyio.current_time() - start == pytest.approx(0.3)
    assert bounded.sent == 1
    assert len(await listed(emulator)) == 3


def _check_command(kubeconfig: Path, *extra: str) -> tuple[int, str]:
    code = "import sys; from trio_lease._cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "--kubeconfig", str(kubeconfig), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_check_command_lists_the_events_rule_as_optional(tmp_path: Path) -> None:
    """`trio-lease check` without the events rule exits 0 and lists it as optional (--json)."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_service_account_token("app-secret-token", "default", "app")
    emulator.grant(SA, ["get", "create", "update", "watch", "list"])
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="app-secret-token")
        code, out = await anyio.to_thread.run_sync(_check_command, kubeconfig, "--json")
        text_code, text = await anyio.to_thread.run_sync(_check_command, kubeconfig)
    assert code == 0, out
    report = json.loads(out)
    assert report["ok"] is True
    assert report["problems"] == []
    (optional,) = report["optional"]
    assert optional["rule"].endswith('verbs: ["create"]\n')
    assert "events.k8s.io" in optional["rule"]
    assert text_code == 0, text
    assert "OPTIONAL: missing permission: create on events.events.k8s.io" in text
    assert "app-secret-token" not in out + text


async def test_event_names_stay_valid_for_the_longest_object_names() -> None:
    """A 253-character object name: the Event name is cut to fit, and the server accepts it."""
    emulator = KubeEmulator()
    long_name = "a" * 120 + "-" + "b" * 132
    async with make_backend(emulator.transport()) as backend, KubernetesEvents(backend) as events:
        info = LeaseInfo(name=long_name, owner="me", identity="me_1")
        events.acquired(info, fencing_token=1, waited=0.0, valid_for=10.0)
        events.released(info, fencing_token=1, held=1.0, written=True)
    assert (events.sent, events.failed) == (2, 0)
    names = [item["metadata"]["name"] for item in await listed(emulator)]
    assert all(len(name) <= 253 and name.startswith("a" * 120) for name in names)
    assert len(set(names)) == 2
