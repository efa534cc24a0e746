"""Semaphore: at most ``limit`` holders at once, one ordinary lease record per slot.

Slot ``i`` of semaphore ``name`` is the lease ``<name>~slot~<i>`` (:mod:`._namespace`): a grant
of the semaphore is a grant of one slot's lease, with that lease's fencing token (strictly
increasing per slot), renewals, cancel-on-loss and release. Nothing is stored besides the
slots' records, so every backend serves a semaphore as it serves a lease.

Waiting (:meth:`Semaphore.held`):

- in a process, waiters are served first come, first served: only the first one contends (the
  others wait for their turn), and no two tasks try the same slot (:mod:`._slotted`);
- the contending waiter tries every slot below the limit; if all are busy it asks one of them,
  not yet asked by anyone, to hand over to it (``Lease.request_handover(replace=False)``):
  that slot's release is then reserved for it, so a holder that releases and at once asks
  again cannot take it back, and a waiter is served after at most the holds in progress when
  it asked; a waiter whose request is gone from the record (it lapsed while the process was
  paused, or the slot went to another) asks again at its next round;
- it then waits for a change of any slot (the backend's watch, through the shared watch), a
  release in its own process, the earliest expiry of a silent holder, or ``wait_interval``,
  whichever comes first, and tries again.

A lowered limit (:meth:`Semaphore.set_limit`) drains the slots above it cooperatively: this
process's grants on them see :attr:`SemaphoreGrant.drain_requested`, other holders are asked by
handover request (their :attr:`SemaphoreGrant.handover_requested`), and no waiter of this
semaphore takes them any more.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import anyio

from ._abc import LeaseBackend, LeaseRecord
from ._checks import check_name, check_semaphore_limit, check_text
from ._exceptions import (
    AcquireTimeout,
    BackendError,
    BackendUnavailable,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
)
from ._grant import Grant
from ._heartbeat import CONFIRM_PAUSE
from ._lease import Lease
from ._settings import LeaseSettings, check_seconds
from ._slotted import SlotChange, SlotFamily
from ._waiting import EXPIRY_JITTER, may_end_the_wait

__all__ = ["Semaphore", "SemaphoreGrant"]

logger = logging.getLogger("trio_lease")


class SemaphoreGrant(Grant):
    """One grant of a :class:`Semaphore`, as yielded by ``held()``: a :class:`Grant` of one
    slot's lease, with the slot and the semaphore's own fields.

    It reads what the slot lease's grant reads (the same holding), so ``fencing_token``,
    ``deadline``, ``lost``, ``handover_requested``, :meth:`check` and :meth:`remaining` are
    the slot lease's. The fencing token strictly increases with every grant of that slot, so a
    resource guarded per slot (or by ``(slot, fencing_token)``) rejects stale holders.
    """

    __slots__ = ("_drain", "grant", "semaphore_name", "slot")

    def __init__(self, semaphore_name: str, slot: int, grant: Grant) -> None:
        super().__init__(grant._holding, grant.owner, grant._clock)
        #: The name of the semaphore.
        self.semaphore_name: str = semaphore_name
        #: The slot held (0 to limit - 1): the lease ``<semaphore_name>~slot~<slot>``.
        self.slot: int = slot
        #: The grant of the slot's lease, as ``Lease.held()`` yields it.
        self.grant: Grant = grant
        self._drain = anyio.Event()

    @property
    def drain_requested(self) -> anyio.Event:
        """Set when the semaphore's limit was lowered to or below this slot: leave soon.

        Cooperative: the body is not cancelled; it finishes the work in hand and leaves the
        scope, and no waiter of the lowered semaphore takes the slot again.
        """
        return self._drain

    def __repr__(self) -> str:
        return (
            f"SemaphoreGrant(semaphore_name={self.semaphore_name!r}, slot={self.slot}, "
            f"fencing_token={self.fencing_token})"
        )


class Semaphore:
    """At most ``limit`` holders at once of the semaphore ``name``, through ``backend``.

    Each grant holds one slot, the ordinary lease ``<name>~slot~<slot>``, with its own fencing token
    (strictly increasing per slot), renewals and cancel-on-loss as with :class:`Lease`. In one
    process every ``held()`` is a grant of its own (never shared like a reentrant lease), and
    waiters are served in arrival order; across processes a waiter asks a busy slot to be handed
    over to it, so it is served after at most the holds in progress when it asked.

    Every contender must use the same ``name`` and, to keep the bound, the same ``limit``: the
    bound is the largest limit any live contender uses. ``settings`` are each slot lease's.
    """

    def __init__(
        self,
        name: str,
        owner: str,
        backend: LeaseBackend,
        settings: LeaseSettings | None = None,
        *,
        limit: int,
    ) -> None:
        _check_limit(limit)
        check_name(name, "semaphore name")
        check_text(owner, "owner")
        if isinstance(backend, LeaseBackend):  # else Lease refuses it below
            check_semaphore_limit(self, backend.store_key, name, limit)
        self._name = name
        self._limit = limit
        self._slots = SlotFamily(name, "slot", owner, backend, settings)
        self._grants: dict[int, SemaphoreGrant] = {}
        self._limit_changed: anyio.Event | None = None
        self._slots.lease(limit - 1)  # check every slot name now, not at the first wait

    @property
    def name(self) -> str:
        """The semaphore's name; its slots are the leases ``<name>~slot~0`` to
        ``<name>~slot~<limit-1>``."""
        return self._name

    @property
    def owner(self) -> str:
        """The owner name; the identity written to the records adds the incarnation id."""
        return self._slots.owner

    @property
    def identity(self) -> str:
        """The holder identity this semaphore writes: ``owner`` plus the incarnation id."""
        return self._slots.identity

    @property
    def backend(self) -> LeaseBackend:
        """The store of the slot records."""
        return self._slots.backend

    @property
    def settings(self) -> LeaseSettings:
        """Each slot lease's timing."""
        return self._slots.settings

    @property
    def limit(self) -> int:
        """How many grants may exist at once (as this contender sees it)."""
        return self._limit

    def __repr__(self) -> str:
        return (
            f"Semaphore(name={self._name!r}, owner={self.owner!r}, limit={self._limit}, "
            f"backend={self.backend!r})"
        )

    def slot_lease(self, slot: int) -> Lease:
        """The lease of slot ``slot`` (for status displays; hold the semaphore with ``held()``)."""
        return self._slots.checked_lease(slot)

    def held(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[SemaphoreGrant]:
        """Wait until a slot is granted, run the body, then release the slot.

        Raises :class:`AcquireTimeout` if ``timeout`` seconds pass first. If the slot's lease
        is lost while the body runs, the body is cancelled and a bare :class:`LeaseLost` is
        raised here, as with :meth:`Lease.held`.
        """
        checked = check_seconds(timeout, "semaphore.held(timeout=...)", none="wait without bound")
        return self._held(checked, wait=True)

    def try_held(self) -> AbstractAsyncContextManager[SemaphoreGrant]:
        """Like :meth:`held`, but raise :class:`LeaseBusy` at once if every slot is busy."""
        return self._held(None, wait=False)

    async def holders(self) -> list[str | None]:
        """Read every slot below the limit: its holder identity, None when free (index: slot).

        A slot whose record cannot be read is held by an unknown holder, as with
        :meth:`Lease.holder`. A holder that stopped renewing is listed until its slot is taken.
        """
        result: list[str | None] = []
        for slot in range(self._limit):
            await self._slots.read(slot)
            result.append(self._slots.lease(slot).holder())
        return result

    async def set_limit(self, limit: int) -> None:
        """Change the limit this contender uses; a lower one drains the slots above it.

        This process's grants on those slots see :attr:`SemaphoreGrant.drain_requested`; any
        other holder of them is asked to hand the slot over (its
        :attr:`SemaphoreGrant.handover_requested`), which also keeps the released slot from
        other contenders for L. Waiters of this semaphore take only slots below the new limit.
        A higher limit wakes the waiters at once.
        """
        _check_limit(limit)
        old, self._limit = self._limit, limit
        self._slots.lease(limit - 1)
        if self._limit_changed is not None:
            self._limit_changed.set()
            self._limit_changed = None
        for slot in range(limit, old):
            grant = self._grants.get(slot)
            if grant is not None:
                grant.drain_requested.set()
                continue
            if slot in self._slots.local.claimed:
                continue  # another semaphore object of this process holds it
            try:
                await self._slots.lease(slot).request_handover()
            except LeaseError as exc:
                logger.warning(
                    "semaphore %r: could not ask the holder of slot %d to leave: %s",
                    self._name,
                    slot,
                    exc,
                )

    @asynccontextmanager
    async def _held(self, timeout: float | None, *, wait: bool) -> AsyncIterator[SemaphoreGrant]:
        async with AsyncExitStack() as stack:
            slot, grant = await self._acquire(stack, timeout, wait=wait)
            granted = SemaphoreGrant(self._name, slot, grant)
            if slot >= self._limit:  # lowered while the grant was being written
                granted.drain_requested.set()
            self._grants[slot] = granted
            stack.callback(self._grants.pop, slot, None)
            yield granted

    async def _acquire(
        self, stack: AsyncExitStack, patience: float | None, *, wait: bool
    ) -> tuple[int, Grant]:
        """Take a slot, entering its hold into ``stack``; wait (if ``wait``) until one is free,
        for at most ``patience`` seconds (None: no limit).

        No cancel scope of this method is open while a slot's hold is entered: the hold's own
        scopes must outlive it (they close with ``stack``).
        """
        clock = anyio.current_time
        started = clock()
        deadline = math.inf if patience is None else started + patience
        family = self._slots.local
        ticket = anyio.Event()
        if wait:
            family.queue.append(ticket)
        reserved: int | None = None
        taken: int | None = None
        last_error: BackendError | None = None
        try:
            if wait and family.queue[0] is not ticket:
                with anyio.move_on_after(max(deadline - clock(), 0.0)):
                    await ticket.wait()
                if not ticket.is_set():
                    raise self._timeout(patience, last_error)
            while True:
                outcome = await self._try_slots(stack, reserved)
                if isinstance(outcome, tuple):
                    taken = outcome[0]
                    return outcome
                busy, last_error = outcome.busy, outcome.error or last_error
                if not wait:
                    if outcome.error is not None and not busy:
                        raise outcome.error
                    raise self._busy(busy)
                if clock() >= deadline:
                    raise self._timeout(patience, last_error)
                if not self._still_reserved(reserved, busy):
                    # None yet, or it lapsed (paused past L), or the slot went to another:
                    # ask again, or this waiter would only ever race the looping holders.
                    reserved = await self._reserve(busy, reserved, clock() - started)
                await self._wait_for_change(busy, deadline, failing=last_error is not None)
                last_error = outcome.error
        finally:
            if wait:
                family.leave_queue(ticket)
            if reserved is not None and reserved != taken:
                bound = self.settings.lease_operation_timeout
                with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
                    await self._slots.withdraw(reserved)

    async def _try_slots(
        self, stack: AsyncExitStack, reserved: int | None
    ) -> tuple[int, Grant] | _Round:
        """Try each slot below the limit that no task of this process holds, the reserved one
        first: the slot taken (its hold entered into ``stack``), else what was seen."""
        seen = _Round({}, None)
        order = list(range(self._limit))
        if reserved is not None and reserved < self._limit:
            order.remove(reserved)
            order.insert(0, reserved)  # ours once released: try it first
        for slot in order:
            if slot >= self._limit:
                continue
            claimer = self._slots.local.claimed.get(slot)
            if claimer is not None:  # held or tried by a task of this process
                seen.busy[slot] = LeaseBusy(self._slots.record_name(slot), claimer, math.inf)
                continue
            try:
                grant = await stack.enter_async_context(self._slots.hold(slot))
            except LeaseBusy as exc:
                seen.busy[slot] = exc
            except BackendUnavailable as exc:
                seen.error = exc
            else:
                return slot, grant
        return seen

    def _still_reserved(self, reserved: int | None, busy: dict[int, LeaseBusy]) -> bool:
        """Whether slot ``reserved`` is busy and its record, as this round read it, still
        carries this contender's handover request."""
        if reserved is None or reserved not in busy:
            return False
        record = self._slots.lease(reserved).last_record
        return record is not None and record.handover_to == self.identity

    async def _reserve(
        self, busy: dict[int, LeaseBusy], reserved: int | None, waited: float
    ) -> int | None:
        """Ask one busy slot, not yet asked by anyone, to hand over to us; its index or None.

        First a short random pause, shorter the longer this contender has waited: when a
        change wakes several waiters at once, the one that waited longest most likely asks
        first, and a holder that releases and at once asks again comes last.
        """
        interval = self.settings.wait_interval
        pause = min(interval / 10, CONFIRM_PAUSE)
        await anyio.sleep(pause * random.uniform(0.0, 1.0) * interval / (interval + waited))
        if reserved is not None:
            await self._slots.withdraw(reserved)
        for slot in sorted(busy):
            if slot in self._slots.local.claimed or slot >= self._limit:
                continue  # held in this process: its release wakes us anyway
            if await self._slots.reserve(slot):
                return slot
        return None

    async def _wait_for_change(
        self, busy: dict[int, LeaseBusy], deadline: float, *, failing: bool
    ) -> None:
        """Wait for a slot's change that may let us in, a local release, a silent holder's
        expiry, a new limit or ``wait_interval`` (jittered), whichever comes first."""
        settings = self.settings
        clock = anyio.current_time
        delay = settings.wait_interval
        soonest = min((exc.expires_in for exc in busy.values()), default=math.inf)
        jitter = delay * random.uniform(0.0, 0.2)
        if soonest <= delay:
            delay, jitter = soonest, random.uniform(0.0, EXPIRY_JITTER)
        elif failing:
            delay = min(delay, 0.1)
        delay = min(delay + jitter + 1e-3, max(deadline - clock(), 0.0))
        limit = self._limit
        known = [self._slots.lease(i).last_record for i in range(limit)]
        woken = anyio.Event()

        # A slot held in this process wakes us by the local release, not by its records.
        local_slots = set(self._slots.local.claimed)

        def receive(slot: int, record: LeaseRecord | None) -> None:
            if slot in local_slots:
                return
            if slot < len(known) and may_end_the_wait(known[slot], record):
                woken.set()
            if slot < len(known):
                known[slot] = record

        if self._limit_changed is None:
            self._limit_changed = anyio.Event()
        limit_changed = self._limit_changed
        local = self._slots.local.changed()

        async def on(event: anyio.Event) -> None:
            await event.wait()
            woken.set()

        with anyio.move_on_after(delay):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow, limit, receive)
                tg.start_soon(on, limit_changed)
                tg.start_soon(on, local)
                await woken.wait()
                tg.cancel_scope.cancel()

    async def _follow(self, limit: int, receive: SlotChange) -> None:
        """Follow the slots' records (a watch failure only logs: the waiter also polls)."""
        try:
            await self._slots.follow(range(limit), receive)
        except Exception as exc:  # a hint only: the waiter also polls, so a failure only logs
            logger.info("semaphore %r: following the slots failed: %s", self._name, exc)

    def _busy(self, busy: dict[int, LeaseBusy]) -> LeaseBusy:
        holders = ", ".join(f"slot {slot}: {exc.holder}" for slot, exc in sorted(busy.items()))
        soonest = min((exc.expires_in for exc in busy.values()), default=math.inf)
        return LeaseBusy(self._name, holders, soonest)

    def _timeout(self, timeout: float | None, last_error: BackendError | None) -> AcquireTimeout:
        detail = f"; last error: {last_error}" if last_error is not None else ""
        waited = "the time allowed" if timeout is None else f"{timeout:g} s"
        return AcquireTimeout(
            f"semaphore {self._name!r} (limit {self._limit}) granted no slot within "
            f"{waited}{detail}",
            last_error=last_error,
        )


@dataclasses.dataclass(slots=True)
class _Round:
    """What one round of attempts saw: the busy slots, and the last backend error."""

    busy: dict[int, LeaseBusy]
    error: BackendUnavailable | None


def _check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise LeaseConfigError(f"limit must be an int of at least 1, got {limit!r}")
