"""A lease's writes: taking a grant in one acquire attempt, and giving it back.

Both are compare-and-swap writes decided by :mod:`._algorithm` from a fresh read:

- :meth:`GrantWriter.attempt` reads, and writes a new grant if the lease can be taken (or
  shares this owner's live grant: reentrancy, docs/design.md §4.6). A write whose outcome is unknown
  (an error, a timeout, a cancellation, an answer that does not show our write) is resolved by
  reading again: a landed grant is adopted, or released at once if the caller is being
  cancelled (docs/design.md §5.1). Conflicting writes are retried after a short jittered
  pause, a few times at most.
- :meth:`GrantWriter.drop_hold` removes one hold of a grant; the last one ends the grant and
  :meth:`GrantWriter._release` writes an empty holder, only if a fresh read still shows our
  grant (docs/design.md §4.4), shielded from cancellation and bounded by the lease operation
  timeout.

:class:`GrantWriter` is the part of a :class:`~trio_lease.Lease` that writes; it reads through
the lease's :class:`~._reading.RecordReader` and notes what it writes in the lease's
:class:`~._state.LeaseState`. ``request_handover()`` and ``withdraw_handover()`` are here too:
compare-and-swap writes of the handover request, with the same echo check, typed errors and
paced retries on conflict.
"""

from __future__ import annotations

import dataclasses
import logging

import anyio

