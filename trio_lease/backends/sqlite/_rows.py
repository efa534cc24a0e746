"""The row boundary of the SQLite backend: the one place a row becomes a record, and back.

SQLite lets any column hold any type, and another program or a hand edit may have written the
file, so every column is checked here (:mod:`trio_lease._wire` does the checks): an unreadable
name or version raises :class:`BackendProtocolError` naming the lease and the column; unreadable
content gives a record with ``unreadable`` set (held by an unknown holder). Values to write are
checked the same way before they are written (a record that would not read back whole is a
:class:`LeaseConfigError`), and versions the backend never issued are recognised without a query.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TypeVar

from ... import _wire
from ..._abc import LeaseRecord
from ..._exceptions import BackendProtocolError, LeaseConfigError
from ..._wire import Malformed

__all__ = [
    "ADDED_COLUMNS",
    "COLUMNS",
    "EDITED",
    "LEASE_COLUMNS",
    "decode_text",
    "issued",
    "lease_name",
    "record_from_row",
    "storable",
    "storable_and_read",
]

T = TypeVar("T")

LEASE_COLUMNS: Final = (
    "name", "holder", "lease_duration", "fencing_token", "acquired_at", "renewed_at",
    "handover_to", "version",
)  # fmt: skip
COLUMNS: Final = ", ".join(LEASE_COLUMNS)
#: Columns later versions added, with their definitions: a file made before lacks them, and
#: :func:`._file.connect` adds them (``ALTER TABLE leases ADD COLUMN``).
ADDED_COLUMNS: Final = {"handover_to": "TEXT NOT NULL DEFAULT ''"}
_VERSION: Final = LEASE_COLUMNS.index("version")
_MAX_TIME_TEXT: Final = 64  # "2024-01-01T00:00:00.000000+00:00" is 32 characters
EDITED: Final = "the file was written by another program or edited by hand; fix or delete that row"


def decode_text(data: bytes) -> str:
    """The connection's text factory: SQLite TEXT to ``str``, never failing a whole query."""
    # SQLite does not check that TEXT is UTF-8, and sqlite3's own decoding fails the whole
    # query with a message quoting the text. Undecodable bytes become lone surrogates instead,
    # which _text refuses for the one column that holds them.
    return data.decode("utf-8", "surrogateescape")


def _text(value: object, column: str) -> str:
    if isinstance(value, bytes):
        raise Malformed(column, "expected text, got a blob")
    text = _wire.string(value, column, default=None)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Malformed(column, "text is not valid UTF-8") from None
    return text


def _time(value: object, column: str) -> datetime | None:
    if value is None:
        return None
    text = _text(value, column)
    if len(text) > _MAX_TIME_TEXT:
        raise Malformed(column, f"expected an ISO-8601 time, got {len(text)} characters")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise Malformed(column, "expected an ISO-8601 time") from None
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)  # as the etcd backend reads one
    return moment


def _informational_time(value: object, column: str) -> datetime | None:
    """A timestamp column: for humans only (never compared), so a bad one reads as None.

    The same rule as the other backends: an unreadable wall-clock time does not make the record
    unreadable, since no decision depends on it (docs/design.md §4.1).
    """
    try:
        return _time(value, column)
    except Malformed:
        return None


def _iso(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


def record_from_row(row: Sequence[object], path: Path) -> LeaseRecord:
    """The one place a row (``COLUMNS``, in order) becomes a record, column by column.

    An unreadable name or version raises :class:`BackendProtocolError` naming the lease and the
    column; unreadable content gives a record with ``unreadable`` set (held by an unknown
    holder: ``holder`` empty, the readable duration or 0.0, the readable token or -1).
    """
    try:
        name = _text(row[0], "name")
    except Malformed as exc:
        raise BackendProtocolError(
            f"SQLite at {path}: a row of table leases has an unreadable name ({exc}); {EDITED}"
        ) from None
    try:
        version = _wire.integer(row[_VERSION], "version", low=1)
    except Malformed as exc:
        raise BackendProtocolError(
            f"SQLite at {path}: lease {name!r} has an unreadable version ({exc}); {EDITED}"
        ) from None
    problems: list[str] = []

    def read(check: Callable[[object, str], T], column: int) -> T | None:
        try:
            return check(row[column], LEASE_COLUMNS[column])
        except Malformed as exc:
            problems.append(str(exc))
            return None

    holder = read(_text, 1)
    duration = read(_wire.number, 2)  # finite, in [0, 2**31 - 1]
    token = read(_wire.integer, 3)  # an integer in [0, 2**63 - 1]: not a real, not text
    handover_to = read(_text, 6)
    acquired = _informational_time(row[4], LEASE_COLUMNS[4])
    renewed = _informational_time(row[5], LEASE_COLUMNS[5])
    return LeaseRecord(
        name=name,
        holder=holder if holder is not None and not problems else "",
        lease_duration=duration if duration is not None else 0.0,
        fencing_token=token if token is not None else -1,
        acquired_at=acquired,
        renewed_at=renewed,
        version=str(version),
        unreadable="; ".join(problems),
        handover_to=handover_to if handover_to is not None and not problems else "",
    )


def lease_name(name: object) -> str:
    """``name`` as a lease name SQLite can store; LeaseConfigError if it is not text."""
    try:
        return _text(name, "name")
    except Malformed as exc:
        raise LeaseConfigError(f"a lease name must be text: {exc}") from None


def storable(record: LeaseRecord, path: Path) -> tuple[object, ...]:
    """The row to write (``COLUMNS`` but the version); LeaseConfigError if it would not read
    back as a whole record."""
    return storable_and_read(record, path)[0]


def storable_and_read(record: LeaseRecord, path: Path) -> tuple[tuple[object, ...], LeaseRecord]:
    """:func:`storable`, and the record the row reads back as at version ``"1"`` (the row at
    version ``v`` reads back as that record with ``version=str(v)``: nothing else of a read
    depends on the version)."""
    values = (
        lease_name(record.name),
        record.holder,
        record.lease_duration,
        record.fencing_token,
        _iso(record.acquired_at),
        _iso(record.renewed_at),
        record.handover_to,
    )
    read = record_from_row((*values, 1), path)
    if read.unreadable:
        raise LeaseConfigError(f"cannot store lease {record.name!r}: {read.unreadable}")
    return values, read


def issued(version: str) -> int | None:
    """The counter value ``version`` names, or None if this backend never issues it."""
    if not (version.isascii() and version.isdigit() and len(version) <= 19):
        return None  # beyond int64 (SQLite could not even bind it), a sign, a dot, spaces
    number = int(version)
    return number if 0 < number <= _wire.INT64_MAX and str(number) == version else None
