"""Options of every command: help for each, bad values refused, the event loop, derived timings."""

from __future__ import annotations

import argparse
import re

import pytest
import sniffio

from trio_lease._cli._main import _call, build_parser

from .conftest import Cli, read_events, wait_for_event


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


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
    """`run --timeout` must be more than 0 s: usage error (2) naming the value, nothing run."""
    log, child = cli.child("never")
    result = cli.run("run", "job", f"--timeout={value}", "--", *child)
    assert result.returncode == 2
    assert "must be more than 0 s" in result.stderr
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
    log, child = cli.child("job", sleep=1.0)
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
