"""The SQLite watch against a model: random inserts, edits and deletions by another program,
several to a commit, and after each commit a poll; what the feed has published must then be
every watched row's version (None for a row that is gone).

A poll reads only the rows written since its last one and finds deletions by counting the
table's rows against the names it has seen (trio_lease/backends/sqlite/_feed.py); this test
drives it through every mix of those: deletions hidden by an insert in the same commit,
deletions of rows nobody watches, rows deleted and put back, names watched that have no row.
Polls are called directly (``SqliteFeed._poll``, the worker thread's step), in this thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._feed import SqliteFeed

pytestmark = pytest.mark.real_store

NAMES = ("a", "b", "c", "d", "e", "f")
WATCHED = ["a", "b", "c", "d"]  # e and f: rows nobody here watches

#: One change by another program: (what, name).
Change = tuple[str, str]
changes = st.tuples(st.sampled_from(("insert", "edit", "delete")), st.sampled_from(NAMES))
#: Commits, each of one or more changes, each commit followed by a poll.
histories = st.lists(st.lists(changes, min_size=1, max_size=4), min_size=1, max_size=12)


@contextlib.contextmanager
def a_feed(path: Path) -> Iterator[SqliteFeed]:
    """A feed on a fresh file (made with its tables and triggers by a backend), closed after."""
    backend = SqliteBackend(path)
    feed = backend.watch_feed()
    try:
        yield feed
    finally:
        feed.close()


def commit(conn: sqlite3.Connection, batch: list[Change], serial: list[int]) -> None:
    """Apply ``batch`` in one transaction, as another program would (the file's triggers give
    every inserted or edited row the counter's next version)."""
    conn.execute("BEGIN IMMEDIATE")
    for what, name in batch:
        serial[0] += 1
        if what == "insert":
            conn.execute(
                "INSERT OR IGNORE INTO leases (name, holder, lease_duration, fencing_token, "
                "version) VALUES (?, ?, 30, 1, 1)",
                (name, f"h{serial[0]}"),
            )
        elif what == "edit":
            conn.execute("UPDATE leases SET holder = ? WHERE name = ?", (f"h{serial[0]}", name))
        else:
            conn.execute("DELETE FROM leases WHERE name = ?", (name,))
    conn.execute("COMMIT")


def table(conn: sqlite3.Connection) -> dict[str, str | None]:
    """Each watched name's version in the file (None: no row)."""
    rows = dict(conn.execute("SELECT name, version FROM leases").fetchall())
    return {name: str(rows[name]) if name in rows else None for name in WATCHED}


def poll(feed: SqliteFeed, names: list[str], published: dict[str, str | None]) -> None:
    """One poll, its states compared and published as the feed's run does."""
    _, states = feed._poll(names)
    for name, state in states:
        version = state.version if state is not None else None
        if name not in feed.known or feed.known[name] != version:
            feed.known[name] = version
            published[name] = version


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(history=histories)
def test_what_the_watch_publishes_is_every_watched_rows_version(
    tmp_path_factory: pytest.TempPathFactory, history: list[list[Change]]
) -> None:
    """After every commit and a poll, the feed has published each watched row's version, None
    for a name without a row, and published nothing that did not change."""
    path = tmp_path_factory.mktemp("feed") / "leases.sqlite3"
    with a_feed(path) as feed:
        published: dict[str, str | None] = {}
        poll(feed, WATCHED, published)  # its connection makes the file
        assert published == dict.fromkeys(WATCHED)
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            check(feed, conn, history, published)


def check(
    feed: SqliteFeed,
    conn: sqlite3.Connection,
    history: list[list[Change]],
    published: dict[str, str | None],
) -> None:
    """Commit each batch of ``history`` and poll after it, checking what was published."""
    serial = [0]
    for batch in history:
        before = table(conn)
        commit(conn, batch, serial)
        after = table(conn)
        earlier = dict(published)
        poll(feed, WATCHED, published)
        assert published == after, (batch, before)
        news = {name for name in WATCHED if published[name] != earlier[name]}
        assert news == {name for name in WATCHED if after[name] != before[name]}
