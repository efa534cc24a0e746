"""KubernetesBackend on the in-process emulator: the SPI, the protocol and its costs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest

from trio_lease import ConflictError, Lease, LeaseConfigError, LeaseRecord, LeaseSettings
from trio_lease._slots import urgent
from trio_lease.backends.kubernetes import KEY_ANNOTATION, lease_name_for
from trio_lease.backends.kubernetes._client import pool_size
from trio_lease.testing import check_backend
from trio_lease.testing.kube import KubeEmulator

from ._helpers import CountingTransport, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio


def _delete(emulator: KubeEmulator, name: str) -> None:
    rt = emulator.resource_type("coordination.k8s.io/v1", "leases")
    assert rt is not None
    emulator.store.delete(rt, "default", name, {})
KINDS = ["coordination.k8s.io/v1", "akka.io/v1"]
NOW = datetime(2026, 3, 1, 10, 0, 0, 5, tzinfo=UTC)
LATER = NOW + timedelta(seconds=2)


@pytest.mark.parametrize("kind", KINDS)
async def test_conformance(kind: str) -> None:
    """check_backend passes against the emulator for both lease kinds."""
    emulator = emulator_with_crd()
    await check_backend(lambda: make_backend(emulator.transport(), kind=kind))


@pytest.mark.parametrize("kind", KINDS)
async def test_steady_state_renewal_is_one_put(kind: str) -> None:
    """A renewal with the cached version costs exactly one HTTP request: the PUT."""
    transport = CountingTransport(emulator_with_crd().transport())
    async with make_backend(transport, kind=kind) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15,
                                                  fencing_token=1, renewed_at=NOW))
        for _ in range(3):
            transport.requests.clear()
            record = await backend.update(dataclasses.replace(record, renewed_at=NOW),
                                          record.version)
            assert transport.methods() == ["PUT"]


async def test_requests_carry_a_server_timeout_and_never_rv_zero() -> None:
    """Every request sends ?timeout=Ns (whole seconds >= 1); reads never use resourceVersion=0."""
    transport = CountingTransport(emulator_with_crd().transport())
    async with make_backend(transport, request_timeout=3.5) as backend:
        await backend.get("job")
        created = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        await backend.get("job")
        await backend.update(created, created.version)
    for method, _, query in transport.requests:
        assert query["timeout"] == "3s", method
        assert "resourceVersion" not in query


async def test_update_without_cached_object_reads_first_and_sends_uid() -> None:
    """An update at a version we have not seen GETs first, then PUTs with uid and version."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as writer:
        created = await writer.create(LeaseRecord("job", holder="a", lease_duration=15))
    transport = CountingTransport(emulator.transport())
    async with make_backend(transport) as other:
        updated = await other.update(dataclasses.replace(created, holder="b"), created.version)
    assert transport.methods() == ["GET", "PUT"]
    assert updated.holder == "b"


async def test_renewal_after_delete_is_lost_not_recreated() -> None:
    """A renewal of a deleted lease fails (uid precondition) and does not re-create it."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        _delete(emulator, "job")
        with pytest.raises(ConflictError):
            await backend.update(record, record.version)
    assert emulator.get_lease("job") is None


async def test_renewal_after_recreate_is_lost() -> None:
    """A renewal against a deleted-and-recreated lease is a conflict (uid or version)."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as a, make_backend(emulator.transport()) as b:
        record = await a.create(LeaseRecord("job", holder="me", lease_duration=15))
        _delete(emulator, "job")
        await b.create(LeaseRecord("job", holder="other", lease_duration=15))
        with pytest.raises(ConflictError):
            await a.update(record, record.version)
    lease = emulator.get_lease("job")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "other"


async def test_writes_preserve_fields_we_do_not_model() -> None:
    """strategy, preferredHolder, labels, annotations survive our PUTs; MicroTime has 6 digits."""
    emulator = emulator_with_crd(coordinated_leader_election=True)  # the gate keeps the fields
    emulator.apply({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "job", "namespace": "default", "labels": {"team": "x"},
                     "annotations": {"note": "keep"}},
        "spec": {"holderIdentity": "", "strategy": "OldestEmulationVersion",
                 "preferredHolder": "pod-b", "leaseTransitions": 4},
    })
    async with make_backend(emulator.transport()) as backend:
        current = await backend.get("job")
        assert current is not None
        assert getattr(current, "preferred_holder", "") == "pod-b"
        new = dataclasses.replace(current, holder="pod-a", lease_duration=15, fencing_token=5,
                                  acquired_at=NOW.replace(microsecond=0), renewed_at=NOW)
        await backend.update(new, current.version)
    lease = emulator.get_lease("job")
    assert lease is not None
    assert lease["spec"]["strategy"] == "OldestEmulationVersion"
    assert lease["spec"]["preferredHolder"] == "pod-b"
    assert lease["metadata"]["labels"] == {"team": "x"}
    assert lease["metadata"]["annotations"] == {"note": "keep"}
    assert lease["spec"]["leaseTransitions"] == 5
    assert lease["spec"]["acquireTime"] == "2026-03-01T10:00:00.000000Z"
    assert lease["spec"]["renewTime"] == "2026-03-01T10:00:00.000005Z"


