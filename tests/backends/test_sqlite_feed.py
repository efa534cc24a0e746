"""The SQLite backend's shared watch: one poller per backend object (real time: threads)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import anyio
import pytest

from trio_lease import Lease, LeaseRecord, LeaseSettings
from trio_lease._shared_watch import shared_watch
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._feed import SqliteFeed

from ._feed import LIMIT, a_foreign_write_cancels_the_holder, running, start_waiters, until
from ._sqlite import another_program

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """The database file of the test."""
    return tmp_path / "leases.sqlite3"


def counting_connections(backend: SqliteBackend) -> list[int]:
    """Count the connections ``backend`` opens (its own and its watches')."""
    opened = [0]
    connect = backend._connect

    def counted() -> sqlite3.Connection:
        opened[0] += 1
        return connect()

    backend._connect = counted  # type: ignore[method-assign]
    return opened


async def test_many_waiters_share_one_poller(path: Path) -> None:
    """200 waiters on 200 leases of one backend: one poller (one connection), all woken."""
    count = 200
    other, mine = SqliteBackend(path), SqliteBackend(path, watch_interval=0.01)
    opened = counting_connections(mine)
    records = [
        await other.create(LeaseRecord(name=f"job{i}", holder="other", lease_duration=3600))
        for i in range(count)
    ]
    async with other, mine, anyio.create_task_group() as tg:
        with anyio.fail_after(LIMIT):
            acquired = start_waiters(tg, mine, count)
            hub = shared_watch(mine)
            assert hub is not None
            await until(lambda: hub.subscribers == count)
            assert isinstance(hub.feed, SqliteFeed)
            feed: SqliteFeed = hub.feed
            polls = feed.polls
            await until(lambda: feed.polls >= polls + 3)
            for record in records:  # released by their holder: every waiter must wake
                released = dataclasses.replace(record, holder="", lease_duration=1.0)
                await other.update(released, record.version)
            await until(lambda: len(acquired) == count)
    assert opened[0] == 2  # the backend's own connection and one poller's
    assert feed.connections == 1


async def test_a_foreign_write_cancels_the_holder_before_its_next_renewal(path: Path) -> None:
    """Another client writing another holder ends the grant with LeaseLost, no renewal sent."""
    mine, other = SqliteBackend(path, watch_interval=0.01), SqliteBackend(path)
    await a_foreign_write_cancels_the_holder(mine, other)


async def test_a_deleted_row_is_published_as_none(path: Path) -> None:
    """A row deleted by another program is published as None."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        created = await backend.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", created)])
            another_program(path, "DELETE FROM leases WHERE name = 'job'")
            await until(lambda: len(published) == 2)
    assert published[1] == ("job", None)


async def test_the_poller_selects_nothing_while_data_version_stands(path: Path) -> None:
    """Polls with an unmoved data_version run no SELECT; a commit makes two (the rows written
    since the last poll, and a count of the table's rows), once per change. The first poll
    makes two as well (the watched rows, and every name in the table)."""
    async with SqliteBackend(path, watch_interval=0.01) as backend, SqliteBackend(path) as other:
        created = await other.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: feed.polls >= 10)
            assert (feed.selects, published) == (2, [("job", created)])
            # A commit: the rows written since the last counter, and a count of the rows.
            await other.create(LeaseRecord(name="unwatched", holder="b"))
            await until(lambda: feed.selects == 4)
            polls = feed.polls
            await until(lambda: feed.polls >= polls + 10)
            assert (feed.selects, len(published)) == (4, 1)  # nothing of ours changed
            renewed = await other.update(created, created.version)
            await until(lambda: len(published) == 2)
    assert published[1] == ("job", renewed)
    assert feed.selects == 6


async def test_a_rerun_publishes_only_what_changed_meanwhile(path: Path) -> None:
    """Versions and connection are kept on the feed: a new run publishes only what changed."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        first = await backend.create(LeaseRecord(name="a", holder="x"))
        second = await backend.create(LeaseRecord(name="b", holder="y"))
        feed = backend.watch_feed()
        with anyio.fail_after(LIMIT):
            async with running(feed, "a", "b") as published:
                await until(lambda: len(published) == 2)
            changed = await backend.update(second, second.version)
            async with running(feed, "a", "b") as again:
                await until(lambda: len(again) >= 1)
                polls = feed.polls
                await until(lambda: feed.polls >= polls + 5)
    assert sorted(published, key=lambda item: item[0]) == [("a", first), ("b", second)]
    assert again == [("b", changed)]
    assert feed.connections == 1  # the poller's connection outlives a run


async def test_a_name_no_row_can_have_is_left_out(path: Path) -> None:
    """A watched name SQLite cannot bind (a lone surrogate) does not break the other names."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        created = await backend.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        async with running(feed, "bad\udc80", "job") as published:
            await until(lambda: feed.polls >= 3)
    assert published == [("job", created)]


async def test_a_release_in_this_process_wakes_the_poller_at_once(tmp_path: Path) -> None:
    """A release by this backend object pokes its poller: a waiter of the same process takes
    the lease without waiting for the next poll (30 s apart here, past the hang guard)."""
    settings = LeaseSettings(
        heartbeat_timeout=60, heartbeat_interval=20, lease_operation_timeout=2, poll_interval=60
    )
    got: list[str] = []
    async with SqliteBackend(tmp_path / "l.db", watch_interval=30) as backend:
        holding = anyio.Event()

        async def hold() -> None:
            async with Lease("job", "a", backend, settings).held():
                holding.set()
                await anyio.sleep(0.5)  # b is waiting on the watch by then

        with anyio.fail_after(10):  # the hang guard: the next poll would be 30 s away
            async with anyio.create_task_group() as tg:
                tg.start_soon(hold)
                await holding.wait()
                async with Lease("job", "b", backend, settings).held():
                    got.append("b")
        feed = backend._feed
        assert feed is not None
        polls = feed.polls
    assert got == ["b"]
    assert polls <= 4  # the first polls of a and b, and one after the release


async def test_a_write_to_one_of_many_watched_leases_decodes_one_row(path: Path) -> None:
    """After the first poll, a renewal of one of 100 watched leases is read as that one row
    (the rows above the file's version counter), not all 100; a deleted row is still found (the
    count of watched rows falls short) and published as None, and an insert as the new row."""
    async with SqliteBackend(path, watch_interval=0.01) as backend, SqliteBackend(path) as other:
        made = [await other.create(LeaseRecord(name=f"job-{i}", holder="a")) for i in range(100)]
        feed = backend.watch_feed()
        names = [f"job-{i}" for i in range(100)] + ["later"]
        async with running(feed, *names) as published:
            await until(lambda: len(published) == 101)  # "later": None
            before = feed.rows_read
            renewed = await other.update(made[7], made[7].version)
            await until(lambda: len(published) == 102)
            assert published[-1:] == [("job-7", renewed)]
            assert feed.rows_read == before + 1
            another_program(path, "DELETE FROM leases WHERE name = 'job-3'")
            await until(lambda: len(published) == 103)
            assert published[-1:] == [("job-3", None)]
            later = await other.create(LeaseRecord(name="later", holder="b"))
            await until(lambda: len(published) == 104)
            assert published[-1:] == [("later", later)]


async def test_an_edit_setting_a_version_to_the_counters_value_is_published(path: Path) -> None:
    """The one edit the file's triggers take for ours (a row's version set to the counter's
    value, which another row has) is not above the counter the poller read last: the delta
    read takes the rows at it too, and publishes the edit (the row written there is not)."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        await backend.create(LeaseRecord(name="job", holder="a"))
        other = await backend.create(LeaseRecord(name="other", holder="b"))
        feed = backend.watch_feed()
        async with running(feed, "job", "other") as published:
            await until(lambda: len(published) == 2 and feed._counter == 2)
            another_program(path, "UPDATE leases SET holder = 'c', version = 2 WHERE name = 'job'")
            await until(lambda: len(published) == 3)
            polls = feed.polls
            await until(lambda: feed.polls >= polls + 5)
    assert [(name, state and (state.holder, state.version)) for name, state in published[2:]] == [
        ("job", ("c", "2"))
    ]
    assert ("other", other) in published[:2]


async def test_the_poller_rides_the_thread_of_the_backends_writes(path: Path) -> None:
    """A batch of this backend's updates polls for the feed in its own worker thread (no call
    of the feed's own), at most twice per watch_interval; the poll's news is published."""
    clock = [1000.0]  # the feed's rhythm on a clock the test moves; its waits are real
    async with SqliteBackend(path, watch_interval=30) as backend, SqliteBackend(path) as other:
        job = await other.create(LeaseRecord(name="job", holder="a"))
        mine = await backend.create(LeaseRecord(name="mine", holder="me"))
        feed = backend.watch_feed()
        feed._clock = lambda: clock[0]
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", job)])
            assert (feed.polls, feed.rides) == (1, 0)  # the first poll is its own
            renewed = await other.update(job, job.version)  # news, and no poll due
            clock[0] += 16  # past half of watch_interval: the next batch polls too
            mine = await backend.update(mine, mine.version)
            assert (feed.polls, feed.rides) == (2, 1)  # in the batch's thread
            await until(lambda: len(published) == 2)
            assert published[1] == ("job", renewed)
            mine = await backend.update(mine, mine.version)  # within half: no ride
            assert (feed.polls, feed.rides) == (2, 1)


async def test_without_writes_the_poller_polls_on_its_own(path: Path) -> None:
    """With no batch of updates to ride, the feed polls every watch_interval on its own."""
    async with SqliteBackend(path, watch_interval=0.01) as backend, SqliteBackend(path) as other:
        job = await other.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: feed.polls >= 5)
            renewed = await other.update(job, job.version)
            await until(lambda: len(published) == 2)
    assert published == [("job", job), ("job", renewed)]
    assert feed.rides == 0


