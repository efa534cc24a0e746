"""Which file a SQLite backend object uses: the one its first open found, for its whole life.

A connection keeps the file it opened even when the path is given another file (``mv``, a
restore, ``os.replace``) or none (``rm``): it would go on reading and renewing in the old,
unlinked file while other processes use the one at the path, and both would hold a lease. So the
file's identity (``st_dev``, ``st_ino``) is recorded when it is first opened, and each call
checks with one ``stat``, in the worker thread that then uses the connection, that the path
still names it (:meth:`DatabaseFile.current`); when it does not, the connection is closed and
the path opened again (:meth:`DatabaseFile.open`), which decides.

Only the first open may create the file and our tables. A later open that finds no file, or our
file emptied of its tables (truncated to 0 bytes), would otherwise start a new database in which
a live lease reads as free and fencing tokens restart at 1. One that finds another file with our
tables (a new file, or a moved or restored copy) cannot be trusted either: versions count in
each file on their own, so a version this process holds may name another state of the same row
there, and a stale holder's compare-and-swap would succeed over the new holder (a restart
forgets the versions; a reopen does not).

The same file can also go back in time: rewritten in place from an older copy (``cp backup
leases.sqlite3`` keeps the inode, and so does a restore tool writing into the file) while in
use. Its rows are then old (a lease free, or held by an old holder, while a live holder renews)
and its version counter, which otherwise only rises, is lower: versions are issued again. So
every read and write of the counter (:meth:`DatabaseFile.check_counter`) is compared with the
highest value this backend object saw before that read began (:attr:`DatabaseFile.counter_seen`);
a lower one means the file went back. Such a restore is seen at the first call that reads a
counter below that mark: not if the file's users wrote it past the mark first (a version this
process holds may then name another state of its row).

Each of these raises :class:`LeaseConfigError` saying so, and so does every later call:
continuing is the operator's choice, by restarting.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Final, Literal

from ..._exceptions import BackendUnavailable, LeaseConfigError
from ._file import connect

__all__ = ["DatabaseFile", "NoDatabase"]

Identity = tuple[int, int]
Loss = Literal["removed", "replaced", "rewound"]

_RESTART: Final = (
    "restart the processes that use it: with a fresh file (it restarts fencing tokens at 1) or "
    "a restored one, as the operator chooses"
)


def _identity(path: Path) -> Identity | None:
    """(``st_dev``, ``st_ino``) of the file ``path`` names, None for none (one ``stat``)."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found.st_dev, found.st_ino


def _identity_or_none(path: Path) -> Identity | None:
    """:func:`_identity`, None also when the path cannot be looked at."""
    try:
        return _identity(path)
    except OSError:
        return None


def _gone(path: Path) -> bool:
    try:
        return _identity(path) is None
    except OSError:
        return False


