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
"""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ..._abc import LeaseRecord

__all__ = [
    "AKKA",
    "COORDINATION",
    "KubernetesLeaseRecord",
    "LeaseKind",
    "format_micro_time",
    "kind_named",
    "parse_time",
]

JsonObject = dict[str, Any]
_ANNOTATION = "trio-lease.io/"
_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?"
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
    """Parse MicroTime or RFC 3339 leniently (any fraction, ``Z`` or offset); junk reads as None."""
    if not isinstance(value, str):
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
    except ValueError:
        return None
    return parsed


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


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

    def to_record(self, key: str, obj: JsonObject) -> KubernetesLeaseRecord:
        """Read a record named ``key`` from a Lease object."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        version = _str(metadata.get("resourceVersion"))
        if self.group == COORDINATION_GROUP:
            return KubernetesLeaseRecord(
                name=key,
                holder=_str(spec.get("holderIdentity")),
                lease_duration=float(_int(spec.get("leaseDurationSeconds"))),
                fencing_token=_int(spec.get("leaseTransitions")),
                acquired_at=parse_time(spec.get("acquireTime")),
                renewed_at=parse_time(spec.get("renewTime")),
                version=version,
                preferred_holder=_str(spec.get("preferredHolder")),
                strategy=_str(spec.get("strategy")),
            )
        annotations = metadata.get("annotations") or {}
        token = annotations.get(_ANNOTATION + "fencing-token")
        renewed = _akka_time(spec.get("time"))
        return KubernetesLeaseRecord(
            name=key,
            holder=_str(spec.get("owner")),
            lease_duration=_float(annotations.get(_ANNOTATION + "lease-duration")),
            fencing_token=(
                _int(token) if token is not None else _int(metadata.get("generation"))
            ),
            acquired_at=parse_time(annotations.get(_ANNOTATION + "acquire-time")) or renewed,
            renewed_at=renewed,
            version=version,
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


def _float(value: object) -> float:
    if isinstance(value, str):
        try:
            result = float(value)
        except ValueError:
            return 0.0
        return result if math.isfinite(result) and result > 0 else 0.0
    return 0.0


def _akka_time(value: object) -> datetime | None:
    millis = _int(value, default=-1)
    if millis <= 0:
        return None
    try:
        return datetime.fromtimestamp(millis / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None


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
