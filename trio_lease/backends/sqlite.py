"""The embedded backend: one SQLite database file shared by many processes on one host.

Each write is one ``BEGIN IMMEDIATE`` transaction doing a compare-and-swap
(``UPDATE … WHERE name = ? AND version = ?``), so concurrent writers from any number of
processes serialise on SQLite's write lock and exactly one wins. Versions come from a
database-wide counter bumped in the same transaction, so a version is never reused. The file is
in WAL mode with ``synchronous=FULL``: a committed grant survives a process killed mid-write and
a power cut, so fencing tokens never go backwards.

Blocking calls run in worker threads (``anyio.to_thread``, abandoned on cancellation: a write
whose caller was cancelled has an unknown outcome, as the SPI expects). ``watch`` polls SQLite's
``PRAGMA data_version`` (a cheap counter that moves when another connection commits) every
``watch_interval`` seconds and yields the record when its version changed.

The file is input: another program, an older version or a hand edit may have written it, and
SQLite lets any column hold any type. :func:`_record_from_row` is the one place a row becomes a
record (a row whose version cannot be read raises :class:`~trio_lease.BackendProtocolError`,
one whose content cannot be read comes back with ``unreadable`` set), a file without our tables
is refused with :class:`~trio_lease.LeaseConfigError` before anything is written to it, and
:meth:`SqliteBackend._translate` is the one place SQLite's errors become ours: errors that
retrying cannot fix (a path that cannot be opened, a file that is not a database, a read-only
file) are :class:`~trio_lease.LeaseConfigError` naming the path and the fix, the rest (a lock
held past ``busy_timeout``, an I/O error) :class:`~trio_lease.BackendUnavailable`.

The default path (used by the CLI) is per user: ``$TRIO_LEASE_SQLITE_PATH``, else
``$XDG_STATE_HOME/trio-lease/leases.sqlite3``, else ``~/.local/state/trio-lease/leases.sqlite3``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from .. import _wire
from .._abc import LeaseBackend, LeaseRecord
from .._exceptions import (
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from .._settings import parse_duration
from .._wire import Malformed

__all__ = ["SqliteBackend", "default_path"]

T = TypeVar("T")

_CREATE_TABLES: Final = (
    """CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        lease_duration REAL NOT NULL,
        fencing_token INTEGER NOT NULL,
        acquired_at TEXT,
        renewed_at TEXT,
        version INTEGER NOT NULL
    )""",
    "CREATE TABLE version_counter (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER)",
)
# A missing counter row restarts above every version in use, so no version is issued twice.
_RESTORE_COUNTER: Final = (
    "INSERT OR IGNORE INTO version_counter (id, value) SELECT 1, "
    "coalesce(max(CASE WHEN typeof(version) = 'integer' THEN version END), 0) FROM leases"
)
_HAS_COUNTER: Final = "SELECT 1 FROM version_counter WHERE id = 1"
_LEASE_COLUMNS: Final = (
    "name", "holder", "lease_duration", "fencing_token", "acquired_at", "renewed_at", "version"
)  # fmt: skip
_COLUMNS: Final = ", ".join(_LEASE_COLUMNS)
_MAX_TIME_TEXT: Final = 64  # "2024-01-01T00:00:00.000000+00:00" is 32 characters
_EDITED: Final = "the file was written by another program or edited by hand; fix or delete that row"

# How SQLite's result codes (https://sqlite.org/rescode.html) are classified, by primary code.
# These cannot be fixed by retrying (each raises LeaseConfigError, which ends waits at once); the
# text is the fix. Every other code is transient (BackendUnavailable, see _translate).
_NEEDS_A_FIX: Final = {
    # "unable to open database file": the path is a directory, its directory is missing or not
    # writable, it lies under /proc or /sys, or the -wal/-shm files cannot be created beside it.
    # (SQLite also says this when the process is out of file descriptors: a process limit, so
    # still something to fix, not to wait out.)
    sqlite3.SQLITE_CANTOPEN: "the path must name a database file in a directory this process "
    "can write (SQLite creates -wal and -shm files beside it); check the path and the "
    "permissions of the file and its directory (or the process's open-file limit)",
    # "file is not a database": the file holds something else; a retry reads the same bytes.
    sqlite3.SQLITE_NOTADB: "give the backend a path of its own (it creates the file there), or "
    "restore this file from a backup",
    # "attempt to write a readonly database": the file, its directory or its mount is read-only
    # to this process; that stays so until someone changes it.
    sqlite3.SQLITE_READONLY: "the file or its directory is read-only to this process; leases "
    "need write access to both (SQLite writes -wal and -shm files beside the database)",
    # "access permission denied", "authorization denied": refused the same way every time.
    sqlite3.SQLITE_PERM: "access was denied; give this process read and write access",
    sqlite3.SQLITE_AUTH: "access was denied; give this process read and write access",
    # "database disk image is malformed": the file is damaged and stays damaged.
    sqlite3.SQLITE_CORRUPT: "the file is damaged; restore it from a backup (a new file restarts "
    "fencing tokens, so stop every user of the lease first)",
}
# errno values of a failed mkdir that can pass on their own (space freed, descriptors closed).
_TRANSIENT_ERRNOS: Final = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)


def default_path() -> Path:
    """The per-user database path the CLI and examples use by default."""
    explicit = os.environ.get("TRIO_LEASE_SQLITE_PATH")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "trio-lease" / "leases.sqlite3"


def _decode_text(data: bytes) -> str:
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
    unreadable, since no decision depends on it (DESIGN §4.1).
    """
    try:
        return _time(value, column)
    except Malformed:
        return None


