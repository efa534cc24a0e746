"""The ``trio-lease`` command.

``trio-lease run NAME -- CMD...`` runs CMD only while this process holds the lease NAME. The
child gets ``TRIO_LEASE_NAME``, ``TRIO_LEASE_OWNER`` and ``TRIO_LEASE_FENCING_TOKEN`` in its
environment. If the lease is lost, the child gets SIGTERM, then SIGKILL after the stop timeout
(the settings' ``stop_timeout``, which the safety inequality accounts for). On Linux the child
is also SIGKILLed by the kernel if ``trio-lease`` itself dies (``kill -9``), so it can never
outlive the lease it ran under.

Exit codes: the child's own code (128+N if killed by signal N); 75 busy (``--no-wait`` while
another owner holds it); 124 timed out waiting (``--timeout``); 125 lease lost (child stopped);
78 configuration error; 69 backend unavailable.

Backend selection, in order: ``--config FILE --section PATH`` (a LeaseProvider TOML section),
else ``--backend NAME`` (default ``sqlite`` at the per-user path, see
``trio_lease.backends.sqlite.default_path``). Timings: the command line, else the environment,
else the ``--config`` section (as LeaseProvider reads it), else, without ``--config``, the CLI
defaults (:data:`CLI_DEFAULTS`). Every option but
``release --force`` can also come from an environment variable ``TRIO_LEASE_<OPTION>`` (for
example ``TRIO_LEASE_SQLITE_PATH``, ``TRIO_LEASE_OWNER``, ``TRIO_LEASE_HEARTBEAT_TIMEOUT``,
``TRIO_LEASE_NO_WAIT=1``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio

from . import _algorithm as algo
from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import (
    AcquireTimeout,
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseLost,
)
from ._lease import WAITING_LOG, Lease, reraise, sole_error
from ._provider import LeaseProvider, build_backend, load_backend_class
from ._settings import LeaseSettings, parse_duration

__all__ = ["main"]

EXIT_BUSY = 75
EXIT_TIMEOUT = 124
EXIT_LOST = 125
EXIT_CONFIG = 78
EXIT_UNAVAILABLE = 69

#: Timings when neither the command line, the environment nor a --config section sets them.
CLI_DEFAULTS = {
    "heartbeat_timeout": "15s",
    "heartbeat_interval": "2s",
    "lease_operation_timeout": "1s",
    "stop_timeout": "2s",
}

# Runs in the child, between fork and exec of CMD (Linux only). It asks the kernel to SIGKILL
# the child when trio-lease dies: otherwise `kill -9` of trio-lease orphans CMD, which keeps
# running after another owner takes the lease over. SIGKILL, because nobody is left to escalate
# a SIGTERM. The getppid() check closes the race of trio-lease dying before prctl ran. Python
# ignores SIGPIPE and SIGXFSZ at startup; ignored signals survive exec, so restore them.
_LAUNCHER = """\
import ctypes, os, signal, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:
    print("trio-lease: prctl(PR_SET_PDEATHSIG):", os.strerror(ctypes.get_errno()), file=sys.stderr)
    os._exit(126)
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"trio-lease: cannot run {sys.argv[2]!r}: {exc}", file=sys.stderr)
    os._exit(127)