async def test_release_is_one_put_keeping_transitions() -> None:
    """The core's release (holder "", 1 s) is a PUT that keeps leaseTransitions."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    async with make_backend(transport) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15,
                                                  fencing_token=7))
        fresh = await backend.get("job")
        assert fresh is not None
        transport.requests.clear()
        await backend.update(dataclasses.replace(fresh, holder="", lease_duration=1.0),
                             record.version)
    assert transport.methods() == ["PUT"]
    lease = emulator.get_lease("job")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseDurationSeconds"] == 1
    assert lease["spec"]["leaseTransitions"] == 7


async def test_invalid_keys_are_mapped_and_annotated() -> None:
    """A key that is not a valid name is stored under lease_name_for(key) with the key annotated."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as backend:
        created = await backend.create(LeaseRecord("Nightly Report/EU", holder="me",
                                                   lease_duration=15))
        assert created.name == "Nightly Report/EU"
        read = await backend.get("Nightly Report/EU")
        assert read is not None
        assert read.holder == "me"
    lease = emulator.get_lease(lease_name_for("Nightly Report/EU"))
    assert lease is not None
    assert lease["metadata"]["annotations"][KEY_ANNOTATION] == "Nightly Report/EU"


async def test_name_collisions_are_detected_on_read() -> None:
    """Reading an object whose key annotation names another key is a LeaseConfigError."""
    emulator = emulator_with_crd()
    name = lease_name_for("Other Key")
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "default",
                                 "annotations": {KEY_ANNOTATION: "Someone Else"}}, "spec": {}})
    async with make_backend(emulator.transport()) as backend:
        with pytest.raises(LeaseConfigError, match="collision"):
            await backend.get("Other Key")


async def test_strict_names_reject_invalid_keys() -> None:
    """With map_names=False an invalid key is rejected locally, before any request."""
    transport = CountingTransport(emulator_with_crd().transport())
    async with make_backend(transport, map_names=False) as backend:
        with pytest.raises(LeaseConfigError, match="lease_name_for"):
            await backend.get("My_Lock")
    assert transport.requests == []


def test_validate_settings_rejects_fractional_lease_durations() -> None:
    """Kubernetes Leases need whole seconds >= 1 as heartbeat_timeout (docs/design.md §6)."""
    backend = make_backend(emulator_with_crd().transport())
    with pytest.raises(LeaseConfigError, match="whole number"):
        backend.validate_settings(LeaseSettings(heartbeat_timeout=30.5, heartbeat_interval=3,
                                                lease_operation_timeout=1))
    backend.validate_settings(LeaseSettings(heartbeat_timeout=30, heartbeat_interval=3,
                                            lease_operation_timeout=1))


def test_validate_settings_for_akka_checks_the_wall_clock_rule() -> None:
    """For akka.io/v1 the holder deadline must end before Akka's takeover point (L - 2R) - R."""
    backend = make_backend(emulator_with_crd().transport(), kind="akka.io/v1")
    backend.validate_settings(LeaseSettings())  # the defaults: D = 80 s <= 120 - 36
    with pytest.raises(LeaseConfigError, match="wall-clock"):
        backend.validate_settings(LeaseSettings(heartbeat_timeout=60, heartbeat_interval=12,
                                                lease_operation_timeout=5, holder_deadline=40))


async def test_backends_share_one_client_per_server_and_loop() -> None:
    """Backends on the same server, credentials and loop share one AsyncClient."""
    emulator = emulator_with_crd()
    emulator.add_token("different", "admin", groups=("system:masters",))
    transport = emulator.transport()
    before = pool_size()
    a, b = make_backend(transport), make_backend(transport)
    await a.get("x")
    await b.get("x")
    assert a._api.client() is b._api.client()
    assert pool_size() == before + 1
    other = make_backend(transport, token="different")
    await other.get("x")
    assert other._api.client() is not a._api.client()
    await a.aclose()
    assert not b._api.client().is_closed
    await b.aclose()
    await other.aclose()
    assert pool_size() == before


async def test_held_lease_renews_with_one_put_per_interval() -> None:
    """Under held(), each steady-state renewal is exactly one request: a PUT, no GET."""
    transport = CountingTransport(emulator_with_crd().transport())
    settings = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5,
                             lease_operation_timeout=0.5)
    async with make_backend(transport) as backend:
        lease = Lease("job", "me", backend, settings)
        async with lease.held():
            await anyio.sleep(2)  # past acquisition
            transport.requests.clear()
            await anyio.sleep(30)
            during = transport.methods()
    assert set(during) == {"PUT"}
    assert len(during) == pytest.approx(30 / 1.5, abs=1)


