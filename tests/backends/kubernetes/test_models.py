"""Lease JSON ⇄ LeaseRecord for both kinds, and MicroTime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from trio_lease import LeaseRecord
from trio_lease.backends.kubernetes._models import (
    AKKA,
    COORDINATION,
    format_micro_time,
    kind_named,
    parse_time,
)

T0 = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


def test_micro_time_always_has_six_digits_and_z() -> None:
    """MicroTime is written with exactly six fraction digits and Z, even at 0 microseconds."""
    assert format_micro_time(T0) == "2026-03-01T10:00:00.000000Z"
    offset = datetime(2026, 3, 1, 12, 0, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert format_micro_time(offset) == "2026-03-01T10:00:00.000005Z"


def test_micro_time_refuses_naive_datetimes() -> None:
    """A naive datetime cannot be written (its zone is unknown)."""
    with pytest.raises(ValueError, match="aware"):
        format_micro_time(datetime(2026, 1, 1))  # noqa: DTZ001


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T10:00:00Z", T0),
        ("2026-03-01T10:00:00.123456Z", T0.replace(microsecond=123456)),
        ("2026-03-01T10:00:00.1Z", T0.replace(microsecond=100000)),
        ("2026-03-01T12:00:00+02:00", T0),
        ("2026-03-01T10:00:00.123456789Z", T0.replace(microsecond=123456)),
        ("garbage", None),
        (None, None),
        (12, None),
    ],
)
def test_times_parse_leniently(text: object, expected: datetime | None) -> None:
    """MicroTime, RFC 3339 seconds, offsets and junk (→ None) are all read."""
    assert parse_time(text) == expected


def _lease(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "x", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"}},
        "spec": spec,
    }


def test_coordination_lease_reads_every_field() -> None:
    """holderIdentity, leaseDurationSeconds, leaseTransitions, times and version are mapped."""
    record = COORDINATION.to_record(
        "x",
        _lease(
            holderIdentity="pod-a",
            leaseDurationSeconds=15,
            leaseTransitions=3,
            acquireTime="2026-03-01T10:00:00.000000Z",
            renewTime="2026-03-01T10:00:05.000000Z",
            preferredHolder="pod-b",
            strategy="OldestEmulationVersion",
        ),
    )
    assert (record.holder, record.lease_duration, record.fencing_token) == ("pod-a", 15.0, 3)
    assert record.acquired_at == T0
    assert record.renewed_at == T0 + timedelta(seconds=5)
    assert record.version == "7"
    assert (record.preferred_holder, record.strategy) == ("pod-b", "OldestEmulationVersion")


def test_empty_spec_reads_as_free() -> None:
    """Absent or null holderIdentity means free; missing numbers read as 0."""
    record = COORDINATION.to_record("x", _lease(holderIdentity=None))
    assert record.is_free
    assert record.lease_duration == 0
    assert record.fencing_token == 0


def test_writes_keep_unmodelled_fields() -> None:
    """A PUT body keeps strategy, preferredHolder, labels, uid and unknown spec fields."""
    base = _lease(holderIdentity="a", strategy="s", preferredHolder="b", future="keep")
    record = LeaseRecord("x", holder="me", lease_duration=15.0, fencing_token=4, renewed_at=T0)
    body = COORDINATION.apply(base, record)
    assert body["spec"]["strategy"] == "s"
    assert body["spec"]["preferredHolder"] == "b"
    assert body["spec"]["future"] == "keep"
    assert body["metadata"]["uid"] == "u1"
    assert body["metadata"]["labels"] == {"a": "b"}
    assert body["spec"]["holderIdentity"] == "me"
    assert body["spec"]["leaseDurationSeconds"] == 15
    assert body["spec"]["leaseTransitions"] == 4
    assert body["spec"]["renewTime"] == "2026-03-01T10:00:00.000000Z"
    assert base["spec"]["holderIdentity"] == "a"  # the cached object is not modified


def test_release_record_writes_empty_holder_and_one_second() -> None:
    """The core's release (holder "", duration 1) becomes holderIdentity "" and 1 s."""
    body = COORDINATION.apply(_lease(holderIdentity="me", leaseTransitions=9), LeaseRecord(
        "x", holder="", lease_duration=1.0, fencing_token=9))
    assert body["spec"]["holderIdentity"] == ""
    assert body["spec"]["leaseDurationSeconds"] == 1
    assert body["spec"]["leaseTransitions"] == 9


