"""Lease objects on the wire ⇄ :class:`LeaseRecord`, for both lease kinds.

``coordination.k8s.io/v1`` (the default, :data:`COORDINATION`)::

    holder          spec.holderIdentity      ("" / absent / null = free)
    lease_duration  spec.leaseDurationSeconds (integer seconds; absent reads as 0)
    fencing_token   spec.leaseTransitions    (the core bumps it on every new grant)
    acquired_at     spec.acquireTime         (MicroTime)
    renewed_at      spec.renewTime           (MicroTime)
    version         metadata.resourceVersion (opaque; equality only)

``akka.io/v1`` (:data:`AKKA`, the CRD in ``lease.yml``, for interop with Akka clusters) has only
``spec.owner`` and ``spec.time`` (epoch milliseconds of the writer's wall clock). The rest of the
record lives in ``trio-lease.io/*`` annotations. An Akka node's PUT drops them, so a record last
written by Akka reads with ``lease_duration`` 0 (contenders then wait their own heartbeat
timeout) and ``fencing_token`` = ``metadata.generation``: the object's spec-change counter, which
is at least every token written before, so the next grant's token stays strictly greater.

Writes start from the last object read (kept by the backend) so every field we do not model
(``strategy``, ``preferredHolder``, labels, annotations, managedFields, Akka's ``version``)
survives. MicroTime is always written ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: the server requires
exactly six digits, and ``datetime.isoformat()`` drops them when microseconds are 0.

Reading is strict and total, in two steps (the backend turns :class:`~trio_lease._wire.Malformed`
into :class:`~trio_lease.BackendProtocolError`):

:meth:`LeaseKind.check_object` (identity: is this our object?)
    an object; ``kind`` ``Lease`` and ``apiVersion`` this kind's (items of a LIST and objects of
    a watch event may omit both, as the server does for built-in kinds in lists; a wrong value is
    refused everywhere); ``metadata`` an object whose ``name`` is the one asked for, whose
    ``namespace`` (when present) is ours, with a non-empty ``uid`` and ``resourceVersion``.
    Anything else (a ``Status``, a ``LeaseList``, ``{}``, another object) raises ``Malformed``:
    without a version no compare-and-swap is possible, and another object's record is not ours.
:meth:`LeaseKind.to_record` (content: what does it say?)
    a field of the wrong type or out of range makes the record *unreadable*
    (:attr:`LeaseRecord.unreadable` names every such field; holder ``""``; the token as read, or
    -1 when the token itself could not be read). The rules, per field:

    ==================================  ===================================================
    spec (absent/null = empty)          not an object → unreadable (coordination: token -1)
    spec.holderIdentity, spec.owner     string, absent or null; else unreadable
    spec.leaseDurationSeconds           int32 >= 0, absent = 0; else unreadable
    spec.leaseTransitions               int32 >= 0, absent = 0; else unreadable, token -1
    metadata.annotations                an object (else unreadable; akka: token -1); a
                                        ``trio-lease.io/*`` value that is not a string →
                                        unreadable; other annotations are never read
    trio-lease.io/fencing-token         decimal string within int64; else token -1
    trio-lease.io/lease-duration        decimal number string, finite, >= 0; else unreadable
    metadata.generation (akka fallback) integer >= 0; else unreadable, token -1
    acquireTime, renewTime, spec.time,  informational only: unparseable or out of range
    trio-lease.io/acquire-time          reads as None, never fails the record
    spec.preferredHolder, spec.strategy advisory only: not a string reads as "" (ignored)
    ==================================  ===================================================
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar

from ... import _wire
from ..._abc import LeaseRecord
from ..._wire import INT32_MAX, JsonObject, Malformed, describe

__all__ = [
    "AKKA",
    "COORDINATION",
    "JsonObject",
    "KubernetesLeaseRecord",
    "LeaseKind",
    "format_micro_time",
    "kind_named",
    "parse_time",
    "resource_version",
]

_T = TypeVar("_T")
_ANNOTATION = "trio-lease.io/"
_TOKEN = _ANNOTATION + "fencing-token"
_DURATION = _ANNOTATION + "lease-duration"
_ACQUIRED = _ANNOTATION + "acquire-time"
#: Our annotations named in messages; any other ``trio-lease.io/*`` key is named generically.
_KNOWN = frozenset(
    _ANNOTATION + n for n in ("key", "fencing-token", "lease-duration", "acquire-time",
                              "write-nonce")
)
_DECIMAL_INT = re.compile(r"[0-9]{1,19}")
_DECIMAL_NUMBER = re.compile(r"[0-9]{1,12}(\.[0-9]{1,12})?([eE][+-]?[0-9]{1,3})?")
#: Longest resourceVersion or uid accepted (real ones are about 20 and 36 characters).
_MAX_ID = 1024
#: 9999-12-31T23:59:59.999Z in epoch milliseconds: the latest spec.time read as a time.
_MAX_EPOCH_MS: Final = 253_402_300_799_999
_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?",
    re.ASCII,
)


@dataclasses.dataclass(frozen=True, slots=True)
class KubernetesLeaseRecord(LeaseRecord):
    """A :class:`LeaseRecord` plus the coordinated-leader-election fields of the Lease.

    ``preferred_holder`` (``spec.preferredHolder``) names the identity the cluster wants to hold
    the lease; when it names someone else, the holder should step down gracefully.
    ``strategy`` is ``spec.strategy``. Both are read-only for trio_lease: they are preserved
    on every write, whatever the core puts here.
    """

    preferred_holder: str = ""
    strategy: str = ""


def format_micro_time(value: datetime) -> str:
    """Format as Kubernetes MicroTime: UTC, ``Z``, exactly six fraction digits."""
    if value.tzinfo is None:
        raise ValueError("MicroTime needs an aware datetime (UTC)")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime | None:
    """Parse MicroTime or RFC 3339 leniently (any fraction, ``Z`` or offset); junk reads as None.

    Total: any value (a list, a 4 MiB string, year 0, an offset past year 1) gives a datetime
    or None, never an exception. Times are informational, so junk never fails a record.
    """
    if not isinstance(value, str) or len(value) > 64:
        return None
    match = _TIME.fullmatch(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, UTC
        )
        if zone and zone not in "Zz":
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            offset = sign * (int(digits[:2]) * 60 + int(digits[2:]))
            parsed -= timedelta(minutes=offset)
    except (ValueError, OverflowError):
        return None
    return parsed


class _Reader:
    """Reads the fields of one record, collecting what could not be read instead of raising."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def read(self, read: Callable[[], _T], fallback: _T) -> _T:
        """``read()``, or ``fallback`` with the problem noted when it raises Malformed."""
        try:
            return read()
        except Malformed as exc:
            self.problems.append(str(exc))
            return fallback

    def note(self, path: str, problem: str) -> None:
        self.problems.append(f"{path}: {problem}")


