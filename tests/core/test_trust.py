"""The core trusts no backend answer (docs/design.md §4.8, the trust boundary).

A scripted store rewrites what the backend answers while a true memory store underneath records
what really happened, so each test can compare what the core believed with the truth: unreadable
records are never free and never ours, lying write echoes yield no grant the store does not
show, conflict storms are paced and bounded, untyped exceptions become typed ones, every scope
raises a single error bare, and a wait on a failing backend says so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from trio_lease import (
    AcquireTimeout,
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseBusy,
    LeaseConfigError,
    LeaseLost,
    LeaseProvider,
    LeaseRecord,
    LeaseSettings,
    run_singleton,
)
from trio_lease._algorithm import UNKNOWN_HOLDER
from trio_lease._writing import MAX_CONFLICTS
from trio_lease.backends.memory import MemoryBackend, MemoryStore

pytestmark = pytest.mark.anyio

#: L = 15 s, R = 1.5 s, T = 0.5 s (D = 10 s).
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
L = SETTINGS.heartbeat_timeout
D = SETTINGS.deadline

#: Rewrites a write's answer: (what the store holds now, the version the write expected, None
#: for a create) -> the answer.
Rewrite = Callable[[LeaseRecord, "str | None"], Any]
E = TypeVar("E", bound=BaseException)


class Scripted(MemoryBackend):
    """A memory store whose answers a test rewrites; ``writes`` logs each write's time.

    ``on_get`` rewrites what ``get`` returns; ``on_write`` what create/update return (the write
    itself lands unless ``apply_writes`` is False); ``*_error`` raise instead of answering.
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        super().__init__(store)
        self.on_get: Callable[[LeaseRecord | None], Any] | None = None
        self.on_write: Rewrite | None = None
        self.apply_writes = True
        self.get_error: BaseException | None = None
        self.write_error: BaseException | None = None
        self.gets: list[float] = []
        self.writes: list[float] = []

    async def get(self, name: str) -> LeaseRecord | None:
        self.gets.append(anyio.current_time())
        if self.get_error is not None:
            raise self.get_error
        record = await super().get(name)
        return self.on_get(record) if self.on_get is not None else record

    def _answer(self, stored: LeaseRecord, expected: str | None) -> LeaseRecord:
        answer: LeaseRecord = self.on_write(stored, expected) if self.on_write else stored
        return answer

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self.writes.append(anyio.current_time())
        if self.write_error is not None:
            raise self.write_error
        stored = await super().create(record) if self.apply_writes else record
        return self._answer(stored, None)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        self.writes.append(anyio.current_time())
        if self.write_error is not None:
            raise self.write_error
        stored = await super().update(record, expected_version) if self.apply_writes else record
        return self._answer(stored, expected_version)


def seed(store: MemoryStore, **fields: Any) -> LeaseRecord:
    """Put a record named job in the store directly (as another program would)."""
    return store._commit(LeaseRecord("job", **fields))


def scripted(**fields: Any) -> tuple[MemoryStore, Scripted]:
    """A :class:`Scripted` backend on a new store; with ``fields``, job seeded there first."""
    store = MemoryStore()
    if fields:
        seed(store, **fields)
    return store, Scripted(store)


async def no_grant(
    lease: Lease, expected: type[E], match: str | None = None, wait_for: float | None = None
) -> pytest.ExceptionInfo[E]:
    """``lease.try_held()`` (``held(timeout=wait_for)``) raises ``expected``; no body runs."""
    scope = lease.try_held() if wait_for is None else lease.held(timeout=wait_for)
    with pytest.raises(expected, match=match) as info:
        async with scope:
            pytest.fail("granted")
    return info


def unreadable(problem: str, token: int) -> Callable[[LeaseRecord | None], Any]:
    """A get rewrite: the record as a backend returns one it cannot read."""

    def rewrite(record: LeaseRecord | None) -> Any:
        assert record is not None
        return dataclasses.replace(
            record, holder="", lease_duration=0.0, fencing_token=token, unreadable=problem
        )

    return rewrite


# -- unreadable is never free ---------------------------------------------------------------------


async def test_unreadable_record_is_busy_never_free() -> None:
    """A record read as unreadable (its stored holder says free) makes try_held raise LeaseBusy."""
    _, backend = scripted(holder="", fencing_token=3)
    backend.on_get = unreadable("spec.holderIdentity: expected a string, got a list", 3)
    lease = Lease("job", "me", backend, SETTINGS)
    info = await no_grant(lease, LeaseBusy)
    assert info.value.holder == UNKNOWN_HOLDER
    assert lease.holder() == UNKNOWN_HOLDER
    assert backend.writes == []


