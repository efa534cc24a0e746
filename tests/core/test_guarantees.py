"""docs/design.md §4: one or more named tests per guarantee, on every backend, on asyncio and trio.

docs/guarantees.md maps each guarantee to these tests.

Every test takes ``world``, which this module sets to ``every_world`` (tests/conftest.py): the
memory backend and the Kubernetes backend on the in-process emulator (both lease kinds) on
virtual time, and SQLite and a real etcd on real time with short settings (L = 1.2 s), each test
bounded there so that a hang fails. A test excluded on a backend is skipped there with its reason.
Here the Kubernetes backend also runs with every request through httpx (``kubernetes-httpx``),
the path a proxy (``HTTPS_PROXY``, kubeconfig ``proxy-url``) takes.

Every duration here is derived from ``world.settings``, so the same tests run on virtual and on
real time. On virtual time every value and bound is the one written in the comments (L = 15 s,
R = 1.5 s, T = 0.5 s, D = 10 s) and ``world.tolerance`` is 0; on real time it is the slack that
scheduling jitter and request latency may add. The safety bounds a guarantee promises (no
takeover before L, the holder cancelled T_stop before any takeover) never get slack.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel
import pytest

from tests.conftest import STORES, Opener, Store, World, parametrized_store
from trio_lease import (
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseInfo,
    LeaseLost,
    LeaseObserver,
    LeaseRecord,
)
from trio_lease._identity import incarnation
from trio_lease.abc import LeaseBackend
from trio_lease.testing import FaultyBackend

pytestmark = pytest.mark.anyio


def _kubernetes_over_httpx(request: pytest.FixtureRequest) -> Callable[[], LeaseBackend]:
    from tests.backends.kubernetes._helpers import HttpxOnly, emulator_with_crd, make_backend

    transport = HttpxOnly(emulator_with_crd().transport())
    return lambda: make_backend(transport)


_OVER_HTTPX: Opener = _kubernetes_over_httpx
#: Every store of ``every_world``, and the Kubernetes backend on the httpx path (proxies).
GUARANTEE_STORES = (*STORES, Store("kubernetes-httpx", _OVER_HTTPX))


@pytest.fixture(params=GUARANTEE_STORES, ids=[store.name for store in GUARANTEE_STORES])
def world_store(request: pytest.FixtureRequest) -> Store:
    """Each store of :data:`GUARANTEE_STORES` (one excluded on a store is skipped there)."""
    return parametrized_store(request)


@pytest.fixture
def world(every_world: World) -> World:
    """A World on every backend (``every_world``), instead of the core tests' memory world."""
    return every_world


def _about(world: World, expected: float) -> object:
    """``expected``, up to float rounding on virtual time and up to world.tolerance on real time.

    On real time the tolerance is absolute only: clocks read large values (trio's starts at a
    random offset of up to days), so a relative tolerance would hide whole seconds.
    """
    if world.tolerance:
        return pytest.approx(expected, rel=0, abs=world.tolerance)
    return pytest.approx(expected)


class _Releases(LeaseObserver):
    """Records each release's ``written`` (False: attempted, not written within T)."""

    def __init__(self) -> None:
        self.written: list[bool] = []

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        self.written.append(written)


class _Losses(LeaseObserver):
    """Records each loss's ``cause``."""

    def __init__(self) -> None:
        self.causes: list[str] = []

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        self.causes.append(cause)


def _holds(lease: Lease, losses: _Losses) -> bool:
    """``lease.check_lease()``, except that a grant lost by its deadline raises its LeaseLost.

    On a real store, a loss by the deadline means the store answered no renewal for L (the
    machine's load): tests/conftest.py runs such a test again (``STARVED``), as it does when
    ``held()`` raises it. Any other loss fails the test, and on virtual time every loss does.
    """
    if lease.check_lease():
        return True
    for cause in losses.causes:
        if cause.startswith("no renewal was confirmed before the holder's deadline"):
            raise LeaseLost(lease.name, cause)
    return False


async def _plant(world: World, record: LeaseRecord) -> LeaseRecord:
    """Write a record directly, as another process would."""
    backend = world.backend()
    current = await backend.get(record.name)
    if current is None:
        return await backend.create(record)
    return await backend.update(record, current.version)


