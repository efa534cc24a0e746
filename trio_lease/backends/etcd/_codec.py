"""The etcd v3 JSON gateway's encodings, and the lease record as a JSON value.

The gateway speaks protobuf's JSON mapping, which has three traps this module handles in one
place:

- ``bytes`` fields (keys, values, ``range_end``) are base64 strings;
- 64-bit integers (revisions, lease IDs, TTLs, counts) are JSON *strings*, e.g. ``"42"``;
- fields holding their default value are *omitted*: a failed txn has no ``succeeded`` key, an
  empty range has no ``kvs``, a PUT event has no ``type``, a missing key's revision is absent.

A record is stored under ``prefix + name`` as a small JSON object; its version is the key's
``mod_revision`` (etcd's global revision of the write that last changed it), which is unique for
every write to the cluster and so never reused for a name.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..._abc import LeaseRecord
from ..._exceptions import BackendError

__all__ = [
    "b64",
    "decode_record",
    "encode_record",
    "int64",
    "unb64",
]

#: Bumped if the stored JSON ever changes incompatibly; readers reject formats they don't know.
RECORD_FORMAT = 1


def b64(data: str | bytes) -> str:
    """Encode a key or value for the gateway (``bytes`` fields are base64 in JSON)."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: object) -> bytes:
    """Decode a base64 ``bytes`` field; a missing field is the default, empty bytes."""
    if text is None:
        return b""
    if not isinstance(text, str):
        raise BackendError(f"etcd returned a non-string bytes field: {type(text).__name__}")
    return base64.b64decode(text)


def int64(value: object) -> int:
    """Parse a 64-bit integer field: a JSON string (how the gateway sends it) or number.

    A missing field (``None``) is the default, 0.
    """
    if value is None:
        return 0
    if isinstance(value, bool):
        raise BackendError(f"etcd returned a boolean where an integer was expected: {value}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise BackendError(f"etcd returned a malformed integer field: {value!r}")


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_time(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("timestamp is not a string")
    return datetime.fromisoformat(value)


def _parse(name: str, value: bytes, version: str) -> LeaseRecord:
    data = json.loads(value)
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise ValueError("not a trio_lease record")
    holder = data["holder"]
    token = data["fencing_token"]
    duration = data["lease_duration"]
    if not isinstance(holder, str) or not isinstance(token, int):
        raise TypeError("holder or fencing_token has the wrong type")
    if isinstance(duration, bool) or not isinstance(duration, int | float):
        raise TypeError("lease_duration is not a number")
    return LeaseRecord(
        name=name,
        holder=holder,
        lease_duration=float(duration),
        fencing_token=token,
        acquired_at=_parse_time(data.get("acquired_at")),
        renewed_at=_parse_time(data.get("renewed_at")),
        version=version,
    )


def encode_record(record: LeaseRecord) -> bytes:
    """The stored value of ``record`` (its version is not stored: it is the mod_revision)."""
    return json.dumps(
        {
            "format": RECORD_FORMAT,
            "name": record.name,
            "holder": record.holder,
            "lease_duration": record.lease_duration,
            "fencing_token": record.fencing_token,
            "acquired_at": _time(record.acquired_at),
            "renewed_at": _time(record.renewed_at),
        },
        separators=(",", ":"),
    ).encode()


def decode_record(name: str, kv: Mapping[str, Any]) -> LeaseRecord:
    """Turn a gateway ``KeyValue`` object into a record whose version is its mod_revision.

    Raises :class:`BackendError` (naming the lease, not the content) if the value is not a
    record this library wrote: someone else's data sits under our prefix.
    """
    revision = int64(kv.get("mod_revision"))
    if revision <= 0:
        raise BackendError(f"etcd returned lease {name!r} without a mod_revision")
    try:
        return _parse(name, unb64(kv.get("value")), str(revision))
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(
            f"the etcd key for lease {name!r} does not hold a trio_lease record ({exc}); "
            f"another program writes under the same prefix: choose a different `prefix`"
        ) from None
