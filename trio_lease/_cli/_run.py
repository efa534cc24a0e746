"""``trio-lease run NAME -- CMD...``: run CMD only while this process holds the lease NAME.

With ``--limit N`` it holds one of N slots of the semaphore NAME instead (at most N such runs
at once), and gives the child its slot (``TRIO_LEASE_SLOT``).

It waits for the lease (or, with ``--no-wait``, gives up at once if another owner holds it),
saying on stderr what it waits for (:mod:`._waiting`), then runs CMD under the lease
(:mod:`._child`). SIGINT, SIGTERM or SIGHUP (a closed terminal) stops the child the same way a
lost lease does, then releases the lease, and the command exits 128+N. The lease's errors reach
the entry point, which maps them to exit codes.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from .._exceptions import LeaseConfigError
from .._grant import Grant
from .._lease import Lease
from .._semaphore import Semaphore, SemaphoreGrant
from .._settings import LeaseSettings
from ._child import check_command, run_child
from ._options import (
    add_backend_options,
    add_owner_option,
    env_flag,
    env_value,
    lease_name,
    open_backend,
    positive_duration,
    slot_count,
)
from ._serving import add_serving_options, serving
from ._waiting import report_waiting

__all__ = ["STOP_SIGNALS", "add_run_command", "run"]

#: What a run holds: the lease's grant, or a slot's.
G = TypeVar("G", bound=Grant)

#: Signals that stop a run gracefully: Ctrl-C, a service manager's stop, a closed terminal
#: (SIGHUP, where the platform has it).
STOP_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()),
)


def add_run_command(commands: Any) -> None:
    """Register ``run`` on the ``trio-lease`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "run", help="run a command only while holding the lease"
    )
    parser.add_argument("name", type=lease_name, help="lease name")
    add_owner_option(parser)
    wait = parser.add_mutually_exclusive_group()
    no_wait, env_wait = env_flag("no_wait"), env_flag("wait")
    waits = not no_wait if no_wait is not None else (env_wait if env_wait is not None else True)
    wait.add_argument(
        "--wait", dest="wait", action="store_true", default=waits, help="wait (the default)"
    )
    wait.add_argument("--no-wait", dest="wait", action="store_false", help="exit 75 if busy")
    parser.add_argument(
        "--timeout",
        type=positive_duration,
        default=env_value("timeout", positive_duration),
        help="give up waiting after this long (exit 124)",
    )
    parser.add_argument(
        "--handover",
        action="store_true",
        default=bool(env_flag("handover")),
        help="ask the holder to hand the lease over to this run (it stops gracefully) "
        "instead of waiting for it to end",
    )
    parser.add_argument(
        "--limit",
        type=slot_count,
        default=env_value("limit", slot_count),
        metavar="N",
        help="run while holding one of N slots of NAME (a semaphore: the leases NAME.0 to "
        "NAME.N-1), so at most N such runs at once; the slot is in TRIO_LEASE_SLOT",
    )
    parser.add_argument("command", nargs="*", help="-- CMD [ARGS...]")
    add_backend_options(parser)
    add_serving_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    """Hold the lease while CMD runs; CMD's exit code, or 128+N if stopped by signal N."""
    command: list[str] = args.command
    check_command(command)
    if args.limit is not None and args.handover:
        raise LeaseConfigError(
            "--handover asks one holder to leave; with --limit no slot holder is asked: drop one"
        )
    backend, settings = open_backend(args)
    async with serving(args, settings) as observers:  # --health-port, --metrics-port
        lease = Lease(args.name, args.owner, backend, settings, observers=observers)
        supervisor = _Supervisor(lease, settings, command, wait=args.wait, timeout=args.timeout)
        supervisor.handover = args.handover
        if args.limit is not None:
            supervisor.semaphore = Semaphore(
                args.name, args.owner, backend, settings, limit=args.limit
            )
        async with backend:
            await supervisor.supervise()
    return supervisor.exit_code()


class _Supervisor:
    """One run: the lease held around the child, both stopped on SIGINT, SIGTERM or SIGHUP."""

    lease: Lease
    settings: LeaseSettings
    command: list[str]
    wait: bool
    timeout: float | None
    #: The child's exit code, once it ran.
    code: int
    #: The error that ended the run (re-raised outside the task group), if any.
    error: Exception | None
    #: The signal that stopped the run, if any.
    stopped_by: int | None
    #: Ask the holder for a handover before waiting (``--handover``).
    handover: bool = False
    #: Hold one slot of this semaphore instead of the lease (``--limit``).
    semaphore: Semaphore | None = None

    def __init__(
        self,
        lease: Lease,
        settings: LeaseSettings,
        command: list[str],
        *,
        wait: bool,
        timeout: float | None,
    ) -> None:
        self.lease = lease
        self.settings = settings
        self.command = command
        self.wait = wait
        self.timeout = timeout
        self.code = 0
        self.error = None
        self.stopped_by = None

    async def supervise(self) -> None:
        """Hold and run until the child exits, the lease is lost or a signal arrives."""
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._cancel_on_signal, signals, tg)
                tg.start_soon(self._hold_and_run, tg)

    def exit_code(self) -> int:
        """The command's exit code; raises the error that ended the run, if any."""
        if self.error is not None:
            raise self.error
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        return self.code

    async def _cancel_on_signal(
        self, signals: AsyncIterator[signal.Signals], tg: TaskGroup
    ) -> None:
        async for signum in signals:
            print(f"trio-lease: got signal {signum}; stopping", file=sys.stderr)
            self.stopped_by = int(signum)
            tg.cancel_scope.cancel()
            return

    async def _hold_and_run(self, tg: TaskGroup) -> None:
        """Hold the lease (or a slot of the semaphore) while the child runs; an error ends the
        run and is kept for :meth:`exit_code`."""
        try:
            if self.semaphore is not None:
                await self._hold_slot_and_run(self.semaphore, tg)
            else:
                await self._hold_lease_and_run(tg)
        except Exception as exc:  # re-raised by exit_code(), outside the task group
            self.error = exc
        finally:
            tg.cancel_scope.cancel()

    async def _hold_lease_and_run(self, tg: TaskGroup) -> None:
        """Hold the lease (asking for a handover first with ``--handover``) while the child runs."""
        lease = self.lease
        if self.handover and await lease.request_handover():
            print(f"trio-lease: {lease.name}: asked the holder to hand over", file=sys.stderr)
        held = lease.held(timeout=self.timeout) if self.wait else lease.try_held()
        report = functools.partial(report_waiting, lease, self.settings)
        await _run_when_held(held, report, tg, functools.partial(self._run_holding, tg))

    async def _run_holding(self, tg: TaskGroup, grant: Grant) -> None:
        """Run the child while ``grant`` holds the lease; a handover request stops it."""
        lease_env = {
            "TRIO_LEASE_NAME": self.lease.name,
            "TRIO_LEASE_OWNER": self.lease.identity,
            "TRIO_LEASE_FENCING_TOKEN": str(grant.fencing_token),
        }
        child = anyio.CancelScope()
        watcher = anyio.CancelScope()
        tg.start_soon(_hand_over_when_asked, grant, child, watcher)
        try:
            with child:
                self.code = await run_child(self.command, lease_env, self.settings.stop_timeout)
        finally:
            watcher.cancel()

    async def _hold_slot_and_run(self, semaphore: Semaphore, tg: TaskGroup) -> None:
        """``--limit``: hold one slot of the semaphore while the child runs.

        A slot's handover request comes from a waiter in line (its release is reserved for
        that waiter), not from one asking this run to stop: the child runs to its end.
        """
        held = semaphore.held(timeout=self.timeout) if self.wait else semaphore.try_held()
        report = functools.partial(_say_waiting_for_a_slot, semaphore, self.settings)
        await _run_when_held(held, report, tg, functools.partial(self._run_in_slot, semaphore))

    async def _run_in_slot(self, semaphore: Semaphore, grant: SemaphoreGrant) -> None:
        """Run the child while ``grant`` holds its slot; it learns the slot and the limit."""
        lease_env = {
            "TRIO_LEASE_NAME": grant.lease_name,
            "TRIO_LEASE_OWNER": grant.identity,
            "TRIO_LEASE_FENCING_TOKEN": str(grant.fencing_token),
            "TRIO_LEASE_SLOT": str(grant.slot),
            "TRIO_LEASE_LIMIT": str(semaphore.limit),
        }
        self.code = await run_child(self.command, lease_env, self.settings.stop_timeout)


async def _run_when_held(
    held: AbstractAsyncContextManager[G],
    report: Callable[[anyio.CancelScope], Coroutine[Any, Any, None]],
    tg: TaskGroup,
    run: Callable[[G], Awaitable[None]],
) -> None:
    """Enter ``held`` while ``report`` (a task in ``tg``) may say on stderr that the run waits;
    once granted, stop it and ``run`` the grant."""
    reporter = anyio.CancelScope()
    tg.start_soon(report, reporter)
    try:
        async with held as grant:
            reporter.cancel()
            await run(grant)
    finally:
        reporter.cancel()


async def _say_waiting_for_a_slot(
    semaphore: Semaphore, settings: LeaseSettings, scope: anyio.CancelScope
) -> None:
    """Say once on stderr that the run waits for a slot, if it has not got one within R."""
    with scope:
        await anyio.sleep(settings.heartbeat_interval)
        print(
            f"trio-lease: waiting for a slot of {semaphore.name!r} (limit {semaphore.limit})",
            file=sys.stderr,
        )


async def _hand_over_when_asked(
    grant: Grant, child: anyio.CancelScope, watcher: anyio.CancelScope
) -> None:
    """Stop the child gracefully (SIGTERM, then the stop timeout) when a handover is asked;
    the run then releases the lease, reserved for the requester, and exits 0."""
    with watcher:
        await grant.handover_requested.wait()
        print(
            f"trio-lease: {grant.lease_name}: {grant.handover_to} asked for a handover; "
            "stopping the command",
            file=sys.stderr,
        )
        child.cancel()