async def _partition_race(
    holder: Lease, contender: Lease, partitioned: FaultyBackend, *, cut_after: float
) -> tuple[float, float]:
    """Holder acquires, is cut off from the store after ``cut_after`` s, and must lose;
    a contender waits for it. Returns (holder's body cancelled at, contender acquired at).

    A holder that loses before the cut (a real-time store that confirmed no renewal for D)
    says nothing of the partition: its LeaseLost is raised, which reruns the test (STARVED in
    tests/conftest.py) on a real-time store and fails it on virtual time.
    """
    times: dict[str, float] = {}
    holding = anyio.Event()
    starved: list[LeaseLost] = []

    async def hold() -> None:
        with pytest.raises(LeaseLost, match="deadline") as lost:
            async with holder.held():
                holding.set()
                await anyio.sleep(cut_after)
                partitioned.pause()
                try:
                    await anyio.sleep_forever()
                finally:
                    times["cancelled"] = anyio.current_time()
        if "cancelled" not in times:
            starved.append(lost.value)

    async def contend() -> None:
        await holding.wait()
        await anyio.sleep(0.01)
        async with contender.held():
            times["taken"] = anyio.current_time()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        tg.start_soon(contend)
    if starved:
        raise starved[0]
    return times["cancelled"], times["taken"]


# -- §4.1 contenders never trust another machine's clock ------------------------------------------


async def test_g1_contender_waits_full_timeout_on_its_own_clock(world: World) -> None:
    """§4.1: a silent holder's record is taken over only after L of the contender's own time."""
    L = world.settings.heartbeat_timeout
    await _plant(world, LeaseRecord(name="job", holder="dead_1", lease_duration=L, fencing_token=7))
    contender = world.lease("b")
    start = anyio.current_time()
    async with contender.held() as grant:
        waited = anyio.current_time() - start
    assert waited >= L
    assert waited < L + world.settings.wait_interval * 1.3 + world.tolerance
    assert grant.fencing_token == 8


async def test_g1_wall_clock_timestamps_are_never_trusted(world: World) -> None:
    """§4.1: record timestamps from a far past or future, and our own wall clock, change nothing."""
    L = world.settings.heartbeat_timeout
    ancient = datetime(2000, 1, 1, tzinfo=UTC)
    for stamp, skew in (
        (ancient, timedelta(hours=5)),
        (ancient + timedelta(days=20000), -timedelta(days=3)),
    ):
        await _plant(
            world,
            LeaseRecord(
                name="job",
                holder="dead_1",
                lease_duration=L,
                fencing_token=1,
                acquired_at=stamp,
                renewed_at=stamp,
            ),
        )
        contender = world.lease("b", wall_clock=lambda skew=skew: datetime.now(UTC) + skew)
        with anyio.move_on_after(L * 0.99):
            async with contender.held():
                pytest.fail("took over before L on its own clock")
        start = anyio.current_time()
        async with contender.held():
            assert anyio.current_time() - start <= L


async def test_g1_contender_honours_a_longer_record_duration(world: World) -> None:
    """§4.1: when the record promises a longer lease_duration than our L, we wait that long."""
    L = world.settings.heartbeat_timeout
    await _plant(world, LeaseRecord(name="job", holder="slow_1", lease_duration=3 * L))
    start = anyio.current_time()
    async with world.lease("b").held():
        assert anyio.current_time() - start >= 3 * L


async def test_g1_each_renewal_restarts_the_contenders_countdown(world: World) -> None:
    """§4.1: a live holder renewing every R is never taken over, however long it holds."""
    holder, contender = world.lease("a"), world.lease("b")
    async with holder.held():
        with anyio.move_on_after(10 * world.settings.heartbeat_timeout) as waiting:
            async with contender.held():
                pytest.fail("a live holder was taken over")
        assert waiting.cancelled_caught
        assert holder.check_lease()


async def test_g1_takeover_is_compare_and_swap_on_the_observed_version(world: World) -> None:
    """§4.1: if the record changes after the contender judged it expired, the takeover fails."""
    L = world.settings.heartbeat_timeout
    planted = await _plant(world, LeaseRecord(name="job", holder="x_1", lease_duration=L))
    contender = world.lease("b")
    backend = world.backend()
    # The contender observes version v and waits L; just before it acts, x renews (new version).
    # (On real time, its read returned a little after we started counting: stop a bit earlier.)
    with anyio.move_on_after(L - 0.001 - world.tolerance):
        async with contender.held():
            pytest.fail("early takeover")
    renewed = await backend.update(planted, planted.version)
    with anyio.move_on_after(L * 0.99):
        async with contender.held():
            pytest.fail("took over a record whose version changed")
    current = await backend.get("job")
    assert current is not None and current.version == renewed.version


