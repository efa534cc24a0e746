"""Table output for kubectl (Accept: application/json;as=Table;v=v1;g=meta.k8s.io)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from trio_lease.testing.kube import KubeEmulator
from trio_lease.testing.kube._table import human_duration

from ._helpers import AKKA, LEASE_YML, LEASES, akka_lease, client, lease

pytestmark = pytest.mark.anyio

KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _clocked() -> tuple[KubeEmulator, list[datetime]]:
    now = [T0]
    return KubeEmulator(wall_clock=lambda: now[0]), now


async def test_lease_table_has_name_holder_age() -> None:
    """Leases print NAME, HOLDER, AGE; the holder may be empty."""
    # Follows pkg/printers/internalversion/printers.go (leaseColumnDefinitions, printLease)
    # and staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go (asTable).
    emulator, now = _clocked()
    async with client(emulator, headers={"Accept": KUBECTL_ACCEPT}) as http:
        await http.post(LEASES, json=lease("held", holderIdentity="pod-a"))
        await http.post(LEASES, json=lease("free"))
        now[0] = T0 + timedelta(minutes=3, seconds=12)
        listed = (await http.get(LEASES)).json()
        one = (await http.get(f"{LEASES}/held")).json()
    assert listed["kind"] == "Table"
    assert listed["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in listed["columnDefinitions"]] == ["Name", "Holder", "Age"]
    assert listed["columnDefinitions"][0]["format"] == "name"
    cells = [r["cells"] for r in listed["rows"]]
    assert cells == [["free", "", "3m12s"], ["held", "pod-a", "3m12s"]]
    assert listed["metadata"]["resourceVersion"] == emulator.resource_version
    partial = listed["rows"][1]["object"]
    assert partial["kind"] == "PartialObjectMetadata"
    assert partial["apiVersion"] == "meta.k8s.io/v1"
    assert partial["metadata"]["name"] == "held"
    assert "spec" not in partial
    assert [r["cells"] for r in one["rows"]] == [["held", "pod-a", "3m12s"]]


async def test_include_object_and_version_are_honoured() -> None:
    """includeObject=Object/None and the v1beta1 Table form as the handler writes them."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go (asTable).
    emulator, _ = _clocked()
    beta = {"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"}
    async with client(emulator, headers=beta) as http:
        await http.post(LEASES, json=lease("held", holderIdentity="pod-a"))
        full = (await http.get(LEASES, params={"includeObject": "Object"})).json()
        none = (await http.get(LEASES, params={"includeObject": "None"})).json()
        bad = await http.get(LEASES, params={"includeObject": "Everything"})
    assert full["apiVersion"] == "meta.k8s.io/v1beta1"
    assert full["rows"][0]["object"]["spec"]["holderIdentity"] == "pod-a"
    assert full["rows"][0]["object"]["kind"] == "Lease"
    assert "object" not in none["rows"][0]
    assert bad.status_code == 400
    assert bad.json()["message"] == 'unrecognized includeObject value: "Everything"'


