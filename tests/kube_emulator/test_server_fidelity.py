"""The emulator answers like kube-apiserver (create, 404, CRDs, gate, errors)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
import yaml

from trio_lease.testing.kube import KubeEmulator

from ._helpers import AKKA, LEASE_YML, LEASES, client, create, lease, with_akka_crd

pytestmark = pytest.mark.anyio

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PAGE_NOT_FOUND = "404 page not found\n"


def _crd() -> dict[str, object]:
    crd: dict[str, object] = next(iter(yaml.safe_load_all(LEASE_YML.read_text())))
    return crd


# --- POST with metadata.resourceVersion ----------------------------------------------------


async def test_post_with_resource_version_is_500() -> None:
    """POST carrying metadata.resourceVersion: 500, no reason (apiserver/pkg/storage/etcd3/store.go
    Create, storage/errors.go ErrResourceVersionSetOnCreate, responsewriters/status.go)."""
    emulator = KubeEmulator()
    body = lease("a", holderIdentity="x")
    body["metadata"]["resourceVersion"] = "12"
    async with client(emulator) as http:
        refused = await http.post(LEASES, json=body)
        await create(http, "b")
        existing = await http.post(LEASES, json={**body, "metadata": {"name": "b",
                                                                       "resourceVersion": "3"}})
        invalid = await http.post(LEASES, json={**body, "metadata": {"name": "B_",
                                                                      "resourceVersion": "3"}})
    expected = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "resourceVersion should not be set on objects to be created", "code": 500,
    }
    assert (refused.status_code, refused.json()) == (500, expected)
    assert emulator.get_lease("a") is None
    # The storage check comes before AlreadyExists (etcd's txn) and after validation.
    assert (existing.status_code, existing.json()) == (500, expected)
    assert invalid.status_code == 422


async def test_put_creating_a_lease_still_drops_the_stale_resource_version() -> None:
    """Create-on-update is not a POST: its resourceVersion is dropped (generic registry
    store.go Update with AllowCreateOnUpdate)."""
    emulator = KubeEmulator()
    body = lease("a", holderIdentity="x")
    body["metadata"]["resourceVersion"] = "12"
    async with client(emulator) as http:
        response = await http.put(f"{LEASES}/a", json=body)
    assert response.status_code == 201


# --- 404 for what no handler serves -----------------------------------------------------------


async def test_unserved_group_is_text_plain_page_not_found() -> None:
    """No CRD for a group: Go's http.NotFound, text/plain, for resources and discovery alike
    (apiserver/pkg/util/notfoundhandler/not_found_handler.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        replies = [
            await http.get(f"{AKKA}/a"),
            await http.post(AKKA, json={"apiVersion": "akka.io/v1", "kind": "Lease"}),
            await http.get(AKKA, params={"watch": "1"}),
            await http.get("/apis/akka.io/v1"),
            await http.get("/apis/akka.io"),
        ]
    for reply in replies:
        assert reply.status_code == 404
        assert reply.headers["content-type"] == "text/plain; charset=utf-8"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.text == PAGE_NOT_FOUND


async def test_unknown_resource_in_a_builtin_group_is_a_status() -> None:
    """Under a built-in group go-restful answers a Status with empty details
    (apiserver/pkg/server/handler.go director, go-restful's service error handler)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        reply = await http.get("/apis/coordination.k8s.io/v1/namespaces/default/widgets")
    assert reply.status_code == 404
    assert reply.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound",
        "details": {}, "code": 404,
    }


# --- CRDs: Established, then served ---------------------------------------------------------


async def test_new_crd_is_established_by_a_second_write() -> None:
    """POST of a CRD answers its reset status; then NamesAccepted and Established are set
    (apiextensions-apiserver pkg/registry/customresourcedefinition/strategy.go PrepareForCreate,
    pkg/controller/establish/establishing_controller.go, status/naming_controller.go)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await http.post(CRDS, json=_crd())
        got = (await http.get(f"{CRDS}/leases.akka.io")).json()
        served = await http.get(AKKA)
    assert created.status_code == 201
    assert created.json()["status"] == {
        "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"],
    }
    conditions = got["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in conditions] == [
        ("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
        ("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
    ]
    assert got["status"]["acceptedNames"] == {
        "plural": "leases", "singular": "lease", "kind": "Lease", "listKind": "LeaseList",
    }
    assert int(got["metadata"]["resourceVersion"]) > int(
        created.json()["metadata"]["resourceVersion"]
    )
    assert served.status_code == 200


async def test_crd_is_not_served_during_its_establishing_window() -> None:
    """crd_establish_delay: 404 page not found and no discovery until Established
    (apiextensions-apiserver pkg/apiserver/customresource_handler.go, discovery_controller.go)."""
    emulator = KubeEmulator(crd_establish_delay=2.0)
    async with client(emulator) as http:
        assert (await http.post(CRDS, json=_crd())).status_code == 201
        early = await http.get(AKKA)
        discovery = await http.get("/apis/akka.io/v1")
        crd = (await http.get(f"{CRDS}/leases.akka.io")).json()
        await anyio.sleep(2.1)
        late = await http.get(AKKA)
        crd_late = (await http.get(f"{CRDS}/leases.akka.io")).json()
    assert (early.status_code, early.text) == (404, PAGE_NOT_FOUND)
    assert (discovery.status_code, discovery.text) == (404, PAGE_NOT_FOUND)
    assert "conditions" not in crd["status"]
    assert late.status_code == 200
    assert crd_late["status"]["conditions"][1]["type"] == "Established"


async def test_crd_update_keeps_its_status() -> None:
    """Re-applying an established CRD keeps status (the strategy's PrepareForUpdate copies it)."""
    emulator = with_akka_crd()
    again = emulator.apply(_crd())[0]
    assert again["status"]["conditions"][1]["status"] == "True"
    assert emulator.resource_type("akka.io/v1", "leases") is not None


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # real time: real sockets
async def test_watchers_see_established_on_a_served_emulator() -> None:
    """A watch on the CRD (what kubectl wait does) gets the MODIFIED event with Established,
    written by a controller task while served (establishing_controller.go)."""
    emulator = KubeEmulator(crd_establish_delay=0.3)
    async with emulator.serve(tls=False) as server, httpx.AsyncClient(
        base_url=server.url, timeout=10
    ) as http:
        created = (await http.post(CRDS, json=_crd())).json()
        params = {"watch": "1", "fieldSelector": "metadata.name=leases.akka.io",
                  "resourceVersion": created["metadata"]["resourceVersion"]}
        seen = []
        with anyio.fail_after(5):
            async with http.stream("GET", CRDS, params=params) as stream:
                async for line in stream.aiter_lines():
                    event = json.loads(line)
                    seen.append(event["type"])
                    conditions = event["object"].get("status", {}).get("conditions", [])
                    if any(c["type"] == "Established" for c in conditions):
                        break
        assert (await http.get(AKKA)).status_code == 200
    assert seen == ["MODIFIED"]


# --- CoordinatedLeaderElection feature gate ------------------------------------------------


async def test_gate_off_drops_strategy_and_preferred_holder() -> None:
    """Gate off (default): both fields silently dropped on create and update, no 422
    (pkg/registry/coordination/lease/strategy.go PrepareForCreate/PrepareForUpdate)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "a", holderIdentity="x", preferredHolder="b")
        created["spec"].update(strategy="OldestEmulationVersion", preferredHolder="b")
        updated = await http.put(f"{LEASES}/a", json=created)
        via_put = await http.put(f"{LEASES}/c", json=lease("c", strategy="x.io/y"))
    assert "preferredHolder" not in created["metadata"] and updated.status_code == 200
    assert updated.json()["spec"] == {"holderIdentity": "x"}
    assert via_put.status_code == 201 and via_put.json()["spec"] == {}


async def test_gate_off_keeps_fields_the_stored_lease_already_has() -> None:
    """Gate off: an update keeps a field the stored Lease already has (PrepareForUpdate)."""
    on = KubeEmulator(coordinated_leader_election=True)
    on.apply(lease("a", strategy="OldestEmulationVersion", preferredHolder="b"))
    stored = on.get_lease("a")
    assert stored is not None
    emulator = KubeEmulator()
    emulator.store.coordinated_leader_election = True
    emulator.apply(stored)
    emulator.store.coordinated_leader_election = False
    current = emulator.get_lease("a")
    assert current is not None
    async with client(emulator) as http:
        current["spec"]["preferredHolder"] = "c"
        updated = await http.put(f"{LEASES}/a", json=current)
    assert updated.json()["spec"] == {"strategy": "OldestEmulationVersion", "preferredHolder": "c"}


async def test_gate_on_validates() -> None:
    """Gate on: preferredHolder without strategy is 422 (coordination validation.go)."""
    emulator = KubeEmulator(coordinated_leader_election=True)
    async with client(emulator) as http:
        reply = await http.post(LEASES, json=lease("a", preferredHolder="b"))
    assert reply.status_code == 422


# --- metadata maps -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "detail"),
    [
        ("annotations", {"a": 1}, "number into Go struct field ObjectMeta.metadata.annotations "
                                  "of type string"),
        ("labels", ["x"], "array into Go struct field ObjectMeta.metadata.labels of type "
                          "map[string]string"),
        ("annotations", "x", "string into Go struct field ObjectMeta.metadata.annotations of "
                             "type map[string]string"),
        ("labels", {"a": True}, "bool into Go struct field ObjectMeta.metadata.labels of type "
                                "string"),
    ],
)
async def test_metadata_maps_of_strings_or_400(field: str, value: object, detail: str) -> None:
    """labels/annotations that are not objects of strings fail in the decoder: 400
    (apiserver/pkg/endpoints/handlers/create.go transformDecodeError, encoding/json)."""
    emulator = KubeEmulator()
    body = lease("a")
    body["metadata"][field] = value
    async with client(emulator) as http:
        reply = await http.post(LEASES, json=body)
    assert reply.status_code == 400
    assert reply.json()["reason"] == "BadRequest"
    assert reply.json()["message"] == (
        f'Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal {detail}'
    )
    assert emulator.get_lease("a") is None


async def test_custom_resource_uid_precondition_on_missing_object_is_409() -> None:
    """A PUT with metadata.uid to a missing custom resource fails the precondition first: 409
    with the StorageError key under /registry/akka.io/leases (storage/etcd3/store.go
    GuaranteedUpdate, registry/generic/registry/store.go Update)."""
    emulator = with_akka_crd()
    body = {"apiVersion": "akka.io/v1", "kind": "Lease",
            "metadata": {"name": "a", "uid": "u-1", "resourceVersion": "5"},
            "spec": {"owner": "x", "time": 1}}
    async with client(emulator) as http:
        reply = await http.put(f"{AKKA}/a", json=body)
    assert reply.status_code == 409
    assert reply.json()["message"] == (
        'Operation cannot be fulfilled on leases.akka.io "a": StorageError: invalid object, '
        "Code: 4, Key: /registry/akka.io/leases/default/a, ResourceVersion: 0, "
        "AdditionalErrorMsg: Precondition failed: UID in precondition: u-1, UID in object meta: "
    )


def test_emulate_command_takes_the_two_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """`trio-lease emulate --crd-establish-delay 1.5 --coordinated-leader-election` reaches the
    emulator (the gate as in pkg/registry/coordination/lease/strategy.go)."""
    from trio_lease.testing.kube import _emulator
    from trio_lease.testing.kube.__main__ import main

    made: list[KubeEmulator] = []

    class Spy(KubeEmulator):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(_emulator, "KubeEmulator", Spy)
    monkeypatch.setattr(anyio, "run", lambda *args, **kwargs: None)
    assert main(["emulate", "--crd-establish-delay", "1.5",
                 "--coordinated-leader-election"]) == 0
    (emulator,) = made
    assert emulator.establisher.delay == 1.5
    assert emulator.store.coordinated_leader_election is True


# --- apiVersion / kind in a body ------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "message"),
    [
        ("coordination.k8s.io/v1beta1", "Lease", "the API version in the data "
         "(coordination.k8s.io/v1beta1) does not match the expected API version "
         "(coordination.k8s.io/v1)"),
        ("coordination.k8s.io/v2", "Lease", 'Lease in version "v2" cannot be handled as a Lease: '
         'no kind "Lease" is registered for version "coordination.k8s.io/v2" in scheme '
         '"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"'),
        ("coordination.k8s.io/v1", "ConfigMap", 'ConfigMap in version "v1" cannot be handled as '
         'a Lease: no kind "ConfigMap" is registered for version "coordination.k8s.io/v1" in '
         'scheme "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"'),
    ],
)
async def test_wrong_api_version_or_kind_on_a_lease(
    api_version: str, kind: str, message: str
) -> None:
    """A Lease body of another version or kind: 400 from the decoder or the version check
    (apiserver/pkg/endpoints/handlers/create.go, update.go: transformDecodeError,
    AcceptsGroupVersion)."""
    emulator = KubeEmulator()
    body = {**lease("a"), "apiVersion": api_version, "kind": kind}
    async with client(emulator) as http:
        created = await http.post(LEASES, json=body)
        replaced = await http.put(f"{LEASES}/a", json=body)
    for reply in (created, replaced):
        assert reply.status_code == 400
        assert reply.json()["reason"] == "BadRequest"
        assert reply.json()["message"] == message


async def test_wrong_kind_on_a_custom_resource_is_422_on_kind() -> None:
    """A custom resource of the wrong kind: the CR validator's 422 under the body's kind
    (apiextensions-apiserver pkg/registry/customresource/validator.go ValidateTypeMeta)."""
    emulator = with_akka_crd()
    body = {"apiVersion": "akka.io/v1", "kind": "Other", "metadata": {"name": "a"},
            "spec": {"owner": "x", "time": 1}}
    async with client(emulator) as http:
        wrong_kind = await http.post(AKKA, json=body)
        wrong_version = await http.post(AKKA, json={**body, "apiVersion": "akka.io/v2",
                                                    "kind": "Lease"})
    assert wrong_kind.status_code == 422
    assert wrong_kind.json()["message"] == (
        'Other.akka.io "a" is invalid: kind: Invalid value: "Other": must be Lease'
    )
    assert wrong_kind.json()["details"]["kind"] == "Other"
    assert (wrong_version.status_code, wrong_version.json()["message"]) == (
        400, "the API version in the data (akka.io/v2) does not match the expected API version "
        "(akka.io/v1)",
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (CI has it)")
def test_kubectl_waits_for_established(tmp_path: Path) -> None:
    """`kubectl wait --for=condition=Established` returns once the window is over, and the CRD's
    resource is served only then (apiextensions-apiserver establishing_controller.go)."""
    kubeconfig = tmp_path / "kubeconfig"
    command = [sys.executable, "-m", "trio_lease.testing.kube", "emulate", "--port", "0",
               "--kubeconfig", str(kubeconfig), "--crd-establish-delay", "1.5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir",
                               str(kubeconfig.parent / "kubectl-cache"), *args],
                              capture_output=True, text=True, timeout=60, check=False)

    try:
        banner = b""
        while b"Ctrl-C" not in banner:
            line = process.stdout.readline()
            assert line, banner.decode(errors="replace")
            banner += line
        assert kubectl("apply", "-f", str(LEASE_YML)).returncode == 0
        early = kubectl("get", "--raw", "/apis/akka.io/v1/namespaces/default/leases")
        started = time.monotonic()
        waited = kubectl("wait", "--for=condition=Established", "crd/leases.akka.io",
                         "--timeout=30s")
        took = time.monotonic() - started
        late = kubectl("get", "leases.akka.io")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)
        process.stdout.close()
    assert early.returncode != 0 and "(NotFound)" in early.stderr  # kubectl words a bare 404
    assert waited.returncode == 0, waited.stderr
    assert "condition met" in waited.stdout
    assert 0.5 < took < 20  # it did wait for the window
    assert late.returncode == 0, late.stderr
