"""The embedded backend: one SQLite database file shared by many processes on one host.

Each write is one ``BEGIN IMMEDIATE`` transaction doing a compare-and-swap
(``UPDATE … WHERE name = ? AND version = ?``), so concurrent writers from any number of
processes serialise on SQLite's write lock and exactly one wins. Versions come from a
database-wide counter bumped in the same transaction, so a version is never reused. The file is
in WAL mode with ``synchronous=FULL``: a committed grant survives a process killed mid-write and
a power cut, so fencing tokens never go backwards.

Blocking calls run in worker threads (``anyio.to_thread``, abandoned on cancellation: a write
whose caller was cancelled has an unknown outcome, as the SPI expects); the updates of one
event-loop turn share one call and one transaction, each row compared on its own version
(``SqliteBackend.update``). ``watch`` polls SQLite's
``PRAGMA data_version`` (a cheap counter that moves when another connection commits) every
``watch_interval`` seconds and yields the record when its version changed; the shared watch
(:mod:`._feed`) is one such poller, on one connection, for every lease a process watches, and
polls in the worker thread of a batch of updates when one just ran.

The file is input: another program, an older version or a hand edit may have written it, and
SQLite lets any column hold any type. :func:`._rows.record_from_row` is the one place a row
becomes a record (a row whose version cannot be read raises
:class:`~trio_lease.BackendProtocolError`, one whose content cannot be read comes back with
``unreadable`` set), a file without our tables, or with another program's trigger on them, is
refused with :class:`~trio_lease.LeaseConfigError` before anything is written to it
(:mod:`._file`), a change of a row made outside the backend gets a new version from triggers
kept in the file, so compare-and-swap and the watch see it, and more triggers keep the version
counter from going down (:mod:`._file`), a backend object uses only the file it first opened and
refuses one removed, emptied or replaced while in use, checked with one ``stat`` per call, or
gone back in time (rewritten in place from an older copy: a version counter below the highest
it read or wrote) (:mod:`._identity`), and
:func:`._errors.translate` is the one place SQLite's errors become ours: errors that retrying
cannot fix (a path that cannot be opened, a file that is not a database, a read-only file) are
:class:`~trio_lease.LeaseConfigError` naming the path and the fix, the rest (a lock held past
``busy_timeout``, an I/O error) :class:`~trio_lease.BackendUnavailable`.

The default path (used by the CLI) is per user: ``$TRIO_LEASE_SQLITE_PATH``, else
``$XDG_STATE_HOME/trio-lease/leases.sqlite3``, else ``~/.local/state/trio-lease/leases.sqlite3``.

Modules: :mod:`._backend` (the SPI on one connection), :mod:`._file` (the database file: its
path, directory, tables), :mod:`._identity` (which file a backend object uses), :mod:`._rows`
(rows and records), :mod:`._errors` (SQLite's errors), :mod:`._feed` (the shared watch).
"""

from ... import _public
from ._backend import SqliteBackend as SqliteBackend
from ._file import default_path as default_path

__all__ = ["SqliteBackend", "default_path"]

_public.publish(globals())