async def test_plain_json_when_table_not_first() -> None:
    """Without an as=Table media type first, the answer is the plain object."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go.
    emulator, _ = _clocked()
    async with client(emulator, headers={"Accept": "application/json, */*"}) as http:
        await http.post(LEASES, json=lease("held", holderIdentity="pod-a"))
        assert (await http.get(LEASES)).json()["kind"] == "LeaseList"


async def test_custom_resource_table_without_printer_columns_is_name_age() -> None:
    """A CRD version without additionalPrinterColumns prints NAME and AGE."""
    # Follows staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/
    # tableconvertor/tableconvertor.go and pkg/apihelpers/helpers.go (GetColumnsForVersion).
    emulator, now = _clocked()
    emulator.apply(LEASE_YML.read_text())
    async with client(emulator, headers={"Accept": KUBECTL_ACCEPT}) as http:
        body = akka_lease("a", owner="me", time=1)
        assert (await http.post(AKKA, json=body)).status_code == 201
        now[0] = T0 + timedelta(days=3, hours=4)
        table = (await http.get(AKKA)).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["columnDefinitions"][1]["type"] == "date"
    assert [r["cells"] for r in table["rows"]] == [["a", "3d4h"]]


async def test_custom_resource_table_uses_printer_columns() -> None:
    """A CRD's additionalPrinterColumns follow NAME, typed as the convertor types them."""
    # Follows staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/
    # tableconvertor/tableconvertor.go (New, cellForJSONValue).
    emulator, _ = _clocked()
    emulator.apply([{
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "locks.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "locks", "singular": "lock", "kind": "Lock"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}},
                "additionalPrinterColumns": [
                    {"name": "Owner", "type": "string", "jsonPath": ".spec.owner"},
                    {"name": "Epoch", "type": "integer", "jsonPath": ".spec.epoch",
                     "priority": 1, "description": "the epoch"},
                    {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
                ],
            }],
        },
    }])
    path = "/apis/example.com/v1/namespaces/default/locks"
    async with client(emulator, headers={"Accept": KUBECTL_ACCEPT}) as http:
        body = {"apiVersion": "example.com/v1", "kind": "Lock", "metadata": {"name": "l"},
                "spec": {"owner": "me", "epoch": 7}}
        created = await http.post(path, json=body)
        assert created.status_code == 201, created.text
        table = (await http.get(path)).json()
    columns = table["columnDefinitions"]
    assert [c["name"] for c in columns] == ["Name", "Owner", "Epoch", "Missing"]
    assert columns[1]["description"] == (
        "Custom resource definition column (in JSONPath format): .spec.owner"
    )
    assert columns[2]["priority"] == 1
    assert columns[2]["description"] == "the epoch"
    assert table["rows"][0]["cells"] == ["l", "me", 7, None]


async def test_other_types_use_the_default_table() -> None:
    """Types without a printer get NAME and CREATED AT (the default table convertor)."""
    # Follows staging/src/k8s.io/apiserver/pkg/registry/rest/table.go.
    emulator, _ = _clocked()
    async with client(emulator, headers={"Accept": KUBECTL_ACCEPT}) as http:
        table = (await http.get("/api/v1/namespaces")).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Created At"]
    assert ["default", "2026-01-01T00:00:00Z"] in [r["cells"] for r in table["rows"]]


def test_human_duration_matches_apimachinery() -> None:
    """Ages are written as duration.HumanDuration writes them."""
    # Follows staging/src/k8s.io/apimachinery/pkg/util/duration/duration.go.
    cases = {
        -5: "<invalid>", -1: "0s", 0: "0s", 119: "119s", 120: "2m", 192: "3m12s", 600: "10m",
        3 * 3600 + 59: "3h", 5 * 3600 + 600: "5h10m", 9 * 3600: "9h", 3 * 86400: "3d",
        3 * 86400 + 4 * 3600: "3d4h", 30 * 86400: "30d", 2 * 365 * 86400 + 10 * 86400: "2y10d",
        9 * 365 * 86400: "9y",
    }
    assert {s: human_duration(s) for s in cases} == cases


async def test_watch_as_table_sends_one_row_tables_headers_first() -> None:
    """A Table watch (kubectl get -w) sends one-row Tables, column definitions only at first."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go
    # (watchEmbeddedEncoder: asTable per event, NoHeaders after the first).
    emulator, _ = _clocked()
    events: list[dict[str, object]] = []
    async with client(emulator, headers={"Accept": KUBECTL_ACCEPT}) as http:
        await http.post(LEASES, json=lease("held", holderIdentity="pod-a"))
        params = {"watch": "1", "timeoutSeconds": "5", "resourceVersion": "0"}
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                async with http.stream("GET", LEASES, params=params) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        events.append(json.loads(line))

            tg.start_soon(watch)
            await anyio.sleep(1)
            got = (await http.get(f"{LEASES}/held", headers={"Accept": "application/json"}))
            changed = {**got.json(), "spec": {"holderIdentity": "pod-b"}}
            await http.put(f"{LEASES}/held", json=changed)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    first, second = (e["object"] for e in events)
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["kind"] == second["kind"] == "Table"
    assert [c["name"] for c in first["columnDefinitions"]] == ["Name", "Holder", "Age"]
    assert second["columnDefinitions"] is None
    assert [r["cells"][:2] for r in first["rows"]] == [["held", "pod-a"]]
    assert [r["cells"][:2] for r in second["rows"]] == [["held", "pod-b"]]
