"""Reading a Lease object into a :class:`KubernetesLeaseRecord`: strict and total.

Whether an object is ours at all (kind, apiVersion, name, namespace, uid, resourceVersion) is
checked first, by :meth:`LeaseKind.check_object <._models.LeaseKind.check_object>`; this module
reads what a checked object says. :func:`read_record` raises
:class:`~trio_lease._wire.Malformed` only when ``metadata`` or its ``resourceVersion`` cannot
be read (no compare-and-swap without it); a field of the wrong type or out of range makes the
record *unreadable* instead (:attr:`LeaseRecord.unreadable` names every such field; holder
``""``; the token as read, or -1 when the token itself could not be read), so that it is held by
an unknown holder: never free, never ours. The rules, per field:

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
trio-lease.io/handover-to           (both kinds) a string; absent = no request
metadata.generation (akka fallback) integer >= 0; else unreadable, token -1
acquireTime, renewTime, spec.time,  informational only: unparseable or out of range
trio-lease.io/acquire-time          reads as None, never fails the record
spec.preferredHolder, spec.strategy advisory only: not a string reads as "" (ignored)
==================================  ===================================================
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import datetime
from typing import Final, NamedTuple, TypeVar

from ... import _wire
from ..._abc import LeaseRecord
from ..._wire import INT32_MAX, JsonObject, Malformed, describe
from ._times import akka_time, parse_time

__all__ = [
    "ACQUIRE_TIME_ANNOTATION",
    "ANNOTATION_PREFIX",
    "FENCING_TOKEN_ANNOTATION",
    "HANDOVER_TO_ANNOTATION",
    "LEASE_DURATION_ANNOTATION",
    "KubernetesLeaseRecord",
    "identifier",
    "read_record",
    "resource_version",
]

_T = TypeVar("_T")
#: The prefix of our annotations, and those the ``akka.io/v1`` kind stores the record in.
ANNOTATION_PREFIX: Final = "trio-lease.io/"
FENCING_TOKEN_ANNOTATION: Final = ANNOTATION_PREFIX + "fencing-token"
LEASE_DURATION_ANNOTATION: Final = ANNOTATION_PREFIX + "lease-duration"
ACQUIRE_TIME_ANNOTATION: Final = ANNOTATION_PREFIX + "acquire-time"
#: A contender's handover request (:attr:`LeaseRecord.handover_to`), on both kinds.
HANDOVER_TO_ANNOTATION: Final = ANNOTATION_PREFIX + "handover-to"
#: Our annotations named in messages; any other ``trio-lease.io/*`` key is named generically.
_KNOWN = frozenset(
    ANNOTATION_PREFIX + n for n in ("key", "fencing-token", "lease-duration", "acquire-time",
                                    "write-nonce", "handover-to")
)
_DECIMAL_INT = re.compile(r"[0-9]{1,19}")
_DECIMAL_NUMBER = re.compile(r"[0-9]{1,12}(\.[0-9]{1,12})?([eE][+-]?[0-9]{1,3})?")
#: Longest resourceVersion or uid accepted (real ones are about 20 and 36 characters).
_MAX_ID = 1024


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


class _Fields(NamedTuple):
    """What the spec (and for akka.io/v1 the annotations) of one object say."""

    holder: str
    duration: float
    token: int
    acquired: datetime | None
    renewed: datetime | None
    preferred: str = ""
    strategy: str = ""


def identifier(metadata: JsonObject, field: str) -> str:
    """``metadata.<field>`` as a non-empty string of bounded length, or Malformed."""
    value = metadata.get(field)
    if type(value) is str and value and len(value) <= _MAX_ID:
        return value  # read four times per renewal: no message made unless one is needed
    path = f"metadata.{field}"
    value = _wire.string(value, path, default=None)
    if not value:
        raise Malformed(path, "expected a non-empty string, got an empty one")
    raise Malformed(path, f"longer than {_MAX_ID} characters")


def resource_version(obj: JsonObject) -> str:
    """``metadata.resourceVersion`` of ``obj``, or Malformed (no compare-and-swap without it)."""
    return identifier(_wire.obj(obj.get("metadata"), "metadata"), "resourceVersion")


def read_record(key: str, obj: JsonObject, *, coordination: bool) -> KubernetesLeaseRecord:
    """The record named ``key`` in ``obj``: a ``coordination.k8s.io`` Lease or an Akka one."""
    metadata = _wire.obj(obj.get("metadata"), "metadata")
    version = identifier(metadata, "resourceVersion")
    reader = _Reader()
    ours = _our_annotations(metadata, reader)
    spec = obj.get("spec")
    if type(spec) is not dict:  # absent or null reads as empty; anything else is noted
        spec = reader.read(lambda: _wire.optional_obj(obj.get("spec"), "spec"), None)
    if coordination:
        fields = _coordination_fields(reader, spec)
    else:
        fields = _akka_fields(reader, spec or {}, metadata, ours)
    asked = ours.get(HANDOVER_TO_ANNOTATION) if ours else None  # not a string: noted above
    unreadable = "; ".join(reader.problems)
    # Every field by position: a class called with keywords gets them as a dict first, a
    # cost paid on every answer (tests/backends/kubernetes/test_models.py checks each field).
    return KubernetesLeaseRecord(
        key,  # name
        "" if unreadable else fields.holder,  # holder
        fields.duration,  # lease_duration
        fields.token,  # fencing_token
        fields.acquired,  # acquired_at
        fields.renewed,  # renewed_at
        version,
        unreadable,
        asked if isinstance(asked, str) and not unreadable else "",  # handover_to
        fields.preferred,  # preferred_holder
        fields.strategy,
    )


def _coordination_fields(reader: _Reader, spec: JsonObject | None) -> _Fields:
    if spec is not None:
        # The common case, a well-typed spec, without a closure per field; anything else takes
        # the field-by-field reading below, which notes each problem.
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds")
        token = spec.get("leaseTransitions")
        if (
            (holder is None or type(holder) is str)
            and (duration is None or (type(duration) is int and 0 <= duration <= INT32_MAX))
            and (token is None or (type(token) is int and 0 <= token <= INT32_MAX))
        ):
            return _Fields(  # by position, as the record (see read_record)
                holder or "",
                float(duration or 0),
                token or 0,
                parse_time(spec.get("acquireTime")),
                parse_time(spec.get("renewTime")),
                _advisory(spec.get("preferredHolder")),
                _advisory(spec.get("strategy")),
            )
    fields = spec if spec is not None else {}
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
    return _Fields(
        holder=holder,
        duration=duration,
        token=-1 if spec is None else token,  # the token lives in the spec, maybe unreadable
        acquired=parse_time(fields.get("acquireTime")),
        renewed=parse_time(fields.get("renewTime")),
        preferred=_advisory(fields.get("preferredHolder")),
        strategy=_advisory(fields.get("strategy")),
    )


def _akka_fields(
    reader: _Reader, fields: JsonObject, metadata: JsonObject, ours: dict[str, object] | None
) -> _Fields:
    holder = reader.read(lambda: _wire.string(fields.get("owner"), "spec.owner"), "")
    duration = _akka_duration(reader, ours)
    token = _akka_token(reader, metadata, ours)
    renewed = akka_time(fields.get("time"))
    acquired = parse_time(ours.get(ACQUIRE_TIME_ANNOTATION) if ours else None) or renewed
    return _Fields(holder, duration, token, acquired, renewed)


def _our_annotations(metadata: JsonObject, reader: _Reader) -> dict[str, object] | None:
    """The ``trio-lease.io/*`` annotations, or None when the annotations are not an object.

    A value that is not a string under one of our keys is noted (it makes the record
    unreadable); other annotations are never read, so whatever they hold cannot matter.
    """
    annotations = metadata.get("annotations")
    if annotations is None:  # absent or null reads as empty (a renewal's answer, often)
        return {}
    if type(annotations) is not dict:  # anything else is noted
        annotations = reader.read(
            lambda: _wire.optional_obj(metadata.get("annotations"), "metadata.annotations"),
            None,
        )
        if annotations is None:
            return None
    ours = {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
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
    if FENCING_TOKEN_ANNOTATION not in ours:
        return reader.read(
            lambda: _wire.integer(metadata.get("generation"), "metadata.generation"), -1
        )
    text = ours[FENCING_TOKEN_ANNOTATION]
    if not isinstance(text, str):
        return -1  # noted by _our_annotations
    path = f'metadata.annotations["{FENCING_TOKEN_ANNOTATION}"]'
    if not _DECIMAL_INT.fullmatch(text):
        reader.note(path, "expected a decimal integer string")
        return -1
    return reader.read(lambda: _wire.integer(int(text), path), -1)


def _akka_duration(reader: _Reader, ours: dict[str, object] | None) -> float:
    text = ours.get(LEASE_DURATION_ANNOTATION) if ours is not None else None
    if not isinstance(text, str):
        return 0.0  # absent (an Akka node wrote it), or noted by _our_annotations
    path = f'metadata.annotations["{LEASE_DURATION_ANNOTATION}"]'
    if not _DECIMAL_NUMBER.fullmatch(text):
        reader.note(path, "expected a decimal number string")
        return 0.0
    return reader.read(lambda: _wire.number(float(text), path), 0.0)


def _advisory(value: object) -> str:
    """spec.preferredHolder and spec.strategy are advisory: a non-string value is ignored."""
    return value if isinstance(value, str) else ""
