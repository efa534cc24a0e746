"""Group: who is alive in a group, one ordinary lease record per member.

A member joins by holding the lowest free slot lease of the group, ``<name>.0``, ``<name>.1``,
... (a slot whose holder stopped renewing is free once it has stood for L, as any lease). Slot
records are created in order and never deleted, so the slots in use are ``0`` up to the first
slot without a record: every member finds every other without a store that can list.

While joined, a member keeps a view of the group (:class:`Membership`): it reads the slots,
follows them with the backend's watch (the process's shared watch), and counts a slot as a
live member while its record is held and has changed (been renewed) within L on its own clock.
A clean leave releases the slot, which every watcher sees at once; a crashed member stops
renewing and drops out of every view L after its last renewal was seen.

A member that leaves (cleanly, or by losing its lease) keeps its view for the next join of the
same group through the same backend object on the same event loop (``run_partitioned`` joins
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
from types import TracebackType

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._abc import LeaseBackend, LeaseRecord
from ._checks import check_name
from ._exceptions import BackendUnavailable, LeaseBusy, LeaseConfigError, LeaseError
from ._grant import Grant
from ._lease import Lease, lease_clock
from ._settings import LeaseSettings
from ._slotted import (
    Family,
    SlotChange,
    family_of,
    follow_slots,
    hold_slot,
    read_slot,
    slot_name,
)

__all__ = ["Group", "Membership"]

logger = logging.getLogger("trio_lease")

#: The lease's monotonic clock.
_Clock = Callable[[], float]

#: Longest pause between join attempts while the backend fails (seconds; doubles from 0.1).
JOIN_BACKOFF = 5.0


@dataclasses.dataclass(slots=True)
class _Kept:
    """The view of a membership that ended, for the next join (see the module docstring)."""

    token: object  # the event loop it was seen on (anyio.lowlevel.current_token())
    clock: _Clock  # the clock its times are on
    seen: list[_Seen]


#: By backend object, then group name: the view of the last membership that ended.
_kept: weakref.WeakKeyDictionary[LeaseBackend, dict[str, _Kept]] = weakref.WeakKeyDictionary()


class Group:
    """The group ``name``: ``async with group.joined() as membership:`` joins it as ``owner``.

    Each member holds one ordinary lease, ``<name>.<slot>``, renewed as any lease is; the body
    of ``joined()`` is cancelled and :class:`LeaseLost` raised if that lease is lost. ``settings``
    are the member leases': a crashed member leaves every view after their heartbeat timeout L.
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
        self._leases: list[Lease] = [Lease(slot_name(name, 0), owner, backend, settings)]
        self._family: Family = family_of(backend, name)

    @property
    def name(self) -> str:
        """The group's name; its members hold the leases ``<name>.0``, ``<name>.1``, ..."""
        return self._name

    @property
    def owner(self) -> str:
        """The owner name this object joins as."""
        return self._leases[0].owner

    @property
    def identity(self) -> str:
        """The identity this object joins as: ``owner`` plus the incarnation id."""
        return self._leases[0].identity

    @property
    def backend(self) -> LeaseBackend:
        """The store of the member records."""
        return self._leases[0].backend

    @property
    def settings(self) -> LeaseSettings:
        """The member leases' timing."""
        return self._leases[0].settings

    def __repr__(self) -> str:
        return f"Group(name={self._name!r}, owner={self.owner!r}, backend={self.backend!r})"

    def slot_lease(self, slot: int) -> Lease:
        """The lease of member slot ``slot`` (for status displays)."""
        if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
            raise LeaseConfigError(f"a slot is an int from 0, got {slot!r}")
        while len(self._leases) <= slot:
            first = self._leases[0]
            name = slot_name(self._name, len(self._leases))
            self._leases.append(Lease(name, first.owner, first.backend, first.settings))
        return self._leases[slot]

    def joined(self) -> AbstractAsyncContextManager[Membership]:
        """Join the group (waiting while the backend fails), run the body, then leave at once.

        The :class:`Membership` yielded lists the live members and streams their changes. If
        the member's lease is lost while the body runs, the body is cancelled and a bare
        :class:`LeaseLost` is raised here, as with :meth:`Lease.held`.
        """
        return self._joined()

    @asynccontextmanager
    async def _joined(self) -> AsyncIterator[Membership]:
        async with AsyncExitStack() as stack:
            slot, grant = await self._join(stack)
            membership = Membership(self, slot, grant)
            body_error: BaseException | None = None
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(membership._keep_view)
                    try:
                        yield membership
                    except (anyio.get_cancelled_exc_class(), GeneratorExit):
                        raise  # cancellation passes through the scopes it belongs to
                    except BaseException as exc:  # re-raised bare below, never in a group
                        body_error = exc
                    finally:
                        tg.cancel_scope.cancel()
                        membership._end()
            finally:
                self._keep(membership)
            if body_error is not None:
                raise body_error

    def _kept_view(self, clock: _Clock) -> list[_Seen]:
        """What the last membership of this group through this backend object saw, if it was
        on this event loop and this clock (else nothing)."""
        try:
            kept = _kept.get(self.backend, {}).get(self._name)
        except TypeError:  # a backend object that takes no weak reference: nothing is kept
            return []
        if kept is None or kept.token != anyio.lowlevel.current_token() or kept.clock != clock:
            return []
        return list(kept.seen)

    def _keep(self, membership: Membership) -> None:
        """Keep ``membership``'s view for the next join (see the module docstring)."""
        kept = _Kept(anyio.lowlevel.current_token(), membership._clock, list(membership._seen))
        with contextlib.suppress(TypeError):  # a backend that takes no weak reference
            _kept.setdefault(self.backend, {})[self._name] = kept

    async def _join(self, stack: AsyncExitStack) -> tuple[int, Grant]:
        """Hold the lowest slot that can be taken (its hold entered into ``stack``)."""
        failures = 0
        while True:
            slot = 0
            error: BackendUnavailable | None = None
            while True:
                if slot in self._family.claimed:
                    slot += 1
                    continue
                lease = self.slot_lease(slot)
                try:
                    grant = await stack.enter_async_context(hold_slot(lease, self._family, slot))
                except LeaseBusy:
                    slot += 1
                    continue
                except BackendUnavailable as exc:
                    error = exc
                    break
                return slot, grant
            failures += 1
            logger.info("group %r: joining failed (%s); retrying", self._name, error)
            await anyio.sleep(min(JOIN_BACKOFF, 0.1 * 2 ** min(failures, 30)))


