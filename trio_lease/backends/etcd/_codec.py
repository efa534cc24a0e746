"""The lease record as the JSON value stored under its key, both ways.

A record is stored under ``prefix + name`` as a small JSON object; its version is the key's
``mod_revision`` (etcd's global revision of the write that last changed it), which is unique for
every write to the cluster and so never reused for a name. The gateway carries keys and values
as base64 (:func:`b64`); the answers around them are checked in :mod:`._replies`.

:func:`decode_record` is total: whatever bytes sit under our key, it returns a record. A value
that is not a record this library wrote (another program's data, another lease's record, a
field of the wrong type or out of range) comes back with
:attr:`~trio_lease.LeaseRecord.unreadable` set: held by an unknown holder, never free, and
never taken over when its fencing token could not be read (``fencing_token`` -1).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from ..._abc import LeaseRecord
from ..._exceptions import BackendProtocolError
from ..._wire import INT32_MAX, INT64_MAX, Malformed, describe, integer, load_json, number, string

__all__ = ["RECORD_FORMAT", "b64", "decode_record", "encode_record"]

#: Bumped if the stored JSON ever changes incompatibly; readers reject formats they don't know.
RECORD_FORMAT = 1
#: Longest timestamp string parsed (an ISO 8601 time with offset and microseconds is 32).
_MAX_TIME_CHARS = 64
_FOREIGN = "another program may write under this prefix: choose a different `prefix`"


def b64(data: str | bytes) -> str:
    """Encode a key or value for the gateway (``bytes`` fields are base64 in JSON)."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_time(value: object) -> datetime | None:
    """An informational timestamp; one that does not read as ISO 8601 reads as None.

    Timestamps are never compared with a clock (docs/design.md §4.1), so a bad one does not make the
    record unreadable. A time without an offset is taken as UTC (the library writes UTC).
    """
    if not isinstance(value, str) or len(value) > _MAX_TIME_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def encode_record(record: LeaseRecord) -> bytes:
    """The stored value of ``record`` (its version is not stored: it is the mod_revision).

    ``handover_to`` is left out when empty, so a value reads the same whether an earlier
    version (which had no such field) or this one wrote it.
    """
    value: dict[str, object] = {
        "format": RECORD_FORMAT,
        "name": record.name,
        "holder": record.holder,
        "lease_duration": record.lease_duration,
        "fencing_token": record.fencing_token,
        "acquired_at": _time(record.acquired_at),
        "renewed_at": _time(record.renewed_at),
    }
    if record.handover_to:
        value["handover_to"] = record.handover_to
    return json.dumps(value, separators=(",", ":")).encode()


def decode_record(name: str, value: bytes, version: str) -> LeaseRecord:
    """The record stored as ``value`` at ``version`` (a mod_revision), readable or not.

    Never raises: a value that is not a well-formed record of lease ``name`` gives a record
    with ``unreadable`` saying which field of the value is wrong, ``holder`` empty, and the
    fencing token and duration where they could be read (token -1 when the token, the format
    or the name is wrong: such a record's token history is not this lease's).
    """

    def unreadable(problem: str, token: int = -1, duration: float = 0.0) -> LeaseRecord:
        return LeaseRecord(
            name=name,
            lease_duration=duration,
            fencing_token=token,
            version=version,
            unreadable=problem,
        )

    try:
        data = load_json(value, "value")
    except BackendProtocolError as exc:
        reason = str(exc).removeprefix("value ").removesuffix("; the outcome is unknown")
        return unreadable(f"value: not a trio_lease record (it {reason}); {_FOREIGN}")
    if not isinstance(data, dict) or "format" not in data:
        kind = describe(data) if not isinstance(data, dict) else "an object without `format`"
        return unreadable(f"value: not a trio_lease record ({kind}); {_FOREIGN}")
    stored_format = data["format"]
    if type(stored_format) is not int or stored_format != RECORD_FORMAT:
        return unreadable(
            f"value.format: not record format {RECORD_FORMAT} (written by a newer trio_lease?)"
        )
    if data.get("name") != name:
        return unreadable("value.name: the record of another lease is stored under this key")
    problems: list[str] = []
    try:
        token = integer(data.get("fencing_token"), "value.fencing_token", high=INT64_MAX)
    except Malformed as exc:
        problems.append(str(exc))
        token = -1
    try:
        duration = number(data.get("lease_duration"), "value.lease_duration", high=INT32_MAX)
    except Malformed as exc:
        problems.append(str(exc))
        duration = 0.0
    try:
        holder = string(data.get("holder"), "value.holder", default=None)
    except Malformed as exc:
        problems.append(str(exc))
        holder = ""
    try:  # absent (an earlier version wrote the value, or no request): none
        handover_to = string(data.get("handover_to", ""), "value.handover_to", default=None)
    except Malformed as exc:
        problems.append(str(exc))
        handover_to = ""
    if problems:
        return unreadable("; ".join(problems), token, duration)
    return LeaseRecord(
        name=name,
        holder=holder,
        lease_duration=duration,
        fencing_token=token,
        acquired_at=_parse_time(data.get("acquired_at")),
        renewed_at=_parse_time(data.get("renewed_at")),
        version=version,
        handover_to=handover_to,
    )
