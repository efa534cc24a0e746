"""events.k8s.io/v1 Events: served, listed, watched, validated, and seen by kubectl.

Validation follows kubernetes/kubernetes pkg/apis/core/validation/events.go
(ValidateEventCreate for an events.k8s.io/v1 request, and legacyValidateEvent): eventTime is
required, type must be Normal or Warning, reportingController / reportingInstance / action /
reason are required once eventTime is set, and the error paths name the core fields
(involvedObject.namespace, count). Decoding errors are the decoder's 400.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend, KubernetesEvents, load_kubeconfig
from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML, client, needs_kubectl, run_kubectl

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


def event(name: str = "job.1", **fields: Any) -> JSON:
    """A valid events.k8s.io/v1 Event, with ``fields`` replaced (None removes one)."""
    body: JSON = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "trio-lease",
        "reportingInstance": "pod-1",
        "action": "LeaderElection",
        "reason": "Acquired",
        "regarding": {"kind": "Lease", "namespace": "default", "name": "job"},
        "note": "me became leader",
        "type": "Normal",
    }
    body.update(fields)
    return {key: value for key, value in body.items() if value is not None}


def causes(response: Any) -> set[tuple[str, str]]:
    """(field, reason) of each cause of a 422."""
    assert response.status_code == 422, response.text
    return {(c["field"], c["reason"]) for c in response.json()["details"]["causes"]}


async def test_create_get_list_watch_delete() -> None:
    """An Event is created (201), read, listed as an EventList, watched and deleted."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await http.post(EVENTS, json=event())
        got = await http.get(f"{EVENTS}/job.1")
        listed = await http.get(EVENTS, params={"fieldSelector": "metadata.name=job.1"})
        watched = []
        params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": "1"}
        async with http.stream("GET", EVENTS, params=params) as stream:
            watched = [json.loads(line) async for line in stream.aiter_lines()]
        deleted = await http.delete(f"{EVENTS}/job.1")
        gone = await http.get(f"{EVENTS}/job.1")
    assert created.status_code == 201, created.text
    body = got.json()
    assert body["reason"] == "Acquired"
    assert body["regarding"] == {"kind": "Lease", "namespace": "default", "name": "job"}
    assert body["metadata"]["namespace"] == "default"
    assert listed.json()["kind"] == "EventList"
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["job.1"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in watched] == [("ADDED", "job.1")]
    assert deleted.status_code == 200
    assert gone.status_code == 404


async def test_discovery_serves_events_k8s_io_v1() -> None:
    """/apis lists events.k8s.io; its v1 resource list has namespaced events of kind Event."""
    async with client(KubeEmulator()) as http:
        groups = (await http.get("/apis")).json()["groups"]
        resources = (await http.get("/apis/events.k8s.io/v1")).json()["resources"]
    assert "events.k8s.io" in [group["name"] for group in groups]
    (entry,) = [r for r in resources if r["name"] == "events"]
    assert entry["kind"] == "Event"
    assert entry["namespaced"] is True
    assert {"create", "get", "list", "watch", "delete"} <= set(entry["verbs"])


async def test_without_event_time_only_event_time_and_type_are_checked() -> None:
    """No eventTime: eventTime Required and type Invalid; the legacy checks do not apply."""
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bare"}}
    async with client(KubeEmulator()) as http:
        response = await http.post(EVENTS, json=body)
    assert causes(response) == {("eventTime", "FieldValueRequired"), ("type", "FieldValueInvalid")}


async def test_with_event_time_the_reporting_fields_are_required() -> None:
    """eventTime set: reportingController, reportingInstance, action and reason are required."""
    body = event(
        reportingController=None, reportingInstance=None, action=None, reason=None, type="Info"
    )
    async with client(KubeEmulator()) as http:
        response = await http.post(EVENTS, json=body)
    assert causes(response) >= {
        ("reportingController", "FieldValueRequired"),
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
        ("reason", "FieldValueRequired"),
        ("type", "FieldValueInvalid"),
    }
    assert 'type: Invalid value: "": has invalid value: Info' in response.json()["message"]


async def test_limits_names_and_namespaces() -> None:
    """Too long reason, an unqualified controller, a deprecated count, a foreign regarding."""
    emulator = KubeEmulator()
    emulator.create_namespace("other")
    other = "/apis/events.k8s.io/v1/namespaces/other/events"
    async with client(emulator) as http:
        long_reason = await http.post(EVENTS, json=event(reason="r" * 129))
        controller = await http.post(EVENTS, json=event(reportingController="Bad Name"))
        count = await http.post(EVENTS, json=event(deprecatedCount=3))
        no_namespace = await http.post(other, json=event(regarding={"kind": "Node", "name": "n"}))
        in_default = await http.post(EVENTS, json=event(regarding={"kind": "Node", "name": "n"}))
    assert causes(long_reason) == {("reason", "FieldValueInvalid")}
    assert causes(controller) == {("reportingController", "FieldValueInvalid")}
    assert causes(count) == {("count", "FieldValueInvalid")}
    assert causes(no_namespace) == {("involvedObject.namespace", "FieldValueInvalid")}
    assert in_default.status_code == 201


