"""The operator's commands on records: ``status`` and ``release --force``.

``status`` reads records and shows them (wall-clock ages, for humans only); ``release --force``
frees a lease whoever holds it (the break-glass, unsafe: fencing tokens protect the data). Both
read through :func:`_checked_get`, which turns anything a backend raises outside the exception
tree into a typed error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from datetime import UTC, datetime
from typing import Any

import anyio

from .. import _algorithm as algo
from .._abc import LeaseBackend, LeaseRecord
from .._backoff import backoff_delay
from .._exceptions import (
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from .._lease import Lease
from ._options import (
    add_backend_options,
    add_owner_option,
    env_flag,
    env_value,
    lease_name,
    missing_database,
    open_backend,
    positive_duration,
)

__all__ = ["add_admin_commands"]

#: ``handover`` of a lease with no record: nothing to hand over (a typo, most likely).
EXIT_NO_RECORD = 1

#: How often ``release --force`` reads and writes again when the record changed meanwhile.
RELEASE_ATTEMPTS = 5


def add_admin_commands(commands: Any) -> None:
    """Register ``status`` and ``release`` on the command's subparsers."""
    status = commands.add_parser("status", help="show holder, token, age, time left")
    status.add_argument(
        "names", nargs="*", type=lease_name, help="lease names (default: every lease there is)"
    )
    status.add_argument(
        "--json", action="store_true", default=bool(env_flag("json")), help="print JSON rows"
    )
    status.add_argument(
        "--watch",
        "-w",
        action="store_true",
        default=bool(env_flag("watch")),
        help="print the leases, then a line for each change until Ctrl-C (with --json: one "
        "JSON object per line)",
    )
    add_backend_options(status)
    status.set_defaults(func=status_command)

    release = commands.add_parser("release", help="break-glass: free a lease (unsafe)")
    release.add_argument("name", type=lease_name, help="lease name")
    # Deliberately not from the environment: breaking a lease must be asked for each time.
    release.add_argument(
        "--force", action="store_true", help="required: free the lease whoever holds it"
    )
    add_backend_options(release)
    release.set_defaults(func=release_command)

    handover = commands.add_parser(
        "handover", help="ask the holder to hand a lease over, then free it for all"
    )
    handover.add_argument("name", type=lease_name, help="lease name")
    add_owner_option(handover)
    handover.add_argument(
        "--timeout",
        type=positive_duration,
        default=env_value("timeout", positive_duration),
        help="give up waiting for the holder after this long (exit 124)",
    )
    add_backend_options(handover)
    handover.set_defaults(func=handover_command)


async def handover_command(args: argparse.Namespace) -> int:
    """Ask the holder to hand over (it stops gracefully), take the lease, release it to all.

    The graceful counterpart of ``release --force``: the holder finishes its work first, and
    the lease is free at once afterwards instead of after the heartbeat timeout.
    """
    backend, settings = open_backend(args)
    no_database = missing_database(args, backend)
    if no_database is not None:  # entering it would create it
        return _no_record(args.name, no_database)
    async with backend:
        await _check_namespace(backend)
        if await _checked_get(backend, args.name) is None:
            return _no_record(args.name, "")
        lease = Lease(args.name, args.owner, backend, settings)
        asked = await lease.request_handover()
        if asked:
            print(f"{args.name}: asked the holder to hand over; waiting", file=sys.stderr)
        async with lease.held(timeout=args.timeout) as grant:
            token = grant.fencing_token
    print(f"{args.name}: taken with fencing token {token} and released: free for any contender")
    return 0


def _no_record(name: str, why: str) -> int:
    """``handover`` of a lease with no record: say so, write nothing."""
    print(
        f"trio-lease: {name!r} has no record{f' ({why})' if why else ''}: nothing to hand "
        "over, and nothing was written; check the name and the backend options",
        file=sys.stderr,
    )
    return EXIT_NO_RECORD