def _identifier(metadata: JsonObject, field: str) -> str:
    """``metadata.<field>`` as a non-empty string of bounded length, or Malformed."""
    path = f"metadata.{field}"
    value = _wire.string(metadata.get(field), path, default=None)
    if not value:
        raise Malformed(path, "expected a non-empty string, got an empty one")
    if len(value) > _MAX_ID:
        raise Malformed(path, f"longer than {_MAX_ID} characters")
    return value


def resource_version(obj: JsonObject) -> str:
    """``metadata.resourceVersion`` of ``obj``, or Malformed (no compare-and-swap without it)."""
    return _identifier(_wire.obj(obj.get("metadata"), "metadata"), "resourceVersion")


def _named(value: object, known: tuple[str, ...]) -> str:
    """For messages: a known kind name as is, any other value by its type only."""
    if isinstance(value, str) and value in known:
        return f"a {value}"
    return "another string" if isinstance(value, str) else describe(value)


def _our_annotations(metadata: JsonObject, reader: _Reader) -> dict[str, object] | None:
    """The ``trio-lease.io/*`` annotations, or None when the annotations are not an object.

    A value that is not a string under one of our keys is noted (it makes the record
    unreadable); other annotations are never read, so whatever they hold cannot matter.
    """
    annotations = reader.read(
        lambda: _wire.optional_obj(metadata.get("annotations"), "metadata.annotations"), None
    )
    if annotations is None:
        return None
    ours = {k: v for k, v in annotations.items() if k.startswith(_ANNOTATION)}
    for key, value in ours.items():
        if not isinstance(value, str):
            where = f'"{key}"' if key in _KNOWN else "a trio-lease.io/ key"
            problem = f"expected a string, got {describe(value)}"
            reader.note(f"metadata.annotations[{where}]", problem)
    return ours


def _akka_token(reader: _Reader, metadata: JsonObject, ours: dict[str, object] | None) -> int:
    """The fencing token of an akka.io/v1 object (annotation, else metadata.generation)."""
    if ours is None:
        return -1  # the annotations could not be read: whether a token is stored is unknown
    if _TOKEN not in ours:
        return reader.read(
            lambda: _wire.integer(metadata.get("generation"), "metadata.generation"), -1
        )
    text = ours[_TOKEN]
    if not isinstance(text, str):
        return -1  # noted by _our_annotations
    if not _DECIMAL_INT.fullmatch(text):
        reader.note(f'metadata.annotations["{_TOKEN}"]', "expected a decimal integer string")
        return -1
    return reader.read(lambda: _wire.integer(int(text), f'metadata.annotations["{_TOKEN}"]'), -1)


