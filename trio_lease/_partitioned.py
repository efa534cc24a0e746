"""run_partitioned: each key's work on exactly one live member, under the key's own lease.

The members (a :class:`~trio_lease.Group` whose member records are
``<name>~partition-member~<slot>``) share the keys by :func:`assign`, a deterministic function
of the sorted keys and the sorted member list. Each member runs ``fn(key, grant)`` for its keys
inside ``Lease(<name>~key~<key>).held()`` (names: :mod:`._namespace`): the key's
fencing token is its own, and losing the key's lease cancels ``fn`` as any ``held()`` body. A key
that moves to another member is cancelled here and released; its new owner asked for it by
handover request, so it takes it at once. A member moves keys once the membership has been quiet
for ``SETTLE`` (so members starting together do not each take every key first), and starts its
keys one at a time, ``START_PACE`` apart and at most ``STARTS_AT_ONCE`` waiting for the store's
first answer.

A newcomer cannot know how long a crashed member's key record has stood unchanged (it has
just started watching, and clocks of other machines are not trusted), so it would take such a
key only L after its own first look. A member that has watched the record stand unchanged for
L *clears* it for the newcomer instead (:class:`_Clearing`): it takes the expired lease and
releases it at once (a new fencing token, ``fn`` not run), and the newcomer, waiting on the
record, takes the free key at once: a crash fails over about L after the dead member's last
renewal, also when its replacement joins at once.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup

from ._abc import LeaseBackend
from ._backoff import backoff_delay
from ._checks import check_async_callable, check_name, check_text
from ._exceptions import LeaseBusy, LeaseConfigError, LeaseError, LeaseLost
from ._grant import Grant
from ._group import partition_group
from ._lease import Lease
from ._namespace import record_name
from ._observer import LeaseInfo, LeaseObserver, everywhere, notify
from ._outcome import Outcome, sole_error
from ._settings import LeaseSettings
from ._slotted import withdraw_request

__all__ = ["assign", "retry_delay", "run_partitioned"]

logger = logging.getLogger("trio_lease")
#: The jitter of retry pauses (not for anything secret).
_jitter = random.Random()

#: Pause between two key starts of one member (seconds): a member's keys, started together,
#: would renew together too, every R.
START_PACE = 0.01
#: Key starts of one member whose first attempt (a read, then a write or a wait) is still in
#: flight: the starts go no faster than the store answers.
STARTS_AT_ONCE = 8
#: Key leases a leaving member releases at once.
RELEASES_AT_ONCE = 16
#: Pause before a failing key's first retry, and the most it grows to (seconds).
RETRY_FIRST = 1.0
RETRY_CAP = 60.0
#: Longest quiet period a member waits for after a change of the members or the keys before it
#: moves keys (seconds; at most a quarter of ``wait_interval``), so members starting together
#: agree on the membership before starting keys instead of each taking them all at first.
SETTLE = 0.5


def assign(keys: Iterable[str], members: Sequence[str]) -> dict[str, list[str]]:
    """The keys of each member: balanced (each gets ⌊K/M⌋ or ⌈K/M⌉) and deterministic.

    Each key ranks the members by rendezvous hash (highest random weight) and goes to the
    first of its ranking with room left, keys taken in order of their best weight, so a join
    or a leave moves few keys beyond those the balance requires.
    """
    ordered = sorted(set(members))
    result: dict[str, list[str]] = {member: [] for member in ordered}
    if not ordered:
        return result
    unique = sorted(set(keys))
    base, extra = divmod(len(unique), len(ordered))
    # Who may take one more: the members that rank highest on the count of keys (stable).
    bonus = set(sorted(ordered, key=lambda m: _weight("+", m), reverse=True)[:extra])
    room = {member: base + (member in bonus) for member in ordered}
    rankings = {key: _ranking(key, ordered) for key in unique}
    for key in sorted(unique, key=lambda k: _weight(k, rankings[k][0]), reverse=True):
        for member in rankings[key]:
            if room[member] > 0:
                room[member] -= 1
                result[member].append(key)
                break
    for taken in result.values():
        taken.sort()
    return result


def _ranking(key: str, members: list[str]) -> list[str]:
    """The members in ``key``'s order of preference (highest rendezvous weight first)."""
    return sorted(members, key=lambda member: _weight(key, member), reverse=True)