def test_fractional_durations_round_up() -> None:
    """A fractional lease duration is stored rounded up, never down (contenders wait longer)."""
    body = COORDINATION.apply(_lease(), LeaseRecord("x", holder="a", lease_duration=1.5))
    assert body["spec"]["leaseDurationSeconds"] == 2
    zero = COORDINATION.apply(_lease(), LeaseRecord("x", holder="a", lease_duration=0.0))
    assert "leaseDurationSeconds" not in zero["spec"]


def test_akka_round_trip_through_annotations() -> None:
    """akka.io/v1 stores owner and time (epoch ms) in spec, the rest in annotations."""
    record = LeaseRecord(
        "k", holder="me", lease_duration=120.0, fencing_token=5, acquired_at=T0,
        renewed_at=T0 + timedelta(seconds=1),
    )
    obj = AKKA.new_object("k", record, {})
    assert obj["apiVersion"] == "akka.io/v1"
    millis = int((T0 + timedelta(seconds=1)).timestamp() * 1000)
    assert obj["spec"] == {"owner": "me", "time": millis}
    obj["metadata"]["resourceVersion"] = "3"
    back = AKKA.to_record("k", obj)
    assert (back.holder, back.lease_duration, back.fencing_token) == ("me", 120.0, 5)
    assert back.acquired_at == T0
    assert back.renewed_at == T0 + timedelta(seconds=1)


def test_akka_record_written_by_akka_uses_generation_as_token() -> None:
    """An Akka-written object (no annotations) reads with fencing_token = metadata.generation."""
    obj = {"metadata": {"resourceVersion": "9", "generation": 12}, "spec": {"owner": "akka@n1",
           "time": 1_700_000_000_000, "version": "x"}}
    record = AKKA.to_record("k", obj)
    assert record.holder == "akka@n1"
    assert record.fencing_token == 12
    assert record.lease_duration == 0.0
    body = AKKA.apply(obj, LeaseRecord("k", holder="me", fencing_token=13))
    assert body["spec"]["version"] == "x"  # Akka's unused field survives


def test_kinds_by_name() -> None:
    """Both kinds are found by API version or short name; others are None."""
    assert kind_named("akka.io/v1") is AKKA
    assert kind_named("akka") is AKKA
    assert kind_named("coordination.k8s.io/v1") is COORDINATION
    assert kind_named("v1") is None
    path = COORDINATION.item_path("ns", "n")
    assert path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/n"


@pytest.mark.parametrize("kind", [COORDINATION, AKKA])
def test_apply_leaves_the_object_read_unchanged(kind: Any) -> None:
    """apply() copies what it writes (it no longer deep-copies): the cached object stays as read."""
    import copy

    base = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": "x",
            "resourceVersion": "7",
            "annotations": {"keep": "me"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"holderIdentity": "old", "owner": "old", "time": 1},
    }
    before = copy.deepcopy(base)
    record = LeaseRecord("x", holder="new", lease_duration=15, fencing_token=4, acquired_at=T0,
                         renewed_at=T0)
    written = kind.apply(base, record)
    written["metadata"]["annotations"]["nonce"] = "1"  # as update() does for a no-op write
    written["metadata"]["resourceVersion"] = "8"
    assert base == before
    assert written["metadata"]["managedFields"] == before["metadata"]["managedFields"]
    assert kind.to_record("x", written).holder == "new"
