"""docs/design.md §8.1: the Lease object, its fields, validation and MicroTime."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, create, lease

pytestmark = pytest.mark.anyio

MICRO = "2026-03-01T10:00:00.123456Z"


async def posted(emulator: KubeEmulator, name: str, **spec: Any) -> httpx.Response:
    """The answer to a POST of Lease ``name`` with ``spec`` to ``emulator``."""
    async with client(emulator) as http:
        return await http.post(LEASES, json=lease(name, **spec))


async def test_every_spec_field_is_optional() -> None:
    """A Lease with an empty spec (or none) is created and read back with an empty spec."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "empty")
        assert created["spec"] == {}
        response = await http.post(LEASES, json={"metadata": {"name": "nospec"}})
        assert response.status_code == 201
        got = (await http.get(f"{LEASES}/nospec")).json()
        assert got["kind"] == "Lease"
        assert got["apiVersion"] == "coordination.k8s.io/v1"
        assert got["spec"] == {}


async def test_full_spec_round_trips_in_go_field_order() -> None:
    """All seven spec fields are stored and served in the Go struct's order."""
    emulator = KubeEmulator(coordinated_leader_election=True)
    spec = {
        "preferredHolder": "b",
        "strategy": "OldestEmulationVersion",
        "leaseTransitions": 3,
        "renewTime": MICRO,
        "acquireTime": MICRO,
        "leaseDurationSeconds": 15,
        "holderIdentity": "pod-a_1",
    }
    async with client(emulator) as http:
        created = await create(http, "full", **spec)
    assert list(created["spec"]) == [
        "holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
        "leaseTransitions", "strategy", "preferredHolder",
    ]
    assert created["spec"] == spec


async def test_holder_identity_is_not_validated() -> None:
    """holderIdentity accepts any string, including "" and characters invalid in names."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        for i, holder in enumerate(["", "Pod A/é_!", "x" * 1000]):
            created = await create(http, f"h{i}", holderIdentity=holder)
            assert created["spec"]["holderIdentity"] == holder
        null = await create(http, "null", holderIdentity=None)
    assert null["spec"] == {}


@pytest.mark.parametrize("duration", [0, -1])
async def test_lease_duration_must_be_positive(duration: int) -> None:
    """leaseDurationSeconds 0 or negative is 422 "must be greater than 0"."""
    emulator = KubeEmulator()
    response = await posted(emulator, "d", leaseDurationSeconds=duration)
    assert response.status_code == 422
    body = response.json()
    assert body["message"] == (
        f'Lease.coordination.k8s.io "d" is invalid: spec.leaseDurationSeconds: Invalid value: '
        f"{duration}: must be greater than 0"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {duration}: must be greater than 0",
            "field": "spec.leaseDurationSeconds",
        }
    ]


async def test_lease_transitions_must_not_be_negative() -> None:
    """leaseTransitions -1 is 422; 0 is accepted."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        bad = await http.post(LEASES, json=lease("t", leaseTransitions=-1))
        good = await http.post(LEASES, json=lease("t", leaseTransitions=0))
    assert bad.status_code == 422
    assert "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0" in (
        bad.json()["message"]
    )
    assert good.status_code == 201


async def test_preferred_holder_needs_strategy() -> None:
    """preferredHolder without strategy is 422 Forbidden; with a strategy it is accepted."""
    emulator = KubeEmulator(coordinated_leader_election=True)
    async with client(emulator) as http:
        bad = await http.post(LEASES, json=lease("p", preferredHolder="b"))
        good = await http.post(
            LEASES, json=lease("p", preferredHolder="b", strategy="example.com/custom")
        )
    assert bad.status_code == 422
    cause = bad.json()["details"]["causes"][0]
    assert cause == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: may only be specified if `strategy` is defined",
        "field": "spec.preferredHolder",
    }
    assert good.status_code == 201


async def test_unknown_builtin_strategy_is_not_supported() -> None:
    """A strategy without "/" other than OldestEmulationVersion is 422 NotSupported."""
    emulator = KubeEmulator(coordinated_leader_election=True)
    response = await posted(emulator, "s", strategy="Random")
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["reason"] == "FieldValueNotSupported"


@pytest.mark.parametrize(
    "text",
    [
        "2026-03-01T10:00:00Z",  # isoformat() with microsecond 0, after a +00:00 -> Z fix
        "2026-03-01T10:00:00+00:00",  # isoformat() with microsecond 0
        "2026-03-01T10:00:00.12345Z",  # five digits
        "2026-03-01T10:00:00.1234567Z",  # seven digits
        "2026-03-01 10:00:00.123456Z",  # str(datetime)
    ],
)
async def test_micro_time_needs_exactly_six_fraction_digits(text: str) -> None:
    """A MicroTime without exactly six fraction digits is a 400 decode error, not stored."""
    emulator = KubeEmulator()
    response = await posted(emulator, "m", renewTime=text)
    assert response.status_code == 400
    body = response.json()
    assert body["reason"] == "BadRequest"
    assert body["message"].startswith('Lease in version "v1" cannot be handled as a Lease: ')
    assert emulator.get_lease("m") is None


async def test_micro_time_offset_is_normalized_to_utc_z() -> None:
    """A six-digit MicroTime with a +hh:mm offset is accepted and served in UTC with Z."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "m", acquireTime="2026-03-01T12:00:00.000000+02:00")
    assert created["spec"]["acquireTime"] == "2026-03-01T10:00:00.000000Z"


async def test_wrong_json_type_is_a_decode_error() -> None:
    """leaseDurationSeconds as a string is 400 BadRequest (the decoder rejects it)."""
    emulator = KubeEmulator()
    response = await posted(emulator, "w", leaseDurationSeconds="15")
    assert response.status_code == 400
    assert "LeaseSpec.spec.leaseDurationSeconds of type int32" in response.json()["message"]


async def test_unknown_spec_fields_are_dropped_with_a_warning() -> None:
    """An unknown spec field is pruned and reported in a Warning header."""
    emulator = KubeEmulator()
    response = await posted(emulator, "u", holderIdentity="a", colour="red")
    assert response.status_code == 201
    assert response.json()["spec"] == {"holderIdentity": "a"}
    assert response.headers["warning"] == '299 - "unknown field \\"spec.colour\\""'


async def test_metadata_is_kept_across_put_and_no_generation() -> None:
    """Labels, annotations, strategy survive a PUT; resourceVersion is a string; no generation."""
    emulator = KubeEmulator(coordinated_leader_election=True)
    async with client(emulator) as http:
        body = lease("k", holderIdentity="a", strategy="x.io/s", preferredHolder="b")
        body["metadata"]["labels"] = {"app": "x"}
        body["metadata"]["annotations"] = {"trio-lease/key": "K"}
        created = (await http.post(LEASES, json=body)).json()
        assert isinstance(created["metadata"]["resourceVersion"], str)
        created["spec"]["holderIdentity"] = "b"
        updated = (await http.put(f"{LEASES}/k", json=created)).json()
    assert updated["metadata"]["labels"] == {"app": "x"}
    assert updated["metadata"]["annotations"] == {"trio-lease/key": "K"}
    assert updated["spec"]["strategy"] == "x.io/s"
    assert updated["spec"]["preferredHolder"] == "b"
    assert "generation" not in updated["metadata"]
    stamp = updated["metadata"]["creationTimestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)  # no fraction
    assert updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]


async def test_there_is_no_status_subresource() -> None:
    """Leases have no status subresource: /leases/{name}/status is the generic 404."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "a")
        response = await http.get(f"{LEASES}/a/status")
    assert response.status_code == 404
    assert response.json()["details"] == {}