"""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(_env_name(name), default)


def _env_name(name: str) -> str:
    return f"TRIO_LEASE_{name.upper().replace('-', '_')}"


def _env_flag(name: str) -> bool | None:
    """A boolean option from the environment (1/true/yes/on, 0/false/no/off), None if unset."""
    value = _env(name)
    if value is None:
        return None
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise LeaseConfigError(f"{_env_name(name)}={value!r}: use 1/true/yes/on or 0/false/no/off")


def default_owner() -> str:
    """``TRIO_LEASE_OWNER``, else ``POD_NAME`` (Kubernetes downward API), else the hostname."""
    return _env("owner") or os.environ.get("POD_NAME") or socket.gethostname()


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("backend")
    group.add_argument("--config", default=_env("config"), help="LeaseProvider TOML file")
    group.add_argument("--section", default=_env("section"), help="section path in --config")
    group.add_argument(
        "--backend",
        default=_env("backend", "sqlite"),
        help="backend name when no --config is given (default: sqlite)",
    )
    group.add_argument(
        "--sqlite-path", default=_env("sqlite_path"), help="SQLite file (default: per-user path)"
    )
    timing = parser.add_argument_group("timing (seconds or '1.5s', '250ms', '2m')")
    for option, default in CLI_DEFAULTS.items():
        flag = option.replace("_", "-")
        # None means "not given": the --config section, else CLI_DEFAULTS, decides.
        timing.add_argument(
            f"--{flag}", dest=option, default=_env(option), help=f"default: {default}"
        )


def _settings(args: argparse.Namespace, base: LeaseSettings | None) -> LeaseSettings:
    """Timings given on the command line or in the environment, over ``base`` (a section)."""
    given = {option: getattr(args, option) for option in CLI_DEFAULTS}
    given = {option: value for option, value in given.items() if value is not None}
    if base is None:
        return LeaseSettings(**(CLI_DEFAULTS | given))
    if not given:
        return base
    return LeaseSettings(**(base.model_dump(exclude_unset=True) | given))


def _open_backend(args: argparse.Namespace) -> tuple[LeaseBackend, LeaseSettings]:
    if args.config:
        if not args.section:
            raise LeaseConfigError("--config needs --section (the TOML section of the lease)")
        provider = LeaseProvider(args.config)
        backend, section_settings = provider._backend_for(args.section)
        return backend, _settings(args, section_settings)
    settings = _settings(args, None)  # validate before opening anything
    config: dict[str, Any] = {}
    if args.backend == "sqlite" and args.sqlite_path:
        config["path"] = args.sqlite_path
    cls = load_backend_class(args.backend, "--backend")
    return build_backend(cls, config, "--backend"), settings


def _check_command(command: list[str]) -> None:
    """Fail before acquiring anything if CMD cannot be started (exit 78, not a held lease)."""
    program = command[0]
    if os.sep in program:
        found = os.path.isfile(program) and os.access(program, os.X_OK)
    else:
        found = shutil.which(program) is not None
    if not found:
        raise LeaseConfigError(f"cannot start {program!r}: no such executable")


async def _run(args: argparse.Namespace) -> int:
    command: list[str] = args.command
    _check_command(command)
    backend, settings = _open_backend(args)
    lease = Lease(args.name, args.owner, backend, settings)
    grace = settings.stop_timeout
    code = 0
    error: Exception | None = None
    stopped_by: int | None = None
    async with backend:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as tg:

                async def cancel_on_signal() -> None:
                    nonlocal stopped_by
                    async for signum in signals:
                        print(f"trio-lease: got signal {signum}; stopping", file=sys.stderr)
                        stopped_by = int(signum)
                        tg.cancel_scope.cancel()
                        return

                async def hold_and_run() -> None:
                    nonlocal code, error
                    try:
                        scope = lease.held(timeout=args.timeout) if args.wait else lease.try_held()
                        reporter = anyio.CancelScope()
                        tg.start_soon(_report_waiting, lease, settings, reporter)
                        try:
                            async with scope as grant:
                                reporter.cancel()
                                code = await _run_child(command, lease, grant.fencing_token, grace)
                        finally:
                            reporter.cancel()
                    except Exception as exc:  # re-raised below, outside the task group
                        error = exc
                    finally:
                        tg.cancel_scope.cancel()

                tg.start_soon(cancel_on_signal)
                tg.start_soon(hold_and_run)
    if error is not None:
        raise error
    if stopped_by is not None:
        return 128 + stopped_by
    return code


#: How often the waiting line is refreshed when nothing changed (seconds); a change (another
#: holder, the backend failing or answering again) is reported within REPORT_CHECK.
REPORT_EVERY = 30.0
REPORT_CHECK = 0.5


async def _report_waiting(lease: Lease, settings: LeaseSettings, scope: anyio.CancelScope) -> None:
    """While waiting, say who holds the lease, or why the backend cannot be used."""
    with scope:
        await _report_loop(lease, settings)


def waiting_line(lease: Lease, settings: LeaseSettings) -> tuple[str, str] | None:
    """(what kind of wait, the line to print) for a waiting ``lease``; None: nothing known yet."""
    error = lease.last_error
    since = lease.failing_since
    if error is not None and since is not None:
        failing = anyio.current_time() - since
        return (
            f"failing:{error}",
            f"trio-lease: waiting for {lease.name!r}: the backend has been failing for "
            f"{failing:.0f} s: {error}",
        )
    holder = lease.holder()
    if holder is None:
        return None
    record = lease._last_record
    if record is not None and record.unreadable:
        never = record.fencing_token < 0
        return (
            f"unreadable:{record.version}",
            f"trio-lease: waiting for {lease.name!r}: its record is unreadable "
            f"({record.unreadable}); "
            + (
                "it is never taken over (its fencing token is unreadable): fix or delete it"
                if never
                else f"it may be taken over once unchanged for {settings.heartbeat_timeout:g} s"
            ),
        )
    return (
        f"held:{holder}",
        f"trio-lease: waiting for {lease.name!r}, held by {holder!r} (a silent holder "
        f"expires {settings.heartbeat_timeout:g} s after its last renewal)",
    )


async def _report_loop(lease: Lease, settings: LeaseSettings) -> None:
    last_kind: str | None = None
    last_at = -math.inf
    while True:
        await anyio.sleep(REPORT_CHECK)
        line = waiting_line(lease, settings)
        if line is None:
            continue
        kind, text = line
        now = anyio.current_time()
        if kind != last_kind or now - last_at >= REPORT_EVERY:
            print(text, file=sys.stderr)
            last_kind, last_at = kind, now


def _child_argv(command: list[str]) -> list[str]:
    """CMD, wrapped on Linux so that the kernel kills it if trio-lease dies (see _LAUNCHER)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *command]


