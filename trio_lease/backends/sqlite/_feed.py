"""SqliteFeed: the shared watch of a :class:`~trio_lease.backends.sqlite.SqliteBackend`.

One poller per backend object follows every lease the process watches: one connection of its own
(kept across runs, closed with the backend), one poll per ``watch_interval``, or at once after
this backend object released a lease or asked for a handover (:meth:`SqliteFeed.poke`). A poll
rides the worker thread of a batch of the backend object's updates when one just ran and the
last poll is at least half a ``watch_interval`` old (:meth:`SqliteFeed.ride`; renewals fall due
every R/32, so while leases are held the polls cost no thread hop of their own); the poller
makes a worker-thread call of its own only when no poll ran within ``watch_interval``. The
results of all polls are published in the order the polls ran. Each poll reads
``PRAGMA data_version`` (SQLite's counter that moves when another connection commits to the
file, including this backend object's own writing connection); when it did not move, the poll
does nothing else. When it moved, the poll reads, in
one snapshot, the file's version counter and the rows written since the counter it read last
(every write takes the counter's next value), and counts the table's rows: a count short of the
names the feed saw in the table (at the last poll, and in the rows written since) means a row was
deleted, and then every watched row is read (``SELECT ... WHERE name IN (...)``, :data:`CHUNK`
names per statement) with every name in the table, as on the first poll of a connection. The
feed publishes each lease whose version differs from the one it published last (None for a row
that is gone). So a poll costs the rows that changed, not the rows watched: a holder's renewal
costs the poller one row to compare, and no step of a poll scans the watched names (the
``--full`` run of 2026-11-26 measured 927 µs per renewal at 1,000 leases when every watched row
was read on every change, and counting the watched rows by name costs some 30 µs more per
renewal than counting the table's: tools/benchmarks/README.md, "Design measurements"). A watched
lease the feed has not read yet (newly watched, or the first poll of a new connection, whose
``data_version`` is not comparable with the old one's) is read at the next poll whatever
``data_version`` says.
The delta read takes the rows at the counter read last too (skipping the one the feed published
at that version): an edit that set a row's version to the counter's value keeps it (the one edit
the file's triggers take for ours, :mod:`._file`), and would not be above it.

Each read of the counter is held against the highest one the backend object saw
(:meth:`._identity.DatabaseFile.check_counter`): a lower one means the file went back in time
(rewritten in place from an older copy), and :class:`~trio_lease.LeaseConfigError` ends the run.

The versions published last (:attr:`SqliteFeed.known`) are kept on the feed, so a run the hub
cancelled and started again publishes only what changed meanwhile. A row whose name or version
cannot be read is skipped (the next request on that lease reports it). A failure that may pass
(a locked or unreadable file) closes the connection and opens a new one after a pause that
doubles up to :data:`BACKOFF_MAX`; only :class:`~trio_lease.LeaseConfigError` (a file that
needs a fix, or one removed, emptied or replaced while in use) escapes :meth:`SqliteFeed.run`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread

from ..._abc import LeaseRecord, Publish, Watched, WatchFeed
from ..._backoff import Backoff
from ..._exceptions import BackendProtocolError, BackendUnavailable, LeaseError
from ._identity import DatabaseFile
from ._rows import COLUMNS, LEASE_COLUMNS, record_from_row

__all__ = ["SqliteFeed"]

logger = logging.getLogger("trio_lease")

#: Names per ``SELECT ... WHERE name IN (...)`` (SQLite's oldest limit is 999 parameters).
CHUNK: Final = 500
#: Names whose last write by this backend object a poll may take as written (:meth:`wrote`).
WRITTEN_MAX: Final = 100_000
#: Longest pause (seconds) before a failed poller opens a new connection.
BACKOFF_MAX: Final = 2.0
_VERSION: Final = LEASE_COLUMNS.index("version")

State = LeaseRecord | None


def _storable(name: str) -> bool:
    """False for a name SQLite cannot bind (a lone surrogate): no row can have it."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