async def status_command(args: argparse.Namespace) -> int:
    """Show the named leases (every lease the backend lists when none are named) as a table or
    JSON; with ``--watch``, then each change as it is seen, until SIGINT or SIGTERM."""
    backend, _ = open_backend(args)
    no_database = missing_database(args, backend)
    if no_database is not None:  # entering it would create it: show no records instead
        print(f"trio-lease: {no_database}; nothing was created", file=sys.stderr)
        rows = [_describe(None, name) for name in args.names]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_table(rows, _widths(rows))
        return 0
    async with backend:
        await _check_namespace(backend)
        rows = await _rows(backend, list(args.names))
        if args.json and not args.watch:
            print(json.dumps(rows, indent=2))
            return 0
        widths = _widths(rows)
        if args.json:
            for row in rows:
                print(json.dumps(row), flush=True)
        else:
            _print_table(rows, widths)
        if args.watch:
            await _watch(backend, args, rows, widths)
    return 0


def _print_table(rows: list[dict[str, Any]], widths: tuple[int, int]) -> None:
    name_width, holder_width = widths
    print(
        f"{'NAME':{name_width}} {'HOLDER':{holder_width}} {'TOKEN':>6} {'AGE':>9} "
        f"{'EXPIRES IN':>10}"
    )
    for row in rows:
        print(_table_line(row, widths), flush=True)


async def _check_namespace(backend: LeaseBackend) -> None:
    """A Kubernetes namespace that does not exist is a configuration error (exit 78), as for
    ``run`` (and a problem for ``check``): a read there answers as in an empty namespace."""
    # KubernetesBackend.missing_namespace(); the core imports no backend, so it is looked up.
    missing_namespace = getattr(backend, "missing_namespace", None)
    if missing_namespace is not None:
        problem: str | None = await missing_namespace()
        if problem is not None:
            raise LeaseConfigError(
                f"{problem}: create it or configure another namespace (the 'namespace' key)"
            )


def _widths(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """The NAME and HOLDER column widths: the longest value, at least 24 and 36."""
    names = [len(str(row["name"])) for row in rows]
    holders = [len(str(row.get("holder") or "")) for row in rows]
    return max([24, *names]), max([36, *holders])


#: How often ``status --watch`` reads the leases again. It polls rather than watches: a
#: listing also finds leases created meanwhile, and a terminal needs no faster updates.
WATCH_POLL_INTERVAL = 0.5


async def _watch(
    backend: LeaseBackend,
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    widths: tuple[int, int],
) -> None:
    """Print a line for each lease whose record changes, until SIGINT or SIGTERM."""
    seen = {row["name"]: _state(row) for row in rows}
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(stop_on_signal)
            failing = ""
            while True:
                await anyio.sleep(WATCH_POLL_INTERVAL)
                try:
                    now = await _rows(backend, list(args.names))
                except BackendUnavailable as exc:  # transient: say so once, keep watching
                    if str(exc) != failing:
                        print(f"trio-lease: {exc}; still watching", file=sys.stderr, flush=True)
                    failing = str(exc)
                    continue
                failing = ""
                for row in now:
                    if seen.get(row["name"]) != _state(row):
                        seen[row["name"]] = _state(row)
                        line = json.dumps(row) if args.json else _table_line(row, widths)
                        print(line, flush=True)


def _state(row: dict[str, Any]) -> tuple[Any, ...]:
    """What ``--watch`` compares: the record, not the ages that change with the clock."""
    keys = ("exists", "holder", "fencing_token", "unreadable", "expired")
    return tuple(row.get(key) for key in keys)


async def _rows(backend: LeaseBackend, names: list[str]) -> list[dict[str, Any]]:
    """The rows of ``names`` (every lease there is when empty), each marked ``foreign`` or not
    (None when this identity may not list leases, so it cannot be told)."""
    if names:
        try:
            foreign: set[str] | None = set(await backend.foreign_names())
        except BackendAuthError:  # may get but not list: a named lease needs no listing
            foreign = None
        records = [(name, await _checked_get(backend, name)) for name in names]
    else:
        foreign = set(await backend.foreign_names())
        records = [(name, await _checked_get(backend, name)) for name in await _all_names(backend)]
    return [
        _describe(record, name)
        | {"foreign": None if foreign is None or record is None else name in foreign}
        for name, record in records
    ]


async def _all_names(backend: LeaseBackend) -> list[str]:
    """Every lease in the store; a configuration error if the backend cannot list them."""
    try:
        return await backend.names()
    except NotImplementedError:
        raise LeaseConfigError("this backend cannot list leases: name them") from None


#: The keys of a lease record in ``status --json``, listed or named (docs/cli.md): a lease
#: with no record has them all, None but ``name`` and ``exists``.
ROW_KEYS = (
    "name", "exists", "holder", "fencing_token", "lease_duration", "acquired_at", "renewed_at",
    "age_s", "expires_in_s", "expired", "version", "unreadable", "foreign",
)  # fmt: skip


def _describe(record: LeaseRecord | None, name: str) -> dict[str, Any]:
    if record is None:
        return dict.fromkeys(ROW_KEYS) | {"name": name, "exists": False}
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
        # A holder silent for longer than its lease duration (by the wall clocks): most likely
        # gone, and contenders take over once they have seen the record unchanged that long.
        "expired": (now - renewed).total_seconds() > record.lease_duration
        if renewed and record.holder
        else None,
        "version": record.version,
        "unreadable": record.unreadable or None,
    }