from . import _algorithm as algo
from ._abc import LeaseRecord
from ._backoff import backoff_delay
from ._exceptions import (
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from ._heartbeat import Holding, registry
from ._observer import everywhere
from ._reading import RecordReader, untyped
from ._slots import urgent
from ._state import LeaseState

__all__ = ["CONFLICT_PAUSE", "MAX_CONFLICTS", "GrantWriter"]

logger = logging.getLogger("trio_lease")

#: Conflicting writes one acquire attempt takes (pausing between them) before it gives up with
#: BackendUnavailable: a real race ends after one conflict (the next read shows the winner), so
#: more in a row means a store that answers "conflict" to every write while reads show the lease
#: takeable; the waiting loop then backs off like for any unavailable backend.
MAX_CONFLICTS = 4
#: First pause after a conflicting write (seconds); doubled on each further conflict, jittered.
CONFLICT_PAUSE = 0.005


class GrantWriter:
    """Writes a lease's grants and releases them (and its handover requests)."""

    __slots__ = ("_reader", "_state")

    def __init__(self, state: LeaseState, reader: RecordReader) -> None:
        self._state = state
        self._reader = reader

    async def attempt(self) -> Holding | algo.Busy:
        """One acquire attempt (re-reading on conflicts). Adds a hold on success.

        A conflicting write is followed by a short jittered pause (doubling each time) and a
        fresh read; after :data:`MAX_CONFLICTS` in a row it raises :class:`BackendUnavailable`.
        """
        conflicts = 0
        while True:
            holding = self._state.live_holding()
            if holding is not None:  # reentrant: share the live grant
                holding.holds += 1
                return holding
            record = await self._reader.read()
            decision = algo.decide_acquire(
                record,
                name=self._state.name,
                identity=self._state.identity,
                observation=self._state.observation,
                now=self._state.clock(),
                settings=self._state.settings,
                wall_now=self._state.wall_clock(),
                token_floor=self._state.token_floor,
            )
            if isinstance(decision, algo.Busy):
                return decision
            holding = await self._write_grant(decision)
            if holding is not None:
                self._state.token_floor = max(self._state.token_floor, holding.token)
                holding.holds += 1
                return holding
            conflicts += 1
            if conflicts >= MAX_CONFLICTS:
                raise BackendUnavailable(
                    f"lease {self._state.name!r}: {conflicts} writes in a row conflicted although "
                    "each read before them showed the lease could be taken; the store may be "
                    "misbehaving"
                )
            await _after_conflicts(conflicts)

    async def request_handover(self, *, replace: bool = True) -> bool:
        """The handover request (:meth:`trio_lease.Lease.request_handover` says what it does):
        a compare-and-swap of this identity into the record, holder and token unchanged.

        With ``replace=False`` a request of another contender already in the record is kept
        (False): a waiter in line keeps its place.
        """
        identity = self._state.identity
        for conflicts in range(MAX_CONFLICTS):
            if conflicts:
                await _after_conflicts(conflicts)
            record = await self._reader.read()
            if record is not None and record.unreadable:
                raise BackendUnavailable(
                    f"lease {self._state.name!r}: cannot ask for a handover, the record is "
                    f"unreadable ({record.unreadable})"
                )
            if record is None or record.is_free or record.holder == identity:
                return False
            if record.handover_to == identity:
                return True
            if record.handover_to and not replace:
                return False
            stored = await self._write_request(record, identity)
            if stored is None:
                continue  # a renewal moved the version: read again
            if stored.handover_to != identity:
                raise LeaseConfigError(
                    f"{self._state.backend!r} does not store handover requests (the record it "
                    "returned has no handover_to): it cannot hand leases over"
                )
            return True
        raise BackendUnavailable(
            f"lease {self._state.name!r}: {MAX_CONFLICTS} handover requests in a row conflicted"
        )

    async def withdraw_handover(self) -> bool:
        """Take this identity's handover request out of the record (compare-and-swap, holder
        and token unchanged): True if it was there and is now gone, False if it was not there
        (granted, replaced, or never made)."""
        for conflicts in range(MAX_CONFLICTS):
            if conflicts:
                await _after_conflicts(conflicts)
            record = await self._reader.read()
            if record is None or record.unreadable or record.handover_to != self._state.identity:
                return False
            if await self._write_request(record, "") is not None:
                return True
        raise BackendUnavailable(
            f"lease {self._state.name!r}: {MAX_CONFLICTS} withdrawals of a handover request in "
            "a row conflicted"
        )

    async def _write_request(self, record: LeaseRecord, handover_to: str) -> LeaseRecord | None:
        """Write ``handover_to`` into ``record`` by compare-and-swap on its version, bounded by
        T, its answer checked (echo): the stored record, or None on a conflict."""
        asked = dataclasses.replace(record, handover_to=handover_to)
        seen = self._state.observation
        what = "asking for a handover" if handover_to else "withdrawing a handover request"
        try:
            with anyio.fail_after(self._state.settings.lease_operation_timeout):
                stored = await self._state.backend.update(asked, record.version)
        except ConflictError:
            return None
        except TimeoutError:
            raise BackendUnavailable(f"{what} on lease {self._state.name!r} timed out") from None
        except LeaseError:
            raise
        except Exception as exc:  # the SPI boundary: a backend bug, made typed and chained
            raise untyped(exc, self._state.backend, f"writing lease {self._state.name!r}") from exc
        problem = algo.echo_problem(stored, asked, record.version)
        if problem:
            raise BackendUnavailable(
                f"{what} on lease {self._state.name!r}: {problem}; the outcome is unknown, "
                "try again"
            )
        assert isinstance(stored, LeaseRecord)
        self._state.observe(stored)
        if seen is not None and seen.version == record.version:
            # Only this write changed the record since ``seen``: the holder has not renewed, so
            # its expiry still counts from then (an unanswered request to a dead holder costs
            # its asker nothing). The watch may have shown ``stored`` already, or a later
            # renewal, which restarts the countdown as any change does.
            now = self._state.observation
            if now is not None and now.version == stored.version:
                self._state.observation = algo.Observation(stored.version, seen.since)
        return stored

    async def _write_grant(self, decision: algo.Write) -> Holding | None:
        """Write a new grant; None if we lost the race. Cleans up if the outcome is unknown."""
        send = self._state.clock()
        try:
            with anyio.move_on_after(self._state.settings.lease_operation_timeout) as scope:
                if decision.expected_version is None:
                    stored = await self._state.backend.create(decision.record)
                else:
                    stored = await self._state.backend.update(
                        decision.record, decision.expected_version
                    )
            if scope.cancelled_caught:
                raise BackendUnavailable(
                    f"writing lease {self._state.name!r} took longer than the lease operation "
                    "timeout"
                )
        except ConflictError:
            return None
        except BaseException as exc:  # noqa: ASYNC103  Cancelled is re-raised below
            # Unknown outcome (error, timeout, or our caller was cancelled): the write may have
            # landed. Learn the truth; adopt it, or, if we are being cancelled, release it.
            cancelled = not isinstance(exc, Exception)
            current = await self._resolve_unknown_grant(decision.record, release=cancelled)  # noqa: ASYNC102  resolve_unknown_grant shields and bounds
            if current is None or cancelled:
                if isinstance(exc, Exception) and not isinstance(exc, LeaseError):
                    raise untyped(  # noqa: ASYNC104  only an Exception is made typed
                        exc, self._state.backend, f"writing lease {self._state.name!r}"
                    ) from exc
                raise
            stored = current
        else:
            problem = algo.echo_problem(stored, decision.record, decision.expected_version)
            if problem:
                # The answer does not show our write: an unknown outcome, like a lost reply.
                current = await self._resolve_unknown_grant(decision.record, release=False)
                if current is None:
                    raise BackendProtocolError(
                        f"writing lease {self._state.name!r}: {problem}, and a fresh read does not "
                        "show our grant; the outcome is unknown"
                    )
                stored = current
        self._state.observe(stored)
        holding = Holding(
            key=self._state.key,
            backend=self._state.backend,
            settings=self._state.settings,
            record=stored,
            send_time=send,
            clock=self._state.clock,
            wall_clock=self._state.wall_clock,
            info=self._state.info,
            observers=self._state.observers,
        )
        registry[self._state.key] = holding
        if self._state.observers or everywhere():
            started, now = self._state.wait_started, self._state.clock()
            holding.tell(
                "acquired",
                waited=0.0 if started is None else now - started,
                valid_for=holding.deadline - now,
            )
        return holding

    async def _resolve_unknown_grant(
        self, intended: LeaseRecord, *, release: bool
    ) -> LeaseRecord | None:
        """After a grant write with unknown outcome: the stored record if it landed, else None.

        With ``release``, a landed grant is released at once (cancellation-safe acquire).
        Shielded and bounded by T.
        """
        with (
            anyio.CancelScope(shield=True),  # noqa: ASYNC912  a shield for cleanup
            anyio.move_on_after(self._state.settings.lease_operation_timeout),  # noqa: ASYNC912  bounds backend calls
        ):
            try:
                current = await self._reader.read()
                if not algo.still_ours(current, self._state.identity, intended.fencing_token):
                    return None
                assert current is not None
                if release:
                    await self._state.backend.update(
                        algo.release_record(current, self._state.wall_clock()), current.version
                    )
                return current
            except Exception as exc:  # cleanup, shielded: whatever failed, it expires after L
                logger.warning(
                    "lease %r: could not resolve an acquire whose outcome is unknown (%s); "
                    "if it landed, the lease expires after the heartbeat timeout",
                    self._state.name,
                    exc,
                )
        return None

    async def drop_hold(self, holding: Holding, *, raise_unknown: bool) -> bool:
        """Remove one hold; the last one ends the grant and releases it (shielded, bounded)."""
        holding.holds -= 1
        if holding.holds > 0:
            return True
        was_lost = holding.lost_cause is not None
        holding.end()
        if was_lost:
            return False
        written = False
        try:
            written = await self._release(holding, raise_unknown=raise_unknown)
        finally:
            if holding.observers or everywhere():
                held = self._state.clock() - holding.granted_at
                holding.tell("released", held=held, written=written)
        return written

    async def _release(self, holding: Holding, *, raise_unknown: bool) -> bool:
        """Write an empty holder if a fresh read still shows our grant (docs/design.md §4.4).

        A write that lands between the read and the release (a contender's handover request,
        which keeps our grant) makes the release conflict: it reads again and releases if the
        grant is still ours, so the requester gets the lease at once instead of after L.
        """
        error: BaseException | None = None
        with (
            anyio.CancelScope(shield=True),  # noqa: ASYNC912  a shield for cleanup
            anyio.move_on_after(self._state.settings.lease_operation_timeout) as scope,  # noqa: ASYNC912  bounds backend calls
            urgent(),  # a release hands the lease over: it goes before acquisitions
        ):
            try:
                for conflicts in range(MAX_CONFLICTS):
                    if conflicts:
                        await _after_conflicts(conflicts)
                    current = await self._reader.read()
                    if not algo.still_ours(current, holding.identity, holding.token):
                        return False
                    assert current is not None
                    written = algo.release_record(current, self._state.wall_clock())
                    try:
                        released = await self._state.backend.update(written, current.version)
                    except ConflictError:
                        continue  # the record moved on: a fresh read tells whether it is ours
                    problem = algo.echo_problem(released, written, current.version)
                    if problem:
                        raise BackendProtocolError(f"the answer to the release: {problem}")
                    self._state.observe(released)
                    return True
                logger.warning(
                    "lease %r: %d releases in a row conflicted; it expires after the heartbeat "
                    "timeout",
                    self._state.name,
                    MAX_CONFLICTS,
                )
                return False
            except Exception as exc:  # cleanup, shielded: logged below, raised typed if asked
                error = exc
        message = (
            f"releasing lease {self._state.name!r} "
            + ("timed out" if scope.cancelled_caught else f"failed: {error}")
            + "; it expires after the heartbeat timeout"
        )
        logger.warning("%s", message)
        if raise_unknown:
            raise BackendUnavailable(message) from error
        return False


async def _after_conflicts(conflicts: int) -> None:
    """The pause before the next try after ``conflicts`` conflicting writes in a row:
    :data:`CONFLICT_PAUSE`, doubled for each further conflict, jittered by ±50 %."""
    await anyio.sleep(backoff_delay(conflicts, CONFLICT_PAUSE, jitter=(0.5, 1.5)))
