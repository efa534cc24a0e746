"""SqliteBackend: the SPI on one SQLite connection, used from worker threads.

The connection is opened on first use (:class:`._identity.DatabaseFile`) and shared by every
call under a lock; an error that needs a fix closes it, so the next call reopens the file and
sees the fix (new permissions). Before each call one ``stat`` checks that the path still names
the file the connection has open; when it does not (the file was replaced or removed), the
connection is closed and the path opened again, which refuses any file but the one this backend
object first opened. Each write is one ``BEGIN IMMEDIATE`` transaction that bumps the version
counter and compares the version (:meth:`SqliteBackend._write`); the updates of one event-loop
turn share one call and one such transaction, each row compared and written on its own version
(:meth:`SqliteBackend.update`, :class:`_Batch`: a worker thread claims a batch before writing
it, so a sender cancelled before its thread started never leaves the batch unsent); a counter
below the version
compared against, or below the row's, means the file was changed by hand, and nothing is
written. Every call that reads the counter (a write, and ``get`` in the same statement as the
row) holds it against the highest value this backend object saw: a lower one means the file went
back in time (restored in place from an older copy) and raises ``LeaseConfigError`` from then on
(:meth:`._identity.DatabaseFile.check_counter`). A watch has a connection of its own and polls
``PRAGMA data_version``. See the
package docstring for the design; rows and errors are translated in :mod:`._rows` and
:mod:`._errors`; the shared watch (one poller for every watched lease) is :mod:`._feed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from ... import _wire
from ..._abc import LeaseBackend, LeaseRecord
from ..._backoff import Backoff
from ..._exceptions import (
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
    own_copy,
)
from ..._paths import user_path
from ..._settings import parse_duration
from ..._wire import Malformed
from ...abc import Changes, Emit
from ._errors import translate
from ._feed import SqliteFeed
from ._file import check_folder, default_path, rollback
from ._identity import DatabaseFile, NoDatabase
from ._rows import COLUMNS, issued, lease_name, record_from_row, storable, storable_and_read

__all__ = ["SqliteBackend"]

T = TypeVar("T")

# The counter and the row's version, in the write's transaction (None for a missing one).
_COUNTER_AND_ROW = (
    "SELECT (SELECT value FROM version_counter WHERE id = 1), "
    "(SELECT version FROM leases WHERE name = ?)"
)
# The counter and the row (NULLs for a missing one) in one statement, so in one snapshot: one
# row even when the lease has none, for about 0.2 µs more than the row alone.
_COUNTER_THEN_ROW = (
    "SELECT (SELECT value FROM version_counter WHERE id = 1), "
    + ", ".join(f"leases.{column}" for column in COLUMNS.split(", "))
    + " FROM (SELECT ? AS wanted) LEFT JOIN leases ON leases.name = wanted"
)
_COUNTER = "SELECT value FROM version_counter WHERE id = 1"


# An update's storable values, the record they read back as (at version "1"), and the
# version expected.
Item = tuple[tuple[object, ...], LeaseRecord, str]


class _Batch:
    """The updates of one event-loop turn: one worker-thread call and one transaction.

    ``items`` are the updates (None: its caller left before a worker thread claimed the batch).
    A driver (one waiting caller at a time, ``driving``) closes the batch to new items
    (``open``) and hands it to a worker thread under a fresh ``ticket``; the thread *claims* it
    (``claimed``, under ``lock``) only if that ticket is still current, so a driver cancelled
    before its thread started takes the ticket back and the batch waits for the next driver,
    never for a thread that will not come. Once claimed, ``items`` no longer change; the thread
    sets ``results`` (one per item: the record written or the item's own error) or ``error``
    (the whole call failed), then ``done``.
    """

    __slots__ = (
        "claimed",
        "done",
        "driving",
        "error",
        "items",
        "lock",
        "open",
        "results",
        "ticket",
        "wake",
    )

    def __init__(self) -> None:
        self.items: list[Item | None] = []
        self.results: list[LeaseRecord | LeaseError | None] = []
        self.error: LeaseError | None = None
        self.open = True  # updates of this turn still join
        self.driving = False  # a caller waits for the worker thread of this batch
        self.ticket: object | None = None  # the send a worker thread may claim (None: unsent)
        self.claimed = False  # a worker thread runs (or ran) the batch: its items are final
        self.lock = threading.Lock()  # ``ticket``, ``claimed`` and ``items`` between threads
        self.wake = anyio.Event()  # set when the driver stops driving (done, or cancelled)
        self.done = threading.Event()  # set by the worker thread once the batch ran




class SqliteBackend(LeaseBackend):
    """Leases in one SQLite file (default: :func:`default_path`); see the package docstring.

    A ``path`` given must be in an existing folder (:class:`LeaseConfigError` at once if not);
    only the default path's folder is created. ``create=False`` opens only an existing database
    and never creates a folder, file or table: reads of a missing one find no leases, writes and
    watches raise :class:`LeaseConfigError`.
    """

    supports_watch: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        busy_timeout: float = 5.0,
        watch_interval: float = 0.05,
    ) -> None:
        #: The database file.
        self.path: Path = (
            user_path(path, "the SQLite backend's path") if path is not None else default_path()
        )
        if "\0" in str(self.path):
            raise LeaseConfigError("the SQLite database path contains a NUL character")
        if not isinstance(create, bool):
            raise LeaseConfigError(f"create must be True or False, got {create!r}")
        if path is not None:
            check_folder(self.path, "the SQLite backend's path")
        if not (0 < busy_timeout < math.inf and 0 < watch_interval < math.inf):
            raise LeaseConfigError("busy_timeout and watch_interval must be positive seconds")
        #: Whether this object may create the database (file and tables; for the default path,
        #: its folder too). With False it only opens an existing one: reads of a missing
        #: database find no leases, writes and watches raise LeaseConfigError, nothing is ever
        #: created.
        self.may_create: bool = create
        #: Seconds a write waits for another connection's write lock (SQLite's busy timeout).
        self.busy_timeout: float = busy_timeout
        #: Seconds between two polls of a watch.
        self.watch_interval: float = watch_interval
        self._file = DatabaseFile(
            self.path, busy_timeout, create=create, make_folder=path is None
        )
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._feed: SqliteFeed | None = None
        self._pending: _Batch | None = None  # the batch the updates of this turn join

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build from a provider section: keys ``path``, ``create``, ``busy-timeout``,
        ``watch-interval``."""
        known = {"path", "create", "busy-timeout", "watch-interval"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise LeaseConfigError(
                f"unknown sqlite backend key(s) {', '.join(unknown)}; known: {sorted(known)}"
            )
        try:
            return cls(
                config.get("path"),
                create=config.get("create", True),
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

    async def __aenter__(self) -> Self:
        return self

    # -- connection handling (worker threads) ---------------------------------------------------

    def _translate(self, exc: sqlite3.Error, *, write: bool = False) -> LeaseError:
        return translate(exc, self.path, self.busy_timeout, write=write)

    def _connect(self) -> sqlite3.Connection:
        return self._file.open()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _with_conn(self, action: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        """Run ``action`` on the connection (opened first if need be), errors translated;
        ``write``: the action writes (its error then says the outcome is unknown)."""
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"the SQLite backend for {self.path} is closed")
            try:
                if self._conn is not None and not self._file.current():
                    self._drop()  # the path names another file or none: the reopen decides
                if self._conn is None:
                    self._conn = self._connect()
                return action(self._conn)
            except sqlite3.Error as exc:
                error = self._translate(exc, write=write)
                if isinstance(error, LeaseConfigError):
                    self._drop()  # reopen next time: the fix (new permissions) then shows
                raise error from exc

    def _guarded(self, action: Callable[[], T]) -> T:
        """Run ``action`` (in a worker thread) with its ``sqlite3`` errors translated."""
        try:
            return action()
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    async def _run(self, action: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        return await anyio.to_thread.run_sync(
            self._with_conn, action, write, abandon_on_cancel=True
        )

    # -- the SPI --------------------------------------------------------------------------------

    def _select(self, conn: sqlite3.Connection, name: str) -> LeaseRecord | None:
        """The record, after checking the counter read with it (the file did not go back)."""
        seen = self._file.counter_seen  # before the statement's snapshot begins
        counter, *row = conn.execute(_COUNTER_THEN_ROW, (name,)).fetchone()
        self._file.check_counter(counter, seen)
        return None if row[0] is None else record_from_row(row, self.path)

    async def get(self, name: str) -> LeaseRecord | None:
        name = lease_name(name)
        try:
            return await self._run(lambda conn: self._select(conn, name))
        except NoDatabase:  # create=False and no database yet: no lease, nothing created
            return None

    async def names(self) -> list[str]:
        """Names of every lease in the file (for ``trio-lease status``); every row is checked."""

        def read(conn: sqlite3.Connection) -> list[str]:
            seen = self._file.counter_seen
            conn.execute("BEGIN")  # one snapshot: the counter and the rows agree
            try:
                (counter,) = conn.execute(_COUNTER).fetchone() or (None,)
                self._file.check_counter(counter, seen)
                rows = conn.execute(f"SELECT {COLUMNS} FROM leases ORDER BY name").fetchall()
            finally:
                rollback(conn)
            return [record_from_row(row, self.path).name for row in rows]

        try:
            return await self._run(read)
        except NoDatabase:  # create=False and no database yet: no lease, nothing created
            return []

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        values = storable(record, self.path)
        return await self._run(lambda conn: self._write(conn, values, None), write=True)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        """Compare-and-write one row, in the batch of the updates that arrive in this tick.

        The updates called in one turn of the event loop (renewals fall due on one grid,
        ``_algorithm.next_renewal``) share one worker-thread call and one transaction
        (:class:`_Batch`); each row is compared and written on its own version, and each caller
        gets its own record or its own ``ConflictError``.
        """
        values, read = storable_and_read(record, self.path)
        if issued(expected_version) is None:
            raise ConflictError(f"version {expected_version!r} was never issued")
        batch = self._pending
        if batch is None or not batch.open:
            batch = self._pending = _Batch()
        index = len(batch.items)
        batch.items.append((values, read, expected_version))
        try:
            written = await self._wait(batch, index)
        except BaseException:
            with batch.lock:
                if not batch.claimed:  # no worker thread took it: this update is not written
                    batch.items[index] = None
            raise
        if self._feed is not None and (not written.holder or written.handover_to):
            self._feed.poke()  # news for this process's waiters or holder: poll now
        return written

    async def _wait(self, batch: _Batch, index: int) -> LeaseRecord:
        """This caller's result once ``batch`` ran; the first waiter with nobody driving drives.

        The driver sends the batch after one checkpoint (so the updates of this turn join it)
        and waits for the worker thread, abandoning it when cancelled (like every call here).
        A driver cancelled before a thread claimed the batch takes its send back, and the next
        waiter sends it again; one cancelled after the claim leaves the thread to finish, and
        the other waiters watch ``done`` from the event loop (:meth:`_until_done`). No thread
        ever waits for another, so a caller's cancellation never changes another's result and
        never leaves a thread blocked.
        """
        while not batch.done.is_set():
            if batch.driving:
                await batch.wake.wait()
            elif batch.claimed:
                await self._until_done(batch)
            else:
                await self._drive(batch)
        if batch.error is not None:
            raise own_copy(batch.error)
        if index >= len(batch.results):  # the worker thread ended by a BaseException
            raise BackendUnavailable(f"SQLite at {self.path}: the batched write did not finish")
        result = batch.results[index]
        if isinstance(result, LeaseError):
            raise result
        assert result is not None
        return result

    async def _drive(self, batch: _Batch) -> None:
        """Send ``batch`` to a worker thread and wait for it (one checkpoint first if open)."""
        batch.driving = True
        try:
            if batch.open:
                await anyio.lowlevel.checkpoint()  # the updates of this turn join
                batch.open = False
                if self._pending is batch:
                    self._pending = None
            ticket = batch.ticket = object()
            try:
                await anyio.to_thread.run_sync(self._send, batch, ticket, abandon_on_cancel=True)
                if self._feed is not None:
                    self._feed.wake()  # the feed's poll rode this thread: publish it now
            except BaseException:
                with batch.lock:
                    if not batch.claimed:
                        batch.ticket = None  # its thread never started: the next waiter sends
                raise
        finally:
            batch.driving = False
            wake, batch.wake = batch.wake, anyio.Event()
            wake.set()

    @staticmethod
    async def _until_done(batch: _Batch) -> None:
        """Wait on the event loop (no thread) for a claimed batch whose driver left.

        The claiming thread always sets ``done`` when it ends (:meth:`_send`), after at most
        the write's own time (``busy_timeout`` for the lock, then the rows); the pause between
        looks doubles from 1 ms to 50 ms.
        """
        backoff = Backoff(0.001, 0.05)
        while not batch.done.is_set():
            await backoff.sleep()

    def _send(self, batch: _Batch, ticket: object) -> None:
        """(worker thread) Claim ``batch`` if ``ticket`` is still its send, run its writes, and
        mark it done whatever happened; a send taken back does nothing."""
        with batch.lock:
            if batch.claimed or batch.ticket is not ticket:
                return
            batch.claimed = True
        try:
            batch.results = self._with_conn(
                lambda conn: self._write_batch(conn, batch.items), write=True
            )
        except LeaseError as exc:
            batch.error = exc
        except Exception as exc:  # not a sqlite3.Error (those are translated): still typed
            batch.error = BackendUnavailable(
                f"SQLite at {self.path}: the batched write failed ({type(exc).__name__})"
            )
        finally:
            batch.done.set()
        if self._feed is not None:
            self._feed.ride()  # the shared watch polls in this thread, not on one of its own

    def _write_batch(
        self, conn: sqlite3.Connection, items: list[Item | None]
    ) -> list[LeaseRecord | LeaseError | None]:
        """Every item in one transaction, each row compared on its own version.

        An item whose row is not at its version (``ConflictError``) or whose version the
        counter is not above (``BackendProtocolError``) writes nothing and the others go on; a
        failure of the transaction itself (the file, the counter going back) raises, and no
        item is written.
        """
        results: list[LeaseRecord | LeaseError | None] = [None] * len(items)
        if not any(items):
            return results
        written: list[tuple[int, tuple[object, ...], LeaseRecord, int]] = []
        seen = self._file.counter_seen  # before the transaction's snapshot begins
        conn.execute("BEGIN IMMEDIATE")
        try:
            for index, item in enumerate(items):
                if item is not None:
                    values, read, expected = item
                    try:
                        # Only a counter no write of this transaction moved is noted: the
                        # file's other readers must not be held against an uncommitted one.
                        version = self._write_row(conn, values, expected, seen, not written)
                        written.append((index, values, read, version))
                    except (ConflictError, BackendProtocolError) as exc:
                        results[index] = exc  # nothing of this row was written
            for index, _, read, version in written:
                # The row reads back as ``read`` at its version (``storable_and_read``).
                results[index] = dataclasses.replace(read, version=str(version))
            if self._feed is not None:
                # Before the commit: a poll in another thread may read the rows as soon as
                # they are committed, and takes these records for rows equal in every column
                # (each record is what its row decodes to, so rows of a write rolled back
                # match nothing, or decode the same).
                self._feed.wrote(
                    ((*values, version), results[index]) for index, values, _, version in written
                )
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        if written:
            self._file.check_counter(written[-1][3], seen)  # committed: later reads find it
        return results

    def _write(
        self, conn: sqlite3.Connection, values: tuple[object, ...], expected: str | None
    ) -> LeaseRecord:
        if expected is not None and issued(expected) is None:
            raise ConflictError(f"version {expected!r} was never issued")
        seen = self._file.counter_seen  # before the transaction's snapshot begins
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._write_row(conn, values, expected, seen)
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        self._file.check_counter(version, seen)  # committed: later reads find it or more
        return record_from_row((*values, version), self.path)

    def _write_row(
        self,
        conn: sqlite3.Connection,
        values: tuple[object, ...],
        expected: str | None,
        seen: int,
        check: bool = True,
    ) -> int:
        """Write one row in the open transaction (a create when ``expected`` is None); its
        version. A conflict or a counter not above the row's raises before anything is written.
        ``check``: hold the counter read against ``seen`` (false once this transaction moved it).
        """
        name = values[0]
        expected_number = None if expected is None else issued(expected)
        counter, stored = conn.execute(_COUNTER_AND_ROW, (name,)).fetchone()
        if check:
            self._file.check_counter(counter, seen)
        version = self._next_version(counter, max(expected_number or 0, _number(stored)), name)
        if expected is None:
            if stored is not None:
                raise ConflictError(f"lease {name!r} already exists")
        elif type(stored) is not int or stored != expected_number:
            raise ConflictError(f"lease {name!r} is missing or not at version {expected}")
        conn.execute("UPDATE version_counter SET value = ? WHERE id = 1", (version,))
        if expected is None:
            _insert_row(conn, values, version)
        else:
            _update_row(conn, values, version, expected, expected_number)
        return version

    def _next_version(self, counter: object, highest: int, name: object) -> int:
        """The version the next write takes: one above the counter, which must be above
        ``highest``, the row's version (else versions would be issued again: ABA)."""
        try:
            version = 1 + _wire.integer(counter, "version_counter.value", high=_wire.INT64_MAX - 1)
        except Malformed as exc:
            raise BackendProtocolError(
                f"SQLite at {self.path}: the version counter is missing or unreadable "
                f"({exc}); the file was changed by another program or by hand"
            ) from None
        if version <= highest:
            # Versions would be issued again (ABA): a stale compare-and-swap could match.
            raise BackendProtocolError(
                f"SQLite at {self.path}: the version counter is below the version of lease "
                f"{name!r}; the file was changed by another program or by hand (a counter "
                "lowered, or a table restored from an older copy); nothing was written: "
                "restore the whole file from one backup, or stop its users and start anew"
            )
        return version

    def watch_feed(self) -> SqliteFeed:
        """One poller (one connection) for every lease this backend object's process follows."""
        self._feed = SqliteFeed(
            self._file,
            watch_interval=self.watch_interval,
            connect=lambda: self._connect(),
            translate=self._translate,
        )
        return self._feed

    def watch(self, name: str) -> Changes[LeaseRecord | None]:
        """The current record, then the record whenever its version changes."""
        follow = functools.partial(self._follow, name)
        return Changes(follow, what=f"SqliteBackend.watch({name!r})")

    async def _follow(self, name: str, emit: Emit[LeaseRecord | None]) -> None:
        name = lease_name(name)
        conns = [await anyio.to_thread.run_sync(self._guarded, self._connect)]

        def poll(last: int | None) -> tuple[int, LeaseRecord | None] | None:
            """(data_version, the record) if the file may have changed since ``last``."""
            if not self._file.current():  # the path names another file or none: reopen
                with contextlib.suppress(sqlite3.Error):
                    conns.pop().close()
                conns.append(self._connect())
                last = None  # a new connection's data_version is not comparable
            data_version: int = conns[0].execute("PRAGMA data_version").fetchone()[0]
            if last == data_version:
                return None
            return data_version, self._select(conns[0], name)

        try:
            data_version: int | None = None
            version: str | None = None
            while True:
                polled = await anyio.to_thread.run_sync(
                    self._guarded, functools.partial(poll, data_version)
                )
                if polled is not None:
                    first = data_version is None
                    data_version, record = polled
                    if first or (record.version if record is not None else None) != version:
                        version = record.version if record is not None else None
                        await emit(record)
                await anyio.sleep(self.watch_interval)
        finally:  # no await: closing a connection is quick and local
            with contextlib.suppress(sqlite3.Error):
                for conn in conns:
                    conn.close()

    async def aclose(self) -> None:
        def close() -> None:
            if self._feed is not None:
                self._feed.close()
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close)


def _insert_row(conn: sqlite3.Connection, values: tuple[object, ...], version: int) -> None:
    """A create's row, in the open transaction (a row of the name there: a conflict)."""
    try:
        conn.execute(
            f"INSERT INTO leases ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*values, version),
        )
    except sqlite3.IntegrityError:
        raise ConflictError(f"lease {values[0]!r} already exists") from None


def _update_row(
    conn: sqlite3.Connection,
    values: tuple[object, ...],
    version: int,
    expected: str,
    expected_number: int | None,
) -> None:
    """An update of the row at version ``expected``, in the open transaction, which has
    checked that version: a row not matched means the file misbehaves."""
    name = values[0]
    cursor = conn.execute(
        "UPDATE leases SET holder = ?, lease_duration = ?, fencing_token = ?, "
        "acquired_at = ?, renewed_at = ?, handover_to = ?, version = ? "
        "WHERE name = ? AND version = ?",
        (*values[1:], version, name, expected_number),
    )
    if cursor.rowcount != 1:
        raise sqlite3.DatabaseError(
            f"lease {name!r} was at version {expected} and its update matched no row"
        )


def _number(stored: object) -> int:
    """A stored version as a number (0 for none or one that is no integer)."""
    return stored if type(stored) is int else 0
