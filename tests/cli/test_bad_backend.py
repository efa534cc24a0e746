"""The CLI on a backend it cannot use: it says why it waits, exits with the documented code, and
never prints a traceback or takes an unreadable record as free (real `trio-lease` processes)."""

from __future__ import annotations

import re
import socket
import sqlite3
from pathlib import Path

from .conftest import FAST, Cli

EXIT_BUSY = 75
EXIT_CONFIG = 78
EXIT_UNAVAILABLE = 69


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _etcd_config(tmp: Path) -> Path:
    config = tmp / "leases.toml"
    config.write_text(
        "[etcd]\n"
        'lease-class = "etcd"\n'
        f'endpoints = ["http://127.0.0.1:{_closed_port()}"]\n'
        "connect-timeout = 0.2\n"
    )
    return config


def test_timeout_while_the_backend_is_unreachable_exits_69_naming_the_last_error(cli: Cli) -> None:
    """Waiting on a dead server prints why within seconds; the timeout exits 69 with the cause."""
    config = _etcd_config(cli.tmp)
    result = cli.run(
        "run", "job", "--config", str(config), "--section", "etcd", *FAST, "--timeout", "3s",
        "--", "true",
    )
    assert result.returncode == EXIT_UNAVAILABLE, result.stderr
    assert re.search(
        r"waiting for 'job' \(\d+ s so far\): the backend has been failing for", result.stderr
    )
    assert "not acquired within 3 s" in result.stderr
    assert "last error" in result.stderr and "no endpoint answered" in result.stderr
    assert "Traceback" not in result.stderr
    # The waiting line reports the failure; the library's own warning is not printed twice.
    assert "cannot use the backend" not in result.stderr


def test_waiting_run_on_a_sqlite_path_under_a_file_exits_78_without_a_traceback(cli: Cli) -> None:
    """A database path whose parent is a regular file ends the wait at once: exit 78, one line."""
    blocker = cli.tmp / "not-a-directory"
    blocker.write_text("x")
    env = dict(cli.env, TRIO_LEASE_SQLITE_PATH=str(blocker / "leases.sqlite3"))
    result = cli.run("run", "job", *FAST, "--", "true", env=env)
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    assert str(blocker) in result.stderr


def test_unreadable_sqlite_row_is_shown_as_such_and_never_taken_as_free(cli: Cli) -> None:
    """A row whose holder is a blob: status says unreadable; run --no-wait exits 75 (busy)."""
    assert cli.run("run", "job", *FAST, "--", "true").returncode == 0  # creates the file
    with sqlite3.connect(cli.db) as conn:  # TEXT affinity would turn a number into text
        conn.execute("UPDATE leases SET holder = X'00ff' WHERE name = 'job'")
    rows = cli.status("job")
    assert rows[0]["unreadable"] and "holder" in rows[0]["unreadable"]
    table = cli.run("status", "job")
    assert "(unreadable record)" in table.stdout
    busy = cli.run("run", "job", *FAST, "--no-wait", "--", "true")
    assert busy.returncode == EXIT_BUSY, busy.stderr
    assert "unreadable" in busy.stderr


def test_release_force_refuses_a_record_whose_token_is_unreadable(cli: Cli) -> None:
    """release --force will not write over a record whose fencing token cannot be read."""
    assert cli.run("run", "job", *FAST, "--", "true").returncode == 0
    with sqlite3.connect(cli.db) as conn:
        conn.execute("UPDATE leases SET fencing_token = 'abc' WHERE name = 'job'")
    result = cli.run("release", "job", "--force")
    assert result.returncode == EXIT_UNAVAILABLE, result.stderr
    assert "fencing token" in result.stderr and "Traceback" not in result.stderr
    with sqlite3.connect(cli.db) as conn:
        assert conn.execute("SELECT fencing_token FROM leases").fetchone() == ("abc",)