def _akka_duration(reader: _Reader, ours: dict[str, object] | None) -> float:
    text = ours.get(_DURATION) if ours is not None else None
    if not isinstance(text, str):
        return 0.0  # absent (an Akka node wrote it), or noted by _our_annotations
    path = f'metadata.annotations["{_DURATION}"]'
    if not _DECIMAL_NUMBER.fullmatch(text):
        reader.note(path, "expected a decimal number string")
        return 0.0
    return reader.read(lambda: _wire.number(float(text), path), 0.0)


def _duration_seconds(seconds: float) -> int | None:
    """Whole seconds for leaseDurationSeconds: rounded up (contenders wait longer, never less)."""
    if seconds <= 0:
        return None
    return max(1, math.ceil(seconds - 1e-9))


@dataclasses.dataclass(frozen=True)
class LeaseKind:
    """One Kubernetes resource that can hold a lease: its URL and its spec mapping."""

    name: str
    group: str
    version: str
    plural: str
    kind: str
    #: RBAC verbs the backend needs, in the order ``check()`` reports them.
    verbs: tuple[str, ...] = ("get", "create", "update", "watch", "list")
    #: Whether a PUT to a missing object creates it (the built-in Lease does; CRs give 404).
    create_on_update: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def resource(self) -> str:
        """``leases.coordination.k8s.io``: the resource as error messages and kubectl name it."""
        return f"{self.plural}.{self.group}"

    def collection_path(self, namespace: str) -> str:
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"

    def item_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    # -- object → record ---------------------------------------------------------------------

    def check_object(
        self, body: object, object_name: str, namespace: str, *, listed: bool = False
    ) -> JsonObject:
        """``body`` if it is this kind's object ``object_name`` in ``namespace``, else Malformed.

        ``listed``: an item of a LIST or the object of a watch event, which may omit
        ``apiVersion`` and ``kind`` (the server leaves them out of built-in kinds' list items).
        See the module docstring for the rules; the content is read by :meth:`to_record`.
        """
        obj = _wire.obj(body, "")
        for field, expected, known in (
            ("kind", self.kind, ("Status", f"{self.kind}List")),
            ("apiVersion", self.api_version, ()),
        ):
            value = obj.get(field)
            if value == expected or (value is None and listed):
                continue
            raise Malformed(field, f"expected {expected!r}, got {_named(value, known)}")
        metadata = _wire.obj(obj.get("metadata"), "metadata")
        name = _wire.string(metadata.get("name"), "metadata.name", default=None)
        if name != object_name:
            raise Malformed("metadata.name", f"expected {object_name!r}, got another name")
        stored_namespace = metadata.get("namespace")
        if stored_namespace is not None and stored_namespace != namespace:
            raise Malformed(
                "metadata.namespace",
                f"expected {namespace!r}, got {_named(stored_namespace, ())}",
            )
        _identifier(metadata, "uid")
        _identifier(metadata, "resourceVersion")
        return obj

    def to_record(self, key: str, obj: JsonObject) -> KubernetesLeaseRecord:
        """Read the record named ``key`` from an object (identity checked by check_object).

        Raises Malformed only when ``metadata`` or its ``resourceVersion`` cannot be read; a
        field that cannot be read makes the record unreadable instead (see the module
        docstring), so that it is held by an unknown holder: never free, never ours.
        """
        metadata = _wire.obj(obj.get("metadata"), "metadata")
        version = _identifier(metadata, "resourceVersion")
        reader = _Reader()
        ours = _our_annotations(metadata, reader)
        spec = reader.read(lambda: _wire.optional_obj(obj.get("spec"), "spec"), None)
        fields = spec if spec is not None else {}
        preferred = strategy = ""
        if self.group == COORDINATION_GROUP:
            holder = reader.read(
                lambda: _wire.string(fields.get("holderIdentity"), "spec.holderIdentity"), ""
            )
            duration = float(reader.read(lambda: _wire.integer(
                fields.get("leaseDurationSeconds"), "spec.leaseDurationSeconds",
                high=INT32_MAX, default=0,
            ), 0))
            token = reader.read(lambda: _wire.integer(
                fields.get("leaseTransitions"), "spec.leaseTransitions",
                high=INT32_MAX, default=0,
            ), -1)
            acquired = parse_time(fields.get("acquireTime"))
            renewed = parse_time(fields.get("renewTime"))
            preferred = _advisory(fields.get("preferredHolder"))
            strategy = _advisory(fields.get("strategy"))
            if spec is None:
                token = -1  # the token lives in the spec, which could not be read
        else:
            holder = reader.read(lambda: _wire.string(fields.get("owner"), "spec.owner"), "")
            duration = _akka_duration(reader, ours)
            token = _akka_token(reader, metadata, ours)
            renewed = _akka_time(fields.get("time"))
            acquired = parse_time(ours.get(_ACQUIRED) if ours else None) or renewed
        unreadable = "; ".join(reader.problems)
        return KubernetesLeaseRecord(
            name=key,
            holder="" if unreadable else holder,
            lease_duration=duration,
            fencing_token=token,
            acquired_at=acquired,
            renewed_at=renewed,
            version=version,
            unreadable=unreadable,
            preferred_holder=preferred,
            strategy=strategy,
        )

    # -- record → object ---------------------------------------------------------------------

    def new_object(
        self, name: str, record: LeaseRecord, annotations: dict[str, str]
    ) -> JsonObject:
        """A fresh object for a POST."""
        metadata: JsonObject = {"name": name}
        if annotations:
            metadata["annotations"] = dict(annotations)
        obj: JsonObject = {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}
        return self.apply(obj, record)

    def apply(self, base: JsonObject, record: LeaseRecord) -> JsonObject:
        """``base`` (the last object read) with the record's fields written over it.

        ``base`` is not changed: the dicts written here (the object, ``metadata``, its
        ``annotations`` and ``spec``) are copied; the rest (``managedFields`` and the like) is
        shared with ``base`` and must not be changed through the result.
        """
        obj = _copy_for_write(base)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        if self.group == COORDINATION_GROUP:
            spec["holderIdentity"] = record.holder
            _set(spec, "leaseDurationSeconds", _duration_seconds(record.lease_duration))
            spec["leaseTransitions"] = max(0, record.fencing_token)
            _set(spec, "acquireTime", _micro(record.acquired_at))
            _set(spec, "renewTime", _micro(record.renewed_at))
            return obj
        spec["owner"] = record.holder
        stamp = record.renewed_at or record.acquired_at
        spec["time"] = int(stamp.timestamp() * 1000) if stamp is not None else 0
        metadata = obj.setdefault("metadata", {})
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            annotations = metadata["annotations"] = {}
        annotations[_ANNOTATION + "fencing-token"] = str(max(0, record.fencing_token))
        annotations[_ANNOTATION + "lease-duration"] = f"{record.lease_duration:g}"
        if record.acquired_at is not None:
            annotations[_ANNOTATION + "acquire-time"] = format_micro_time(record.acquired_at)
        else:
            annotations.pop(_ANNOTATION + "acquire-time", None)
        return obj


