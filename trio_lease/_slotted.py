"""A family of slot leases: the records a Semaphore or a Group makes for itself.

:class:`~trio_lease.Semaphore` and :class:`~trio_lease.Group` (and through a group
:func:`~trio_lease.run_partitioned`) are built from plain :class:`~trio_lease.Lease` objects,
one per slot, so every backend, the shared watch, fencing tokens and cancel-on-loss serve them
unchanged. A :class:`SlotFamily` owns those leases and everything the features do with them:

- their names, ``<name>~<role>~<slot>`` (:mod:`._namespace`: out of reach of every user name);
- holding one slot as ``try_held()`` does (:meth:`SlotFamily.hold`), never two tasks of one
  process on one slot (a lease is reentrant per identity: they would share one grant);
- a fresh read of a slot, asking its holder to hand it over without replacing another's
  request, and withdrawing that: the lease's own reads and writes (``Lease.read()``,
  ``request_handover(replace=False)``, ``withdraw_handover()``), with their echo checks, typed
  errors and paced retries;
- following the slots' records: the one place these features consume the watch.

What one process knows of a family on one store is a :class:`LocalSlots`, shared by every family
object of that name and role on that store in the running event loop: which slots its tasks
hold or try, and its waiters in arrival order (only the first one contends, so a process serves
its waiters first come, first served).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from contextlib import asynccontextmanager

import anyio
from anyio.lowlevel import RunVar

from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import BackendError, LeaseConfigError
from ._grant import Grant
from ._lease import Lease
from ._namespace import Role, record_name
from ._settings import LeaseSettings
from ._shared_watch import FeedFailure, shared_watch

__all__ = ["LocalSlots", "SlotChange", "SlotFamily", "follow_records", "withdraw_request"]

logger = logging.getLogger("trio_lease")

#: What :meth:`SlotFamily.follow` hands its callback: the slot's index and its new state.
SlotChange = Callable[[int, LeaseRecord | None], None]


class LocalSlots:
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


#: Per event loop (its events belong to one loop): by store, role and name, while used.
_local: RunVar[weakref.WeakValueDictionary[tuple[Hashable, str, str], LocalSlots]] = RunVar(
    "trio_lease_local_slots"
)


def _local_slots(backend: LeaseBackend, role: str, name: str) -> LocalSlots:
    """The running loop's :class:`LocalSlots` for ``name``/``role`` on ``backend``'s store."""
    try:
        families = _local.get()
    except LookupError:
        families = weakref.WeakValueDictionary()
        _local.set(families)
    key = (backend.store_key, role, name)
    local = families.get(key)
    if local is None:
        local = families[key] = LocalSlots()
    return local


class SlotFamily:
    """The slot leases ``<name>~<role>~0``, ``~1``, ... of one feature object, held as ``owner``
    through ``backend`` with ``settings``; made on first use (slot numbers are not bounded)."""

    __slots__ = ("_leases", "_local", "name", "role")

    def __init__(
        self,
        name: str,
        role: Role,
        owner: str,
        backend: LeaseBackend,
        settings: LeaseSettings | None,
    ) -> None:
        #: The feature's name (checked by the feature: no reserved separator).
        self.name: str = name
        #: What the slots are for (:data:`._namespace.ROLES`).
        self.role: Role = role
        self._leases: list[Lease] = [Lease(record_name(name, role, 0), owner, backend, settings)]
        self._local: LocalSlots | None = None

    @property
    def owner(self) -> str:
        return self._leases[0].owner

    @property
    def identity(self) -> str:
        return self._leases[0].identity

    @property
    def backend(self) -> LeaseBackend:
        return self._leases[0].backend

    @property
    def settings(self) -> LeaseSettings:
        return self._leases[0].settings

    @property
    def local(self) -> LocalSlots:
        """What this process knows of the family (see :class:`LocalSlots`), in this loop."""
        if self._local is None:
            self._local = _local_slots(self.backend, self.role, self.name)
        return self._local

    def lease(self, slot: int) -> Lease:
        """The lease of slot ``slot`` (made on first use, with the leases below it)."""
        while len(self._leases) <= slot:
            first = self._leases[0]
            name = record_name(self.name, self.role, len(self._leases))
            self._leases.append(Lease(name, first.owner, first.backend, first.settings))
        return self._leases[slot]

    def checked_lease(self, slot: object) -> Lease:
        """:meth:`lease` for a caller's ``slot``, refused unless an int from 0."""
        if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
            raise LeaseConfigError(f"a slot is an int from 0, got {slot!r}")
        return self.lease(slot)

    def record_name(self, slot: int) -> str:
        """The name of slot ``slot``'s record."""
        return record_name(self.name, self.role, slot)

    @asynccontextmanager
    async def hold(self, slot: int) -> AsyncIterator[Grant]:
        """Claim ``slot`` in this process and try its lease once (``try_held``), holding it here.

        Raises :class:`LeaseBusy` (or a backend error) at once if it cannot be taken. The claim
        is let go only after the lease was released, so no other task of this process tries the
        slot while this one still holds it (it would share the grant).
        """
        local = self.local
        if slot in local.claimed:
            raise RuntimeError(f"slot {slot} of {self.name!r} is already claimed in this process")
        lease = self.lease(slot)
        local.claimed[slot] = lease.identity
        held = False
        try:
            async with lease.try_held() as grant:
                held = True
                yield grant
        finally:
            local.let_go(slot, released=held)

    async def read(self, slot: int) -> LeaseRecord | None:
        """A fresh read of slot ``slot``'s record (``Lease.read()``: bounded, typed errors)."""
        return await self.lease(slot).read()

    async def reserve(self, slot: int) -> bool:
        """Ask the holder of ``slot`` to hand it over to this identity, unless another contender
        already asked (``request_handover(replace=False)``): True if the request is in the
        record. A store failure counts as not reserved (logged)."""
        try:
            return await self.lease(slot).request_handover(replace=False)
        except BackendError as exc:
            logger.info("%s: asking for a handover failed: %s", self.record_name(slot), exc)
            return False

    async def withdraw(self, slot: int) -> None:
        """Withdraw this identity's handover request on ``slot`` (:func:`withdraw_request`)."""
        await withdraw_request(self.lease(slot))

    async def follow(self, slots: Iterable[int], receive: SlotChange) -> None:
        """Call ``receive(slot, record)`` for each change of the records of ``slots`` (their
        current state first), until cancelled; see :func:`follow_records`."""
        numbers = list(slots)
        names = [self.record_name(slot) for slot in numbers]

        def deliver(index: int, record: LeaseRecord | None) -> None:
            receive(numbers[index], record)

        await follow_records(
            self.backend, names, deliver, read_bound=self.settings.lease_operation_timeout
        )