def _table_line(row: dict[str, Any], widths: tuple[int, int] = (24, 36)) -> str:
    name_width, holder_width = widths
    name = f"{row['name']:{name_width}}"
    if not row["exists"]:
        return f"{name} {'(no record)':{holder_width}}"
    if row["unreadable"]:
        return (
            f"{name} {'(unreadable record)':{holder_width}} version {row['version']}: "
            f"{row['unreadable']}"
        )
    age = "-" if row["age_s"] is None else f"{row['age_s']:.1f}s"
    expires = "-" if row["expires_in_s"] is None else f"{row['expires_in_s']:.1f}s"
    if row["expired"]:
        expires = "expired"
    foreign = "  (foreign: not written by trio-lease)" if row.get("foreign") else ""
    return (
        f"{name} {row['holder'] or '(free)':{holder_width}} {row['fencing_token']:>6} "
        f"{age:>9} {expires:>10}{foreign}"
    )


async def release_command(args: argparse.Namespace) -> int:
    """Free the lease whoever holds it, keeping its fencing token (needs ``--force``)."""
    if not args.force:
        print(
            "trio-lease: release needs --force. It frees the lease whoever holds it: the holder "
            "may still be working until it notices (fencing tokens protect your data).",
            file=sys.stderr,
        )
        return 2
    backend, _ = open_backend(args)
    no_database = missing_database(args, backend)
    if no_database is not None:  # entering it would create it
        print(f"trio-lease: {args.name!r} is not held ({no_database}; nothing was created)")
        return 0
    async with backend:
        await _check_namespace(backend)
        for attempt in range(RELEASE_ATTEMPTS):
            if attempt:
                await anyio.sleep(backoff_delay(attempt, 0.1))  # renewed or taken over meanwhile
            if await _release_once(backend, args.name):
                return 0
    raise BackendUnavailable(f"lease {args.name!r} kept changing while releasing it; try again")


async def _release_once(backend: LeaseBackend, name: str) -> bool:
    """One read and compare-and-swap; False if the record changed in between."""
    record = await _checked_get(backend, name)
    if record is None or record.is_free:
        print(f"trio-lease: {name!r} is not held")
        return True
    if record.unreadable and record.fencing_token < 0:
        raise BackendError(
            f"the record of lease {name!r} is unreadable ({record.unreadable}), "
            "its fencing token included: a release would lose the token history that "
            "fencing relies on. Fix or delete the record with the store's own tools"
        )
    # The same record a holder's own release writes: no holder, the token kept.
    written = algo.release_record(dataclasses.replace(record, unreadable=""), datetime.now(UTC))
    try:
        stored = await backend.update(written, record.version)
    except ConflictError:
        return False
    problem = algo.echo_problem(stored, written, record.version)
    if problem:
        raise BackendProtocolError(
            f"releasing {name!r}: {problem}; run `trio-lease status {name}` "
            "to see what the store holds"
        )
    was = algo.UNKNOWN_HOLDER if record.unreadable else repr(record.holder)
    print(f"trio-lease: released {name!r} (was held by {was})")
    return True


async def _checked_get(backend: LeaseBackend, name: str) -> LeaseRecord | None:
    """``backend.get`` with anything outside the exception tree turned into a typed error."""
    try:
        record = await backend.get(name)
    except LeaseError:
        raise
    except Exception as exc:  # the SPI boundary: a backend's own bug, made typed and chained
        raise BackendProtocolError(
            f"reading lease {name!r}: {backend!r} raised {type(exc).__name__}"
        ) from exc
    if record is not None and not isinstance(record, LeaseRecord):
        raise BackendProtocolError(f"reading lease {name!r}: {backend!r} returned no record")
    return record
