"""Cooperative handover from the command line: `run --handover` and `handover NAME`."""

from __future__ import annotations

import pytest

from .conftest import FAST, ONE_SHOT, Cli, wait_for_event


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_run_with_handover_takes_over_from_a_running_holder_gracefully(cli: Cli, loop: str) -> None:
    """`run --handover`: the holder SIGTERMs its command, releases and exits 0; the new run
    starts at once with the next token, before a waiting third run (the holder's and the
    asking run's CLI on each event loop)."""
    first_log, first_child = cli.child("first")
    first = cli.start(
        "run", "job", "--owner", "first", "--anyio-backend", loop, *FAST, "--", *first_child
    )
    first_start = wait_for_event(first_log, "start", first)
    third_log, third_child = cli.child("third", sleep=0.1)
    third = cli.start("run", "job", "--owner", "third", *FAST, "--", *third_child)
    third.wait_for_stderr("waiting for 'job'")

    second_log, second_child = cli.child("second", sleep=0.1)
    second = cli.start(
        "run",
        "job",
        "--owner",
        "second",
        "--handover",
        "--anyio-backend",
        loop,
        *FAST,
        "--",
        *second_child,
    )
    wait_for_event(first_log, "sigterm", first)
    assert first.wait() == 0
    assert "asked for a handover" in first.stderr()
    second_start = wait_for_event(second_log, "start", second)
    assert second_start["token"] == first_start["token"] + 1
    assert second.wait() == 0
    assert wait_for_event(third_log, "start", third)["token"] == second_start["token"] + 1
    assert third.wait() == 0


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_handover_command_frees_a_held_lease_after_a_graceful_stop(cli: Cli, loop: str) -> None:
    """`handover NAME`: the holder stops gracefully; the lease is then free for anyone."""
    first_log, first_child = cli.child("first")
    first = cli.start(
        "run", "job", "--owner", "first", "--anyio-backend", loop, *FAST, "--", *first_child
    )
    first_start = wait_for_event(first_log, "start", first)

    handed = cli.run("handover", "job", "--owner", "operator", "--anyio-backend", loop, *ONE_SHOT)
    assert handed.returncode == 0, handed.stderr
    assert f"taken with fencing token {first_start['token'] + 1} and released" in handed.stdout
    assert first.wait() == 0
    (row,) = cli.status("job")
    assert row["holder"] in ("", None)