async def withdraw_request(lease: Lease) -> None:
    """Withdraw ``lease``'s handover request, if the record still has it.

    Used by a waiter that gives up or moves on: a released record reserved for it would
    otherwise stay closed to every other contender for L. Shielded and bounded by T; a failure
    only logs (the reservation then lapses after L).
    """
    with (
        anyio.CancelScope(shield=True),  # noqa: ASYNC912  a shield for cleanup
        anyio.move_on_after(lease.settings.lease_operation_timeout),  # noqa: ASYNC912  its bound
    ):
        try:
            await lease.withdraw_handover()
        except BackendError as exc:
            logger.info("%s: withdrawing a handover request failed: %s", lease.name, exc)


async def follow_records(
    backend: LeaseBackend, names: list[str], receive: SlotChange, *, read_bound: float
) -> None:
    """Call ``receive(index, record)`` for each change of the records ``names``, until cancelled.

    Through the process's shared watch (one stream per backend object, whatever the number of
    records). Each name's current state is delivered first, so a change between the caller's
    last read and the subscription is not missed (that read is bounded by ``read_bound``). Returns
    at once for a backend without a watch (the callers also poll). A feed failure is not passed
    on: the callers' next read meets the error itself.
    """
    hub = shared_watch(backend) if backend.supports_watch else None
    if hub is None:
        return

    async def follow(index: int, name: str) -> None:
        async def first() -> LeaseRecord | None:
            with anyio.fail_after(read_bound):
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