def test_clients_are_never_shared_across_event_loops() -> None:
    """Runs on asyncio then trio get their own clients, each closed with its last backend."""
    transport = emulator_with_crd().transport()
    clients: list[httpx.AsyncClient] = []

    async def use() -> None:
        async with make_backend(transport) as a, make_backend(transport) as b:
            await a.get("x")
            await b.get("x")
            assert a._api.client() is b._api.client()
            clients.append(a._api.client())

    anyio.run(use, backend="asyncio")
    anyio.run(use, backend="trio")
    assert clients[0] is not clients[1]
    assert all(client.is_closed for client in clients)


class CreatedOnPut(httpx.AsyncBaseTransport):
    """A server that answers a PUT with 201 (a Lease re-created by the update)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.armed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.armed and request.method == "PUT":
            await response.aread()
            return httpx.Response(201, content=response.content, headers=response.headers)
        return response


async def test_201_on_a_renewal_means_the_lease_is_lost() -> None:
    """A PUT answered 201 (the lease had been deleted and was re-created) is a ConflictError."""
    transport = CreatedOnPut(emulator_with_crd().transport())
    async with make_backend(transport) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        transport.armed = True
        with pytest.raises(ConflictError, match="lost"):
            await backend.update(record, record.version)


class _SlowTransport(CountingTransport):
    """Each request takes 10 ms, so a burst queues for the client's in-flight slots."""

    in_flight = peak = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path, {}))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.sleep(0.01)
            return await self.inner.handle_async_request(request)
        finally:
            self.in_flight -= 1


async def test_at_most_four_requests_in_flight_and_an_urgent_one_overtakes_the_queue() -> None:
    """Renewals (marked urgent by the core) go before requests already waiting for a slot."""
    transport = _SlowTransport(KubeEmulator().transport())
    async with make_backend(transport) as backend:

        async def read(name: str, marked: bool = False) -> None:
            with urgent() if marked else contextlib.nullcontext():
                assert await backend.get(name) is None

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(read, f"acquire-{i}")
            await anyio.sleep(0.001)  # 4 in flight, 16 waiting
            tg.start_soon(read, "renewal", True)
    names = [path.rsplit("/", 1)[-1] for _, path, _ in transport.requests]
    assert len(names) == 21 and transport.peak == 4
    # Among the four handed a slot when the first four finish (in any order), not last.
    assert 4 <= names.index("renewal") < 8, names


async def test_the_urgent_request_nearest_its_deadline_overtakes_other_urgent_ones() -> None:
    """A renewal close to its lease's deadline goes before renewals queued with time to spare."""
    transport = _SlowTransport(KubeEmulator().transport())
    async with make_backend(transport) as backend:

        async def read(name: str, deadline: float) -> None:
            with urgent(deadline):
                assert await backend.get(name) is None

        async with anyio.create_task_group() as tg:
            later = anyio.current_time() + 100
            for i in range(20):
                tg.start_soon(read, f"renewal-{i}", later)
            await anyio.sleep(0.001)  # 4 in flight, 16 waiting
            tg.start_soon(read, "due", anyio.current_time() + 1)
    names = [path.rsplit("/", 1)[-1] for _, path, _ in transport.requests]
    assert len(names) == 21 and transport.peak == 4
    # Among the four handed a slot when the first four finish, not behind the sixteen.
    assert 4 <= names.index("due") < 8, names


class _Bodies(httpx.AsyncBaseTransport):
    """Wraps a transport (so requests go through httpx) and keeps each PUT's JSON body."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.puts: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            self.puts.append(json.loads(await request.aread()))
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_write_sends_no_managed_fields_and_the_server_keeps_them(kind: str) -> None:
    """An update without ``metadata.managedFields`` keeps the live object's: the real server's
    FieldManager.Update falls back to them (k8s.io/apimachinery/pkg/util/managedfields/internal/
    fieldmanager.go, decodeLiveOrNew; an empty list would reset them). So PUT bodies leave them
    out, renewals and no-op writes alike, and nothing another manager recorded is lost."""
    emulator = emulator_with_crd()
    transport = _Bodies(emulator.transport())
    async with make_backend(transport, kind=kind) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15,
                                                  fencing_token=1, renewed_at=NOW))
        stored = emulator.get(kind, "leases", "job", "default")
        assert stored is not None and stored["metadata"]["managedFields"]
        before = {entry["manager"] for entry in stored["metadata"]["managedFields"]}
        renewed = await backend.update(dataclasses.replace(record, renewed_at=LATER),
                                       record.version)
        same = await backend.update(renewed, renewed.version)  # changes nothing: a nonce
        assert same.version != renewed.version
    stored = emulator.get(kind, "leases", "job", "default")
    assert stored is not None
    assert len(transport.puts) == 2
    assert all("managedFields" not in body["metadata"] for body in transport.puts)
    assert {entry["manager"] for entry in stored["metadata"]["managedFields"]} == before
