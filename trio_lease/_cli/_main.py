"""The entry point: the argument parser, the command it names, and errors as exit codes.

Exit codes: the child's own code for ``run`` (128+N if killed by signal N); 75 busy
(``--no-wait`` while another owner holds it); 124 timed out waiting (``--timeout``); 125 lease
lost (child stopped); 78 configuration error; 69 backend unavailable; 2 usage error.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from .._exceptions import (
    AcquireTimeout,
    BackendAuthError,
    BackendError,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseLost,
)
from .._host import reraise, sole_error
from .._waiting import WAITING_LOG
from ._admin import add_admin_commands
from ._manifests import add_manifests_command
from ._run import add_run_command

__all__ = ["build_parser", "main"]

EXIT_BUSY = 75
EXIT_TIMEOUT = 124
EXIT_LOST = 125
EXIT_CONFIG = 78
EXIT_UNAVAILABLE = 69

#: The exit code of each error that ends a command (the first class that matches wins);
#: any other error is a bug and ends with a traceback.
_EXIT_CODES: tuple[tuple[type[LeaseError], int], ...] = (
    (LeaseBusy, EXIT_BUSY),
    (AcquireTimeout, EXIT_TIMEOUT),
    (LeaseLost, EXIT_LOST),
    (LeaseConfigError, EXIT_CONFIG),
    (BackendAuthError, EXIT_CONFIG),
    (BackendError, EXIT_UNAVAILABLE),  # unavailable, or a conflict that did not resolve
)

#: Commands contributed by optional parts (the Kubernetes emulator and checker).
_OPTIONAL_COMMANDS = (
    ("trio_lease.testing.kube._cli", "add_emulate_command"),
    ("trio_lease.backends.kubernetes._cli", "add_check_command"),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; option defaults come from ``TRIO_LEASE_*`` environment variables."""
    parser = argparse.ArgumentParser(
        prog="trio-lease", description="Distributed leases: run commands while holding one."
    )
    commands = parser.add_subparsers(dest="command_name", required=True)
    add_run_command(commands)
    add_admin_commands(commands)
    add_manifests_command(commands)
    _add_optional_commands(commands)
    return parser


def _add_optional_commands(commands: Any) -> None:
    """Add the optional commands whose dependencies are installed.

    Only a missing third-party module leaves a command out: an import error inside trio_lease
    is a bug, and hiding the command would hide it.
    """
    for module_name, function in _OPTIONAL_COMMANDS:
        try:
            module = __import__(module_name, fromlist=[function])
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "trio_lease":
                raise
            continue
        adder: Callable[[Any], None] = getattr(module, function)
        adder(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-lease`` console script."""
    logging.basicConfig(level=logging.WARNING, format="trio-lease: %(message)s")
    # The waiting line reports a failing backend itself; say it once, not twice.
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not getattr(record, WAITING_LOG, False))
    try:
        parser = build_parser()
    except (LeaseConfigError, argparse.ArgumentTypeError) as exc:  # a bad TRIO_LEASE_* value
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return _dispatch(_parse(parser, list(sys.argv[1:] if argv is None else argv)))


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; everything after the first ``--`` is run's command, never our options."""
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(argv)
    if args.command_name == "run":
        command = list(args.command) + command
        if not command:
            parser.error("run needs a command after --, e.g. trio-lease run NAME -- echo hello")
        args.command = command
    return args


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command and map its error, if any, to a message and an exit code."""
    try:
        return _call(args.func, args)
    except LeaseError as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        stopped = "; the command was stopped" if isinstance(exc, LeaseLost) else ""
        print(f"trio-lease: {exc}{stopped}", file=sys.stderr)
        return code


def _call(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> int:
    """``func(args)``, in an event loop if it is async; one error out of a group, bare."""
    try:
        if inspect.iscoroutinefunction(func):
            backend = getattr(args, "anyio_backend", None) or "asyncio"
            result: int = anyio.run(func, args, backend=backend)
        else:
            result = func(args)
    except BaseExceptionGroup as group:  # never expected: one error is reported bare
        single = sole_error(group)
        if not isinstance(single, Exception):
            raise
        reraise(single)
    return result


def _exit_code(exc: LeaseError) -> int | None:
    """The exit code for ``exc``, None if it is not one a command ends with."""
    if isinstance(exc, AcquireTimeout) and exc.last_error is not None:
        # Still failing when the time ran out: the backend, not a holder, kept us waiting.
        return EXIT_UNAVAILABLE
    for error_class, code in _EXIT_CODES:
        if isinstance(exc, error_class):
            return code
    return None
