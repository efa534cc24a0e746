"""Options of every command: help for each, bad values refused, the event loop, derived timings."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from datetime import UTC, datetime, timedelta
from importlib.metadata import entry_points
from pathlib import Path

import anyio
import pytest
import sniffio

from trio_lease._cli._main import _call, build_parser

from .conftest import Cli, read_events, wait_for_event


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_every_commands_help_is_plain_text(cli: Cli) -> None:
    """`trio-lease COMMAND --help` of every command prints plain text: no reST or Markdown
    markup (roles such as :func:, double or single backticks) in descriptions or options."""
    commands = sorted(_commands(build_parser()))
    assert {"run", "status", "release", "handover", "manifests", "check", "emulate"} <= set(
        commands
    )
    for command in [None, *commands]:
        result = cli.run(*([command] if command else []), "--help")
        assert result.returncode == 0, result.stderr
        assert "usage: trio-lease" in result.stdout
        marked = re.findall(r"`|\*\*|:(?:class|func|meth|mod|data|attr):", result.stdout)
        assert marked == [], (command, result.stdout)


def test_every_option_of_every_command_has_plain_help() -> None:
    """Each option and argument says what it is, in plain words (no Markdown or reST markup)."""
    missing, marked = [], []
    for name, command in _commands(build_parser()).items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                missing.append(label)
            elif re.search(r"`|\*\*|:(class|func|meth|mod|data):", action.help):
                marked.append(label)
    assert missing == []
    assert marked == []


@pytest.mark.parametrize("value", ["0", "-1", "0s", "-0.5"])
def test_a_timeout_of_zero_or_less_is_refused(cli: Cli, value: str) -> None:
    """`run --timeout` must be positive: one line naming the option and the rule, exit 78, nothing
    run (as any bad option value)."""
    log, child = cli.child("never")
    result = cli.run("run", "job", f"--timeout={value}", "--", *child)
    assert result.returncode == 78
    assert result.stderr.startswith("trio-lease: --timeout: durations must be positive")
    assert f"got {value!r}" in result.stderr and result.stderr.count("\n") == 1
    assert read_events(log) == []


@pytest.mark.parametrize(
    "args",
    [["run", " ", "--", "true"], ["status", ""], ["release", "\t", "--force"]],
    ids=["run", "status", "release"],
)
def test_blank_lease_names_are_refused(cli: Cli, args: list[str]) -> None:
    """A blank lease name is a usage error (2) on every command, before any backend is opened."""
    result = cli.run(*args)
    assert result.returncode == 2
    assert "a lease name cannot be blank" in result.stderr
    assert not cli.db.exists()


def test_section_without_config_is_a_configuration_error(cli: Cli) -> None:
    """`--section` without `--config` exits 78 saying it needs --config (it was ignored before)."""
    result = cli.run("status", "job", "--section", "leases.job")
    assert result.returncode == 78
    assert "--section needs --config" in result.stderr


def test_heartbeat_timeout_alone_is_valid_and_the_rest_follows(cli: Cli) -> None:
    """`--heartbeat-timeout 3s` alone runs (R, T and T_stop follow from it, as in LeaseSettings;
    with the CLI's fixed 2 s interval it was refused)."""
    # The child holds for 5 s: `status` (a process of its own) must read the lease while held,
    # which on a loaded machine can take over a second.
    log, child = cli.child("job", sleep=5.0)
    holder = cli.start("run", "job", "--heartbeat-timeout", "3s", "--", *child)
    assert wait_for_event(log, "start", holder)["name"] == "job"
    [row] = cli.status("job")
    assert row["lease_duration"] == 3
    assert holder.wait() == 0, holder.stderr()


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_anyio_backend_picks_the_event_loop(loop: str) -> None:
    """`--anyio-backend` runs the command on that event loop (asyncio by default)."""
    seen: list[str] = []

    async def command(args: argparse.Namespace) -> int:
        seen.append(sniffio.current_async_library())
        return 0

    args = build_parser().parse_args(["status", "job", "--anyio-backend", loop])
    assert _call(command, args) == 0
    default = build_parser().parse_args(["status", "job"])
    assert _call(command, default) == 0
    assert seen == [loop, "asyncio"]


def test_status_marks_a_holder_silent_past_its_lease_duration_as_expired(cli: Cli) -> None:
    """A holder whose last renewal (by the wall clocks) is older than its lease duration shows
    as expired in the table and `"expired": true` in JSON; a live one does not."""
    from trio_lease import LeaseRecord
    from trio_lease.backends.sqlite import SqliteBackend

    long_ago = datetime.now(UTC) - timedelta(minutes=5)

    async def seed() -> None:
        async with SqliteBackend(path=cli.db) as backend:
            await backend.create(LeaseRecord(
                "gone", "crashed-host_1", 15.0, 4, acquired_at=long_ago, renewed_at=long_ago
            ))
            now = datetime.now(UTC)
            await backend.create(LeaseRecord(
                "live", "busy-host_1", 600.0, 2, acquired_at=now, renewed_at=now
            ))

    anyio.run(seed)
    gone, live = cli.status("gone", "live")
    assert (gone["expired"], live["expired"]) == (True, False)
    table = cli.run("status", "gone", "live").stdout.splitlines()
    assert table[1].split()[-1] == "expired"
    assert table[2].split()[-1] != "expired"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_waiting_line_says_how_long_it_waited_and_the_holder_held(anyio_backend: str) -> None:
    """The waiting line names how long this run has waited and how long the holder has held
    the lease (by the record's acquired_at)."""
    from trio_lease import Lease, LeaseBusy, LeaseRecord, LeaseSettings
    from trio_lease._cli._waiting import waiting_line
    from trio_lease.backends.memory import MemoryBackend, MemoryStore

    store = MemoryStore()
    acquired = datetime.now(UTC) - timedelta(seconds=125)
    store._commit(LeaseRecord("job", "other_1", 15.0, 1, acquired_at=acquired, renewed_at=acquired))
    settings = LeaseSettings(heartbeat_timeout=15)
    lease = Lease("job", "me", MemoryBackend(store), settings)
    with pytest.raises(LeaseBusy):
        async with lease.try_held():
            pytest.fail("granted")
    line = waiting_line(lease, settings, waited=42.0)
    assert line is not None
    assert "waiting for 'job' (42 s so far), held by 'other_1' for 2 min 5 s" in line[1]


def test_an_optional_command_is_left_out_only_for_a_missing_third_party_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command whose third-party dependency is missing is left out of the parser; a broken
    import inside trio_lease is raised, not hidden as a missing command."""
    from trio_lease._cli import _main

    monkeypatch.setattr(_main, "_BUILTIN_COMMANDS", {"x": "no_such_dependency_xyz:add"})
    assert "manifests" in _commands(build_parser())
    monkeypatch.setattr(_main, "_BUILTIN_COMMANDS", {"x": "trio_lease._no_such_module:add"})
    with pytest.raises(ModuleNotFoundError):
        build_parser()


def test_commands_come_from_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trio_lease.commands entry points add their subcommands (check and emulate are
    registered there, by public functions); a source checkout without the metadata has the
    built-in ones."""
    from trio_lease._cli import _main

    registered = {e.name: e.value for e in entry_points(group=_main.COMMANDS_GROUP)}
    assert registered == _main._BUILTIN_COMMANDS
    assert all(".testing.kube:" in t or ".kubernetes:" in t for t in registered.values())
    assert {"check", "emulate"} <= _commands(build_parser()).keys()
    monkeypatch.setattr(_main, "_BUILTIN_COMMANDS", {})
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert not {"check", "emulate"} & _commands(build_parser()).keys()


def test_python_dash_m_runs_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m trio_lease._cli` runs the `trio-lease` entry point and exits with its code.

    The entry point itself is replaced: run in-process, it would set up the root logger's
    handlers for the rest of the session (the subprocess tests run it for real)."""
    import runpy

    from trio_lease._cli import _main

    calls: list[None] = []

    def entry_point() -> int:
        calls.append(None)
        return 7

    monkeypatch.setattr(_main, "main", entry_point)
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("trio_lease._cli", run_name="__main__")
    assert (exit_info.value.code, len(calls)) == (7, 1)


def _synopsis() -> str:
    """The text block that opens docs/cli.md."""
    page = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    return page.split("```text\n", 1)[1].split("```", 1)[0]


def test_the_synopsis_in_docs_cli_names_every_command_and_option() -> None:
    """docs/cli.md's synopsis has a line for every command, and names every option of the
    commands that touch leases and of `manifests` (`check` and `emulate` end in "...": their
    pages list the rest)."""
    synopsis = _synopsis()
    commands = next(
        action for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    partial = {"check", "emulate"}
    for name, parser in commands.choices.items():
        assert f"trio-lease {name}" in synopsis, name
        if name in partial:
            continue
        options = {
            option for action in parser._actions for option in action.option_strings
        } - {"-h", "--help"}
        missing = sorted(option for option in options if option not in synopsis)
        assert missing == [], (name, missing)