async def test_unreadable_record_is_taken_over_only_after_L_unchanged() -> None:
    """An unreadable record with a readable token is taken over once unchanged for L, token+1."""
    store, backend = scripted(holder="", fencing_token=3)
    backend.on_get = unreadable("spec.leaseDurationSeconds: integer out of range", 3)
    lease = Lease("job", "me", backend, SETTINGS)
    start = anyio.current_time()
    async with lease.held(timeout=3 * L) as grant:
        first_write = backend.writes[0]
        assert grant.fencing_token == 4
        assert store.records["job"].holder == lease.identity
    assert first_write - start >= L


async def test_unreadable_token_is_never_taken_over() -> None:
    """With its token unreadable too, the record is never written over: the wait times out."""
    _, backend = scripted(holder="", fencing_token=3)
    backend.on_get = unreadable("spec.leaseTransitions: expected an integer, got a string", -1)
    lease = Lease("job", "me", backend, SETTINGS)
    info = await no_grant(lease, AcquireTimeout, match="unreadable", wait_for=4 * L)
    assert backend.writes == []
    assert info.value.last_error is None


async def test_holder_reading_its_record_unreadable_is_not_renewed_and_stops_at_deadline() -> None:
    """A holder whose re-read is unreadable confirms nothing: its body is cancelled at D."""
    backend = Scripted()
    lease = Lease("job", "me", backend, SETTINGS)
    with pytest.raises(LeaseLost):
        async with lease.held() as grant:
            sent = anyio.current_time()
            backend.write_error = BackendUnavailable("reset")  # forces a re-read
            backend.on_get = unreadable("spec: expected an object, got a list", grant.fencing_token)
            await anyio.sleep(2 * L)
    assert anyio.current_time() - sent <= D + SETTINGS.lease_operation_timeout


# -- write echoes ---------------------------------------------------------------------------------


