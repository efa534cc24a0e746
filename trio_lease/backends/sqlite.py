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

The default path (used by the CLI) is per user: ``$TRIO_LEASE_SQLITE_PATH``, else
``$XDG_STATE_HOME/trio-lease/leases.sqlite3``, else ``~/.local/state/trio-lease/leases.sqlite3``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from .._abc import LeaseBackend, LeaseRecord
from .._exceptions import BackendUnavailable, ConflictError, LeaseConfigError
from .._settings import parse_duration

__all__ = ["SqliteBackend", "default_path"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    lease_duration REAL NOT NULL,
    fencing_token INTEGER NOT NULL,
    acquired_at TEXT,
    renewed_at TEXT,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS version_counter (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER);
INSERT OR IGNORE INTO version_counter (id, value) VALUES (1, 0);
"""
_COLUMNS = "name, holder, lease_duration, fencing_token, acquired_at, renewed_at, version"


def default_path() -> Path:
    """The per-user database path the CLI and examples use by default."""
    explicit = os.environ.get("TRIO_LEASE_SQLITE_PATH")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "trio-lease" / "leases.sqlite3"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _from_iso(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _row_to_record(row: tuple[Any, ...] | None) -> LeaseRecord | None:
    if row is None:
        return None
    name, holder, duration, token, acquired, renewed, version = row
    return LeaseRecord(
        name=name,
        holder=holder,
        lease_duration=duration,
        fencing_token=token,
        acquired_at=_from_iso(acquired),
        renewed_at=_from_iso(renewed),
        version=str(version),
    )


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
        if busy_timeout <= 0 or watch_interval <= 0:
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
        return ("sqlite", str(self.path.resolve()))

    # -- connection handling (worker threads) ---------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        return conn

    def _with_conn(self, action: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"the SQLite backend for {self.path} is closed")
            if self._conn is None:
                self._conn = self._connect()
            return action(self._conn)

    async def _run(self, action: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(self._with_conn, action, abandon_on_cancel=True)
        except sqlite3.OperationalError as exc:
            # "database is locked" past busy_timeout, I/O errors: transient, outcome unknown.
            raise BackendUnavailable(f"SQLite at {self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise BackendUnavailable(f"SQLite at {self.path}: {exc}") from exc

    # -- the SPI --------------------------------------------------------------------------------

    async def get(self, name: str) -> LeaseRecord | None:
        def read(conn: sqlite3.Connection) -> LeaseRecord | None:
            row = conn.execute(f"SELECT {_COLUMNS} FROM leases WHERE name = ?", (name,)).fetchone()
            return _row_to_record(row)

        return await self._run(read)

    async def names(self) -> list[str]:
        """Names of every lease in the file (for ``trio-lease status``)."""
        return await self._run(
            lambda conn: [row[0] for row in conn.execute("SELECT name FROM leases ORDER BY name")]
        )

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await self._run(lambda conn: self._write(conn, record, None))

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        return await self._run(lambda conn: self._write(conn, record, expected_version))

    @staticmethod
    def _write(conn: sqlite3.Connection, record: LeaseRecord, expected: str | None) -> LeaseRecord:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute(
                "UPDATE version_counter SET value = value + 1 WHERE id = 1 RETURNING value"
            ).fetchone()[0]
            values = (
                record.holder,
                record.lease_duration,
                record.fencing_token,
                _iso(record.acquired_at),
                _iso(record.renewed_at),
                version,
            )
            if expected is None:
                try:
                    conn.execute(
                        f"INSERT INTO leases ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (record.name, *values),
                    )
                except sqlite3.IntegrityError:
                    raise ConflictError(f"lease {record.name!r} already exists") from None
            else:
                try:
                    expected_int = int(expected)
                except ValueError:
                    raise ConflictError(f"version {expected!r} was never issued") from None
                cursor = conn.execute(
                    "UPDATE leases SET holder = ?, lease_duration = ?, fencing_token = ?, "
                    "acquired_at = ?, renewed_at = ?, version = ? WHERE name = ? AND version = ?",
                    (*values, record.name, expected_int),
                )
                if cursor.rowcount != 1:
                    raise ConflictError(
                        f"lease {record.name!r} is missing or not at version {expected}"
                    )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        stored = _row_to_record((record.name, *values))
        assert stored is not None
        return stored

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:
        """Yield the current record, then the record whenever its version changes."""
        conn = await anyio.to_thread.run_sync(self._connect)
        try:

            def poll(last: tuple[int, str | None] | None) -> tuple[int, LeaseRecord | None]:
                data_version = conn.execute("PRAGMA data_version").fetchone()[0]
                if last is not None and last[0] == data_version:
                    return data_version, None
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM leases WHERE name = ?", (name,)
                ).fetchone()
                return data_version, _row_to_record(row)

            seen: tuple[int, str | None] | None = None
            while True:
                data_version, record = await anyio.to_thread.run_sync(poll, seen)
                if seen is None or data_version != seen[0]:
                    version = record.version if record is not None else None
                    if seen is None or version != seen[1]:
                        yield record
                    seen = (data_version, version)
                await anyio.sleep(self.watch_interval)
        finally:
            conn.close()

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close)