def _copy_for_write(base: JsonObject) -> JsonObject:
    """A copy of ``base`` whose top level, metadata, annotations and spec can be written.

    Renewals apply a record to the last object read many times a second: a deep copy of the
    whole object (with ``managedFields``) was the largest cost outside HTTP in the profile.
    """
    obj = dict(base)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata = obj["metadata"] = dict(metadata)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            metadata["annotations"] = dict(annotations)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        obj["spec"] = dict(spec)
    return obj


def _set(spec: JsonObject, key: str, value: object) -> None:
    if value is None:
        spec.pop(key, None)
    else:
        spec[key] = value


def _micro(value: datetime | None) -> str | None:
    return format_micro_time(value) if value is not None else None


def _advisory(value: object) -> str:
    """spec.preferredHolder and spec.strategy are advisory: a non-string value is ignored."""
    return value if isinstance(value, str) else ""


def _akka_time(value: object) -> datetime | None:
    """spec.time (epoch milliseconds) as a datetime; informational, so junk reads as None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_EPOCH_MS:
        return None
    return datetime.fromtimestamp(value / 1000, UTC)


COORDINATION_GROUP: Final = "coordination.k8s.io"

#: The built-in Lease (``coordination.k8s.io/v1``): the default kind.
COORDINATION: Final = LeaseKind(
    name="coordination.k8s.io/v1",
    group=COORDINATION_GROUP,
    version="v1",
    plural="leases",
    kind="Lease",
    create_on_update=True,
)
#: Akka's Lease custom resource (``akka.io/v1``, defined in ``lease.yml``).
AKKA: Final = LeaseKind(
    name="akka.io/v1", group="akka.io", version="v1", plural="leases", kind="Lease"
)

_KINDS = {k.name: k for k in (COORDINATION, AKKA)} | {"coordination": COORDINATION, "akka": AKKA}


def kind_named(name: str) -> LeaseKind | None:
    """The kind called ``name`` ("coordination.k8s.io/v1"/"coordination", "akka.io/v1"/"akka")."""
    return _KINDS.get(name)