def _lie_other_holder(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    return dataclasses.replace(stored, holder="someone-else")


def _lie_token(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    return dataclasses.replace(stored, fencing_token=0)


def _lie_no_version(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    return dataclasses.replace(stored, version="")


def _lie_shorter(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    return dataclasses.replace(stored, lease_duration=1.0)


def _lie_old_version(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    assert expected is not None
    return dataclasses.replace(stored, version=expected)


def _lie_unreadable(stored: LeaseRecord, expected: str | None) -> LeaseRecord:
    return dataclasses.replace(stored, holder="", unreadable="metadata: expected an object")


def _lie_not_a_record(stored: LeaseRecord, expected: str | None) -> object:
    return {"kind": "Status", "status": "Failure"}


LIES: list[Rewrite] = [
    _lie_other_holder, _lie_token, _lie_no_version, _lie_old_version, _lie_shorter,
    _lie_unreadable, _lie_not_a_record,
]


def _write_paths(lies: list[Rewrite]) -> list[Any]:
    """(lie, seeded) pairs: seeded=True takes a free record by update, False creates one."""
    return [
        pytest.param(lie, seeded, id=f"{lie.__name__[5:]}-{'update' if seeded else 'create'}")
        for lie in lies
        for seeded in (False, True)
        if seeded or lie is not _lie_old_version  # a create has no old version to echo
    ]


def lied_to(lie: Rewrite, seeded: bool, *, landing: bool) -> tuple[MemoryStore, Scripted, Lease]:
    """A lease whose grant writes are answered by ``lie``, and land in the store or not; if
    ``seeded``, a free record job (token 7) is there before, else there is none."""
    store, backend = scripted(holder="", fencing_token=7) if seeded else scripted()
    backend.apply_writes = landing
    backend.on_write = lie
    return store, backend, Lease("job", "me", backend, SETTINGS)


@pytest.mark.parametrize(("lie", "seeded"), _write_paths(LIES))
async def test_lying_echo_of_a_write_that_did_not_land_yields_no_grant(
    lie: Rewrite, seeded: bool
) -> None:
    """A grant write answered with a lying echo, not applied by the store: no grant, typed error."""
    store, _, lease = lied_to(lie, seeded, landing=False)
    await no_grant(lease, BackendProtocolError, match="does not show our grant")
    assert store.records.get("job") is None or store.records["job"].holder == ""


@pytest.mark.parametrize(("lie", "seeded"), _write_paths(LIES))
async def test_lying_echo_of_a_write_that_landed_yields_the_stored_grant(
    lie: Rewrite, seeded: bool
) -> None:
    """A grant write that landed but was answered with a lie: the fresh read's grant, as stored."""
    store, backend, lease = lied_to(lie, seeded, landing=True)
    async with lease.try_held() as grant:
        backend.on_write = None
        stored = store.records["job"]
        assert stored.holder == grant.identity == lease.identity
        assert stored.fencing_token == grant.fencing_token == (8 if seeded else 1)


async def test_lying_renewal_echoes_never_extend_the_deadline() -> None:
    """Renewals answered with the old version are unconfirmed: the body is cancelled at D."""
    backend = Scripted()
    lease = Lease("job", "me", backend, SETTINGS)
    with pytest.raises(LeaseLost, match="deadline"):
        async with lease.held():
            sent = anyio.current_time()
            backend.on_write = _lie_old_version
            await anyio.sleep(2 * L)
    assert anyio.current_time() - sent <= D + SETTINGS.lease_operation_timeout
    assert len(backend.writes) > 3  # it kept renewing; only the echoes were wrong


async def test_lying_release_echo_is_an_unknown_outcome() -> None:
    """release() answered with someone else's record raises BackendUnavailable (outcome unknown)."""
    backend = Scripted()
    lease = Lease("job", "me", backend, SETTINGS)
    async with lease.host():
        assert await lease.acquire()
        backend.on_write = _lie_other_holder
        with pytest.raises(BackendUnavailable, match="release"):
            await lease.release()


async def test_a_read_that_drops_the_token_never_makes_a_grant_token_repeat() -> None:
    """A reply missing the token (read as 0, as a record no library of ours wrote) after our
    grant 1 was released: the next grant goes above every token this lease has seen, so the
    sequence 1, 1 the hostile-server suite found cannot happen (tokens strictly increase)."""
    backend = Scripted()
    lease = Lease("job", "me", backend, SETTINGS)
    async with lease.try_held() as first:
        pass
    backend.on_get = lambda record: (
        dataclasses.replace(record, fencing_token=0) if record is not None else None
    )
    async with lease.try_held() as second:
        stored = await MemoryBackend.get(backend, "job")
        assert stored is not None and stored.fencing_token == second.fencing_token
    assert (first.fencing_token, second.fencing_token) == (1, 2)



# -- bounded, paced loops -------------------------------------------------------------------------


async def test_conflict_storm_is_paced_and_bounded_in_try_held() -> None:
    """Every write conflicts while reads show the lease free: a few paced writes, then an error."""
    backend = Scripted()
    backend.write_error = ConflictError("always")
    lease = Lease("job", "me", backend, SETTINGS)
    await no_grant(lease, BackendUnavailable, match="conflicted")
    assert len(backend.writes) == MAX_CONFLICTS
    gaps = [b - a for a, b in zip(backend.writes, backend.writes[1:], strict=False)]
    assert all(gap > 0 for gap in gaps), gaps


async def test_conflict_storm_in_a_wait_never_spins() -> None:
    """held(timeout=10 s) against a store that conflicts on every write makes few, spaced writes."""
    backend = Scripted()
    backend.write_error = ConflictError("always")
    lease = Lease("job", "me", backend, SETTINGS)
    info = await no_grant(lease, AcquireTimeout, wait_for=10)
    assert isinstance(info.value.last_error, BackendUnavailable)
    assert len(backend.writes) < 60
    assert len(set(backend.writes)) == len(backend.writes)  # no two at the same instant


# -- typed errors, one exception tree -------------------------------------------------------------


@pytest.mark.parametrize(
    "error", [TypeError("x"), KeyError("x"), AttributeError("x"), RecursionError(), OverflowError()]
)
async def test_untyped_exception_from_a_backend_becomes_a_protocol_error(
    error: Exception,
) -> None:
    """A backend raising outside the exception tree gives BackendProtocolError (cause kept)."""
    backend = Scripted()
    backend.get_error = error
    lease = Lease("job", "me", backend, SETTINGS)
    info = await no_grant(lease, BackendProtocolError, match=type(error).__name__)
    assert info.value.__cause__ is error


async def test_untyped_exception_from_a_write_becomes_a_protocol_error() -> None:
    """A create raising KeyError (and not landing) gives BackendProtocolError, not KeyError."""
    backend = Scripted()
    backend.write_error = KeyError("metadata")
    lease = Lease("job", "me", backend, SETTINGS)
    await no_grant(lease, BackendProtocolError, match="KeyError")


@pytest.mark.parametrize(
    "error",
    [BackendAuthError("forbidden"), LeaseConfigError("no namespace"), BackendError("odd")],
    ids=["auth", "config", "backend"],
)
async def test_held_raises_errors_retrying_cannot_fix_bare_and_at_once(error: Exception) -> None:
    """held(timeout=...) raises a 403/config error itself at once, never an ExceptionGroup."""
    backend = Scripted()
    backend.get_error = error
    lease = Lease("job", "me", backend, SETTINGS)
    start = anyio.current_time()
    info = await no_grant(lease, type(error), wait_for=60)
    assert info.value is error
    assert anyio.current_time() - start < 1


async def test_run_singleton_raises_an_auth_error_bare() -> None:
    """run_singleton ends with the backend's BackendAuthError itself, not a group."""
    backend = Scripted()
    error = BackendAuthError("forbidden")
    backend.get_error = error
    lease = Lease("job", "me", backend, SETTINGS)

    async def fn(ctx: object) -> None:
        pytest.fail("ran without the lease")

    with pytest.raises(BackendAuthError) as info:
        await run_singleton(lease, fn)
    assert info.value is error


def _chained_value_error() -> ValueError:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ValueError("body") from inner
    except ValueError as exc:
        return exc


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "interrupt"])
async def test_held_lets_a_body_base_exception_out_bare(error: BaseException) -> None:
    """A body raising SystemExit or KeyboardInterrupt leaves held() as itself, lease released."""
    backend = MemoryBackend()
    lease = Lease("job", "me", backend, SETTINGS)
    with pytest.raises(type(error)) as info:
        async with lease.held():
            raise error
    assert info.value is error
    assert backend.store.records["job"].holder == ""


async def test_lease_host_passes_the_body_exception_unchanged() -> None:
    """`async with lease.host():` lets the body's ValueError out bare, with its own cause kept."""
    lease = Lease("job", "me", MemoryBackend(), SETTINGS)
    error = _chained_value_error()
    cause = error.__cause__
    with pytest.raises(ValueError) as info:
        async with lease.host():
            assert await lease.acquire()
            raise error
    assert info.value is error
    assert info.value.__cause__ is cause
    assert not lease.check_lease()


async def test_provider_host_passes_the_body_exception_unchanged(tmp_path: Path) -> None:
    """`async with provider:` lets the body's ValueError out bare, with its own cause kept."""
    config = tmp_path / "leases.toml"
    config.write_text(
        '[jobs]\nlease-class = "memory"\nheartbeat-timeout = "15s"\n'
        'heartbeat-interval = "1.5s"\nlease-operation-timeout = "0.5s"\n'
    )
    provider = LeaseProvider(config)
    error = _chained_value_error()
    cause = error.__cause__
    with pytest.raises(ValueError) as info:
        async with provider:
            lease = provider.get_lease("job", "jobs", "me")
            assert await lease.acquire()
            raise error
    assert info.value is error
    assert info.value.__cause__ is cause


# -- waiting tells the truth ----------------------------------------------------------------------


class _Timed(logging.Handler):
    """Keeps (virtual time, record) of every WARNING of the trio_lease logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, logging.LogRecord]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((anyio.current_time(), record))


@pytest.fixture
def warnings_seen() -> Any:
    handler = _Timed()
    logger = logging.getLogger("trio_lease")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_failing_backend_is_warned_about_within_seconds_and_named_on_timeout(
    warnings_seen: _Timed,
) -> None:
    """A wait on an unreachable backend warns within 2 s and AcquireTimeout names the last error."""
    backend = Scripted()
    backend.get_error = BackendUnavailable("could not connect to the API server")
    lease = Lease("job", "me", backend, SETTINGS)
    start = anyio.current_time()
    info = await no_grant(lease, AcquireTimeout, wait_for=20)
    assert info.value.last_error is backend.get_error
    assert "could not connect" in str(info.value) and "failing for" in str(info.value)
    failing = [(t, r) for t, r in warnings_seen.seen if "cannot use the backend" in r.getMessage()]
    assert failing, [r.getMessage() for _, r in warnings_seen.seen]
    assert failing[0][0] - start <= 2.0
    assert all(r.exc_info is None for _, r in failing)  # no traceback
    assert len(failing) <= 2  # rate-limited (every 30 s) over a 20 s wait


async def test_wait_reports_recovery_and_then_acquires(warnings_seen: _Timed) -> None:
    """When the backend answers again the wait says so, clears last_error and acquires."""
    backend = Scripted()
    backend.get_error = BackendUnavailable("connection refused")
    lease = Lease("job", "me", backend, SETTINGS)

    async def heal() -> None:
        await anyio.sleep(5)
        assert lease.last_error is backend.get_error and lease.failing_since is not None
        backend.get_error = None

    async with anyio.create_task_group() as tg:
        tg.start_soon(heal)
        async with lease.held(timeout=30) as grant:
            assert grant.fencing_token == 1
    assert lease.last_error is None and lease.failing_since is None
    assert any("answers again" in r.getMessage() for _, r in warnings_seen.seen)



async def test_a_wait_outlasts_a_backend_down_for_hours(warnings_seen: _Timed) -> None:
    """Two hours of an unreachable backend (thousands of failed attempts, each backing off up
    to the poll interval) end in AcquireTimeout, not an OverflowError from the backoff (it
    doubled without bound: 2**1024 overflowed a float after ~35 minutes); warnings stay
    rate-limited."""
    backend = Scripted()
    backend.get_error = BackendUnavailable("connection refused")
    lease = Lease("job", "me", backend, SETTINGS)
    info = await no_grant(lease, AcquireTimeout, wait_for=2 * 3600)
    assert info.value.last_error is backend.get_error
    failing = [r for _, r in warnings_seen.seen if "cannot use the backend" in r.getMessage()]
    # Every WARN_EVERY (30 s), at the first attempt after it (attempts come every R + jitter).
    assert 2 * 3600 / (30 + 2 * SETTINGS.wait_interval) <= len(failing) <= 2 * 3600 / 30 + 1


class _BadWatch(MemoryBackend):
    """A memory store whose watch yields ``item`` after the first state, or raises ``error``."""

    def __init__(self, item: object = None, error: Exception | None = None) -> None:
        super().__init__()
        self.item = item
        self.error = error
        self.reads = 0

    async def watch(self, name: str) -> Any:
        yield await self.get(name)
        if self.error is not None:
            raise self.error
        yield self.item


@pytest.mark.parametrize(
    "backend",
    [_BadWatch(item={"kind": "Lease"}), _BadWatch(error=AttributeError("metadata"))],
    ids=["yields-a-dict", "raises-attribute-error"],
)
async def test_watch_holder_turns_a_bad_watch_into_a_protocol_error(backend: _BadWatch) -> None:
    """watch_holder() raises BackendProtocolError for a watch item that is not a record."""
    lease = Lease("job", "me", backend, SETTINGS)
    seen = []
    with pytest.raises(BackendProtocolError, match="watching lease 'job'"):
        async with lease.watch_holder() as holders:
            async for holder in holders:
                seen.append(holder)
    assert seen == [None]


async def test_waiting_contender_survives_a_bad_watch_and_acquires_on_release() -> None:
    """A contender whose watch breaks falls back to polling and still takes a released lease."""
    store = MemoryStore()
    seed(store, holder="other", fencing_token=1, lease_duration=15)
    backend = _BadWatch(error=TypeError("items"))
    backend.store = store
    lease = Lease("job", "me", backend, SETTINGS)

    async def release_later() -> None:
        await anyio.sleep(3)
        current = store.records["job"]
        store._commit(dataclasses.replace(current, holder=""))

    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(release_later)
        async with lease.held(timeout=10) as grant:
            assert grant.fencing_token == 2
            assert anyio.current_time() - start < 3 + SETTINGS.wait_interval + 1


async def test_a_watch_meeting_an_error_retrying_cannot_fix_ends_the_wait_at_once() -> None:
    """When the store starts refusing us (TLS, CRD gone) the watch wakes the wait, which ends."""
    store = MemoryStore()
    seed(store, holder="other", fencing_token=1, lease_duration=15)
    error = LeaseConfigError("the server's TLS certificate does not verify")

    class Refusing(_BadWatch):
        """Answers the first read; then every read and the watch fail with ``error``."""

        async def get(self, name: str) -> LeaseRecord | None:
            if self.reads:
                raise error
            self.reads += 1
            return await super().get(name)

    backend = Refusing(error=error)
    backend.reads = 0
    backend.store = store
    lease = Lease("job", "me", backend, SETTINGS)
    start = anyio.current_time()
    info = await no_grant(lease, LeaseConfigError, wait_for=60)
    assert info.value is error
    assert anyio.current_time() - start < SETTINGS.wait_interval