def _weight(key: str, member: str) -> int:
    digest = hashlib.blake2b(f"{key}\0{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


#: What run_partitioned runs for each key the member holds.
KeyWork = Callable[[str, Grant], Awaitable[None]]


def retry_delay(failures: int, jitter: float) -> float:
    """The pause before running a key again after its ``failures``-th error in a row.

    Capped exponential backoff: ``RETRY_FIRST`` doubled per failure up to ``RETRY_CAP``, times
    a jitter factor from 1 down to ½ (``jitter`` in [0, 1)), so members that fail on a shared
    cause do not retry in step; below the cap a pause is never shorter than the one before.
    """
    return backoff_delay(failures, RETRY_FIRST, RETRY_CAP) * (1.0 - jitter / 2)


async def run_partitioned(
    keys: Iterable[str] | ObjectReceiveStream[Iterable[str]],
    fn: KeyWork,
    *,
    name: str,
    owner: str,
    backend: LeaseBackend,
    settings: LeaseSettings | None = None,
    stop_on_error: bool = False,
) -> None:
    """Join the members of ``name`` and run ``fn(key, grant)`` for this member's share of ``keys``.

    Runs until cancelled. Each key runs on one live member at a time, only while that member
    holds the key's lease ``<name>~key~<key>`` (``grant`` is that lease's; ``fn`` is cancelled if it
    is lost or the key moves to another member). If ``fn`` returns, the key stays held, idle,
    until it moves.

    An exception of ``fn`` harms no other key: it is logged, told to the observers
    (``key_failed``) and the key is run again on this member, still held, after a capped
    exponential backoff (:func:`retry_delay`). With ``stop_on_error=True`` the first one ends
    the member instead (its keys move to the others) and is raised here, bare; errors of
    several keys at once are raised as one ``ExceptionGroup`` of them. :class:`LeaseLost` is
    raised if the member's own lease in the group is lost.

    ``keys`` is the keys (at least one), or a receive stream of key sets (an anyio memory
    object stream, say): the first set received starts the work, each later one replaces the
    keys while running (a key left out is cancelled and released; a set may be empty). Every
    member must be given the same keys; each process must use its own owner.

    Leaving (cancelled, or ended by an error): the member first leaves the group, so the others
    take its keys over at once, then releases its keys at most ``RELEASES_AT_ONCE`` at a time,
    within ``heartbeat_timeout / 2`` (any left then are released all together).
    """
    check_name(name, "name")
    check_text(owner, "owner")
    check_async_callable(fn, "fn")
    if not isinstance(stop_on_error, bool):
        raise TypeError(f"stop_on_error must be a bool, got {stop_on_error!r}")
    stream: ObjectReceiveStream[Iterable[str]] | None = None
    if isinstance(keys, ObjectReceiveStream):
        stream, wanted = keys, []
    else:
        wanted = _checked(keys)
        if not wanted:
            raise LeaseConfigError(
                "keys is empty: give at least one key, or a receive stream of key sets to "
                "start with none"
            )
    group = partition_group(name, owner, backend, settings)
    leases = _KeyLeases(name, owner, backend, settings)
    leases.follow(wanted)
    errors = _Errors(name, stop_on_error)
    budget = group.settings.heartbeat_timeout / 2
    # The kept error leaves bare, also when the caller's scope was cancelled meanwhile (the
    # task groups' exit then raises that cancellation): the rule of every scope (_outcome).
    try:
        async with anyio.create_task_group() as keys_tg:
            runs = _Runs(keys_tg, fn, leases, errors)
            try:
                with errors.stopping:
                    async with group.joined() as membership, anyio.create_task_group() as tg:
                        runs.members = membership.members()
                        changed = _Trigger()
                        clearing = _Clearing(membership.identity, leases, group.settings)
                        clearing.saw(runs.members)

                        async def follow_members() -> None:
                            async with membership.changes() as lists:
                                async for listed in lists:
                                    runs.members = listed
                                    clearing.saw(listed)
                                    changed.poke()

                        async def follow_keys(updates: ObjectReceiveStream[Iterable[str]]) -> None:
                            nonlocal wanted
                            async for update in updates:
                                wanted = _checked(update)
                                leases.follow(wanted)
                                changed.poke()

                        tg.start_soon(follow_members)
                        tg.start_soon(leases.observe)
                        tg.start_soon(clearing.run, lambda: assign(wanted, runs.members))
                        if stream is not None:
                            tg.start_soon(follow_keys, stream)
                        settle = min(SETTLE, group.settings.wait_interval / 4)
                        while True:
                            await changed.settled(settle)
                            runs.rebalance(
                                assign(wanted, runs.members).get(membership.identity, [])
                            )
            except Exception as exc:  # the membership lost, a bad key set: raised bare below
                single = sole_error(exc) if isinstance(exc, ExceptionGroup) else exc
                errors.fail_library(single if isinstance(single, Exception) else exc)
            finally:
                # joined() has ended: the member's lease is released, so the others see it leave
                # and ask for its keys while they are released here, a few at a time.
                with anyio.CancelScope(shield=True):
                    await runs.stop_all(budget)
    except BaseException as exc:
        errors.outcome().settle(exc)
        raise
    errors.outcome().settle(None)


class _Runs:
    """The member's key runs: started and cancelled as the assignment changes, stopped a few
    at a time when the member leaves.

    Each run's scope is shielded from the member's cancellation, so that leaving releases the
    keys at a bounded pace (:meth:`stop_all`) instead of all at once: hundreds of releases
    written together overrun the operation timeout of a loaded store, and a key whose release
    timed out waits L to move.
    """

    def __init__(self, tg: TaskGroup, fn: KeyWork, leases: _KeyLeases, errors: _Errors) -> None:
        self._tg = tg
        self._fn = fn
        self._leases = leases
        self._errors = errors
        self._running: dict[str, anyio.CancelScope] = {}
        self._ended: dict[str, anyio.Event] = {}
        self._starts = anyio.Lock()
        self._attempts = anyio.CapacityLimiter(STARTS_AT_ONCE)
        self._closed = False
        #: The live members as last seen.
        self.members: tuple[str, ...] = ()

    def rebalance(self, mine: list[str]) -> None:
        """Cancel the runs of keys no longer in ``mine``; start those of new ones, paced."""
        if self._closed:
            return
        for key in sorted(self._running.keys() - set(mine)):
            self._running.pop(key).cancel()
        for key in sorted(set(mine) - self._running.keys()):
            scope = self._running[key] = anyio.CancelScope(shield=True)
            self._tg.start_soon(self._run, key, scope, self._ended.get(key))

    async def _run(self, key: str, scope: anyio.CancelScope, before: anyio.Event | None) -> None:
        done = self._ended[key] = anyio.Event()
        token = object()
        attempting = False

        def attempted() -> None:
            nonlocal attempting
            if attempting:
                attempting = False
                self._attempts.release_on_behalf_of(token)

        try:
            with scope:
                if before is not None:
                    await before.wait()  # the key's previous run has released it
                async with self._starts:
                    await anyio.sleep(START_PACE)
                    await self._attempts.acquire_on_behalf_of(token)
                    attempting = True
                self._leases.on_first_attempt(key, attempted)
                await _hold_key(key, self._fn, self._leases.of(key), self.members, self._errors)
        finally:
            attempted()
            done.set()

    async def stop_all(self, budget: float) -> None:
        """Stop every run, ``RELEASES_AT_ONCE`` at a time, within ``budget`` seconds; those
        still running then are cancelled together."""
        self._closed = True
        limiter = anyio.CapacityLimiter(RELEASES_AT_ONCE)
        with anyio.move_on_after(budget):
            async with anyio.create_task_group() as tg:
                for key in sorted(self._running):
                    tg.start_soon(self._stop, key, limiter)
        for scope in self._running.values():
            scope.cancel()

    async def _stop(self, key: str, limiter: anyio.CapacityLimiter) -> None:
        async with limiter:
            self._running[key].cancel()
            await self._ended[key].wait()


class _Clearing:
    """Clears, for members that joined less than L ago, the dead members' key records this
    member has watched stand unchanged for L (see the module docstring).

    Only keys assigned to such a newcomer: a member that has been in the group for L has
    watched the records as long as this one, and takes its keys itself. Clearing is an ordinary
    attempt (``try_held()``, which takes the record only if it has expired in this member's
    view) and an immediate release; a key taken meanwhile (``LeaseBusy``) is left alone.
    """

    def __init__(self, me: str, leases: _KeyLeases, settings: LeaseSettings) -> None:
        self._me = me
        self._leases = leases
        self._settings = settings
        self._members: tuple[str, ...] = ()
        #: When (this member's clock) each member was first listed.
        self._since: dict[str, float] = {}

    def saw(self, members: tuple[str, ...]) -> None:
        """Note a member list (the first one, then each change)."""
        now = anyio.current_time()
        self._members = members
        for member in members:
            self._since.setdefault(member, now)

    async def run(self, assignment: Callable[[], dict[str, list[str]]]) -> None:
        """Clear what there is to clear, every ``wait_interval`` or sooner, until cancelled."""
        while True:
            soonest = await self._clear_due(assignment())
            await anyio.sleep(min(soonest, self._settings.wait_interval) + 1e-3)

    async def _clear_due(self, assignment: dict[str, list[str]]) -> float:
        """Clear the records due now; seconds until the next one may be due."""
        now = anyio.current_time()
        soonest = self._settings.wait_interval
        for member, keys in assignment.items():
            new_for = self._since.get(member, now) + self._settings.heartbeat_timeout - now
            if member == self._me or new_for <= 0:
                continue
            soonest = min(soonest, new_for)
            for key in keys:
                lease = self._leases.of(key)
                record = lease.last_record
                if record is None or record.is_free or record.holder in self._members:
                    continue
                wait = lease.takeover_in()
                if wait > 0:
                    soonest = min(soonest, wait)
                    continue
                await _clear(key, lease)
        return soonest


async def _clear(key: str, lease: Lease) -> None:
    """Take ``key``'s expired lease and release it at once; a failure only logs."""
    try:
        async with lease.try_held():
            pass
    except LeaseBusy:
        return  # taken meanwhile (by the member it is assigned to, most likely)
    except LeaseError as exc:
        logger.info("key %r: clearing a dead member's record failed: %s", key, exc)
    else:
        logger.info("key %r: cleared a dead member's record for the member that gets it", key)


class _Errors:
    """What a key's error does: reported and retried, or (``stop_on_error``) kept and the
    member stopped."""

    def __init__(self, name: str, stop_on_error: bool) -> None:
        self._name = name
        self.stop_on_error = stop_on_error
        self._kept: list[Exception] = []
        self._library: list[Exception] = []
        #: Cancelled to end the member on an error.
        self.stopping = anyio.CancelScope()

    def fail(self, exc: Exception) -> None:
        """Keep ``exc``, an error of ``fn``, and end the member."""
        self._kept.append(exc)
        self.stopping.cancel()

    def fail_library(self, exc: Exception) -> None:
        """Keep ``exc``, the library's (the membership or a key's lease failed), and end the
        member."""
        self._library.append(exc)
        self.stopping.cancel()

    def outcome(self) -> Outcome:
        """What leaves ``run_partitioned`` (the rule of :class:`~._outcome.Outcome`): the errors
        of ``fn`` as its body's error, the library's noted on it; without an error of ``fn``,
        the library's error as that error."""
        outcome = Outcome()
        outcome.given(self._error(self._kept or self._library))
        if self._kept:
            for error in self._library:
                outcome.note(error)
        return outcome

    def report(
        self, lease: Lease, key: str, exc: Exception, failures: int, retry_in: float | None
    ) -> None:
        """Log a key's error and tell the observers."""
        again = "ending the member" if retry_in is None else f"running it again in {retry_in:.3g} s"
        logger.warning(
            "partitioned %r: key %r failed (%d in a row), %s: %s: %s",
            self._name,
            key,
            failures,
            again,
            type(exc).__name__,
            exc,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        if everywhere():
            info = LeaseInfo(lease.name, lease.owner, lease.identity)
            notify((), "key_failed", info, key=key, error=exc, failures=failures, retry_in=retry_in)

    def _error(self, kept: list[Exception]) -> Exception | None:
        """One kept error bare, several as an ExceptionGroup of them (None if none)."""
        if len(kept) == 1:
            return kept[0]
        if kept:
            return ExceptionGroup(f"partitioned {self._name!r}: {len(kept)} keys failed", kept)
        return None


async def _hold_key(
    key: str, fn: KeyWork, lease: _KeyLease, members: tuple[str, ...], errors: _Errors
) -> None:
    """Ask for the key, hold it and run ``fn`` (again after a loss, and after an error of
    ``fn`` unless ``stop_on_error``).

    A handover is asked only of a holder still in the group that was seen renewing the key
    lately (within ``2R + T``: a live holder renews every R): a request writes the record, and
    every other member watching it counts the holder's expiry again from that write. So no
    request goes to a member that died after the others last saw it alive (its keys move L
    after its last renewal, not L after a request), nor to a live member that lost or left the
    key (it renews it no more; the key is taken when its record has stood for L). A live holder
    not asked still releases the key when its own view of the members moves it.

    A failing ``fn`` is run again with the key still held, on this member: the assignment is a
    function of the membership, so a key released for others would come back here (or, handed
    to another member, fail there too). The count of failures in a row starts again after a
    run of ``fn`` that returned or lasted ``RETRY_CAP`` or more.
    """
    record = lease.last_record
    asked = False
    if record is not None and not record.is_free and record.holder in members and _renewing(lease):
        try:
            asked = await lease.request_handover()
        except LeaseError as exc:
            logger.info("key %r: asking for a handover failed: %s", key, exc)
    granted = False
    failures = 0
    try:
        while True:  # noqa: ASYNC913  every pass awaits held(), which checkpoints
            try:
                async with lease.held() as grant:
                    granted = True
                    while True:
                        began = anyio.current_time()
                        try:
                            await fn(key, grant)
                        except LeaseLost:
                            raise
                        except Exception as exc:  # fn's own error: reported, retried or kept
                            if anyio.current_time() - began >= RETRY_CAP:
                                failures = 0
                            failures += 1
                            if errors.stop_on_error:
                                errors.report(lease, key, exc, failures, None)
                                errors.fail(exc)
                                return
                            delay = retry_delay(failures, _jitter.random())
                            errors.report(lease, key, exc, failures, delay)
                            await anyio.sleep(delay)
                        else:
                            failures = 0
                            await anyio.sleep_forever()
            except LeaseLost as exc:
                logger.warning("key %r: lost (%s); asking for it again", key, exc)
            except Exception as exc:  # held() itself, not fn: the member ends
                errors.fail_library(exc)
                return
    finally:
        record = lease.last_record
        if asked and not granted and (record is None or record.is_free or _renewing(lease)):
            # The key moved on before it was handed over: withdraw the request, or its
            # release would stay closed to the member that gets it now, for L. Not from a
            # holder that stopped renewing: it releases nothing, a request on a held record
            # reserves nothing, and the write would postpone the key's takeover by L.
            bound = lease.settings.lease_operation_timeout
            with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
                await withdraw_request(lease)


def _renewing(lease: _KeyLease) -> bool:
    """Whether the key's holder was seen renewing lately: its record changed within 2R + T (a
    live holder renews every R, each write within T)."""
    settings = lease.settings
    return (
        lease.unchanged_for() < 2 * settings.heartbeat_interval + settings.lease_operation_timeout
    )


class _KeyLeases:
    """The member's lease of each key, and what each has seen of its key's record.

    Every key's record is followed (the shared watch), not only the member's own keys': when a
    member crashes, the members that get its keys have watched its key records since its last
    renewal, so they may take the keys L after it, not L after they first look.
    """

    def __init__(
        self, name: str, owner: str, backend: LeaseBackend, settings: LeaseSettings | None
    ) -> None:
        self._name = name
        self._owner = owner
        self._backend = backend
        self._settings = settings
        self._leases: dict[str, _KeyLease] = {}
        self._keys: list[str] = []
        self._following = anyio.CancelScope()
        self._attempts = _FirstAttempts()

    def __repr__(self) -> str:
        return f"<keys of {self._name!r}: {len(self._keys)} followed>"

    def of(self, key: str) -> _KeyLease:
        """The lease of ``key`` (made on first use)."""
        lease = self._leases.get(key)
        if lease is None:
            lease = _KeyLease(
                record_name(self._name, "key", check_name(key, "key")),
                self._owner,
                self._backend,
                self._settings,
                observers=[self._attempts],
            )
            self._leases[key] = lease
        return lease

    def on_first_attempt(self, key: str, call: Callable[[], None]) -> None:
        """Call ``call`` once the next attempt on ``key``'s lease has an answer: granted, or
        found held by another (its wait begins)."""
        self._attempts.calls[self.of(key).name] = call

    def follow(self, keys: list[str]) -> None:
        """Follow the records of ``keys`` from now on (restarting :meth:`observe`)."""
        self._keys = list(keys)
        for key in keys:
            self.of(key)
        self._following.cancel()

    async def observe(self) -> None:
        """Follow the records of the followed keys in their leases, until cancelled."""
        while True:
            leases = [self.of(key) for key in self._keys]
            self._following = anyio.CancelScope()
            with self._following:
                try:
                    async with anyio.create_task_group() as tg:
                        for lease in leases:
                            tg.start_soon(lease.follow)
                except Exception as exc:  # a hint only: a failure only logs
                    logger.info("partitioned %r: following the keys failed: %s", self._name, exc)
                await anyio.sleep_forever()


class _KeyLease(Lease):
    """A key's lease, which also follows its record before it is asked for.

    A member follows every key's record (its lease's reader follows the shared watch), so the
    lease counts a dead holder's expiry from the holder's last renewal seen, not from the first
    attempt, which may come later: the key's new owner takes it L after the renewals stopped.
    """

    async def follow(self) -> None:
        """Follow the key's record until cancelled, observing each state (returns at once for
        a backend without a watch)."""
        await self._reader.follow()

    def takeover_in(self) -> float:
        """Seconds until the key's record as last seen may be taken over, by this lease's own
        observation (0 when it is free, unseen, or has stood unchanged for L)."""
        return self._reader.takeover_in()

    def unchanged_for(self) -> float:
        """Seconds the key's record has stood unchanged in this lease's view (0 when unseen)."""
        return self._reader.unchanged_for()


class _FirstAttempts(LeaseObserver):
    """Tells a key's run that its lease's first attempt was answered (see ``STARTS_AT_ONCE``)."""

    def __init__(self) -> None:
        self.calls: dict[str, Callable[[], None]] = {}

    def _answered(self, lease: LeaseInfo) -> None:
        call = self.calls.pop(lease.name, None)
        if call is not None:
            call()

    def waiting(self, lease: LeaseInfo, *, holder: str, expires_in: float) -> None:
        self._answered(lease)

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, valid_for: float
    ) -> None:
        self._answered(lease)


class _Trigger:
    """Poked on each change of the members or the keys; waited on until they settle."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def poke(self) -> None:
        self._event.set()

    async def settled(self, quiet: float, *, rounds: int = 4) -> None:
        """Wait for a poke, then for ``quiet`` seconds without one (restarted by each poke,
        ``rounds`` times at most), so a burst of changes is acted on once."""
        await self._event.wait()
        for _ in range(rounds):
            self._event = anyio.Event()
            with anyio.move_on_after(quiet):
                await self._event.wait()
            if not self._event.is_set():
                break
        self._event = anyio.Event()


def _checked(keys: Iterable[str]) -> list[str]:
    """The keys, sorted and unique; a key that is not a non-empty string is refused."""
    if isinstance(keys, str):
        raise LeaseConfigError(f"keys must be an iterable of strings, not the string {keys!r}")
    if not isinstance(keys, Iterable):
        raise TypeError(
            f"keys must be an iterable of key strings or a receive stream of key sets, got {keys!r}"
        )
    items = list(keys)
    for key in items:
        if not isinstance(key, str) or not key:
            raise LeaseConfigError(f"every key must be a non-empty string, got {key!r}")
    return sorted(set(items))
