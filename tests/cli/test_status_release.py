"""`trio-lease status` (table and --json) and `trio-lease release` (--force, and refusing)."""

from __future__ import annotations

import os
import signal

from .conftest import FAST, Cli, L, no_record, wait_for_event


def test_status_shows_holder_token_and_expiry_as_table_and_json(cli: Cli) -> None:
    """status lists every lease (or the named ones) with holder, token, duration and expiry;
    a name without a record says so; a released lease shows as free."""
    log, child = cli.child("holder")
    # T = 0.5 s (the largest R allows): the release on SIGTERM is bounded by T, and 0.25 s of a
    # SQLite write was not always enough on a loaded CI machine (the lease then stays held).
    slower_release = [*FAST, "--lease-operation-timeout", "0.5s"]
    holder = cli.start("run", "job", "--owner", "alpha", *slower_release, "--", *child)
    identity = wait_for_event(log, "start", holder)["owner"]
    assert identity.startswith("alpha_")

    row, missing = cli.status("job", "missing")
    assert row["exists"] is True
    assert row["holder"] == identity
    assert row["fencing_token"] == 1
    assert row["lease_duration"] == L
    assert isinstance(row["expires_in_s"], float)
    assert isinstance(row["age_s"], float)
    assert missing == no_record("missing")

    table = cli.run("status")  # no names: every lease in the SQLite file
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split() == ["NAME", "HOLDER", "TOKEN", "AGE", "EXPIRES", "IN"]
    assert line.split()[:3] == ["job", identity, "1"]

    os.kill(holder.pid, signal.SIGTERM)
    assert holder.wait() == 128 + signal.SIGTERM
    free = cli.run("status", "job", "missing")
    assert free.stdout.splitlines()[1].split() == ["job", "(free)", "1", "-", "-"]
    assert free.stdout.splitlines()[2].split() == ["missing", "(no", "record)"]


def test_release_without_force_refuses_with_exit_2(cli: Cli) -> None:
    """`release NAME` without --force explains the danger, exits 2 and leaves the holder."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *child)
    identity = wait_for_event(log, "start", holder)["owner"]
    refused = cli.run("release", "job")
    assert refused.returncode == 2
    assert "release needs --force" in refused.stderr
    assert cli.status("job")[0]["holder"] == identity
    os.kill(holder.pid, signal.SIGTERM)
    assert holder.wait() == 128 + signal.SIGTERM


def test_release_force_frees_the_lease_and_keeps_the_token(cli: Cli) -> None:
    """`release NAME --force` writes an empty holder keeping the fencing token, so the next
    grant continues from it; on a free or missing lease it says so and exits 0."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *child)
    wait_for_event(log, "start", holder)
    released = cli.run("release", "job", "--force")
    assert released.returncode == 0, released.stderr
    [row] = cli.status("job")
    assert (row["holder"], row["fencing_token"]) == (None, 1)
    assert holder.wait() == 125

    again = cli.run("release", "job", "--force")
    assert (again.returncode, again.stdout) == (0, "trio-lease: 'job' is not held\n")
    missing = cli.run("release", "missing", "--force")
    assert (missing.returncode, missing.stdout) == (0, "trio-lease: 'missing' is not held\n")

    next_log, next_child = cli.child("next", sleep=0)
    assert cli.run("run", "job", *FAST, "--", *next_child).returncode == 0
    assert wait_for_event(next_log, "start")["token"] == 2


def test_status_without_names_on_a_backend_that_cannot_list_exits_78(cli: Cli) -> None:
    """`status` with no names on a backend without names() asks for names and exits 78."""
    (cli.tmp / "unlisted.py").write_text(
        "from trio_lease.abc import LeaseBackend\n"
        "from trio_lease.backends.memory import MemoryBackend\n"
        "class Unlisted(MemoryBackend):\n"
        "    names = LeaseBackend.names\n"
    )
    env = cli.env | {"PYTHONPATH": str(cli.tmp)}
    result = cli.run("status", "--backend", "unlisted:Unlisted", env=env)
    assert result.returncode == 78
    assert result.stderr == "trio-lease: this backend cannot list leases: name them\n"
    assert result.stdout == ""