# -- §4.2 the holder stops first ------------------------------------------------------------------


async def test_g2_deadline_is_anchored_at_send_time_not_reply(world: World) -> None:
    """§4.2: with slow replies, the holder's deadline counts from when its write was sent."""
    s = world.settings
    D = s.deadline
    # 0.4 s, below T = 0.5 s: replies arrive, late (on real time, the tolerance is left within T
    # for the store's own latency, so that renewals still succeed).
    latency = 0.8 * s.lease_operation_timeout - world.tolerance
    slow = world.faulty(reply_latency=latency)
    lease = world.lease("a", backend=slow)
    sent = anyio.current_time()
    async with lease.held() as grant:
        entered = anyio.current_time()
        # The get (0.4 s) came first; the create was sent at sent + 0.4 and replied at + 0.8.
        # On real time the store adds its own latency, but the create was still sent at least
        # `latency` after `sent` (after the get's reply) and at least `latency` before `entered`
        # (its reply took that long): on virtual time both bounds are sent + 0.4 + D.
        assert sent + latency + D - 1e-9 <= grant.deadline <= entered - latency + D + 1e-9
        await anyio.sleep(s.heartbeat_interval + 2 * s.lease_operation_timeout)
        assert grant.deadline < anyio.current_time() + D - (latency - 0.01)


async def test_g2_holder_cancels_body_before_any_contender_takes_over(world: World) -> None:
    """§4.2: partitioned from the store, the holder's body is cancelled D after its last
    confirmed renewal was sent, and stop_timeout before a contender can take over."""
    s = world.settings
    partitioned = world.faulty()
    holder, contender = world.lease("a", backend=partitioned), world.lease("b")
    # Cut the holder off after its third renewal has completed (on real time that renewal may
    # still be in flight at 3R: the tolerance lets it finish).
    cancelled, taken = await _partition_race(
        holder, contender, partitioned, cut_after=3 * s.heartbeat_interval + world.tolerance
    )
    assert cancelled + s.stop_timeout < taken
    assert taken - cancelled >= s.safety_margin - s.heartbeat_interval - world.tolerance


async def test_g2_every_request_is_bounded_by_operation_timeout(world: World) -> None:
    """§4.2: against a hanging store, no call takes longer than T, and the loss comes by D."""
    hanging = world.faulty()
    lease = world.lease("a", backend=hanging)

    def requests() -> int:
        return sum(hanging.calls[op] for op in ("get", "create", "update"))

    with pytest.raises(LeaseLost):
        async with lease.held() as grant:
            before = requests()
            hanging.pause()
            await anyio.sleep_forever()
    # The loss came exactly at the deadline: no hanging request held the holder past it.
    assert anyio.current_time() == _about(world, grant.deadline)
    # Each attempt gave up after T, so several (a renewal, then re-reads) fitted before D.
    # (Watch streams are not requests bounded by T: they are left out of the count.)
    assert requests() - before >= 2
    hanging.resume()


async def test_g2_unknown_outcome_counts_as_not_renewed(world: World) -> None:
    """§4.2: a renewal applied but unconfirmed does not move the deadline; a re-read keeps the
    grant (it is still ours), and the next confirmed renewal moves it."""
    s = world.settings
    lossy = world.faulty()
    lease = world.lease("a", backend=lossy)
    async with lease.held() as grant:
        first_deadline = grant.deadline
        lossy.lose_next_replies(1)
        await anyio.sleep(s.heartbeat_interval + 0.01)  # the first renewal's reply is lost
        assert grant.deadline == first_deadline
        await anyio.sleep(s.lease_operation_timeout)  # re-read, then a confirmed renewal
        assert grant.deadline > first_deadline
        assert lease.check_lease()
        assert lossy.calls["get"] >= 2


