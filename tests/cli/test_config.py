"""Every `trio-lease` option from the command line, the environment or a provider TOML file."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from .conftest import FAST, TIMINGS, Cli, L, wait_for_event

SOURCES = ["options", "environment", "toml", "toml-named-in-environment"]


def configure(cli: Cli, source: str) -> tuple[list[str], dict[str, str]]:
    """Backend and timing options from ``source``: (extra arguments, environment).

    The timings only validate together (with the CLI defaults, R = 2 s is not < L/2 = 1.5 s
    and the stop timeout breaks the safety inequality), so a run that starts proves that every
    timing came from ``source``; the record's duration (= L) shows it once more.
    """
    env = {key: value for key, value in cli.env.items() if key != "TRIO_LEASE_SQLITE_PATH"}
    toml = cli.tmp / "leases.toml"
    toml.write_text(
        "[leases.cli]\n"
        'lease-class = "sqlite"\n'
        f"path = {str(cli.db)!r}\n"
        + "".join(f'{key} = "{value}"\n' for key, value in TIMINGS.items())
    )
    if source == "options":
        return ["--backend", "sqlite", "--sqlite-path", str(cli.db), *FAST], env
    if source == "environment":
        env |= {f"TRIO_LEASE_{key.upper().replace('-', '_')}": v for key, v in TIMINGS.items()}
        env |= {"TRIO_LEASE_BACKEND": "sqlite", "TRIO_LEASE_SQLITE_PATH": str(cli.db)}
        return [], env
    if source == "toml":
        return ["--config", str(toml), "--section", "leases.cli"], env
    env |= {"TRIO_LEASE_CONFIG": str(toml), "TRIO_LEASE_SECTION": "leases.cli"}
    return [], env


@pytest.mark.parametrize("source", SOURCES)
def test_backend_and_timings_come_from_each_source(cli: Cli, source: str) -> None:
    """run, status and release take the backend, the SQLite path and every timing from
    options, from TRIO_LEASE_* variables, or from a provider TOML section."""
    options, env = configure(cli, source)
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *options, "--", *child, env=env)
    identity = wait_for_event(log, "start", holder)["owner"]
    [row] = cli.status("job", *options, env=env)
    assert (row["holder"], row["lease_duration"]) == (identity, L)
    busy = cli.run("run", "job", "--no-wait", *options, "--", "true", env=env)
    assert busy.returncode == 75, busy.stderr
    released = cli.run("release", "job", "--force", *options, env=env)
    assert released.returncode == 0, released.stderr
    assert holder.wait() == 125
    assert not (Path(env["XDG_STATE_HOME"]) / "trio-lease").exists()  # no default file used


def test_run_options_come_from_the_environment(cli: Cli) -> None:
    """TRIO_LEASE_OWNER, TRIO_LEASE_NO_WAIT, TRIO_LEASE_TIMEOUT and TRIO_LEASE_JSON act like
    --owner, --no-wait, --timeout and --json; a bad value is a configuration error (78)."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *child, env=cli.env | {"TRIO_LEASE_OWNER": "e"})
    assert wait_for_event(log, "start", holder)["owner"].startswith("e_")

    no_wait = cli.run("run", "job", *FAST, "--", "true", env=cli.env | {"TRIO_LEASE_NO_WAIT": "1"})
    assert no_wait.returncode == 75, no_wait.stderr
    # Long enough for a read to get through on a starved machine (FAST's T is 0.25 s): a wait
    # in which every read failed ends as unavailable (69), not as timed out.
    timeout = cli.env | {"TRIO_LEASE_TIMEOUT": "2s"}
    timed_out = cli.run("run", "job", *FAST, "--", "true", env=timeout)
    assert timed_out.returncode == 124, timed_out.stderr
    as_json = cli.run("status", "job", env=cli.env | {"TRIO_LEASE_JSON": "yes"})
    assert as_json.stdout.startswith("[")
    bad = cli.run("run", "job", "--", "true", env=cli.env | {"TRIO_LEASE_NO_WAIT": "maybe"})
    assert bad.returncode == 78
    assert "TRIO_LEASE_NO_WAIT='maybe'" in bad.stderr

    os.kill(holder.pid, signal.SIGTERM)
    assert holder.wait() == 128 + signal.SIGTERM


def test_options_override_the_environment_which_overrides_the_toml_section(cli: Cli) -> None:
    """Timings: the command line wins over TRIO_LEASE_*, which wins over the --config section;
    invalid timings exit 78 naming the failed inequality."""
    _, env = configure(cli, "toml-named-in-environment")  # the section says L = 3 s, R = 0.5 s
    env["TRIO_LEASE_HEARTBEAT_TIMEOUT"] = "4s"
    from_env = cli.run("run", "job", "--heartbeat-interval", "2s", "--", "true", env=env)
    assert from_env.returncode == 78
    assert "heartbeat_interval must be < heartbeat_timeout / 2: 2 s >= 2 s" in from_env.stderr
    from_option = cli.run(
        "run", "job", "--heartbeat-timeout", "3s", "--heartbeat-interval", "2s", "--", "true",
        env=env,
    )
    assert from_option.returncode == 78
    assert "heartbeat_interval must be < heartbeat_timeout / 2: 2 s >= 1.5 s" in from_option.stderr

    stop_env = cli.env | {"TRIO_LEASE_STOP_TIMEOUT": "1s"}  # with L = 3 s: unsafe
    unsafe = cli.run("run", "job", *FAST[:6], "--", "true", env=stop_env)
    assert unsafe.returncode == 78
    assert "the safety inequality" in unsafe.stderr
    overridden = cli.run("run", "job", *FAST, "--", "true", env=stop_env)
    assert overridden.returncode == 0, overridden.stderr
