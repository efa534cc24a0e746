"""Core v1 Events: what KubernetesEvents writes (events.k8s.io/v1) read where users look.

Follows pkg/apis/events/v1/conversion.go (one stored Event, two versions: ``regarding`` is
``involvedObject``, ``note`` is ``message``, ...), staging/src/k8s.io/api/core/v1/types.go (the
core Event's fields and how they are written), pkg/printers/internalversion/printers.go
(``printEvent``) and kubectl's staging/src/k8s.io/kubectl/pkg/cmd/events/events.go (``kubectl
events`` lists core v1 Events).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend, KubernetesEvents, load_kubeconfig
from trio_lease.testing.kube import KubeEmulator

from ._helpers import anyio_backend as anyio_backend
from ._helpers import needs_kubectl, run_kubectl, served

pytestmark = pytest.mark.anyio

CORE = "/api/v1/namespaces/default/events"
EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


async def _hold_once(kubeconfig: Path) -> None:
    backend = KubernetesBackend(load_kubeconfig([kubeconfig]))
    events = KubernetesEvents(backend, reporting_instance="pod-1")
    lease = Lease("nightly", "me", backend, LeaseSettings(heartbeat_timeout=2,
                                                          heartbeat_interval=0.5),
                  observers=[events])
    async with backend, events, lease.held():
        pass


async def test_events_k8s_io_events_read_as_core_v1(tmp_path: Path) -> None:
    """GET, list and watch of /api/v1 events show the stored Events in core v1 fields;
    writing there is 405 (the emulator's core Events are read only)."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin-token", "admin", ("system:masters",))
    async with served(emulator, "admin-token") as (server, http):
        params = {"watch": "1", "timeoutSeconds": "30"}
        async with http.stream("GET", CORE, params=params) as watch:
            await _hold_once(server.write_kubeconfig(tmp_path / "config", token="admin-token"))
            with anyio.fail_after(10):
                first = json.loads(await anext(watch.aiter_lines()))
        listed = (await http.get(CORE)).json()
        new = (await http.get(EVENTS)).json()["items"][0]
        one = (await http.get(f"{CORE}/{new['metadata']['name']}")).json()
        refused = await http.post(CORE, json={"metadata": {"name": "x"}})
    assert listed["kind"] == "EventList"
    assert listed["apiVersion"] == "v1"
    item = next(i for i in listed["items"] if i["metadata"]["name"] == new["metadata"]["name"])
    assert list(item) == [
        "metadata", "involvedObject", "reason", "message", "source", "firstTimestamp",
        "lastTimestamp", "type", "eventTime", "action", "reportingComponent",
        "reportingInstance",
    ]
    assert item["involvedObject"] == new["regarding"]
    assert item["message"] == new["note"]
    assert (item["source"], item["firstTimestamp"], item["lastTimestamp"]) == ({}, None, None)
    assert (item["reportingComponent"], item["reportingInstance"]) == ("trio-lease", "pod-1")
    assert one == {"kind": "Event", "apiVersion": "v1", **item}
    assert first["type"] == "ADDED"
    assert first["object"]["apiVersion"] == "v1"
    assert "involvedObject" in first["object"] and "regarding" not in first["object"]
    assert refused.status_code == 405


@needs_kubectl
async def test_kubectl_events_shows_what_kubernetes_events_wrote(tmp_path: Path) -> None:
    """kubectl events and kubectl get events list the Acquired and Released Events."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin-token", "admin", ("system:masters",))
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        await _hold_once(config)
        events = await run_kubectl(config, "events")
        got = await run_kubectl(config, "get", "events")
        for_lease = await run_kubectl(config, "events", "--for", "lease/nightly")
    header, *rows = events.stdout.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], events.stderr
    assert [row.split()[1:4] for row in rows] == [
        ["Normal", "Acquired", "Lease/nightly"], ["Normal", "Released", "Lease/nightly"],
    ]
    header, *rows = got.stdout.splitlines()
    assert [row.split()[1:4] for row in rows] == [
        ["Normal", "Acquired", "lease/nightly"], ["Normal", "Released", "lease/nightly"],
    ]
    assert len(for_lease.stdout.splitlines()) == 3, for_lease.stderr