async def _run_child(command: list[str], lease: Lease, token: int, grace: float) -> int:
    env = dict(os.environ)
    env.update(
        TRIO_LEASE_NAME=lease.name,
        TRIO_LEASE_OWNER=lease.identity,
        TRIO_LEASE_FENCING_TOKEN=str(token),
    )
    try:
        process = await anyio.open_process(
            _child_argv(command), stdin=None, stdout=None, stderr=None, env=env
        )
    except OSError as exc:
        raise LeaseConfigError(f"cannot start {command[0]!r}: {exc}") from None
    try:
        returncode = await process.wait()
    finally:
        if process.returncode is None:
            # Lost the lease or asked to stop: SIGTERM, then SIGKILL after the grace period.
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    process.terminate()
                with anyio.move_on_after(grace):
                    await process.wait()
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
    return 128 - returncode if returncode < 0 else returncode


def _describe(record: LeaseRecord | None, name: str) -> dict[str, Any]:
    if record is None:
        return {"name": name, "exists": False}
    now = datetime.now(UTC)
    renewed = record.renewed_at
    return {
        "name": name,
        "exists": True,
        "holder": record.holder or None,
        "fencing_token": record.fencing_token,
        "lease_duration": record.lease_duration,
        "acquired_at": record.acquired_at.isoformat() if record.acquired_at else None,
        "renewed_at": renewed.isoformat() if renewed else None,
        "age_s": round((now - record.acquired_at).total_seconds(), 3)
        if record.acquired_at and record.holder
        else None,
        # From wall clocks, for humans only: contenders judge expiry on their own clock.
        "expires_in_s": round(record.lease_duration - (now - renewed).total_seconds(), 3)
        if renewed and record.holder
        else None,
        "version": record.version,
        "unreadable": record.unreadable or None,
    }


async def _status(args: argparse.Namespace) -> int:
    backend, _ = _open_backend(args)
    async with backend:
        names: list[str] = list(args.names)
        if not names:
            lister = getattr(backend, "names", None)
            if lister is None:
                raise LeaseConfigError("this backend cannot list leases: name them")
            names = await lister()
        rows = [_describe(await _checked_get(backend, name), name) for name in names]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = f"{'NAME':24} {'HOLDER':36} {'TOKEN':>6} {'AGE':>9} {'EXPIRES IN':>10}"
    print(header)
    for row in rows:
        if not row["exists"]:
            print(f"{row['name']:24} {'(no record)':36}")
            continue
        if row["unreadable"]:
            print(f"{row['name']:24} {'(unreadable record)':36} version {row['version']}: "
                  f"{row['unreadable']}")
            continue
        age = "-" if row["age_s"] is None else f"{row['age_s']:.1f}s"
        expires = "-" if row["expires_in_s"] is None else f"{row['expires_in_s']:.1f}s"
        print(
            f"{row['name']:24} {row['holder'] or '(free)':36} {row['fencing_token']:>6} "
            f"{age:>9} {expires:>10}"
        )
    return 0


async def _release(args: argparse.Namespace) -> int:
    if not args.force:
        print(
            "trio-lease: release needs --force. It frees the lease whoever holds it: the holder "
            "may still be working until it notices (fencing tokens protect your data).",
            file=sys.stderr,
        )
        return 2
    backend, _ = _open_backend(args)
    async with backend:
        for attempt in range(5):
            if attempt:
                await anyio.sleep(0.05 * 2**attempt)  # renewed or taken over meanwhile
            record = await _checked_get(backend, args.name)
            if record is None or record.is_free:
                print(f"trio-lease: {args.name!r} is not held")
                return 0
            if record.unreadable and record.fencing_token < 0:
                raise BackendError(
                    f"the record of lease {args.name!r} is unreadable ({record.unreadable}), "
                    "its fencing token included: a release would lose the token history that "
                    "fencing relies on. Fix or delete the record with the store's own tools"
                )
            # The same record a holder's own release writes: no holder, the token kept.
            written = algo.release_record(
                dataclasses.replace(record, unreadable=""), datetime.now(UTC)
            )
            try:
                stored = await backend.update(written, record.version)
            except ConflictError:
                continue
            problem = algo.echo_problem(stored, written, record.version)
            if problem:
                raise BackendProtocolError(
                    f"releasing {args.name!r}: {problem}; run `trio-lease status {args.name}` "
                    "to see what the store holds"
                )
            was = algo.UNKNOWN_HOLDER if record.unreadable else repr(record.holder)
            print(f"trio-lease: released {args.name!r} (was held by {was})")
            return 0
    raise BackendUnavailable(f"lease {args.name!r} kept changing while releasing it; try again")