async def test_g2_clock_rate_error_within_tolerance_keeps_exclusion(world: World) -> None:
    """§4.2: a holder clock running slow by rho and a contender clock running fast by rho still
    leave the holder cancelled before the takeover."""
    s = world.settings
    rho = s.clock_rate_tolerance
    partitioned = world.faulty()
    slow = lambda: anyio.current_time() * (1 - rho)  # noqa: E731
    fast = lambda: anyio.current_time() * (1 + rho)  # noqa: E731
    holder = world.lease("a", backend=partitioned, clock=slow)
    contender = world.lease("b", clock=fast)
    cancelled, taken = await _partition_race(holder, contender, partitioned, cut_after=0.0)
    assert cancelled + s.stop_timeout < taken


# -- §4.3 fencing ---------------------------------------------------------------------------------


async def test_g3_fencing_token_increases_on_every_new_grant(world: World) -> None:
    """§4.3: from free, same owner after release, another owner, takeover after expiry: each
    new grant's token is greater than every earlier one; renewals keep it."""
    s = world.settings
    a, b = world.lease("a"), world.lease("b")
    tokens = []
    async with a.held() as grant:
        tokens.append(grant.fencing_token)
        await anyio.sleep(5 * s.heartbeat_interval)  # several renewals
        assert grant.fencing_token == tokens[0]
    async with a.held() as grant:
        tokens.append(grant.fencing_token)
    async with b.held() as grant:
        tokens.append(grant.fencing_token)
    # Takeover from a crashed holder: c's writes stop reaching the store.
    dead = world.faulty()
    crashed = world.lease("c", backend=dead)
    holding = anyio.Event()

    async def crash_while_holding() -> None:
        with pytest.raises(LeaseLost):
            async with crashed.held() as grant:
                tokens.append(grant.fencing_token)
                dead.pause()
                holding.set()
                await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(crash_while_holding)
        await holding.wait()
        await anyio.sleep(2 * s.lease_operation_timeout)  # 1 s
        async with b.held() as grant:
            tokens.append(grant.fencing_token)
    assert len(tokens) == 5
    assert tokens == sorted(set(tokens)), tokens


async def test_g3_grant_exposes_token_to_guarded_work(world: World) -> None:
    """§4.3: the token a body sees equals the token stored in the record."""
    backend = world.backend()
    async with world.lease("a", backend=backend).held() as grant:
        record = await backend.get("job")
        assert record is not None and record.fencing_token == grant.fencing_token


# -- §4.4 release is safe and fast ----------------------------------------------------------------


async def test_g4_release_only_after_body_and_its_cleanup_exit(world: World) -> None:
    """§4.4: while the body's finally runs, the record still names us; after exit it is free."""
    backend = world.backend()
    lease = world.lease("a", backend=backend)
    async with lease.held():
        try:
            pass
        finally:
            await anyio.sleep(2 * world.settings.lease_operation_timeout)  # 1 s
            during = await backend.get("job")
    after = await backend.get("job")
    assert during is not None and during.holder == lease.identity
    assert after is not None and after.holder == ""


async def test_g4_released_lease_is_acquirable_at_once(world: World) -> None:
    """§4.4: after a release the next owner acquires without waiting for the timeout."""
    T = world.settings.lease_operation_timeout
    a, b = world.lease("a"), world.lease("b")
    async with a.held():
        pass
    start = anyio.current_time()
    async with b.held():
        assert anyio.current_time() - start < T + world.tolerance


async def test_g4_release_keeps_the_token_history(world: World) -> None:
    """§4.4: release writes an empty holder and keeps the fencing token."""
    backend = world.backend()
    async with world.lease("a", backend=backend).held() as grant:
        token = grant.fencing_token
    record = await backend.get("job")
    assert record is not None and record.holder == "" and record.fencing_token == token


async def test_g4_release_never_clobbers_a_new_holder(world: World) -> None:
    """§4.4: if another owner holds the record when we release, our release writes nothing."""
    L = world.settings.heartbeat_timeout
    backend = world.backend()
    lease = world.lease("a")
    lost = False
    try:
        async with lease.held() as grant:
            # An operator force-releases and b takes the lease while a still runs; again if a's
            # renewal moved the record between the read and the write (renewals on real time).
            while True:
                current = await backend.get("job")
                assert current is not None
                taken = LeaseRecord(
                    name="job", holder="b_1", lease_duration=L,
                    fencing_token=grant.fencing_token + 1,
                )
                try:
                    await backend.update(taken, current.version)
                    break
                except ConflictError:
                    assert world.tolerance, "no renewal can interleave on virtual time"
    except LeaseLost:
        # On a real store a's watch can report the takeover before b's write has returned:
        # a then stops as lost instead of releasing, and must not write either.
        lost = True
    assert not lost or world.tolerance, "on virtual time the body leaves before the watch"
    final = await backend.get("job")
    assert final is not None and final.holder == "b_1"


