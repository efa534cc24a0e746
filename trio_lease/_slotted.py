"""Families of slot leases: ``<name>.0``, ``<name>.1``, ... as ordinary lease records.

:class:`~trio_lease.Semaphore` and :class:`~trio_lease.Group` are built from plain
:class:`~trio_lease.Lease` objects, one per slot, so every backend, the shared watch, fencing
tokens and cancel-on-loss serve them unchanged. What they add is kept here:

- :class:`Family`: what one process knows of a family of slots on one store: which slots its
  own tasks hold or are trying (a lease is reentrant per identity, so two tasks of one process
  must never try the same slot: they would share one grant), and the process's waiters in
  arrival order (only the first one contends, so a process serves its waiters first come, first
  served);
- :func:`hold_slot`: one attempt at one slot, holding it as ``try_held()`` does;
- :func:`follow_slots`: the one place where these features consume the watch of slot records;
- :func:`read_slot`, :func:`reserve` and :func:`clear_reservation`: a fresh read of a slot,
  asking its holder to hand it over (never replacing another's request), and withdrawing that.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from contextlib import asynccontextmanager

import anyio

from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import ConflictError, LeaseError
from ._grant import Grant
from ._lease import Lease, read_record
from ._shared_watch import FeedFailure, shared_watch

__all__ = [
    "Family",
    "SlotChange",
    "clear_reservation",
    "family_of",
    "follow_slots",
    "hold_slot",
    "read_slot",
    "reserve",
    "slot_name",
]

logger = logging.getLogger("trio_lease")


def slot_name(name: str, slot: int) -> str:
    """The lease name of slot ``slot`` of the family ``name``."""
    return f"{name}.{slot}"


class Family:
    """One process's view of a family of slots on one store: its claims and its waiters."""

    __slots__ = ("__weakref__", "_changed", "claimed", "queue")

    def __init__(self) -> None:
        #: Slots this process's tasks hold or are trying right now, and their identities.
        self.claimed: dict[int, str] = {}
        #: This process's waiters, first come first: only ``queue[0]`` contends.
        self.queue: list[anyio.Event] = []
        self._changed: anyio.Event | None = None

    def changed(self) -> anyio.Event:
        """Set the next time a slot claimed here is let go (made on first use)."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def let_go(self, slot: int, *, released: bool) -> None:
        """Drop the claim on ``slot``; wake the waiters if it was held (and is now released)."""
        self.claimed.pop(slot, None)
        if released and self._changed is not None:
            self._changed.set()
            self._changed = None

    def leave_queue(self, ticket: anyio.Event) -> None:
        """Take ``ticket`` out of the queue and wake the next waiter if it is now first."""
        was_first = bool(self.queue) and self.queue[0] is ticket
        if ticket in self.queue:
            self.queue.remove(ticket)
        if was_first and self.queue:
            self.queue[0].set()


_families: weakref.WeakValueDictionary[tuple[Hashable, str], Family] = weakref.WeakValueDictionary()


def family_of(backend: LeaseBackend, name: str) -> Family:
    """The process's :class:`Family` for ``name`` on ``backend``'s store (shared while used)."""
    key = (backend.store_key, name)
    family = _families.get(key)
    if family is None:
        family = Family()
        _families[key] = family
    return family


@asynccontextmanager
async def hold_slot(lease: Lease, family: Family, slot: int) -> AsyncIterator[Grant]:
    """Claim ``slot`` in this process and try its lease once (``try_held``), holding it here.

    Raises :class:`LeaseBusy` (or a backend error) at once if it cannot be taken. The claim is
    let go only after the lease was released, so no other task of this process tries the slot
    while this one still holds it (it would share the grant).
    """
    if slot in family.claimed:
        raise RuntimeError(f"slot {slot} of {lease.name!r} is already claimed in this process")
    family.claimed[slot] = lease.identity
    held = False
    try:
        async with lease.try_held() as grant:
            held = True
            yield grant
    finally:
        family.let_go(slot, released=held)


async def read_slot(lease: Lease) -> LeaseRecord | None:
    """A fresh read of a slot's record (bounded by T), noted by the lease as its own reads are."""
    return await read_record(lease)


async def reserve(lease: Lease) -> bool:
    """Ask the holder of ``lease`` to hand it over to this identity, unless someone already
    asked: True if the request is now in the record (compare-and-swap on a fresh read).

    Unlike ``Lease.request_handover()``, this never replaces another contender's request, so
    a waiter in line keeps its place. Bounded by T; a failure counts as not reserved.
    """
    try:
        with anyio.fail_after(lease.settings.lease_operation_timeout):
            record = await lease.backend.get(lease.name)
            if (
                record is None
                or record.unreadable
                or record.is_free
                or record.holder == lease.identity
                or record.handover_to
            ):
                return record is not None and record.handover_to == lease.identity
            asked = dataclasses.replace(record, handover_to=lease.identity)
            stored = await lease.backend.update(asked, record.version)
    except ConflictError:
        return False
    except (TimeoutError, LeaseError, Exception) as exc:
        logger.info("lease %r: asking for a handover failed: %s", lease.name, exc)
        return False
    return isinstance(stored, LeaseRecord) and stored.handover_to == lease.identity


async def clear_reservation(lease: Lease) -> None:
    """Withdraw this identity's handover request on ``lease``'s record, if it is still there.

    Used by a waiter that gives up: a released record reserved for it would otherwise stay
    closed to every other contender for L. Shielded and bounded by T; failures only log (the
    reservation then lapses after L).
    """
    with (
        anyio.CancelScope(shield=True),  # noqa: ASYNC912  a shield for cleanup
        anyio.move_on_after(lease.settings.lease_operation_timeout),  # noqa: ASYNC912  its bound
    ):
        try:
            record = await lease.backend.get(lease.name)
            if record is None or record.unreadable or record.handover_to != lease.identity:
                return
            await lease.backend.update(dataclasses.replace(record, handover_to=""), record.version)
        except ConflictError:
            pass  # it moved on: a grant clears the request, a renewal keeps it (lapses after L)
        except (LeaseError, Exception) as exc:
            logger.info("lease %r: withdrawing a handover request failed: %s", lease.name, exc)


#: What :func:`follow_slots` hands its callback: the slot's index and its new state.
SlotChange = Callable[[int, LeaseRecord | None], None]


async def follow_slots(
    backend: LeaseBackend, names: Sequence[str], receive: SlotChange, *, timeout: float
) -> None:
    """Call ``receive(index, record)`` for each change of the records ``names``, until cancelled.

    The one place the slot features consume the backend's watch (through the process's shared
    watch: one stream per backend object, whatever the number of slots). Each name's current
    state is delivered first, so a change between the caller's last read and the subscription
    is not missed (that read is bounded by ``timeout``). Returns at once for a backend without
    a watch (the callers also poll). A feed failure is not passed on: the callers' next read
    meets the error itself.
    """
    settings_timeout = timeout
    hub = shared_watch(backend) if backend.supports_watch else None
    if hub is None:
        return

    async def follow(index: int, name: str) -> None:
        async def first() -> LeaseRecord | None:
            with anyio.fail_after(settings_timeout):
                return await backend.get(name)

        async def deliver(  # noqa: ASYNC124  the hub awaits its callbacks
            state: LeaseRecord | FeedFailure | None,
        ) -> None:
            if not isinstance(state, FeedFailure):
                receive(index, state)

        await hub.follow(name, deliver, first=first)

    async with anyio.create_task_group() as tg:
        for index, name in enumerate(names):
            tg.start_soon(follow, index, name)