@dataclasses.dataclass(slots=True)
class _Seen:
    """A slot's record as this member last saw it, and when (its clock) that version appeared."""

    record: LeaseRecord | None
    since: float


class Membership:
    """This member's place in a :class:`Group` and its view of the group, while joined.

    :meth:`members` lists the live members (sorted identities, this one included);
    :meth:`changes` streams each new list.
    """

    def __init__(self, group: Group, slot: int, grant: Grant) -> None:
        self._group = group
        #: The member slot held: the lease ``<group name>.<slot>``.
        self.slot: int = slot
        #: The grant of the member's lease (fencing token, deadline, ``check()``).
        self.grant: Grant = grant
        self._clock: _Clock = lease_clock(group.slot_lease(0))
        # Each slot's record as last seen, and since when (kept from the last membership).
        self._seen: list[_Seen] = group._kept_view(self._clock)
        self._members: tuple[str, ...] = (grant.identity,)
        self._subscribers: set[MemoryObjectSendStream[tuple[str, ...]]] = set()
        self._wake = anyio.Event()
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

    def changes(self) -> AbstractAsyncContextManager[MemoryObjectReceiveStream[tuple[str, ...]]]:
        """A stream of the member list: the current one first, then each change.

        ``async with membership.changes() as lists: async for members in lists:`` — the
        stream ends when the member leaves the group. A slow reader misses no list (the
        stream buffers them).
        """
        return _Changes(self)

    # The view, kept by a task of joined() (never raising: a failure only logs and retries).

    async def _keep_view(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        group = self._group
        settings = group.settings
        clock = self._clock
        started = False
        failures = 0
        while True:
            try:
                await self._scan(clock)
            except LeaseError as exc:  # the view's failure never ends the membership
                failures += 1
                log = logger.info if isinstance(exc, BackendUnavailable) else logger.warning
                log("group %r: reading the members failed: %s", group.name, exc)
            else:
                failures = 0
            self._publish(clock)
            if not started:
                task_status.started()
                started = True
            if failures:
                delay = min(settings.wait_interval, 0.1 * 2 ** min(failures, 30))
            else:
                poll = settings.heartbeat_timeout if group.backend.supports_watch else None
                delay = self._next_expiry(clock) - clock()
                delay = min(delay, poll if poll is not None else settings.wait_interval)
            await self._wait(max(delay, 0.0) + 1e-3, clock)

    async def _scan(self, clock: _Clock) -> None:
        """Read slots from 0 up to the first without a record (that one included)."""
        slot = 0
        while True:
            record = await read_slot(self._group.slot_lease(slot))
            self._note(slot, record, clock())
            if record is None:
                del self._seen[slot + 1 :]
                return
            slot += 1

    def _note(self, slot: int, record: LeaseRecord | None, now: float) -> None:
        while len(self._seen) <= slot:
            self._seen.append(_Seen(None, now))
        seen = self._seen[slot]
        version = None if record is None else record.version
        if seen.record is None or seen.record.version != version:
            self._seen[slot] = _Seen(record, now)

    def _alive(self, slot: int, seen: _Seen, now: float) -> bool:
        if slot == self.slot:
            return True
        record = seen.record
        if record is None or record.is_free or record.unreadable:
            return False
        return now - seen.since < self._group.settings.heartbeat_timeout

    def _next_expiry(self, clock: _Clock) -> float:
        now = clock()
        ends = [
            seen.since + self._group.settings.heartbeat_timeout
            for slot, seen in enumerate(self._seen)
            if slot != self.slot and self._alive(slot, seen, now)
        ]
        return min(ends, default=math.inf)

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
            for send in list(self._subscribers):
                send.send_nowait(listed)

    async def _wait(self, delay: float, clock: _Clock) -> None:
        """Until a slot changes holder (the watch), a member may have expired, or ``delay``."""
        names = [slot_name(self._group.name, slot) for slot in range(len(self._seen))]
        woken = anyio.Event()

        def receive(slot: int, record: LeaseRecord | None) -> None:
            if slot >= len(self._seen):
                return
            before = self._seen[slot].record
            self._note(slot, record, clock())
            if _membership_change(before, record):
                woken.set()

        with anyio.move_on_after(delay):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow, names, receive)
                await woken.wait()
                tg.cancel_scope.cancel()

    async def _follow(self, names: list[str], receive: SlotChange) -> None:
        try:
            await follow_slots(
                self._group.backend,
                names,
                receive,
                timeout=self._group.settings.lease_operation_timeout,
            )
        except Exception as exc:  # the view also polls: a watch failure only logs
            logger.info("group %r: following the members failed: %s", self._group.name, exc)
        await anyio.sleep_forever()

    def _end(self) -> None:
        self._ended = True
        for send in list(self._subscribers):
            send.close()
        self._subscribers.clear()


class _Changes:
    """The async context manager of :meth:`Membership.changes`: a receive stream of lists."""

    def __init__(self, membership: Membership) -> None:
        self._membership = membership
        self._send: MemoryObjectSendStream[tuple[str, ...]] | None = None
        self._receive: MemoryObjectReceiveStream[tuple[str, ...]] | None = None

    async def __aenter__(self) -> MemoryObjectReceiveStream[tuple[str, ...]]:
        send, receive = anyio.create_memory_object_stream[tuple[str, ...]](math.inf)
        self._send, self._receive = send, receive
        send.send_nowait(self._membership.members())
        if self._membership._ended:
            send.close()
        else:
            self._membership._subscribers.add(send)
        return receive

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._send is not None:
            self._membership._subscribers.discard(self._send)
            self._send.close()
        if self._receive is not None:
            self._receive.close()


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