async def test_g4_release_is_shielded_and_bounded(world: World) -> None:
    """§4.4: an outer cancel still releases; a hanging store delays the exit by at most T."""
    T = world.settings.lease_operation_timeout
    backend = world.backend()
    # A real store on a loaded machine can answer the release's read and write later than T:
    # the release then gives up at T and the lease expires after L, as documented. There, up
    # to three tries (each on its own lease); every try that leaves the lease held must have
    # attempted its release and reported it unwritten, and one try must release.
    for attempt in range(3 if world.tolerance else 1):
        releases = _Releases()
        name = f"job-{attempt}"
        # The outer cancel comes once the grant is held: a timer could fire while a slow store
        # still answers the acquire, and then there is nothing to release.
        with anyio.CancelScope() as outer:
            async with world.lease("a", backend=backend, name=name, observers=[releases]).held():
                outer.cancel()
                await anyio.sleep_forever()
        assert outer.cancelled_caught
        record = await backend.get(name)
        assert record is not None
        if record.holder == "":
            assert releases.written == [True]
            break
        assert world.tolerance and releases.written == [False], (record, releases.written)
    else:
        pytest.fail("no release was written in three tries on a real store")

    hanging = world.faulty()
    lease = world.lease("c", backend=hanging, name="other")
    async with lease.held():
        hanging.pause()
        exit_started = anyio.current_time()
    assert anyio.current_time() - exit_started <= T + 1e-9 + world.tolerance
    hanging.resume()


# -- §4.5 structured ------------------------------------------------------------------------------


async def test_g5_loss_cancels_body_and_raises_bare_lease_lost(world: World) -> None:
    """§4.5: a takeover cancels the body; a bare LeaseLost (no ExceptionGroup) is raised."""
    backend = world.backend()
    lease = world.lease("a")
    reached_end = False
    with pytest.raises(LeaseLost) as info:
        async with lease.held():
            current = await backend.get("job")
            assert current is not None
            await backend.update(
                LeaseRecord(name="job", holder="thief_1", fencing_token=99), current.version
            )
            await anyio.sleep(4 * world.settings.heartbeat_timeout)  # 60 s
            reached_end = True
    assert type(info.value) is LeaseLost
    assert "thief_1" in str(info.value)
    assert not reached_end
    assert not lease.check_lease()


async def test_g5_outer_cancellation_passes_through_unchanged(world: World) -> None:
    """§4.5: an outer cancel scope catches its own cancellation; no LeaseLost appears."""
    lease = world.lease("a")
    with anyio.move_on_after(world.settings.heartbeat_timeout / 3) as outer:  # 5 s
        async with lease.held():
            await anyio.sleep_forever()
    assert outer.cancelled_caught


async def test_g5_renewals_continue_while_body_cleans_up(world: World) -> None:
    """§4.5: after an outer cancel, a body cleanup longer than the timeout keeps the lease."""
    s = world.settings
    backend = world.backend()
    losses = _Losses()
    lease = world.lease("a", backend=backend, observers=[losses])
    observed: list[bool] = []
    # The outer cancel comes once the grant is held (a timer could fire during a slow acquire).
    with anyio.CancelScope() as outer:
        async with lease.held():
            outer.cancel()
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(2 * s.heartbeat_timeout)  # 30 s
                    observed.append(_holds(lease, losses))
                    record = await backend.get("job")
                    observed.append(record is not None and record.holder == lease.identity)
    assert outer.cancelled_caught
    assert observed == [True, True]


async def test_g5_body_deadline_follows_renewals(world: World) -> None:
    """§4.5: the body's cancel scope carries the grant's deadline, pushed forward by every
    confirmed renewal: a healthy holder's body outlives many first deadlines uncancelled."""
    L = world.settings.heartbeat_timeout
    lease = world.lease("a")
    async with lease.held() as grant:
        first = grant.deadline
        await anyio.sleep(5 * L)  # would be cancelled at `first` if renewals did not push it
        assert grant.deadline > first + 4 * L
        grant.check()
    assert not lease.check_lease()


