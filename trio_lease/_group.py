"""Group: who is alive in a group, one ordinary lease record per member.

A member joins by holding the lowest free slot lease of the group, ``<name>~member~0``,
``~1``, ... (:mod:`._namespace`; a slot whose holder stopped renewing is free once it has stood
for L, as any lease). Slot records are created in order and never deleted, so the slots in use
are ``0`` up to the first slot without a record: every member finds every other without a store
that can list.

While joined, a member keeps a view of the group (:class:`Membership`): it reads the slots,
follows them with the backend's watch (the process's shared watch), and counts a slot as a
live member once it has seen the record change (a renewal, a join) and until the record has
stood unchanged for L on its own clock. A record seen only as it was at the first read is not
counted: its holder may have died just before this member joined. So the first view waits (at
most R + T) until each held slot was seen renewed; a live member renewing later than that is
listed once its renewal is seen. A clean leave releases the slot, which every
watcher sees at once; a crashed member stops renewing and drops out of every view L after its
last renewal was seen. A member then takes the dead member's slot back (acquires it by the
lease's own rules, and releases it at once), so the next member to join reuses it and the
records stay at about the number of live members.

A member that leaves (cleanly, or by losing its lease) keeps its view for the next join of the
same group through the same backend object in the same event loop (``run_partitioned`` joins
again after a lost membership): a slot whose record has not changed since it was seen still
counts from when it was first seen, so a crashed member drops out L after its last renewal was
seen, not L after the join. A record that changed meanwhile is seen anew.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import anyio
from anyio.lowlevel import RunVar

from ._abc import LeaseBackend, LeaseRecord
from ._backoff import Backoff
from ._checks import check_name
from ._exceptions import BackendUnavailable, LeaseBusy, LeaseError
from ._grant import Grant
from ._lease import Lease
from ._outcome import Outcome
from ._settings import LeaseSettings
from ._slotted import SlotChange, SlotFamily
from ._streams import Changes, Emit
from ._waiting import FAILED_ATTEMPT_PAUSE

__all__ = ["Group", "Membership", "partition_group"]

logger = logging.getLogger("trio_lease")

#: The lease's monotonic clock.
_Clock = Callable[[], float]

#: Longest pause between join attempts while the backend fails (seconds; doubles from 0.2).
JOIN_BACKOFF = 5.0


@dataclasses.dataclass(slots=True)
class _Kept:
    """The view of a membership that ended, for the next join (see the module docstring)."""

    seen: list[_Seen]


#: Per event loop (the times are on its clock), by backend object, then the group's role and
#: name: the view of the last membership that ended.
_kept: RunVar[weakref.WeakKeyDictionary[LeaseBackend, dict[tuple[str, str], _Kept]]] = RunVar(
    "trio_lease_kept_views"
)


class Group:
    """The group ``name``: ``async with group.joined() as membership:`` joins it as ``owner``.

    Each member holds one ordinary lease, ``<name>~member~<slot>``, renewed as any lease is; the
    body of ``joined()`` is cancelled and :class:`LeaseLost` raised if that lease is lost.
    ``settings`` are the member leases': a crashed member leaves every view after their heartbeat
    timeout L.
    """

    def __init__(
        self,
        name: str,
        owner: str,
        backend: LeaseBackend,
        settings: LeaseSettings | None = None,
    ) -> None:
        check_name(name, "group name")
        self._name = name
        self._slots = SlotFamily(name, "member", owner, backend, settings)

    @property
    def name(self) -> str:
        """The group's name; its members hold the leases ``<name>~member~0``, ``~1``, ..."""
        return self._name

    @property
    def owner(self) -> str:
        """The owner name this object joins as."""
        return self._slots.owner

    @property
    def identity(self) -> str:
        """The identity this object joins as: ``owner`` plus the incarnation id."""
        return self._slots.identity

    @property
    def backend(self) -> LeaseBackend:
        """The store of the member records."""
        return self._slots.backend

    @property
    def settings(self) -> LeaseSettings:
        """The member leases' timing."""
        return self._slots.settings

    def __repr__(self) -> str:
        return f"Group(name={self._name!r}, owner={self.owner!r}, backend={self.backend!r})"

    def slot_lease(self, slot: int) -> Lease:
        """The lease of member slot ``slot`` (for status displays)."""
        return self._slots.checked_lease(slot)

    def joined(self) -> AbstractAsyncContextManager[Membership]:
        """Join the group (waiting while the backend fails), run the body, then leave at once.

        The :class:`Membership` yielded lists the live members and streams their changes. If
        the member's lease is lost while the body runs, the body is cancelled and a bare
        :class:`LeaseLost` is raised here, as with :meth:`Lease.held`. It can also be raised
        before the body runs: joining takes a first view of the members, which waits up to
        R + T for each other slot to be seen renewed, and a grant whose own renewals were
        starved past its deadline meanwhile (an event loop blocked that long) is lost then.
        """
        return self._joined()

    @asynccontextmanager
    async def _joined(self) -> AsyncIterator[Membership]:
        async with AsyncExitStack() as stack:
            slot, grant = await self._join(stack)
            membership = Membership(self, slot, grant)
            outcome = Outcome()  # the body's own error bare, also after the caller's deadline
            with outcome.settled():
                try:
                    async with anyio.create_task_group() as tg:
                        await tg.start(membership._keep_view)
                        try:
                            with outcome.body():
                                yield membership
                        finally:
                            tg.cancel_scope.cancel()
                            membership._end()
                finally:
                    self._keep(membership)

    def _kept_view(self) -> list[_Seen]:
        """What the last membership of this group through this backend object saw in this
        event loop (else nothing)."""
        try:
            kept = _kept.get().get(self.backend, {}).get((self._slots.role, self._name))
        except (LookupError, TypeError):  # none yet, or a backend that takes no weak reference
            return []
        return [] if kept is None else list(kept.seen)

    def _keep(self, membership: Membership) -> None:
        """Keep ``membership``'s view for the next join (see the module docstring)."""
        try:
            views = _kept.get()
        except LookupError:
            views = weakref.WeakKeyDictionary()
            _kept.set(views)
        with contextlib.suppress(TypeError):  # a backend that takes no weak reference
            views.setdefault(self.backend, {})[(self._slots.role, self._name)] = _Kept(
                list(membership._seen)
            )

    async def _join(self, stack: AsyncExitStack) -> tuple[int, Grant]:
        """Hold the lowest slot that can be taken (its hold entered into ``stack``)."""
        backoff = Backoff(FAILED_ATTEMPT_PAUSE, JOIN_BACKOFF)
        while True:
            slot = 0
            error: BackendUnavailable | None = None
            while True:
                if slot in self._slots.local.claimed:
                    slot += 1
                    continue
                try:
                    grant = await stack.enter_async_context(self._slots.hold(slot))
                except LeaseBusy:
                    slot += 1
                    continue
                except BackendUnavailable as exc:
                    error = exc
                    break
                return slot, grant
            logger.info("group %r: joining failed (%s); retrying", self._name, error)
            await backoff.sleep()


