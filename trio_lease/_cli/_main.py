"""The entry point: the argument parser, the command it names, and errors as exit codes.

Exit codes: the child's own code for ``run`` (128+N if killed by signal N); 75 busy
(``--no-wait`` while another owner holds it); 124 timed out waiting (``--timeout``); 125 lease
lost (child stopped); 78 configuration error; 69 backend unavailable; 2 usage error; 130
interrupted (Ctrl-C) before a command could handle it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

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
from ._interrupt import EXIT_INTERRUPTED, hand_over, loop_options, quit_while_starting
from ._manifests import add_manifests_command
from ._options import add_timing_options, check_settings
from ._run import add_run_command

__all__ = ["build_parser", "main"]

EXIT_BUSY = 75
EXIT_TIMEOUT = 124
EXIT_LOST = 125
EXIT_CONFIG = 78
EXIT_UNAVAILABLE = 69
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a tool SIGPIPE ended

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

#: The entry point group of commands contributed by other parts and packages: each entry
#: names a public function that adds its subcommand to the ``trio-lease`` subparsers.
COMMANDS_GROUP = "trio_lease.commands"

#: The commands shipped with trio_lease, so a source checkout without installed entry-point
#: metadata has them too (an installed entry point of the same name wins).
_BUILTIN_COMMANDS = {
    "emulate": "trio_lease.testing.kube:add_emulate_command",
    "check": "trio_lease.backends.kubernetes:add_check_command",
}


class BadOptionValue(Exception):
    """An option's value that its type or choices refuse: one line, exit 78 (not argparse's
    usage text and exit 2, which stay for unknown options and missing arguments)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports a bad option value as :class:`BadOptionValue`.

    argparse reports a value its type refuses as ``argument --flag: ...`` through
    :meth:`error`; so does a value outside the option's choices. Subparsers get this class too.
    """

    def error(self, message: str) -> NoReturn:
        flag, _, problem = message.removeprefix("argument ").partition(": ")
        is_option_value = (
            message.startswith("argument -")
            and not problem.startswith("expected ")
            and not problem.startswith("not allowed with ")
            and " " not in flag.split("/")[0]
        )
        if is_option_value:
            raise BadOptionValue(f"{flag}: {problem}")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; option defaults come from ``TRIO_LEASE_*`` environment variables."""
    parser = _Parser(
        prog="trio-lease", description="Distributed leases: run commands while holding one."
    )
    parser.add_argument(
        "--version", action="version", version=f"trio-lease {_version()}", help="print the version"
    )
    # Not required: `trio-lease` alone prints the whole help (see _parse), not argparse's
    # "required: command_name".
    commands = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    add_run_command(commands)
    add_admin_commands(commands)
    add_manifests_command(commands)
    _add_optional_commands(commands)
    check = _subparsers(parser).get("check")
    if check is not None:  # it checks the timings run would use: it takes run's timing options
        add_timing_options(check)
        check.set_defaults(run_settings=None)
    return parser


def _version() -> str:
    """The installed version, else the source tree's."""
    try:
        return importlib.metadata.version("trio_lease")
    except importlib.metadata.PackageNotFoundError:
        from .._version import __version__

        return str(__version__)