class SqliteFeed(WatchFeed):
    """One poller for every watched lease of one backend object; see the module docstring."""

    def __init__(
        self,
        file: DatabaseFile,
        *,
        watch_interval: float,
        connect: Callable[[], sqlite3.Connection],
        translate: Callable[[sqlite3.Error], LeaseError],
    ) -> None:
        #: The database file, and the seconds between two polls.
        self.path: Path = file.path
        self.watch_interval: float = watch_interval
        self._file = file
        self._connect = connect
        self._translate = translate
        #: The version last published per watched lease (None: published as missing).
        self.known: dict[str, str | None] = {}
        #: Polls (each in a worker thread), SELECTs of rows, and connections opened, so far.
        self.polls: int = 0
        #: Polls made in the thread of a batch of updates (:meth:`ride`), so far.
        self.rides: int = 0
        self.selects: int = 0
        self.connections: int = 0
        #: Rows decoded so far, and rows found as this backend object wrote them (not decoded).
        self.rows_read: int = 0
        self.rows_known: int = 0
        # name -> (the row this backend object wrote, its record); see :meth:`wrote`.
        self._written: dict[object, tuple[tuple[object, ...], LeaseRecord]] = {}
        self._data_version: int | None = None
        self._counter: int | None = None  # the file's version counter at the last full poll
        # Every name in the table at the last poll's snapshot (None: not known), for the
        # deletion check of the delta read (:meth:`_changed`).
        self._present: set[object] | None = None
        # The watched names of the run as a set, and the list they were taken from; and the
        # list whose every name was known at a poll (names of a run are not unknown again).
        self._watched: tuple[list[str], set[str]] | None = None
        self._all_known: list[str] | None = None
        # A failed poll waits a poll interval, doubled per failure in a row up to BACKOFF_MAX.
        self._backoff = Backoff(watch_interval, max(watch_interval, BACKOFF_MAX))
        self._poked: anyio.Event | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._names: list[str] | None = None  # what a ride polls (None: no run follows)
        self._seq = 0  # polls so far (under ``_lock``): their results are published in order
        self._ridden: collections.deque[tuple[int, list[tuple[str, State]]]] = (
            collections.deque()
        )  # rides' results, not published yet
        self._clock: Callable[[], float] = time.monotonic  # seconds, for the rides' rhythm
        self._last_poll = -math.inf  # self._clock() of the last poll, in any thread
        self._asked = False  # poked: the next turn polls even if a ride was recent

    def __repr__(self) -> str:
        return f"<SqliteFeed of {str(self.path)!r}: {len(self.known)} lease(s) known>"

    async def run(self, watched: Watched, publish: Publish) -> None:
        try:
            while True:
                try:
                    await self._follow(watched, publish)
                except BackendUnavailable as exc:  # a lock, an I/O error: it may pass
                    logger.info(
                        "the SQLite watch of %s failed (%s); polling again", self.path, exc
                    )
                self._names = None  # no rides while the poller waits to try again
                await self._backoff.sleep()
        finally:
            self._names = None

    async def _follow(self, watched: Watched, publish: Publish) -> None:
        """Poll until a poll fails (then the connection is closed) or the run is cancelled.

        A turn polls on its own (one worker-thread call) only when no ride polled within
        ``watch_interval``, when poked, or when a name is watched that the rides do not poll
        yet; it publishes the rides' results and its own in the order the polls ran.
        """
        generation: int | None = None
        names: list[str] = []
        while True:
            moved = generation != watched.generation  # the set of names changed (or a new run)
            if moved:
                generation = watched.generation
                names = self._rewatch(watched)
            own: tuple[int, list[tuple[str, State]]] | None = None
            if moved or self._poll_due():
                self._asked = False
                poll = functools.partial(self._poll, names)
                own = await anyio.to_thread.run_sync(poll)
            self._names = names
            self._publish(own, publish)
            self._backoff.reset()  # polls succeed: no backoff
            self._poked = poked = anyio.Event()
            # A ride that ended meanwhile is published at once.
            wait = 0.0 if self._ridden else self._last_poll + self.watch_interval - self._clock()
            with anyio.move_on_after(max(wait, 0.0)):
                await poked.wait()
            self._poked = None

    def _rewatch(self, watched: Watched) -> list[str]:
        """Forget the names no longer watched; the watched names a row can have."""
        for name in [n for n in self.known if n not in watched]:
            del self.known[name]
        return [n for n in watched if _storable(n)]

    def _poll_due(self) -> bool:
        """Whether the run polls on its own now: poked, no rides yet, or none for a while."""
        return (
            self._asked
            or self._names is None
            or self._clock() - self._last_poll >= self.watch_interval
        )

    def _publish(self, own: tuple[int, list[tuple[str, State]]] | None, publish: Publish) -> None:
        """Publish, in the order polled, every state that differs from the one last known."""
        for states in self._in_order(own):
            for name, state in states:
                version = state.version if state is not None else None
                if name not in self.known or self.known[name] != version:
                    self.known[name] = version
                    publish(name, state)

    def _in_order(
        self, own: tuple[int, list[tuple[str, State]]] | None
    ) -> list[list[tuple[str, State]]]:
        """The results of the rides not published yet and of ``own``, in the order polled."""
        polls = []
        while self._ridden:
            polls.append(self._ridden.popleft())
        if own is not None:
            polls.append(own)
        polls.sort(key=lambda poll: poll[0])
        return [states for _, states in polls]

    def poke(self) -> None:
        """Poll now: this backend object released a lease or asked for a handover (a waiter or
        holder of this process should not wait for the next poll)."""
        self._asked = True
        if self._poked is not None:
            self._poked.set()

    def wake(self) -> None:
        """Publish now what a ride polled (on the event loop, after a batch's thread ended)."""
        if self._ridden and self._poked is not None:
            self._poked.set()

    def ride(self) -> None:
        """(worker thread) Poll in the thread of a batch of updates that just ran, instead of
        on a call of its own; at most twice per ``watch_interval``, only while a run follows
        the leases. A failed ride does nothing: the poller's own next poll meets the failure.
        """
        names = self._names
        if names is None or self._clock() - self._last_poll < self.watch_interval / 2:
            return
        try:
            self._poll(names, ridden=True)
        except Exception as exc:  # the connection is closed: the next own poll reopens it
            logger.debug("a poll of the SQLite watch of %s in a write's thread failed: %s",
                         self.path, exc)

    def close(self) -> None:
        """(worker thread) Close the poller's connection for good (the backend is closed)."""
        with self._lock:
            self._closed = True
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _poll(
        self, names: list[str], ridden: bool = False
    ) -> tuple[int, list[tuple[str, State]]]:
        """(worker thread) The states to compare, every watched one if the file changed, and
        the poll's place in the order of polls; a ride's are kept for the run to publish.

        The connection is kept between polls and runs; a poll that fails closes it, so the
        next one opens a new connection (on which ``data_version`` starts afresh). Each poll
        first checks (one ``stat``) that the path still names the connection's file; when it
        does not, the connection is closed and the path opened again, which refuses any file
        but the backend object's own (:class:`._identity.DatabaseFile`).
        """
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"the SQLite backend for {self.path} is closed")
            try:
                states = self._poll_on(names)
            except sqlite3.Error as exc:
                self._drop()
                raise self._translate(exc) from exc
            except BaseException:
                self._drop()
                raise
            self._seq += 1
            self._last_poll = self._clock()
            if ridden:
                self.rides += 1
                self._ridden.append((self._seq, states))
            return self._seq, states

    def _current_connection(self) -> sqlite3.Connection:
        """The poller's connection to the path's current file, opened again when it changed."""
        if self._conn is not None and not self._file.current():
            self._drop()  # the path names another file or none: the reopen decides
        if self._conn is None:
            self._conn = self._connect()
            self.connections += 1
            self._data_version = None  # another connection's counter: not comparable
            self._counter = None
            self._present = None
        return self._conn

    def _poll_on(self, names: list[str]) -> list[tuple[str, State]]:
        conn = self._current_connection()
        self.polls += 1
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        moved, self._data_version = data_version != self._data_version, data_version
        unread = self._unread(names)
        if not (moved or unread):
            return []
        seen = self._file.counter_seen  # before the snapshot begins
        conn.execute("BEGIN")  # one snapshot: the counter and the rows agree
        try:
            counter = self._read_counter(conn)
            self._file.check_counter(counter, seen)
            if not moved:
                found = self._rows(conn, unread)  # newly watched leases only
            elif self._counter is None or counter is None or unread or self._present is None:
                found = self._rows(conn, names)
                self._present = self._all_names(conn) if counter is not None else None
            else:
                found = self._changed(conn, names, self._counter, self._present)
        finally:
            conn.execute("COMMIT")
        if moved:
            self._counter = counter
        return found

    def _unread(self, names: list[str]) -> list[str]:
        """The names of ``names`` the feed has not published yet.

        Names leave :attr:`known` only when the run's set of names changes (a new list), so
        once every name of a list was known, it stays so: later polls skip the scan.
        """
        if names is self._all_known:
            return []
        unread = [n for n in names if n not in self.known]
        if not unread:
            self._all_known = names
        return unread

    def _changed(
        self, conn: sqlite3.Connection, names: list[str], since: int, present: set[object]
    ) -> list[tuple[str, State]]:
        """The watched rows written since version ``since``; every watched row if one is gone.

        Every write takes the next value of the file's version counter (the file's triggers
        renumber any other insert or edit), so the rows above the last counter read are all
        that changed, and an edit that set a row's version to the counter's value is at it
        (the row we wrote at that version, published already, is skipped undecoded). A deleted
        row leaves none, so the poll counts the table's rows: every name of the last snapshot
        (``present``) and of the rows written since is still there unless a row was deleted,
        and a count short of them reads every watched row again. Each step costs the rows
        that changed, not the rows watched.
        """
        if self._watched is None or self._watched[0] is not names:
            self._watched = (names, set(names))
        watched = self._watched[1]
        published = str(since)
        self.selects += 2
        rows = conn.execute(f"SELECT {COLUMNS} FROM leases WHERE version >= ?", (since,))
        changed = []
        for row in rows:
            name = row[0]
            present.add(name)
            if name in watched and not (
                row[_VERSION] == since and self.known.get(name) == published
            ):
                changed.append(row)
        (total,) = conn.execute("SELECT count(*) FROM leases").fetchone()
        if total != len(present):
            found = self._rows(conn, names)
            self._present = self._all_names(conn)
            return found
        return list(self._decoded(changed, {}).items())

    def _all_names(self, conn: sqlite3.Connection) -> set[object]:
        """Every name in the table (in the poll's snapshot; an edited file's may be of any type)."""
        self.selects += 1
        return {name for (name,) in conn.execute("SELECT name FROM leases")}

    def _read_counter(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT value FROM version_counter WHERE id = 1").fetchone()
        value = row[0] if row is not None else None
        return value if type(value) is int else None

    def _rows(self, conn: sqlite3.Connection, wanted: list[str]) -> list[tuple[str, State]]:
        """Every row of ``wanted`` (None for a name without one)."""
        found: dict[str, State] = dict.fromkeys(wanted)
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            marks = ", ".join("?" * len(chunk))
            self.selects += 1
            rows = conn.execute(f"SELECT {COLUMNS} FROM leases WHERE name IN ({marks})", chunk)
            self._decoded(rows, found)
        return list(found.items())

    def wrote(self, rows: Iterable[tuple[tuple[object, ...], Any]]) -> None:
        """(worker thread) Rows this backend object just committed (``COLUMNS``, in order),
        each with the record it reads back as: a poll that finds one of them as written takes
        that record instead of decoding the row again (a row changed in any column is decoded).
        Kept only while a run follows the leases, for :data:`WRITTEN_MAX` names at most."""
        if self._names is None:
            return
        if len(self._written) > WRITTEN_MAX:
            self._written.clear()
        for row, record in rows:
            self._written[row[0]] = (row, record)

    def _decoded(self, rows: Iterable[Any], found: dict[str, State]) -> dict[str, State]:
        for row in rows:
            mine = self._written.pop(row[0], None)
            if mine is not None and mine[0] == tuple(row):
                self.rows_known += 1
                found[mine[1].name] = mine[1]
                continue
            self.rows_read += 1
            try:
                record = record_from_row(row, self.path)
            except BackendProtocolError as exc:  # an edited row: its next read reports it
                logger.debug("the SQLite watch skipped a row: %s", exc)
                if isinstance(row[0], str):
                    found.pop(row[0], None)
                continue
            found[record.name] = record
        return found