def partition_group(
    name: str, owner: str, backend: LeaseBackend, settings: LeaseSettings | None
) -> Group:
    """The group of ``run_partitioned(name=name)``'s members: its member slots are the records
    ``<name>~partition-member~<slot>``, apart from a user's ``Group(name)``."""
    group = Group(name, owner, backend, settings)
    group._slots = SlotFamily(name, "partition-member", owner, backend, settings)
    return group


@dataclasses.dataclass(slots=True)
class _Seen:
    """A slot's record as this member last saw it, and when (its clock) that version appeared.

    ``confirmed``: this member saw the record change to this version (a renewal, a join), so
    its holder was alive when it appeared. A record only ever seen as it was at the first read
    is not confirmed: its holder may have died just before (a replacement that joins right after
    a crash), and counting it alive for L from that read would make this member's assignment
    disagree with the others' for up to L.
    """

    record: LeaseRecord | None
    since: float
    confirmed: bool = False


class Membership:
    """This member's place in a :class:`Group` and its view of the group, while joined.

    :meth:`members` lists the live members (sorted identities, this one included);
    :meth:`changes` streams each new list.
    """

    def __init__(self, group: Group, slot: int, grant: Grant) -> None:
        self._group = group
        #: The member slot held: the lease ``<group name>~member~<slot>``.
        self.slot: int = slot
        #: The grant of the member's lease (fencing token, deadline, ``check()``).
        self.grant: Grant = grant
        self._clock: _Clock = anyio.current_time
        # Each slot's record as last seen, and since when (kept from the last membership).
        self._seen: list[_Seen] = group._kept_view()
        self._members: tuple[str, ...] = (grant.identity,)
        self._changed = anyio.Event()  # set (and replaced) on each new list, and at the end
        self._ended = False

    def __repr__(self) -> str:
        return f"Membership(group={self._group.name!r}, slot={self.slot}, members={self._members})"

    @property
    def identity(self) -> str:
        """This member's identity, as it appears in :meth:`members`."""
        return self.grant.identity

    def members(self) -> tuple[str, ...]:
        """The live members' identities, sorted, this member included (as last seen; no I/O)."""
        return self._members

    def changes(self) -> Changes[tuple[str, ...]]:
        """A stream of the member list: the current one first, then each change.

        ``async with membership.changes() as lists: async for members in lists:`` — the
        stream ends when the member leaves the group. A slow reader gets the latest list when
        it reads again (lists it was too slow for are skipped, as the lease's watch does): no
        list is buffered.
        """
        return Changes(self._stream_lists, what="membership.changes()")

    async def _stream_lists(self, emit: Emit[tuple[str, ...]]) -> None:
        sent: tuple[str, ...] | None = None
        while True:
            changed = self._changed
            current = self._members
            if current != sent:
                await emit(current)
                sent = current
                continue  # it may have changed while the reader took its time
            if self._ended:
                return
            await changed.wait()

    # The view, kept by a task of joined() (never raising: a failure only logs and retries).

    async def _keep_view(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        group = self._group
        settings = group.settings
        clock = self._clock
        started = False
        backoff = Backoff(FAILED_ATTEMPT_PAUSE, settings.wait_interval)
        # The first view waits (at most a renewal interval and a request) until every held slot
        # was seen renewed: it then lists the live members only, not a member that died just
        # before this one joined.
        confirm_by = clock() + settings.heartbeat_interval + settings.lease_operation_timeout
        while True:
            try:
                await self._scan(clock)
            except LeaseError as exc:  # the view's failure never ends the membership
                delay = backoff.failed()
                log = logger.info if isinstance(exc, BackendUnavailable) else logger.warning
                log("group %r: reading the members failed: %s", group.name, exc)
            else:
                backoff.reset()
            if (
                not started
                and not backoff.failures
                and self._unconfirmed()
                and clock() < confirm_by
            ):
                await self._wait(min(confirm_by - clock(), settings.wait_interval), clock)
                continue
            self._publish(clock)
            if not started:
                task_status.started()
                started = True
            retry_at = await self._reclaim(clock)
            if not backoff.failures:
                poll = settings.heartbeat_timeout if group.backend.supports_watch else None
                delay = min(self._next_expiry(clock), retry_at) - clock()
                delay = min(delay, poll if poll is not None else settings.wait_interval)
            await self._wait(max(delay, 0.0) + 1e-3, clock)

    async def _scan(self, clock: _Clock) -> None:
        """Read slots from 0 up to the first without a record (that one included)."""
        slot = 0
        while True:
            record = await self._group._slots.read(slot)
            self._note(slot, record, clock())
            if record is None:
                del self._seen[slot + 1 :]
                return
            slot += 1

    def _note(self, slot: int, record: LeaseRecord | None, now: float) -> None:
        while len(self._seen) <= slot:
            self._seen.append(_Seen(record, now))  # a first sight: not confirmed
        seen = self._seen[slot]
        version = None if record is None else record.version
        if seen.record is None or seen.record.version != version:
            # Seen to change (or to appear where there was nothing): written by a live holder.
            self._seen[slot] = _Seen(record, now, confirmed=seen.record is not record)

    def _held_by_another(self, slot: int, seen: _Seen) -> bool:
        record = seen.record
        return slot != self.slot and not (record is None or record.is_free or record.unreadable)

    def _unconfirmed(self) -> bool:
        """Whether a slot held by another member was never seen to change."""
        return any(
            self._held_by_another(slot, seen) and not seen.confirmed
            for slot, seen in enumerate(self._seen)
        )

    def _alive(self, slot: int, seen: _Seen, now: float) -> bool:
        if slot == self.slot:
            return True
        if not self._held_by_another(slot, seen) or not seen.confirmed:
            return False
        return now - seen.since < self._group.settings.heartbeat_timeout

    def _next_expiry(self, clock: _Clock) -> float:
        """When the next held slot's record will have stood for L (a member drops out, or a
        dead member's slot can be taken back)."""
        now = clock()
        timeout = self._group.settings.heartbeat_timeout
        ends = [
            seen.since + timeout
            for slot, seen in enumerate(self._seen)
            if self._held_by_another(slot, seen) and seen.since + timeout > now
        ]
        return min(ends, default=math.inf)

    async def _reclaim(self, clock: _Clock) -> float:
        """Take back every slot whose record has stood unchanged for L in this member's view
        (its holder is gone, docs/design.md §4.1) and release it at once, so the next member
        to join reuses it: the slots stay at about the number of live members, whatever the
        number of crashes. The slot's lease takes it over only by its own rules (its own
        observation of the record for L, compare-and-swap), so a holder that is in fact alive
        keeps it. Returns when to try again a slot whose lease is not expired yet by its own
        observation (which began at its first read of the version, perhaps after the view saw
        it on the watch)."""
        now = clock()
        retry_at = math.inf
        slots = self._group._slots
        for slot, seen in enumerate(self._seen):
            if not self._held_by_another(slot, seen) or slot in slots.local.claimed:
                continue
            if now - seen.since < self._group.settings.heartbeat_timeout:
                continue
            try:
                async with slots.hold(slot):
                    pass
            except LeaseBusy as exc:  # not expired for the lease yet, or a live holder after all
                retry_at = min(retry_at, clock() + exc.expires_in)
            except LeaseError as exc:  # the store failed: the next round tries again
                logger.debug("group %r: taking back slot %d failed: %s", slots.name, slot, exc)
        return retry_at

    def _publish(self, clock: _Clock) -> None:
        now = clock()
        members: list[str] = []
        for slot, seen in enumerate(self._seen):
            if self._alive(slot, seen, now):
                members.append(self.identity if slot == self.slot else _holder(seen))
        if self.slot >= len(self._seen):
            members.append(self.identity)
        listed = tuple(sorted(members))
        if listed != self._members:
            self._members = listed
            self._changed.set()
            self._changed = anyio.Event()

    async def _wait(self, delay: float, clock: _Clock) -> None:
        """Until a slot changes holder (the watch), a member is first seen renewing, a member
        may have expired, or ``delay``."""
        slots = range(len(self._seen))
        woken = anyio.Event()

        def receive(slot: int, record: LeaseRecord | None) -> None:
            if slot >= len(self._seen):
                return
            before = self._seen[slot]
            self._note(slot, record, clock())
            confirmed = self._seen[slot].confirmed and not before.confirmed
            if _membership_change(before.record, record) or confirmed:
                woken.set()

        with anyio.move_on_after(delay):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow, slots, receive)
                await woken.wait()
                tg.cancel_scope.cancel()

    async def _follow(self, slots: range, receive: SlotChange) -> None:
        try:
            await self._group._slots.follow(slots, receive)
        except Exception as exc:  # the view also polls: a watch failure only logs
            logger.info("group %r: following the members failed: %s", self._group.name, exc)
        await anyio.sleep_forever()

    def _end(self) -> None:
        self._ended = True
        self._changed.set()


def _holder(seen: _Seen) -> str:
    assert seen.record is not None
    return seen.record.holder


def _membership_change(before: LeaseRecord | None, after: LeaseRecord | None) -> bool:
    """Whether a slot's change may change the member list (not a renewal of the same holder)."""
    if before is None or after is None:
        return before is not after
    return (
        after.holder != before.holder
        or after.fencing_token != before.fencing_token
        or bool(after.unreadable) != bool(before.unreadable)
    )
