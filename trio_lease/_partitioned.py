"""run_partitioned: each key's work on exactly one live member, under the key's own lease.

The members (a :class:`~trio_lease.Group` whose member records are
``<name>~partition-member~<slot>``) share the keys by :func:`assign`, a deterministic function
of the sorted keys and the sorted member list. Each member runs ``fn(key, grant)`` for its keys
inside ``Lease(<name>~key~<key>).held()`` (names: :mod:`._namespace`): the key's
fencing token is its own, and losing the key's lease cancels ``fn`` as any ``held()`` body. A key
that moves to another member is cancelled here and released; its new owner asked for it by
handover request, so it takes it at once. A member moves keys once the membership has been quiet
for ``SETTLE`` (so members starting together do not each take every key first), and starts its
keys one at a time, ``START_PACE`` apart.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup

from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import LeaseConfigError, LeaseError, LeaseLost
from ._grant import Grant
from ._group import partition_group
from ._lease import Lease, observe_record, takeover_in
from ._namespace import check_name, record_name
from ._outcome import FirstError
from ._settings import LeaseSettings
from ._slotted import follow_records, withdraw_request

__all__ = ["assign", "run_partitioned"]

logger = logging.getLogger("trio_lease")

#: Pause between two key starts of one member (seconds).
START_PACE = 0.05
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


async def run_partitioned(
    keys: Iterable[str] | ObjectReceiveStream[Iterable[str]],
    fn: KeyWork,
    *,
    name: str,
    owner: str,
    backend: LeaseBackend,
    settings: LeaseSettings | None = None,
) -> None:
    """Join the members of ``name`` and run ``fn(key, grant)`` for this member's share of ``keys``.

    Runs until cancelled. Each key runs on one live member at a time, only while that member
    holds the key's lease ``<name>~key~<key>`` (``grant`` is that lease's; ``fn`` is cancelled if it
    is lost or the key moves to another member). If ``fn`` returns, the key stays held, idle,
    until it moves. An exception of ``fn`` ends this member (the keys move to the others) and
    is raised here; so is :class:`LeaseLost` if the member's own lease in the group is lost.

    ``keys`` is the keys, or a receive stream of key sets (an anyio memory object stream, say):
    the first set received starts the work, each later one replaces the keys while running
    (a key left out is cancelled and released). Every member must be given the same keys; each
    process must use its own owner.
    """
    stream: ObjectReceiveStream[Iterable[str]] | None = None
    if isinstance(keys, ObjectReceiveStream):
        stream, wanted = keys, []
    else:
        wanted = _checked(keys)
    group = partition_group(check_name("a run_partitioned name", name), owner, backend, settings)
    leases = _KeyLeases(name, owner, backend, settings)
    leases.follow(wanted)
    failure: list[BaseException] = []
    # fn's error (in `failure`) leaves bare, also when the caller's scope was cancelled.
    async with FirstError(failure), group.joined() as membership, anyio.create_task_group() as tg:
        running: dict[str, anyio.CancelScope] = {}
        ended: dict[str, anyio.Event] = {}
        starts = anyio.Lock()
        members = membership.members()
        changed = _Trigger()

        async def run_key(key: str, scope: anyio.CancelScope, before: anyio.Event | None) -> None:
            done = ended[key] = anyio.Event()
            try:
                with scope:
                    if before is not None:
                        await before.wait()  # the key's previous run has released it
                    async with starts:
                        await anyio.sleep(START_PACE)
                    await _hold_key(key, fn, leases.of(key), members, failure, tg)
            finally:
                done.set()

        def rebalance() -> None:
            mine = set(assign(wanted, members).get(membership.identity, []))
            for key in sorted(running.keys() - mine):
                running.pop(key).cancel()
            for key in sorted(mine - running.keys()):
                running[key] = anyio.CancelScope()
                before = ended.get(key)
                tg.start_soon(run_key, key, running[key], None if before is None else before)

        async def follow_members() -> None:
            nonlocal members
            async with membership.changes() as lists:
                async for listed in lists:
                    members = listed
                    changed.poke()

        async def follow_keys(updates: ObjectReceiveStream[Iterable[str]]) -> None:
            nonlocal wanted
            async for update in updates:
                wanted = _checked(update)
                leases.follow(wanted)
                changed.poke()

        tg.start_soon(follow_members)
        tg.start_soon(leases.observe)
        if stream is not None:
            tg.start_soon(follow_keys, stream)
        settle = min(SETTLE, (settings or LeaseSettings()).wait_interval / 4)
        while True:
            await changed.settled(settle)
            rebalance()


async def _hold_key(
    key: str,
    fn: KeyWork,
    lease: Lease,
    members: tuple[str, ...],
    failure: list[BaseException],
    tg: TaskGroup,
) -> None:
    """Ask for the key, hold it and run ``fn`` (again after a loss); an error of ``fn`` ends
    the member (noted in ``failure``).

    A handover is asked only of a holder still in the group that may still be renewing the key:
    a request writes the record, and a write restarts the expiry countdown. So no request goes
    to a crashed holder, nor to a live member whose record of the key has already stood
    unchanged for L in this member's view (it lost or left the key and renews it no more; the
    key is taken at once instead of L after the request).
    """
    record = lease.last_record
    asked = False
    if (
        record is not None
        and not record.is_free
        and record.holder in members
        and takeover_in(lease) > 0
    ):
        try:
            asked = await lease.request_handover()
        except LeaseError as exc:
            logger.info("key %r: asking for a handover failed: %s", key, exc)
    granted = False
    try:
        while True:  # noqa: ASYNC913  every pass awaits held(), which checkpoints
            try:
                async with lease.held() as grant:
                    granted = True
                    await fn(key, grant)
                    await anyio.sleep_forever()
            except LeaseLost as exc:
                logger.warning("key %r: lost (%s); asking for it again", key, exc)
            except Exception as exc:
                failure.append(exc)
                tg.cancel_scope.cancel()
                return
    finally:
        if asked and not granted:
            # The key moved on before it was handed over: withdraw the request, or its
            # release would stay closed to the member that gets it now, for L.
            bound = lease.settings.lease_operation_timeout
            with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
                await withdraw_request(lease)


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
        self._leases: dict[str, Lease] = {}
        self._keys: list[str] = []
        self._following = anyio.CancelScope()

    def __repr__(self) -> str:
        return f"<keys of {self._name!r}: {len(self._keys)} followed>"

    def of(self, key: str) -> Lease:
        """The lease of ``key`` (made on first use)."""
        lease = self._leases.get(key)
        if lease is None:
            name = record_name(self._name, "key", check_name("a key", key))
            lease = Lease(name, self._owner, self._backend, self._settings)
            self._leases[key] = lease
        return lease

    def follow(self, keys: list[str]) -> None:
        """Follow the records of ``keys`` from now on (restarting :meth:`observe`)."""
        self._keys = list(keys)
        for key in keys:
            self.of(key)
        self._following.cancel()

    async def observe(self) -> None:
        """Note each change of the followed keys' records in their leases, until cancelled."""
        while True:
            keys = self._keys
            leases = [self.of(key) for key in keys]
            self._following = anyio.CancelScope()
            with self._following:
                receive = functools.partial(_observe, leases)
                try:
                    await follow_records(
                        self._backend,
                        [lease.name for lease in leases],
                        receive,
                        timeout=leases[0].settings.lease_operation_timeout if leases else 1.0,
                    )
                except Exception as exc:  # a hint only: a failure only logs
                    logger.info("partitioned %r: following the keys failed: %s", self._name, exc)
                await anyio.sleep_forever()


def _observe(leases: list[Lease], index: int, record: LeaseRecord | None) -> None:
    observe_record(leases[index], record)


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
    items = list(keys)
    for key in items:
        if not isinstance(key, str) or not key:
            raise LeaseConfigError(f"every key must be a non-empty string, got {key!r}")
    return sorted(set(items))