async def _checked_get(backend: LeaseBackend, name: str) -> LeaseRecord | None:
    """``backend.get`` with anything outside the exception tree turned into a typed error."""
    try:
        record = await backend.get(name)
    except LeaseError:
        raise
    except Exception as exc:
        raise BackendProtocolError(
            f"reading lease {name!r}: {backend!r} raised {type(exc).__name__}"
        ) from exc
    if record is not None and not isinstance(record, LeaseRecord):
        raise BackendProtocolError(f"reading lease {name!r}: {backend!r} returned no record")
    return record


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; option defaults come from ``TRIO_LEASE_*`` environment variables."""
    parser = argparse.ArgumentParser(
        prog="trio-lease", description="Distributed leases: run commands while holding one."
    )
    commands = parser.add_subparsers(dest="command_name", required=True)

    run = commands.add_parser("run", help="run a command only while holding the lease")
    run.add_argument("name", help="lease name")
    run.add_argument("--owner", default=default_owner(), help="owner name (default: hostname)")
    wait = run.add_mutually_exclusive_group()
    no_wait, env_wait = _env_flag("no_wait"), _env_flag("wait")
    waits = not no_wait if no_wait is not None else (env_wait if env_wait is not None else True)
    wait.add_argument("--wait", dest="wait", action="store_true", default=waits)
    wait.add_argument("--no-wait", dest="wait", action="store_false", help="exit 75 if busy")
    env_timeout = _env("timeout")
    run.add_argument(
        "--timeout",
        type=_duration,
        default=None if env_timeout is None else _duration(env_timeout),
        help="give up waiting after this long (exit 124)",
    )
    run.add_argument("command", nargs="*", help="-- CMD [ARGS...]")
    _add_backend_options(run)
    run.set_defaults(func=_run)

    status = commands.add_parser("status", help="show holder, token, age, expiry")
    status.add_argument("names", nargs="*")
    status.add_argument("--json", action="store_true", default=bool(_env_flag("json")))
    _add_backend_options(status)
    status.set_defaults(func=_status)

    release = commands.add_parser("release", help="break-glass: free a lease (unsafe)")
    release.add_argument("name")
    # Deliberately not from the environment: breaking a lease must be asked for each time.
    release.add_argument("--force", action="store_true")
    _add_backend_options(release)
    release.set_defaults(func=_release)

    _add_optional_commands(commands)
    return parser


def _add_optional_commands(commands: Any) -> None:
    """Commands contributed by optional parts (the Kubernetes emulator and checker)."""
    for module_name, function in (
        ("trio_lease.testing.kube._cli", "add_emulate_command"),
        ("trio_lease.backends.kubernetes._cli", "add_check_command"),
    ):
        try:
            module = __import__(module_name, fromlist=[function])
        except ImportError:
            continue
        adder: Callable[[Any], None] = getattr(module, function)
        adder(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-lease`` console script."""
    logging.basicConfig(level=logging.WARNING, format="trio-lease: %(message)s")
    # The waiting line below reports a failing backend itself; say it once, not twice.
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not getattr(record, WAITING_LOG, False))
    try:
        parser = build_parser()
    except (LeaseConfigError, argparse.ArgumentTypeError) as exc:  # a bad TRIO_LEASE_* value
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:  # everything after the first -- is the command, never our options
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(argv)
    if args.command_name == "run":
        command = list(args.command) + command
        if not command:
            parser.error("run needs a command after --, e.g. trio-lease run NAME -- echo hello")
        args.command = command
    return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command and map its error, if any, to a message and an exit code."""
    func = args.func
    try:
        try:
            if args.command_name in ("run", "status", "release"):
                result: int = anyio.run(func, args)
            else:
                result = func(args)
        except BaseExceptionGroup as group:  # never expected: one error is reported bare
            single = sole_error(group)
            if not isinstance(single, Exception):
                raise
            reraise(single)
    except LeaseBusy as exc:
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_BUSY
    except AcquireTimeout as exc:
        print(f"trio-lease: {exc}", file=sys.stderr)
        # Still failing when the time ran out: the backend, not a holder, kept us waiting.
        return EXIT_UNAVAILABLE if exc.last_error is not None else EXIT_TIMEOUT
    except LeaseLost as exc:
        print(f"trio-lease: {exc}; the command was stopped", file=sys.stderr)
        return EXIT_LOST
    except (LeaseConfigError, BackendAuthError) as exc:
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BackendError as exc:  # unavailable, or a conflict that did not resolve
        print(f"trio-lease: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return result


if __name__ == "__main__":
    sys.exit(main())
