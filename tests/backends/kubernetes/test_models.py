"""Lease JSON ⇄ LeaseRecord for both kinds, and MicroTime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_lease import LeaseRecord
from trio_lease._wire import Malformed
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION, kind_named
from trio_lease.backends.kubernetes._reading import KubernetesLeaseRecord
from trio_lease.backends.kubernetes._times import format_micro_time, parse_time

T0 = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


def test_micro_time_always_has_six_digits_and_z() -> None:
    """MicroTime is written with exactly six fraction digits and Z, even at 0 microseconds."""
    assert format_micro_time(T0) == "2026-03-01T10:00:00.000000Z"
    offset = datetime(2026, 3, 1, 12, 0, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert format_micro_time(offset) == "2026-03-01T10:00:00.000005Z"


def test_micro_time_has_a_four_digit_year_and_reads_back_as_written() -> None:
    """RFC 3339 years have four digits (strftime's %Y drops the zeros on glibc); a time this
    process wrote reads back as the same aware datetime, remembered or parsed."""
    from trio_lease.backends.kubernetes import _times

    early = datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert format_micro_time(early) == "0005-01-02T03:04:05.000006Z"
    for value in (early, T0.replace(microsecond=999999)):
        text = format_micro_time(value)
        remembered = parse_time(text)
        _times._FORMATTED.clear()
        parsed = parse_time(text)
        assert remembered == parsed == value
        assert remembered is not None and parsed is not None
        assert remembered.tzinfo is parsed.tzinfo is UTC


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                   timezone(timedelta(hours=-11)), UTC]),
    )
)
def test_micro_time_is_the_utc_time_with_six_digits_for_any_aware_datetime(value: datetime) -> None:
    """Whatever the zone and the microseconds (0 among them): the UTC time, six fraction digits,
    ``Z``; as the standard library writes it in UTC."""
    from trio_lease.backends.kubernetes import _times

    _times._TEXTS.clear()  # formatted here, not remembered
    utc = value.astimezone(UTC).replace(tzinfo=None)
    assert format_micro_time(value) == utc.isoformat(timespec="microseconds") + "Z"


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
        ("0000-01-01T00:00:00Z", None),
        ("0001-01-01T00:00:00+01:00", None),
        ("9999-12-31T23:59:59-01:00", None),
        ("2026-03-01T10:00:00.1" + "0" * 10_000 + "Z", None),
        ("٢٠٢٦-03-01T10:00:00Z", None),
    ],
)
def test_times_parse_leniently(text: object, expected: datetime | None) -> None:
    """MicroTime, RFC 3339 seconds, offsets and junk (→ None, never an exception) are read."""
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


def test_a_read_record_has_each_field_in_its_place() -> None:
    """The record is built by position (no keyword dict per answer): every field, each with a
    value of its own, lands where its name says, for a readable record and an unreadable one."""
    obj = _lease(
        holderIdentity="pod-a", leaseDurationSeconds=15, leaseTransitions=3,
        acquireTime="2026-03-01T10:00:00.000000Z", renewTime="2026-03-01T10:00:05.000000Z",
        preferredHolder="pod-b", strategy="OldestEmulationVersion",
    )
    obj["metadata"]["annotations"] = {"trio-lease.io/handover-to": "pod-c"}
    assert COORDINATION.to_record("key", obj) == KubernetesLeaseRecord(
        name="key", holder="pod-a", lease_duration=15.0, fencing_token=3, acquired_at=T0,
        renewed_at=T0 + timedelta(seconds=5), version="7", unreadable="", handover_to="pod-c",
        preferred_holder="pod-b", strategy="OldestEmulationVersion",
    )
    obj["spec"]["holderIdentity"] = 5
    unreadable = COORDINATION.to_record("key", obj)
    assert unreadable == KubernetesLeaseRecord(
        name="key", holder="", lease_duration=15.0, fencing_token=3, acquired_at=T0,
        renewed_at=T0 + timedelta(seconds=5), version="7", unreadable=unreadable.unreadable,
        handover_to="", preferred_holder="pod-b", strategy="OldestEmulationVersion",
    )
    assert unreadable.unreadable.startswith("spec.holderIdentity")


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


# -- reading is strict and total: unreadable records, never free, never an exception ---------


def _akka(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "x", "uid": "u1", "resourceVersion": "7", "generation": 4}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "akka.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


HELD = {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "leaseTransitions": 3}


@pytest.mark.parametrize(
    ("change", "problem", "duration", "token"),
    [
        ({"holderIdentity": ["someone"]}, "spec.holderIdentity: expected a string, got a list",
         15.0, 3),
        ({"holderIdentity": 5}, "spec.holderIdentity: expected a string, got an integer", 15.0, 3),
        ({"holderIdentity": {"a": 1}}, "spec.holderIdentity: expected a string", 15.0, 3),
        ({"leaseDurationSeconds": 2**31}, "spec.leaseDurationSeconds: integer out of range",
         0.0, 3),
        ({"leaseDurationSeconds": 10**400}, "spec.leaseDurationSeconds: integer out of range",
         0.0, 3),
        ({"leaseDurationSeconds": -1}, "spec.leaseDurationSeconds: integer out of range", 0.0, 3),
        ({"leaseDurationSeconds": 1.5}, "spec.leaseDurationSeconds: expected an integer", 0.0, 3),
        ({"leaseDurationSeconds": True}, "spec.leaseDurationSeconds: expected an integer", 0.0, 3),
        ({"leaseDurationSeconds": "15"}, "spec.leaseDurationSeconds: expected an integer", 0.0, 3),
        ({"leaseDurationSeconds": float("nan")}, "spec.leaseDurationSeconds", 0.0, 3),
        ({"leaseTransitions": -1}, "spec.leaseTransitions: integer out of range", 15.0, -1),
        ({"leaseTransitions": 2**31}, "spec.leaseTransitions: integer out of range", 15.0, -1),
        ({"leaseTransitions": "3"}, "spec.leaseTransitions: expected an integer", 15.0, -1),
        ({"leaseTransitions": 3.0}, "spec.leaseTransitions: expected an integer", 15.0, -1),
        ({"leaseTransitions": False}, "spec.leaseTransitions: expected an integer", 15.0, -1),
    ],
)
def test_coordination_fields_of_the_wrong_type_make_the_record_unreadable(
    change: dict[str, Any], problem: str, duration: float, token: int
) -> None:
    """A bad spec field reads as unreadable (holder "", token as read or -1), never as free."""
    record = COORDINATION.to_record("x", _lease(**{**HELD, **change}))
    assert record.unreadable.startswith(problem)
    assert not record.is_free
    assert (record.holder, record.lease_duration, record.fencing_token) == ("", duration, token)
    assert record.version == "7"


def test_unreadable_holder_message_is_the_contracts() -> None:
    """A list as holderIdentity gives exactly the message the contract names."""
    record = COORDINATION.to_record("x", _lease(**{**HELD, "holderIdentity": ["someone"]}))
    assert record.unreadable == "spec.holderIdentity: expected a string, got a list"
    assert record.fencing_token == 3


@pytest.mark.parametrize("spec", [["x"], "spec", 5, True])
def test_spec_that_is_not_an_object_is_unreadable_without_a_token(spec: object) -> None:
    """spec not an object (was an AttributeError): unreadable, token -1, version kept."""
    obj = _lease()
    obj["spec"] = spec
    record = COORDINATION.to_record("x", obj)
    assert record.unreadable.startswith("spec: expected an object")
    assert (record.fencing_token, record.version) == (-1, "7")


@pytest.mark.parametrize(
    "change",
    [{"leaseDurationSeconds": 0}, {"leaseDurationSeconds": None}, {"leaseTransitions": None},
     {"holderIdentity": None}, {"acquireTime": "yesterday"}, {"renewTime": 5},
     {"acquireTime": "0000-01-01T00:00:00Z"}, {"renewTime": "0001-01-01T00:00:00+01:00"},
     {"acquireTime": "9999-12-31T23:59:59-01:00"}, {"renewTime": "2026-03-01T10:00:00" + "9" * 99},
     {"preferredHolder": ["b"]}, {"strategy": 5}],
)
def test_legal_or_informational_fields_never_make_a_record_unreadable(
    change: dict[str, Any]
) -> None:
    """Duration 0 or absent, null fields, junk times and odd advisory fields read fine."""
    record = COORDINATION.to_record("x", _lease(**{**HELD, **change}))
    assert record.unreadable == ""
    if "holderIdentity" not in change:
        assert record.holder == "pod-a"
    for field in ("acquireTime", "renewTime"):
        if field in change:
            assert (record.acquired_at if field == "acquireTime" else record.renewed_at) is None
    assert isinstance(record, KubernetesLeaseRecord)
    assert isinstance(record.preferred_holder, str)
    assert isinstance(record.strategy, str)


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        (["a"], "metadata.annotations: expected an object, got a list"),
        ("a=b", "metadata.annotations: expected an object, got a string"),
        ({"trio-lease.io/key": 5}, 'metadata.annotations["trio-lease.io/key"]: expected a string'),
        ({"trio-lease.io/whatever": [1]}, "metadata.annotations[a trio-lease.io/ key]"),
    ],
)
def test_our_annotations_of_the_wrong_type_make_the_record_unreadable(
    annotations: object, problem: str
) -> None:
    """Annotations not an object, or a trio-lease.io/* value not a string: unreadable."""
    obj = _lease(**HELD)
    obj["metadata"]["annotations"] = annotations
    record = COORDINATION.to_record("x", obj)
    assert record.unreadable.startswith(problem)
    assert record.fencing_token == 3  # the built-in Lease keeps its token in the spec


def test_other_annotations_are_never_read() -> None:
    """Annotations outside trio-lease.io/ may hold anything: the record reads normally."""
    obj = _lease(**HELD)
    obj["metadata"]["annotations"] = {"note": 5, "other.io/x": {"a": [1]}}
    record = COORDINATION.to_record("x", obj)
    assert (record.unreadable, record.holder) == ("", "pod-a")


@pytest.mark.parametrize(
    ("annotations", "spec", "problem", "token", "duration"),
    [
        (None, {"owner": ["n1"]}, "spec.owner: expected a string, got a list", 4, 0.0),
        ({"trio-lease.io/fencing-token": "abc"}, {"owner": "n1"},
         'metadata.annotations["trio-lease.io/fencing-token"]', -1, 0.0),
        ({"trio-lease.io/fencing-token": "-1"}, {"owner": "n1"}, "metadata.annotations", -1, 0.0),
        ({"trio-lease.io/fencing-token": "9" * 20}, {"owner": "n1"}, "metadata.annotations", -1,
         0.0),
        ({"trio-lease.io/fencing-token": "1.5"}, {"owner": "n1"}, "metadata.annotations", -1, 0.0),
        ({"trio-lease.io/fencing-token": ""}, {"owner": "n1"}, "metadata.annotations", -1, 0.0),
        ({"trio-lease.io/fencing-token": 5}, {"owner": "n1"}, "metadata.annotations", -1, 0.0),
        ({"trio-lease.io/fencing-token": "5", "trio-lease.io/lease-duration": "nan"},
         {"owner": "n1"}, 'metadata.annotations["trio-lease.io/lease-duration"]', 5, 0.0),
        ({"trio-lease.io/fencing-token": "5", "trio-lease.io/lease-duration": "1e999"},
         {"owner": "n1"}, 'metadata.annotations["trio-lease.io/lease-duration"]', 5, 0.0),
        ({"trio-lease.io/fencing-token": "5", "trio-lease.io/lease-duration": "inf"},
         {"owner": "n1"}, 'metadata.annotations["trio-lease.io/lease-duration"]', 5, 0.0),
        ({"trio-lease.io/fencing-token": "5", "trio-lease.io/lease-duration": "-5"},
         {"owner": "n1"}, 'metadata.annotations["trio-lease.io/lease-duration"]', 5, 0.0),
        ({"trio-lease.io/fencing-token": "5", "trio-lease.io/lease-duration": 15},
         {"owner": "n1"}, 'metadata.annotations["trio-lease.io/lease-duration"]', 5, 0.0),
        (["x"], {"owner": "n1"}, "metadata.annotations: expected an object", -1, 0.0),
    ],
)
def test_akka_fields_of_the_wrong_type_make_the_record_unreadable(
    annotations: dict[str, Any] | None, spec: dict[str, Any], problem: str, token: int,
    duration: float,
) -> None:
    """akka.io/v1: a bad owner, token or duration annotation reads as unreadable, not free."""
    record = AKKA.to_record("x", _akka(annotations, **spec))
    assert record.unreadable.startswith(problem)
    assert not record.is_free
    assert (record.holder, record.fencing_token, record.lease_duration) == ("", token, duration)
    assert record.version == "7"


@pytest.mark.parametrize("generation", ["4", -1, 4.0, True, None])
def test_akka_generation_fallback_must_be_an_integer(generation: object) -> None:
    """Without our token annotation, a bad or absent metadata.generation gives token -1."""
    obj = _akka(None, owner="akka@n1")
    obj["metadata"]["generation"] = generation
    record = AKKA.to_record("x", obj)
    assert record.unreadable.startswith("metadata.generation")
    assert record.fencing_token == -1


@pytest.mark.parametrize("time", ["x", -5, 10**20, True, 1.5e12, None])
def test_akka_time_is_informational(time: object) -> None:
    """spec.time that is not epoch milliseconds in range reads as no time, never unreadable."""
    record = AKKA.to_record("x", _akka(None, owner="akka@n1", time=time))
    assert (record.unreadable, record.holder, record.renewed_at) == ("", "akka@n1", None)


@pytest.mark.parametrize("kind", [COORDINATION, AKKA])
@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"metadata": ["x"]}, "metadata: expected an object"),
        ({"metadata": None}, "metadata: expected an object"),
        ({"metadata": {"name": "x", "uid": "u1"}}, "metadata.resourceVersion"),
        ({"metadata": {"name": "x", "uid": "u1", "resourceVersion": ""}},
         "metadata.resourceVersion"),
        ({"metadata": {"name": "x", "uid": "u1", "resourceVersion": 7}},
         "metadata.resourceVersion"),
        ({"metadata": {"name": "x", "resourceVersion": "7"}}, "metadata.uid"),
        ({"metadata": {"name": "y", "uid": "u1", "resourceVersion": "7"}}, "metadata.name"),
        ({"metadata": {"name": ["x"], "uid": "u1", "resourceVersion": "7"}}, "metadata.name"),
        ({"metadata": {"name": "x", "namespace": "other", "uid": "u1", "resourceVersion": "7"}},
         "metadata.namespace"),
        ({"kind": "Status"}, "kind: expected 'Lease', got a Status"),
        ({"kind": "LeaseList"}, "kind: expected 'Lease', got a LeaseList"),
        ({"kind": "ConfigMap"}, "kind: expected 'Lease', got another string"),
        ({"kind": None}, "kind"),
        ({"apiVersion": "v1"}, "apiVersion"),
        ({"apiVersion": None}, "apiVersion"),
    ],
)
def test_objects_that_are_not_ours_are_refused(
    kind: Any, change: dict[str, Any], path: str
) -> None:
    """check_object refuses other kinds, names, namespaces, and objects without uid or version."""
    obj = {**(_lease(**HELD) if kind is COORDINATION else _akka(None, owner="a")), **change}
    with pytest.raises(Malformed) as info:
        kind.check_object(obj, "x", "ns")
    assert str(info.value).startswith(path)


@pytest.mark.parametrize("kind", [COORDINATION, AKKA])
def test_list_items_may_omit_api_version_and_kind(kind: Any) -> None:
    """Items of a LIST (and watch objects) may omit apiVersion and kind; replies may not."""
    obj = _lease(**HELD) if kind is COORDINATION else _akka(None, owner="a")
    del obj["apiVersion"], obj["kind"]
    assert kind.check_object(obj, "x", "ns", listed=True) is obj
    with pytest.raises(Malformed, match="kind"):
        kind.check_object(obj, "x", "ns")
    obj["kind"] = "Status"
    with pytest.raises(Malformed, match="kind"):
        kind.check_object(obj, "x", "ns", listed=True)