async def test_g5_body_exception_propagates_bare(world: World) -> None:
    """§4.5: an error in the body reaches the caller as itself, and the lease is released."""
    backend = world.backend()
    with pytest.raises(KeyError):
        async with world.lease("a", backend=backend).held():
            raise KeyError("boom")
    record = await backend.get("job")
    assert record is not None and record.holder == ""


async def test_g5_no_task_outlives_held(world: World) -> None:
    """§4.5: once held() has exited, none of its tasks are running."""
    before = len(anyio.get_running_tasks())
    async with world.lease("a").held():
        assert len(anyio.get_running_tasks()) > before
    await anyio.lowlevel.checkpoint()
    assert len(anyio.get_running_tasks()) == before


async def test_g5_no_task_outlives_the_acquire_host(world: World) -> None:
    """§4.5: the heartbeat of acquire() lives and ends with `async with lease.host():`."""
    before = len(anyio.get_running_tasks())
    lease = world.lease("a")
    async with lease.host():
        assert await lease.acquire()
        assert len(anyio.get_running_tasks()) > before
    assert len(anyio.get_running_tasks()) == before
    assert not lease.check_lease()


# -- §4.6 reentrant per owner ---------------------------------------------------------------------


async def test_g6_same_owner_reenters_and_shares_the_grant(world: World) -> None:
    """§4.6: nested held() by one owner shares the token; the lease stays held until the outer."""
    backend = world.backend()
    lease = world.lease("a", backend=backend)
    other_object = world.lease("a")  # same owner, another Lease object in this process
    async with lease.held() as outer:
        async with lease.held() as inner, other_object.held() as third:
            assert inner.fencing_token == outer.fencing_token == third.fencing_token
        record = await backend.get("job")
        assert record is not None and record.holder == lease.identity
        assert lease.check_lease()
    record = await backend.get("job")
    assert record is not None and record.holder == ""


async def test_g6_other_owner_never_acquires_a_live_lease(world: World) -> None:
    """§4.6: acquire() by another owner returns False while the lease is live."""
    s = world.settings
    tries = round(2 * s.heartbeat_timeout / s.heartbeat_interval)  # 20, over 2L
    unanswered = 0
    losses = _Losses()
    a, b = world.lease("a", observers=[losses]), world.lease("b")
    async with a.host(), b.host():
        assert await a.acquire()
        assert await a.acquire()  # reentrant
        for _ in range(tries):
            try:
                assert not await b.acquire()
            except BackendUnavailable:
                # A real store under load may not answer b's read within T (etcd's own
                # DEADLINE_EXCEEDED at T = 0.2 s was seen in CI): acquire() then raises, as
                # documented, which does not acquire either. Never on virtual time.
                if not world.tolerance:
                    raise
                unanswered += 1
            await anyio.sleep(s.heartbeat_interval)
        assert _holds(a, losses) and not b.check_lease()
    # Most tries must have been answered, or the test would show nothing about a live lease.
    assert unanswered <= tries // 4, f"{unanswered} of {tries} acquire() calls got no answer"


# -- §4.7 owner identity --------------------------------------------------------------------------


async def test_g7_identity_is_owner_plus_incarnation(world: World) -> None:
    """§4.7: the holder written to the record is the owner name plus this process's incarnation."""
    lease = world.lease("pod-a")
    assert lease.identity == f"pod-a_{incarnation()}"
    async with lease.held() as grant:
        assert grant.identity == lease.identity and grant.owner == "pod-a"


async def test_g7_restarted_process_does_not_inherit_a_live_lease(world: World) -> None:
    """§4.7: a record held by the same owner name from an earlier incarnation is not ours."""
    await _plant(
        world,
        LeaseRecord(
            name="job",
            holder="pod-a_0123456789ab",
            lease_duration=world.settings.heartbeat_timeout,
            fencing_token=4,
        ),
    )
    lease = world.lease("pod-a")
    async with lease.host():
        assert not await lease.acquire()


def test_g7_forked_child_gets_a_new_incarnation() -> None:
    """§4.7: a forked process is a new incarnation (os.register_at_fork)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write_end, incarnation().encode())
        os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 64).decode()
    os.waitpid(pid, 0)
    os.close(read_end)
    assert child and child != incarnation()