async def test_wrong_json_types_are_decode_errors() -> None:
    """A number for reason, or an eventTime without six fraction digits: 400 from the decoder."""
    async with client(KubeEmulator()) as http:
        number = await http.post(EVENTS, json=event(reason=5))
        time = await http.post(EVENTS, json=event(eventTime="2026-01-01T00:00:00Z"))
    assert number.status_code == 400
    assert number.json()["message"] == (
        'Event in version "v1" cannot be handled as a Event: json: cannot unmarshal number '
        "into Go struct field Event.reason of type string"
    )
    assert time.status_code == 400
    assert "cannot be handled as a Event" in time.json()["message"]


async def test_lease_yml_lets_the_service_account_create_but_not_list_events() -> None:
    """lease.yml's Role grants create on events (what KubernetesEvents needs), nothing more."""
    emulator = KubeEmulator(require_auth=True)
    emulator.apply(LEASE_YML.read_text())
    emulator.add_service_account_token("tok", "default", "default")
    async with client(emulator, token="tok") as http:
        created = await http.post(EVENTS, json=event())
        listed = await http.get(EVENTS)
    assert created.status_code == 201, created.text
    assert listed.status_code == 403


async def test_table_prints_events_as_print_event_does() -> None:
    """As a Table: printEvent's columns; every cell sent, Source from the reporting fields."""
    emulator = KubeEmulator()
    table_accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with client(emulator) as http:
        await http.post(EVENTS, json=event(note=" me became leader \n"))
        response = await http.get(EVENTS, headers={"Accept": table_accept})
    table = response.json()
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message",
        "First Seen", "Count", "Name",
    ]  # fmt: skip
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 1, 1, 0, 1, 1, 1]
    (row,) = table["rows"]
    assert row["cells"][1:] == [
        "Normal", "Acquired", "lease/job", "", "trio-lease, pod-1", "me became leader",
        row["cells"][0], 1, "job.1",
    ]  # fmt: skip


@needs_kubectl
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_kubectl_get_events_lists_what_a_lease_wrote(tmp_path: Path) -> None:
    """Real sockets: a lease held with KubernetesEvents, then `kubectl get events` lists both."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin", "admin", groups=("system:masters",))
    settings = LeaseSettings(heartbeat_timeout=2, heartbeat_interval=0.5)

    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="admin")
        backend = KubernetesBackend(load_kubeconfig([kubeconfig]))
        events = KubernetesEvents(backend)
        lease = Lease("nightly", "me", backend, settings, observers=[events])
        async with backend, events, lease.held():
            pass
        shown = await run_kubectl(kubeconfig, "get", "events")
        dumped = await run_kubectl(kubeconfig, "get", "events", "-o", "json")
    assert shown.returncode == dumped.returncode == 0, shown.stderr + dumped.stderr
    table, listed = shown.stdout, dumped.stdout
    items = sorted(json.loads(listed)["items"], key=lambda item: item["eventTime"])
    # kubectl reads core v1 Events (the core group comes first): regarding is involvedObject.
    assert [(i["reason"], i["involvedObject"]["name"]) for i in items] == [
        ("Acquired", "nightly"),
        ("Released", "nightly"),
    ]
    header, *rows = table.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [row.split()[1:4] for row in rows] == [
        ["Normal", "Acquired", "lease/nightly"],
        ["Normal", "Released", "lease/nightly"],
    ]
    assert "became leader" in rows[0]


@pytest.fixture
def snippet() -> str:
    """The Python snippet of the "Events" section of docs/kubernetes.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    events_section = text[text.index("## Events\n") :]
    (code,) = re.findall(r"```python\n(.*?)```", events_section, flags=re.DOTALL)
    return str(code)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_docs_snippet_writes_acquired_and_released(tmp_path: Path, snippet: str) -> None:
    """docs/kubernetes.md "Events": its snippet, run with KUBECONFIG set, writes both Events."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("admin", "admin", groups=("system:masters",))
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="admin")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAME": "pod-7"}
        done = await anyio.run_process([sys.executable, "-c", snippet], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    stored = emulator.store.items(emulator.types[("events.k8s.io", "v1", "events")], "default")
    assert sorted(
        (e["reason"], e["regarding"]["name"], e["reportingInstance"]) for e in stored
    ) == [
        ("Acquired", "nightly-report", "pod-7"),
        ("Released", "nightly-report", "pod-7"),
    ]
