"""Lease: one public class joining the layers of a lease, each a module of its own.

=================  ==========================================================================
:mod:`._reading`   construction, the record as last read, ``holder()``, ``watch_holder()``
:mod:`._writing`   one acquire attempt (grant write, unknown outcomes, conflicts), release
:mod:`._waiting`   waiting for the grant (watch or jittered polls), its warnings
:mod:`._held`      ``held()`` / ``try_held()``: the body guarded by the heartbeat
:mod:`._akka`      ``acquire()`` / ``release()`` / ``check_lease()`` and their host task group
=================  ==========================================================================

The two ways of holding, :mod:`._held` and :mod:`._akka`, are independent layers on the same
base; they share grants (reentrancy, docs/design.md §4.6) through the process's registry of holdings
(:mod:`._heartbeat`), not through code. See :mod:`._reading` for why layers, not composition.
"""

from __future__ import annotations

from ._akka import AkkaLease
from ._held import HeldLease

__all__ = ["Lease"]


class Lease(HeldLease, AkkaLease):
    """A named distributed lease, held by ``owner`` through ``backend``.

    The identity written to the record is ``owner`` plus a per-process incarnation id, so a
    restarted process never silently inherits a live lease. Leases are reentrant per identity:
    in one process, every :class:`Lease` of the same store, name and owner shares one grant.

    ``clock`` (monotonic seconds, default ``anyio.current_time``) and ``wall_clock`` (UTC
    datetimes, written to records for humans only) can be injected for tests.

    Hold it as a scope with :meth:`held` (or :meth:`try_held`), or Akka-style with
    :meth:`acquire`, :meth:`release` and :meth:`check_lease` inside ``async with lease:``.
    """
