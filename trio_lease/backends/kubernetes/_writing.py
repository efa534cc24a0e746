"""Writing a record onto a Lease object: the body of a POST or PUT.

Writes start from the last object read (kept by the backend's object cache) so every field we
do not model (``strategy``, ``preferredHolder``, labels, annotations, Akka's ``version``)
survives; ``managedFields`` survives too, because a PUT leaves it out and the server then keeps
the live object's (``_backend._put_body``). A ``coordination.k8s.io/v1`` Lease gets the record
in its spec; an ``akka.io/v1`` object gets ``spec.owner`` and ``spec.time`` (epoch
milliseconds) and the rest in ``trio-lease.io/*`` annotations (see :mod:`._models` for the
mapping). Both kinds keep a handover request in the annotation ``trio-lease.io/handover-to``,
removed when there is none.
"""

from __future__ import annotations

import math
from datetime import datetime

from ..._abc import LeaseRecord
from ..._wire import JsonObject
from ._reading import (
    ACQUIRE_TIME_ANNOTATION,
    FENCING_TOKEN_ANNOTATION,
    HANDOVER_TO_ANNOTATION,
    LEASE_DURATION_ANNOTATION,
)
from ._times import format_micro_time

__all__ = ["apply_record"]


def apply_record(base: JsonObject, record: LeaseRecord, *, coordination: bool) -> JsonObject:
    """``base`` (the last object read) with the record's fields written over it.

    ``base`` is not changed: the dicts written here (the object, ``metadata``, its
    ``annotations`` and ``spec``) are copied; the rest (``managedFields`` and the like) is
    shared with ``base`` and must not be changed through the result.
    """
    obj = _copy_for_write(base)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    if coordination:
        spec["holderIdentity"] = record.holder
        _set(spec, "leaseDurationSeconds", _duration_seconds(record.lease_duration))
        spec["leaseTransitions"] = max(0, record.fencing_token)
        _set(spec, "acquireTime", _micro(record.acquired_at))
        _set(spec, "renewTime", _micro(record.renewed_at))
        _set_handover(obj, record.handover_to)
        return obj
    spec["owner"] = record.holder
    stamp = record.renewed_at or record.acquired_at
    spec["time"] = int(stamp.timestamp() * 1000) if stamp is not None else 0
    annotations = _annotations(obj)
    _set_handover(obj, record.handover_to)
    annotations[FENCING_TOKEN_ANNOTATION] = str(max(0, record.fencing_token))
    annotations[LEASE_DURATION_ANNOTATION] = f"{record.lease_duration:g}"
    if record.acquired_at is not None:
        annotations[ACQUIRE_TIME_ANNOTATION] = format_micro_time(record.acquired_at)
    else:
        annotations.pop(ACQUIRE_TIME_ANNOTATION, None)
    return obj


def _annotations(obj: JsonObject) -> JsonObject:
    """The object's annotations, made an object (the copy ``_copy_for_write`` made) if need be."""
    metadata = obj.setdefault("metadata", {})
    annotations: JsonObject | None = metadata.get("annotations")
    if not isinstance(annotations, dict):
        annotations = metadata["annotations"] = {}
    return annotations


def _set_handover(obj: JsonObject, handover_to: str) -> None:
    """Write the handover request annotation, or remove it (never adding empty annotations)."""
    if handover_to:
        _annotations(obj)[HANDOVER_TO_ANNOTATION] = handover_to
        return
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict):
        annotations.pop(HANDOVER_TO_ANNOTATION, None)


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


def _duration_seconds(seconds: float) -> int | None:
    """Whole seconds for leaseDurationSeconds: rounded up (contenders wait longer, never less)."""
    if seconds <= 0:
        return None
    return max(1, math.ceil(seconds - 1e-9))