def _add_optional_commands(commands: Any) -> None:
    """Add the commands registered in the ``trio_lease.commands`` entry point group.

    Only a missing third-party module leaves a command out: an import error inside trio_lease
    is a bug, and hiding the command would hide it.
    """
    targets = dict(_BUILTIN_COMMANDS)
    for entry in importlib.metadata.entry_points(group=COMMANDS_GROUP):
        targets[entry.name] = entry.value
    for target in targets.values():
        module_name, _, function = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "trio_lease":
                raise
            continue
        adder: Callable[[Any], None] = getattr(module, function)
        adder(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-lease`` console script."""
    try:
        with quit_while_starting():  # until the event loop handles SIGINT (see _interrupt)
            code = _main(argv)
        sys.stdout.flush()  # here, not in the interpreter's exit, where a closed pipe is noise
        return code
    except KeyboardInterrupt:  # Ctrl-C before a command's own signal handling took over
        print("trio-lease: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _stdout_closed()
    except BaseExceptionGroup as group:
        _, rest = group.split(BrokenPipeError)
        if rest is None:
            return _stdout_closed()
        raise


def _stdout_closed() -> int:
    """Whoever read stdout closed it (``trio-lease status | head -1``): end quietly, as a tool
    SIGPIPE ends. stdout goes to devnull first, so the interpreter's last flush of what is
    still buffered does not fail again (Python's documented recipe for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_STDOUT_CLOSED


def _main(argv: Sequence[str] | None) -> int:
    logging.basicConfig(level=logging.WARNING, format="trio-lease: %(message)s")
    # The waiting line reports a failing backend itself; say it once, not twice.
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not getattr(record, WAITING_LOG, False))
    try:
        parser = build_parser()
    except (LeaseConfigError, argparse.ArgumentTypeError) as exc:  # a bad TRIO_LEASE_* value
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    except BadOptionValue as exc:
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if getattr(args, "command_name", None) == "check":
        args.run_settings = check_settings(args)
    return _dispatch(args)


#: A value that starts like a negative number or duration (``-1``, ``-1s``, ``-.5``): argparse
#: would take ``-1s`` for an unknown option and print the whole usage; it is an option's value.
_NEGATIVE_VALUE = re.compile(r"-\.?[0-9]")


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; everything after the first ``--`` is run's command, never our options."""
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    if not argv:
        parser.print_help(sys.stderr)
        parser.exit(2, "\ntrio-lease: name a command, e.g. trio-lease status\n")
    args = parser.parse_args(_joined_values(parser, argv))
    if args.command_name is None:
        parser.print_help(sys.stderr)
        parser.exit(2, "\ntrio-lease: name a command, e.g. trio-lease status\n")
    if args.command_name == "run":
        command = list(args.command) + command
        if not command:
            run_parser = _subparsers(parser)["run"]
            run_parser.print_usage(sys.stderr)
            run_parser.exit(
                2,
                "trio-lease run: a command to run is needed after --, e.g. "
                "trio-lease run NAME -- echo hello\n",
            )
        args.command = command
    return args


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _joined_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--flag -1s`` as ``--flag=-1s`` for options that take a value, so a negative value
    reaches the option's check (exit 78, "must be positive") instead of a usage error."""
    takes_value = {
        option
        for sub in [parser, *_subparsers(parser).values()]
        for action in sub._actions
        if action.option_strings and action.nargs != 0
        for option in action.option_strings
    }
    joined: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else ""
        if arg in takes_value and _NEGATIVE_VALUE.match(following):
            joined.append(f"{arg}={following}")
            index += 2
            continue
        joined.append(arg)
        index += 1
    return joined


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command and map its error, if any, to a message and an exit code."""
    try:
        return _call(args.func, args)
    except LeaseError as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        stopped = "; the command was stopped" if isinstance(exc, LeaseLost) else ""
        print(f"trio-lease: {_flags_named(_message(exc), args)}{stopped}", file=sys.stderr)
        return code


def _flags_named(message: str, args: argparse.Namespace) -> str:
    """``message`` with the TOML keys it names (```ca-file```) as the flags that set them
    (``--cacert``) unless the backend comes from a ``--config`` file: say what the user can
    type, not a key they never wrote."""
    from ._backend_flags import BACKEND_FLAGS

    if getattr(args, "config", None):
        return message
    for flag in BACKEND_FLAGS:
        if hasattr(args, flag.dest):
            message = message.replace(f"`{flag.key}`", f"{flag.flag} (`{flag.key}`)")
            message = message.replace(f"'{flag.key}' key", f"{flag.flag} option")
    return message


def _call(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> int:
    """``func(args)``, in an event loop if it is async; one error out of a group, bare."""
    try:
        if inspect.iscoroutinefunction(func):
            backend = getattr(args, "anyio_backend", None) or "asyncio"
            options = loop_options(backend)
            result: int = anyio.run(func, args, backend=backend, backend_options=options)
        else:
            hand_over()
            result = func(args)
    except BaseExceptionGroup as group:  # never expected: one error is reported bare
        single = sole_error(group)
        if not isinstance(single, Exception):
            raise
        reraise(single)
    return result


def _exit_code(exc: LeaseError) -> int | None:
    """The exit code for ``exc``, None if it is not one a command ends with."""
    own: int | None = getattr(exc, "exit_code", None)  # a CLI error with its own code
    if own is not None:
        return own
    if isinstance(exc, AcquireTimeout) and exc.last_error is not None:
        # Still failing when the time ran out: the backend, not a holder, kept us waiting.
        return EXIT_UNAVAILABLE
    for error_class, code in _EXIT_CODES:
        if isinstance(exc, error_class):
            return code
    return None


def _message(exc: LeaseError) -> str:
    """``exc``'s message; settings that break several rules list one rule per line."""
    problems = exc.problems if isinstance(exc, LeaseConfigError) else ()
    if len(problems) > 1:
        return "invalid lease settings:\n" + "\n".join(f"  - {p}" for p in problems)
    return str(exc)
