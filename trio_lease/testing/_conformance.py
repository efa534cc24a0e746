"""check_backend: the conformance suite any LeaseBackend must pass.

Run it from a test, on any anyio backend::

    async def test_my_backend_conforms():
        await check_backend(lambda: MyBackend(url), prefix="conformance")

``factory`` returns a new client of one shared store each time it is called (for a server
backend, a new client object; for the memory backend, ``lambda: MemoryBackend(store)``); it may
be a coroutine function. The suite opens several clients at once to race them, closes every
client it opened, and uses record names starting with ``prefix`` plus a random part, so it can
run against a store that holds other data.

The suite is a table of checks (:data:`_CHECKS`), run in order on one shared :class:`_Run`:
each check is a small function naming the rules it enforces. Every failed check raises
:class:`BackendConformanceError` naming the rule that was broken.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import secrets
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import anyio

from .._abc import LeaseBackend, LeaseRecord
from .._algorithm import echo_problem
from .._exceptions import ConflictError
from .._feed import checked_watch

__all__ = ["BackendConformanceError", "check_backend"]

BackendFactory = Callable[[], LeaseBackend | Awaitable[LeaseBackend]]


class BackendConformanceError(AssertionError):
    """A backend broke a rule of the SPI (see :mod:`trio_lease.abc`)."""


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise BackendConformanceError(rule)


async def _open(factory: BackendFactory, stack: AsyncExitStack) -> LeaseBackend:
    made = factory()
    backend = await made if inspect.isawaitable(made) else made
    _require(isinstance(backend, LeaseBackend), "factory must return a LeaseBackend")
    stack.push_async_callback(backend.aclose)
    return backend


def _same_payload(a: LeaseRecord, b: LeaseRecord) -> bool:
    def close(x: datetime | None, y: datetime | None) -> bool:
        if x is None or y is None:
            return x is y
        return abs((x - y).total_seconds()) < 1.0  # backends may store coarser timestamps

    return (
        a.name == b.name
        and a.holder == b.holder
        and math.isclose(a.lease_duration, b.lease_duration, abs_tol=1.0)
        and a.fencing_token == b.fencing_token
        and close(a.acquired_at, b.acquired_at)
        and close(a.renewed_at, b.renewed_at)
    )


async def _conflicts(write: Awaitable[object], rule: str) -> None:
    """Await ``write``, which must raise ConflictError; ``rule`` says so when it does not."""
    try:
        await write
    except ConflictError:
        return
    raise BackendConformanceError(rule)


@dataclasses.dataclass
class _Run:
    """One run of the suite: its clients, its names, and the records earlier checks left."""

    factory: BackendFactory
    stack: AsyncExitStack
    a: LeaseBackend
    b: LeaseBackend
    prefix: str
    writers: int
    watch_timeout: float
    run: str = dataclasses.field(default_factory=lambda: secrets.token_hex(4))
    now: datetime = dataclasses.field(
        default_factory=lambda: datetime.now(UTC).replace(microsecond=0)
    )
    #: The record the create checks wrote, as given and as created; then its latest version.
    record: LeaseRecord | None = None
    created: LeaseRecord | None = None
    current: LeaseRecord | None = None

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{self.run}-{suffix}"

    def written(self) -> tuple[LeaseRecord, LeaseRecord, LeaseRecord]:
        """(record, created, current) of the basic record; the create checks ran first."""
        assert self.record is not None and self.created is not None and self.current is not None
        return self.record, self.created, self.current


# -- reads and creates ----------------------------------------------------------------------------


async def _check_missing(run: _Run) -> None:
    _require(await run.a.get(run.name("missing")) is None, "get of a missing record returns None")


async def _check_create(run: _Run) -> None:
    record = LeaseRecord(
        name=run.name("basic"),
        holder="owner-a",
        lease_duration=15.0,
        fencing_token=1,
        acquired_at=run.now,
        renewed_at=run.now,
    )
    created = await run.a.create(record)
    _require(isinstance(created, LeaseRecord), "create returns a LeaseRecord")
    _require(created.version != "", "create returns the record with a version")
    problem = echo_problem(created, record, None)
    _require(not problem, f"create returns what it stored, as the core checks it: {problem}")
    _require(_same_payload(created, record), "create stores every field of the record")
    run.record = record
    run.created = run.current = created


async def _check_read_back(run: _Run) -> None:
    record, created, _ = run.written()
    read = await run.b.get(record.name)
    _require(read is not None, "a created record is visible to other clients")
    assert read is not None
    _require(read.version == created.version, "get returns the version create returned")
    _require(_same_payload(read, record), "get returns what create stored")


async def _check_create_conflicts(run: _Run) -> None:
    record, _, _ = run.written()
    await _conflicts(
        run.b.create(dataclasses.replace(record, holder="owner-b")),
        "create of an existing record raises ConflictError",
    )
    after = await run.a.get(record.name)
    _require(
        after is not None and after.holder == "owner-a",
        "a conflicting create leaves the record unchanged",
    )


# -- updates: compare-and-swap on the version -----------------------------------------------------


async def _check_updates(run: _Run) -> None:
    _, created, current = run.written()
    seen = {created.version}
    for i in range(3):
        new = dataclasses.replace(
            current, renewed_at=run.now, fencing_token=current.fencing_token + i
        )
        updated = await run.b.update(new, current.version)
        _require(updated.version not in seen, "every write produces a new version")
        _require(_same_payload(updated, new), "update stores every field of the record")
        problem = echo_problem(updated, new, current.version)
        _require(not problem, f"update returns what it stored, as the core checks: {problem}")
        seen.add(updated.version)
        current = updated
    run.current = current


async def _check_stale_update(run: _Run) -> None:
    record, created, current = run.written()
    await _conflicts(
        run.a.update(dataclasses.replace(current, holder="owner-x"), created.version),
        "update with a stale version raises ConflictError",
    )
    final = await run.a.get(record.name)
    _require(
        final is not None and final.version == current.version and final.holder == "owner-a",
        "a conflicting update leaves the record unchanged",
    )


async def _check_update_of_missing(run: _Run) -> None:
    _, _, current = run.written()
    missing = run.name("never-created")
    await _conflicts(
        run.a.update(LeaseRecord(name=missing, holder="x"), current.version),
        "update of a missing record raises ConflictError",
    )
    _require(await run.a.get(missing) is None, "update of a missing record does not create it")


# -- races: exactly one of many concurrent writers wins -------------------------------------------


async def _race(
    clients: Sequence[LeaseBackend],
    label: str,
    write: Callable[[LeaseBackend, str], Awaitable[object]],
) -> tuple[list[str], list[str]]:
    """Every client runs ``write`` at once as ``<label>-<i>``; returns (winners, losers)."""
    wins: list[str] = []
    losses: list[str] = []

    async def one(client: LeaseBackend, who: str) -> None:
        try:
            await write(client, who)
        except ConflictError:
            losses.append(who)
        else:
            wins.append(who)

    async with anyio.create_task_group() as tg:
        for i, client in enumerate(clients):
            tg.start_soon(one, client, f"{label}-{i}")
    return wins, losses


async def _check_races(run: _Run) -> None:
    extra = [await _open(run.factory, run.stack) for _ in range(max(0, run.writers - 2))]
    clients = [run.a, run.b, *extra]
    race = run.name("race")
    wins, losses = await _race(
        clients,
        "writer",
        lambda client, who: client.create(LeaseRecord(name=race, holder=who, lease_duration=5.0)),
    )
    _require(len(wins) == 1, f"exactly one concurrent create wins (won: {wins})")
    _require(len(losses) == len(clients) - 1, "every other concurrent create conflicts")
    base = await run.a.get(race)
    assert base is not None
    _require(base.holder == wins[0], "the record holds the winning create")

    wins, _ = await _race(
        clients,
        "updater",
        lambda client, who: client.update(dataclasses.replace(base, holder=who), base.version),
    )
    _require(len(wins) == 1, f"exactly one concurrent update from a version wins ({wins})")
    won = await run.b.get(race)
    _require(won is not None and won.holder == wins[0], "the record holds the winning update")


# -- watch ----------------------------------------------------------------------------------------


async def _check_watch(run: _Run) -> None:
    if not run.a.supports_watch:
        return
    watcher, writer, name, limit = run.a, run.b, run.name("watch"), run.watch_timeout
    states: list[LeaseRecord | None] = []
    first_seen = anyio.Event()
    change_seen = anyio.Event()

    async def watch() -> None:
        async with checked_watch(watcher, name) as stream:
            async for state in stream:
                states.append(state)
                first_seen.set()
                if state is not None and state.holder == "second":
                    change_seen.set()
                    return

    with anyio.move_on_after(limit) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await first_seen.wait()
            _require(states[0] is None, "watch first yields the current state (None when missing)")
            created = await writer.create(LeaseRecord(name=name, holder="first", lease_duration=5))
            await writer.update(dataclasses.replace(created, holder="second"), created.version)
            await change_seen.wait()
    if scope.cancelled_caught:
        raise BackendConformanceError(
            f"watch yields the current state at once and a change by another client within "
            f"{limit} s (saw {len(states)} states)"
        )


# -- handover requests -----------------------------------------------------------------------------


async def _check_handover_to(run: _Run) -> None:
    """handover_to is stored like the other fields: Lease.request_handover depends on it."""
    name, why = run.name("handover"), " (Lease.request_handover writes it)"
    created = await run.a.create(LeaseRecord(name=name, holder="owner-a", lease_duration=5.0))
    asked = await run.b.update(dataclasses.replace(created, handover_to="owner-b"), created.version)
    _require(asked.handover_to == "owner-b", "update stores handover_to and returns it" + why)
    read = await run.a.get(name)
    ok = read is not None and read.handover_to == "owner-b"
    _require(ok, "get returns the handover_to an update stored" + why)
    if run.a.supports_watch:
        state: LeaseRecord | None = None
        with anyio.move_on_after(run.watch_timeout):
            async with checked_watch(run.a, name) as states:
                state = await states.receive()
        ok = state is not None and state.handover_to == "owner-b"
        _require(ok, "watch yields the handover_to an update stored" + why)
    cleared = await run.a.update(dataclasses.replace(asked, handover_to=""), asked.version)
    read = await run.b.get(name)
    ok = cleared.handover_to == "" and read is not None and read.handover_to == ""
    _require(ok, 'an update writing handover_to "" clears it')
    again = await run.b.update(dataclasses.replace(cleared, handover_to="c"), cleared.version)
    _require(again.handover_to == "c", "every update stores handover_to" + why)


#: The checks, in the order they run (later ones build on the records earlier ones wrote).
_CHECKS: tuple[Callable[[_Run], Awaitable[None]], ...] = (
    _check_missing,
    _check_create,
    _check_read_back,
    _check_create_conflicts,
    _check_updates,
    _check_stale_update,
    _check_update_of_missing,
    _check_races,
    _check_watch,
    _check_handover_to,
)


async def check_backend(
    factory: BackendFactory,
    *,
    prefix: str = "conformance",
    writers: int = 8,
    watch_timeout: float = 10.0,
) -> None:
    """Check that backends made by ``factory`` follow the SPI. Raises on the first violation.

    Checks: a missing record reads as None; create stores the payload and sets a version, and
    create and update return the record they stored (the core confirms writes by that echo);
    create of an existing name conflicts; update with the current version succeeds and gives a
    version never seen before; update with a stale version, or of a missing record, conflicts;
    of ``writers`` clients racing to create, and then to update from one version, exactly one
    wins each race; and, if ``supports_watch``, watch yields the current state first and then
    delivers a change made by another client within ``watch_timeout`` seconds; and
    ``handover_to`` is stored by create and update and returned by get and watch (a cooperative
    handover, :meth:`Lease.request_handover <trio_lease.Lease.request_handover>`, writes it),
    an update writing ``""`` clearing it.
    """
    async with AsyncExitStack() as stack:
        a = await _open(factory, stack)
        b = await _open(factory, stack)
        run = _Run(factory, stack, a, b, prefix, writers, watch_timeout)
        for check in _CHECKS:
            await check(run)