class NoDatabase(LeaseConfigError):
    """There is no lease database at the path, and this backend object may not create one
    (``SqliteBackend(path, create=False)``): reads find no leases, a write raises this."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"there is no SQLite lease database at {path} (no file, or a file without its "
            "tables), and this backend was opened with create=False, which never creates one: "
            "open it with create=True to write, or check the path"
        )
        self.path = path


class DatabaseFile:
    """The one file a backend object uses for its whole life, and the connections on it.

    The first open that succeeds may create the file and our tables, and records the file's
    identity. Every later open (after a call found the path naming another file or none, or
    after a connection was closed on an error) must find that same file with our tables:
    versions and fencing tokens live in the file, so a file that was removed or emptied lost
    them, and another file (a new one, a restored or moved copy) issues versions this process
    may already hold for other states of a row; a compare-and-swap with them could succeed
    over another holder. Every counter read must be at least the highest seen before it
    (:meth:`check_counter`): a lower one is the same file gone back in time. Each of these
    raises :class:`LeaseConfigError`, and so does every open after it (:meth:`current` is
    then False, so each call closes its connection and opens again): a new backend object
    (a restart) is the operator's choice to continue.
    """

    def __init__(
        self, path: Path, busy_timeout: float, *, create: bool = True, make_folder: bool = True
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        #: Whether the first open may create the file and our tables (else :class:`NoDatabase`).
        self.create = create
        #: Whether the first open may create the file's folder (the default location only).
        self.make_folder = make_folder
        #: The highest value of the file's version counter read or written through this object
        #: (0 before any). Read it before a statement that reads the counter, and pass it, with
        #: the value read, to :meth:`check_counter`.
        self.counter_seen: int = 0
        self._identity: Identity | None = None
        self._lost = ""  # why no open may succeed any more
        self._lock = threading.Lock()

    def current(self) -> bool:
        """(worker thread) Whether the path still names the file (one ``stat``), and the file
        has not been refused (then the caller reopens, and the open raises)."""
        try:
            return (
                not self._lost
                and self._identity is not None
                and _identity(self.path) == self._identity
            )
        except OSError:
            return False  # cannot tell: the open that follows reports it

    def check_counter(self, counter: object, seen: int) -> None:
        """(worker thread) Note ``counter``, the file's version counter as a statement read or
        wrote it; LeaseConfigError if it is below ``seen``, :attr:`counter_seen` as read before
        that statement began.

        ``seen`` rather than the mark now: another connection of this object may have read or
        written a higher value after this statement's snapshot was taken, which is no time
        travel. Every value that made ``seen`` was committed before this snapshot began, and
        the counter only rises, so a lower one means the file went back. A counter that is not
        an integer is left for the write's checks (nothing can be compared).
        """
        if type(counter) is not int:
            return
        if counter < seen:
            raise self._lose("rewound")
        if counter > self.counter_seen:
            with self._lock:
                self.counter_seen = max(self.counter_seen, counter)

    def open(self) -> sqlite3.Connection:
        """(worker thread) A new connection on the file (raises ``sqlite3.Error`` too)."""
        with self._lock:
            known, lost = self._identity, self._lost
        if lost:
            raise LeaseConfigError(lost)
        return self._first_open() if known is None else self._reopen(known)

    def _first_open(self) -> sqlite3.Connection:
        """Open, creating the file and our tables if need be, and record the file's identity.

        The identity is recorded only if the path named the same file (or none) before the open
        and that file after it: a file replaced while it was opened is BackendUnavailable, and
        the next call tries again. Another thread's first open may have recorded a file first:
        a connection on another file than that one is refused like a reopen's.
        """
        try:
            before = _identity(self.path)
        except OSError:
            before = None  # connect reports what is wrong with the path
        if self.create:
            conn = connect(self.path, self.busy_timeout, make_folder=self.make_folder)
        else:
            conn = self._open_existing()
        after = _identity_or_none(self.path)
        with self._lock:
            if self._identity is None and after is not None and before in (None, after):
                self._identity = after
            if after is not None and after == self._identity:
                return conn
            recorded = self._identity is not None
        conn.close()
        if not recorded:
            raise BackendUnavailable(
                f"the SQLite lease database {self.path} was replaced while it was opened; "
                "the next call opens it again"
            )
        raise self._lose("removed" if after is None else "replaced")

    def _open_existing(self) -> sqlite3.Connection:
        """The first open without ``create``: :class:`NoDatabase` for no file or no tables."""
        try:
            conn = connect(self.path, self.busy_timeout, create=False)
        except sqlite3.OperationalError:
            if _gone(self.path):
                raise NoDatabase(self.path) from None
            raise
        if conn is None:
            raise NoDatabase(self.path)
        return conn

    def _reopen(self, known: Identity) -> sqlite3.Connection:
        """Open the file recorded as ``known`` again, never creating anything.

        The path is looked at before the open (a file replaced or removed is not even opened)
        and after it, for what changed in between: removed (the open, ``mode=rw``, fails and
        the path names no file), emptied (the open finds no tables), replaced (the path names
        another file after the open).
        """
        try:
            before = _identity(self.path)
        except OSError as exc:
            raise LeaseConfigError(
                f"cannot check the SQLite lease database {self.path}: {exc.strerror}; "
                "give this process access to it and its directory"
            ) from None
        if before != known:
            raise self._lose("removed" if before is None else "replaced")
        try:
            conn = connect(self.path, self.busy_timeout, create=False)
        except sqlite3.OperationalError:
            if _gone(self.path):  # removed since the stat above
                raise self._lose("removed") from None
            raise
        if conn is None:
            raise self._lose("removed")
        after = _identity_or_none(self.path)
        if after == known:
            return conn
        conn.close()
        raise self._lose("removed" if after is None else "replaced")

    def _lose(self, how: Loss) -> LeaseConfigError:
        """The error every open raises from now on (the file is gone, emptied, replaced or went
        back in time); the first reason found stays."""
        where = f"the SQLite lease database {self.path}"
        said = {
            "removed": f"{where} was removed or emptied while this process used it: its leases "
            f"and fencing tokens are gone; {_RESTART}",
            "replaced": f"{where} was replaced by another file while this process used it (a "
            "new, moved or restored file): its versions may repeat the ones this process "
            f"holds, so this backend does not use it; {_RESTART}",
            "rewound": f"{where} went back in time while this process used it: its version "
            "counter is below one this process read or wrote (the file was restored or "
            "rewritten from an older copy while in use, or its counter lowered by hand), so "
            "its leases may show an old holder or none, and versions this process holds may "
            "be issued again for other states; this backend does not use it. Check which "
            "holder is real (the resources its fencing tokens guard, the processes' logs), "
            "then restart the processes that use it, or move the file aside (every user then "
            "stops; a fresh file restarts fencing tokens at 1)",
        }[how]
        with self._lock:
            self._lost = self._lost or said
            return LeaseConfigError(self._lost)
