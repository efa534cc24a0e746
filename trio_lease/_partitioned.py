"""run_partitioned: each key's work on exactly one live member, under the key's own lease.

The members of ``<name>.members`` (a :class:`~trio_lease.Group`) share the keys by
:func:`assign`, a deterministic function of the sorted keys and the sorted member list. Each
member runs ``fn(key, grant)`` for its keys inside ``Lease(<name>.<key>).held()``: the key's
fencing token is its own, and losing the key's lease cancels ``fn`` as any ``held()`` body. A key
that moves to another member is cancelled here and released; its new owner asked for it by
handover request, so it takes it at once. New keys start one at a time, ``START_PACE`` apart,
so members starting together do not storm the backend.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup

from ._abc import LeaseBackend
from ._exceptions import LeaseConfigError, LeaseError, LeaseLost
from ._grant import Grant
from ._group import Group
from ._lease import Lease
from ._settings import LeaseSettings

__all__ = ["assign", "run_partitioned"]

logger = logging.getLogger("trio_lease")

#: Pause between two key starts of one member (seconds).
START_PACE = 0.05


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
    """Join ``<name>.members`` and run ``fn(key, grant)`` for this member's share of ``keys``.

    Runs until cancelled. Each key runs on one live member at a time, only while that member
    holds the key's lease ``<name>.<key>`` (``grant`` is that lease's; ``fn`` is cancelled if it
    is lost or the key moves to another member). If ``fn`` returns, the key stays held, idle,
    until it moves. An exception of ``fn`` ends this member (the keys move to the others).

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
    group = Group(f"{name}.members", owner, backend, settings)
    leases: dict[str, Lease] = {}
    failure: list[BaseException] = []
    async with group.joined() as membership, anyio.create_task_group() as tg:
        running: dict[str, anyio.CancelScope] = {}
        ended: dict[str, anyio.Event] = {}
        starts = anyio.Lock()
        members = membership.members()
        changed = anyio.Event()

        async def run_key(key: str, scope: anyio.CancelScope, before: anyio.Event | None) -> None:
            done = ended[key] = anyio.Event()
            try:
                with scope:
                    if before is not None:
                        await before.wait()  # the key's previous run has released it
                    async with starts:
                        await anyio.sleep(START_PACE)
                    await _hold_key(key, fn, leases[key], failure, tg)
            finally:
                done.set()

        def rebalance() -> None:
            mine = set(assign(wanted, members).get(membership.identity, []))
            for key in sorted(running.keys() - mine):
                running.pop(key).cancel()
            for key in sorted(mine - running.keys()):
                if key not in leases:
                    leases[key] = Lease(f"{name}.{key}", owner, backend, settings)
                running[key] = anyio.CancelScope()
                before = ended.get(key)
                tg.start_soon(run_key, key, running[key], None if before is None else before)

        async def follow_members() -> None:
            nonlocal members
            async with membership.changes() as lists:
                async for listed in lists:
                    members = listed
                    changed.set()

        async def follow_keys(updates: ObjectReceiveStream[Iterable[str]]) -> None:
            nonlocal wanted
            async for update in updates:
                wanted = _checked(update)
                changed.set()

        tg.start_soon(follow_members)
        if stream is not None:
            tg.start_soon(follow_keys, stream)
        while True:
            await changed.wait()
            changed = anyio.Event()
            rebalance()
    if failure:
        raise failure[0]


async def _hold_key(
    key: str, fn: KeyWork, lease: Lease, failure: list[BaseException], tg: TaskGroup
) -> None:
    """Ask for the key, hold it and run ``fn`` (again after a loss); an error of ``fn`` ends
    the member (noted in ``failure``)."""
    try:
        await lease.request_handover()
    except LeaseError as exc:
        logger.info("key %r: asking for a handover failed: %s", key, exc)
    while True:
        try:
            async with lease.held() as grant:
                await fn(key, grant)
                await anyio.sleep_forever()
        except LeaseLost as exc:
            logger.warning("key %r: lost (%s); asking for it again", key, exc)
        except Exception as exc:
            failure.append(exc)
            tg.cancel_scope.cancel()
            return


def _checked(keys: Iterable[str]) -> list[str]:
    """The keys, sorted and unique; a key that is not a non-empty string is refused."""
    if isinstance(keys, str):
        raise LeaseConfigError(f"keys must be an iterable of strings, not the string {keys!r}")
    items = list(keys)
    for key in items:
        if not isinstance(key, str) or not key:
            raise LeaseConfigError(f"every key must be a non-empty string, got {key!r}")
    return sorted(set(items))