async def test_a_row_as_this_backend_wrote_it_is_not_decoded_again(path: Path) -> None:
    """The poller takes the record of a row this backend object wrote, as written, from the
    write (no second decode); a row another program changed after it is decoded."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        created = await backend.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", created)])
            read, known = feed.rows_read, feed.rows_known
            renewed = await backend.update(created, created.version)
            await until(lambda: len(published) == 2)
            assert published[1] == ("job", renewed)
            assert published[1][1] is renewed  # the write's own record
            assert (feed.rows_read, feed.rows_known) == (read, known + 1)
            another_program(path, "UPDATE leases SET holder = 'b' WHERE name = 'job'")
            await until(lambda: len(published) == 3)
    edited = published[2][1]
    assert edited is not None and edited.holder == "b"
    assert (feed.rows_read, feed.rows_known) == (read + 1, known + 1)


async def test_the_feed_learns_a_write_before_its_commit(path: Path) -> None:
    """The poller runs in a thread of its own and may read a row the moment it is committed:
    the backend hands the feed the records it wrote before the commit, so no poll can find the
    row first and decode it again, however late the writing thread runs."""
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        created = await backend.create(LeaseRecord(name="job", holder="a"))
        feed = backend.watch_feed()
        visible_when_told: list[bool] = []
        told = feed.wrote

        def wrote(rows: object) -> None:
            with sqlite3.connect(path) as conn:  # another reader, as the poller is
                row = conn.execute("SELECT version FROM leases WHERE name = 'job'").fetchone()
            visible_when_told.append(row[0] != int(created.version))
            told(rows)  # type: ignore[arg-type]

        feed.wrote = wrote  # type: ignore[method-assign]
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", created)])
            renewed = await backend.update(created, created.version)
            await until(lambda: len(published) == 2)
        assert visible_when_told == [False]  # told while the write was not yet committed
        assert published[1][1] is renewed


async def test_a_row_deleted_in_the_commit_that_inserts_another_is_found(path: Path) -> None:
    """A deletion and an insert in one commit leave the table's row count unchanged: the poll
    still finds the deleted row (the names it knew plus the inserted one outnumber the rows),
    publishes it as None and the inserted row as written, and nothing else."""
    async with SqliteBackend(path, watch_interval=0.01) as backend, SqliteBackend(path) as other:
        for i in range(10):
            await other.create(LeaseRecord(name=f"job-{i}", holder="a"))
        feed = backend.watch_feed()
        names = [f"job-{i}" for i in range(10)] + ["new"]
        async with running(feed, *names) as published:
            await until(lambda: len(published) == 11)  # "new": None
            another_program(
                path,
                "BEGIN IMMEDIATE",
                "DELETE FROM leases WHERE name = 'job-4'",
                "INSERT INTO leases (name, holder, lease_duration, fencing_token, version) "
                "VALUES ('new', 'b', 30, 1, 1)",
                "COMMIT",
            )
            await until(lambda: len(published) == 13)
            polls = feed.polls
            await until(lambda: feed.polls >= polls + 5)
    news = dict(published[11:])
    assert len(published) == 13 and news.keys() == {"job-4", "new"}
    assert news["job-4"] is None
    assert news["new"] is not None and news["new"].holder == "b"


async def test_an_unwatched_row_deleted_publishes_nothing(path: Path) -> None:
    """Deleting a row nobody here watches reads the watched rows again (the count falls
    short) and publishes nothing: none of them changed."""
    async with SqliteBackend(path, watch_interval=0.01) as backend, SqliteBackend(path) as other:
        job = await other.create(LeaseRecord(name="job", holder="a"))
        await other.create(LeaseRecord(name="elsewhere", holder="b"))
        feed = backend.watch_feed()
        async with running(feed, "job") as published:
            await until(lambda: published == [("job", job)])
            selects = feed.selects
            another_program(path, "DELETE FROM leases WHERE name = 'elsewhere'")
            # the delta and the count, then the watched rows and the names again
            await until(lambda: feed.selects == selects + 4)
            polls = feed.polls
            await until(lambda: feed.polls >= polls + 5)
            renewed = await other.update(job, job.version)
            await until(lambda: len(published) == 2)
    assert published == [("job", job), ("job", renewed)]
    assert feed.selects == selects + 6  # the renewal: one delta and one count