def _iso(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


def _record_from_row(row: Sequence[object], path: Path) -> LeaseRecord:
    """The one place a row (``_COLUMNS``, in order) becomes a record, column by column.

    An unreadable name or version raises :class:`BackendProtocolError` naming the lease and the
    column; unreadable content gives a record with ``unreadable`` set (held by an unknown
    holder: ``holder`` empty, the readable duration or 0.0, the readable token or -1).
    """
    try:
        name = _text(row[0], "name")
    except Malformed as exc:
        raise BackendProtocolError(
            f"SQLite at {path}: a row of table leases has an unreadable name ({exc}); {_EDITED}"
        ) from None
    try:
        version = _wire.integer(row[6], "version", low=1)
    except Malformed as exc:
        raise BackendProtocolError(
            f"SQLite at {path}: lease {name!r} has an unreadable version ({exc}); {_EDITED}"
        ) from None
    problems: list[str] = []

    def read(check: Callable[[object, str], T], column: int) -> T | None:
        try:
            return check(row[column], _LEASE_COLUMNS[column])
        except Malformed as exc:
            problems.append(str(exc))
            return None

    holder = read(_text, 1)
    duration = read(_wire.number, 2)  # finite, in [0, 2**31 - 1]
    token = read(_wire.integer, 3)  # an integer in [0, 2**63 - 1]: not a real, not text
    acquired = _informational_time(row[4], _LEASE_COLUMNS[4])
    renewed = _informational_time(row[5], _LEASE_COLUMNS[5])
    return LeaseRecord(
        name=name,
        holder=holder if holder is not None and not problems else "",
        lease_duration=duration if duration is not None else 0.0,
        fencing_token=token if token is not None else -1,
        acquired_at=acquired,
        renewed_at=renewed,
        version=str(version),
        unreadable="; ".join(problems),
    )


def _lease_name(name: object) -> str:
    try:
        return _text(name, "name")
    except Malformed as exc:
        raise LeaseConfigError(f"a lease name must be text: {exc}") from None


def _issued(version: str) -> int | None:
    """The counter value ``version`` names, or None if this backend never issues it."""
    if not (version.isascii() and version.isdigit() and len(version) <= 19):
        return None  # beyond int64 (SQLite could not even bind it), a sign, a dot, spaces
    number = int(version)
    return number if 0 < number <= _wire.INT64_MAX and str(number) == version else None


def _rollback(conn: sqlite3.Connection) -> None:
    # After some errors (an I/O error in COMMIT) SQLite has rolled back already; a failing
    # ROLLBACK must not replace the error that explains what happened.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


class SqliteBackend(LeaseBackend):
    """Leases in one SQLite file (default: :func:`default_path`); see the module docstring."""

    supports_watch = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = 5.0,
        watch_interval: float = 0.05,
    ) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        if "\0" in str(self.path):
            raise LeaseConfigError("the SQLite database path contains a NUL character")
        if not (0 < busy_timeout < math.inf and 0 < watch_interval < math.inf):
            raise LeaseConfigError("busy_timeout and watch_interval must be positive seconds")
        self.busy_timeout = busy_timeout
        self.watch_interval = watch_interval
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SqliteBackend:
        """Build from a provider section: keys ``path``, ``busy-timeout``, ``watch-interval``."""
        known = {"path", "busy-timeout", "watch-interval"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise LeaseConfigError(
                f"unknown sqlite backend key(s) {', '.join(unknown)}; known: {sorted(known)}"
            )
        try:
            return cls(
                config.get("path"),
                busy_timeout=parse_duration(config.get("busy-timeout", 5.0)),
                watch_interval=parse_duration(config.get("watch-interval", 0.05)),
            )
        except ValueError as exc:
            raise LeaseConfigError(f"sqlite backend: {exc}") from None

    def __repr__(self) -> str:
        return f"SqliteBackend({str(self.path)!r})"

    @property
    def store_key(self) -> Hashable:
        try:
            return ("sqlite", str(self.path.resolve()))
        except (OSError, RuntimeError):  # a symlink loop; the connection will report it
            return ("sqlite", os.path.abspath(self.path))

    async def __aenter__(self) -> SqliteBackend:
        return self

    # -- connection handling (worker threads) ---------------------------------------------------

    def _translate(self, exc: sqlite3.Error) -> LeaseError:
        """The one place an ``sqlite3`` error becomes ours; see ``_NEEDS_A_FIX`` for the codes."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        said = f"SQLite at {self.path}: {exc}"  # SQLite's own fixed texts, never file content
        if primary in _NEEDS_A_FIX:
            return LeaseConfigError(f"{said}; {_NEEDS_A_FIX[primary]}")
        if primary == sqlite3.SQLITE_ERROR and str(exc).startswith(
            ("no such table", "no such column")
        ):  # a program changed our tables while we were connected
            return LeaseConfigError(f"{said}; {self.path} is no longer a trio_lease database")
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            # "database is locked": another connection held the write lock for longer than
            # busy_timeout; it ends when that transaction does, so this is worth retrying.
            return BackendUnavailable(
                f"{said} (for longer than busy_timeout, {self.busy_timeout:g} s): another "
                "connection holds a long write transaction; the outcome of a write is unknown"
            )
        # "disk I/O error" (SQLITE_IOERR), "database or disk is full" and the rest: a read,
        # write or fsync failed in a way that can pass (a device hiccup, a file-size limit or a
        # quota, space freed), and a write whose commit failed may or may not be on disk, which
        # is exactly an unknown outcome: the core re-reads, waits retry with backoff.
        return BackendUnavailable(f"{said}; the outcome of a write is unknown")

    def _prepare_directory(self) -> None:
        path, parent = self.path, self.path.parent
        where = f"the directory {parent} for the SQLite lease database {path}"
        if os.path.isdir(path):
            raise LeaseConfigError(
                f"{path} is a directory; the SQLite backend needs the path of a database "
                f"file, such as {path / 'leases.sqlite3'}"
            )
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise LeaseConfigError(
                f"cannot create {where}: part of that path is a file, not a directory; choose "
                "another path"
            ) from None
        except OSError as exc:
            if exc.errno in _TRANSIENT_ERRNOS:
                raise BackendUnavailable(f"cannot create {where}: {exc.strerror}") from None
            raise LeaseConfigError(
                f"cannot create {where}: {exc.strerror}; create it with write access for this "
                "process, or choose another path"
            ) from None

    def _connect(self) -> sqlite3.Connection:
        self._prepare_directory()
        target = os.fspath(self.path)
        conn = sqlite3.connect(
            "./:memory:" if target == ":memory:" else target,  # a file, never a memory database
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.text_factory = _decode_text
            ours = self._has_our_tables(conn)  # before anything, even the journal mode, changes
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            if not ours or conn.execute(_HAS_COUNTER).fetchone() is None:
                conn.execute("BEGIN IMMEDIATE")  # checked again under the lock: racing creators
                try:
                    if not self._has_our_tables(conn):
                        for statement in _CREATE_TABLES:
                            conn.execute(statement)
                    conn.execute(_RESTORE_COUNTER)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _has_our_tables(self, conn: sqlite3.Connection) -> bool:
        """True for our tables, False for a file without tables; else LeaseConfigError."""
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = {row[0] for row in rows if not str(row[0]).startswith("sqlite_")}
        if not tables:
            return False
        problem = ""
        for table, needed in (("leases", _LEASE_COLUMNS), ("version_counter", ("id", "value"))):
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            missing = [column for column in needed if column not in {row[1] for row in info}]
            if table not in tables:
                problem = f"it has tables, but no table {table}"
            elif missing:
                problem = f"table {table} has no column {', '.join(missing)}"
            elif table == "leases" and [row[1] for row in info if row[5]] != ["name"]:
                problem = "the primary key of table leases is not its name"
            if problem:
                raise LeaseConfigError(
                    f"{self.path} is not a trio_lease database ({problem}); it belongs to "
                    "another program or was changed by hand: give the backend a file of its own"
                )
        return True

    def _with_conn(self, action: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"the SQLite backend for {self.path} is closed")
            try:
                if self._conn is None:
                    self._conn = self._connect()
                return action(self._conn)
            except sqlite3.Error as exc:
                error = self._translate(exc)
                if isinstance(error, LeaseConfigError) and self._conn is not None:
                    # Reopen next time: the fix (a restored file, new permissions) then shows.
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.close()
                    self._conn = None
                raise error from exc

    def _guarded(self, action: Callable[[], T]) -> T:
        """Run ``action`` (in a worker thread) with its ``sqlite3`` errors translated."""
        try:
            return action()
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    async def _run(self, action: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._with_conn, action, abandon_on_cancel=True)

    # -- the SPI --------------------------------------------------------------------------------

    def _select(self, conn: sqlite3.Connection, name: str) -> LeaseRecord | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM leases WHERE name = ?", (name,)).fetchone()
        return None if row is None else _record_from_row(row, self.path)

    async def get(self, name: str) -> LeaseRecord | None:
        name = _lease_name(name)
        return await self._run(lambda conn: self._select(conn, name))

    async def names(self) -> list[str]:
        """Names of every lease in the file (for ``trio-lease status``); every row is checked."""

        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM leases ORDER BY name")
            return [_record_from_row(row, self.path).name for row in rows]

        return await self._run(read)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        values = self._storable(record)
        return await self._run(lambda conn: self._write(conn, values, None))

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        values = self._storable(record)
        return await self._run(lambda conn: self._write(conn, values, expected_version))

    def _storable(self, record: LeaseRecord) -> tuple[object, ...]:
        """The row to write; LeaseConfigError if it would not read back as a whole record."""
        values = (
            _lease_name(record.name),
            record.holder,
            record.lease_duration,
            record.fencing_token,
            _iso(record.acquired_at),
            _iso(record.renewed_at),
        )
        problem = _record_from_row((*values, 1), self.path).unreadable
        if problem:
            raise LeaseConfigError(f"cannot store lease {record.name!r}: {problem}")
        return values

    def _write(
        self, conn: sqlite3.Connection, values: tuple[object, ...], expected: str | None
    ) -> LeaseRecord:
        name = values[0]
        expected_number = None if expected is None else _issued(expected)
        if expected is not None and expected_number is None:
            raise ConflictError(f"version {expected!r} was never issued")
        conn.execute("BEGIN IMMEDIATE")
        try:
            counter = conn.execute("SELECT value FROM version_counter WHERE id = 1").fetchone()
            try:
                version = 1 + _wire.integer(
                    None if counter is None else counter[0],
                    "version_counter.value",
                    high=_wire.INT64_MAX - 1,
                )
            except Malformed as exc:
                raise BackendProtocolError(
                    f"SQLite at {self.path}: the version counter is missing or unreadable "
                    f"({exc}); the file was changed by another program or by hand"
                ) from None
            conn.execute("UPDATE version_counter SET value = ? WHERE id = 1", (version,))
            if expected is None:
                try:
                    conn.execute(
                        f"INSERT INTO leases ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (*values, version),
                    )
                except sqlite3.IntegrityError:
                    raise ConflictError(f"lease {name!r} already exists") from None
            else:
                cursor = conn.execute(
                    "UPDATE leases SET holder = ?, lease_duration = ?, fencing_token = ?, "
                    "acquired_at = ?, renewed_at = ?, version = ? WHERE name = ? AND version = ?",
                    (*values[1:], version, name, expected_number),
                )
                if cursor.rowcount != 1:
                    raise ConflictError(f"lease {name!r} is missing or not at version {expected}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return _record_from_row((*values, version), self.path)

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:
        """Yield the current record, then the record whenever its version changes."""
        name = _lease_name(name)
        conn = await anyio.to_thread.run_sync(self._guarded, self._connect)
        try:

            def poll(last: tuple[int, str | None] | None) -> tuple[int, LeaseRecord | None]:
                data_version = conn.execute("PRAGMA data_version").fetchone()[0]
                if last is not None and last[0] == data_version:
                    return data_version, None
                return data_version, self._select(conn, name)

            seen: tuple[int, str | None] | None = None
            while True:
                data_version, record = await anyio.to_thread.run_sync(
                    self._guarded, functools.partial(poll, seen)
                )
                if seen is None or data_version != seen[0]:
                    version = record.version if record is not None else None
                    if seen is None or version != seen[1]:
                        yield record
                    seen = (data_version, version)
                await anyio.sleep(self.watch_interval)
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close)
