"""The edges a new user touches first, each in real `trio-lease` processes: values checked
where they enter, the emulator's failed handshakes, defaults valid for every lease kind, one
answer from check, status and run, read-only commands without side effects, and messages that
say what to do."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trustme

from tests.etcd_server import EtcdCluster

from ._stores import NAMESPACE, Emulator, start_emulator
from .conftest import FAST, ONE_SHOT, PATIENCE, Cli, no_record, trio_lease_command

ROOT = Path(__file__).parents[2]
INTERRUPTING = Path(__file__).with_name("interrupting.py")

TRACEBACK = "Traceback (most recent call last)"


def _kube(emulator: Emulator, *more: str) -> list[str]:
    return ["--kubeconfig", str(emulator.kubeconfig), *more]


def test_an_endpoint_port_out_of_range_exits_78_naming_the_option(cli: Cli) -> None:
    """`status --endpoints http://127.0.0.1:99999` (also --json, --watch, port -5) exits 78
    naming --endpoints and the rule, with no traceback (it was an OverflowError)."""
    for argv in (
        ["status", "--endpoints", "http://127.0.0.1:99999"],
        ["status", "--json", "--watch", "--endpoints", "http://127.0.0.1:99999"],
        ["status", "job", "--endpoints", "http://127.0.0.1:-5"],
        ["run", "job", "--timeout", "3", "--endpoints", "http://127.0.0.1:abc", "--", "true"],
    ):
        result = cli.run(*argv)
        assert result.returncode == 78, (argv, result.stderr)
        assert result.stderr.startswith("trio-lease: --endpoints: 'http://127.0.0.1:")
        assert "not a number from 1 to 65535" in result.stderr
        assert TRACEBACK not in result.stderr


def test_a_negative_duration_exits_78_saying_durations_are_positive(cli: Cli) -> None:
    """`--heartbeat-timeout -1s` (it was a usage error, exit 2) and `--timeout=-1s` both exit
    78 with one line saying durations must be positive."""
    for argv in (
        ["status", "--heartbeat-timeout", "-1s"],
        ["run", "job", "--timeout=-1s", "--", "true"],
    ):
        result = cli.run(*argv)
        assert result.returncode == 78, result.stderr
        assert "durations must be positive, got '-1s'" in result.stderr
        assert result.stderr.count("\n") == 1


def test_a_negative_duration_in_a_config_section_says_durations_are_positive(cli: Cli) -> None:
    """`heartbeat-timeout = "-1s"` in a `--config` section exits 78 naming the key and saying
    durations must be positive (it said "cannot read '-1s' as a duration")."""
    config = cli.tmp / "negative.toml"
    database = cli.tmp / "s.db"
    config.write_text(
        f'[leases.cli]\nlease-class = "sqlite"\npath = "{database}"\nheartbeat-timeout = "-1s"\n'
    )
    result = cli.run("status", "--config", str(config), "--section", "leases.cli")
    assert result.returncode == 78, result.stderr
    assert "heartbeat-timeout: durations must be positive, got '-1s'" in result.stderr
    assert "cannot read" not in result.stderr and TRACEBACK not in result.stderr


def test_the_top_level_usage_version_and_a_run_without_command(cli: Cli) -> None:
    """`trio-lease` alone prints the help (not "required: command_name"), `--version` prints
    the version, and `run job` prints run's usage and says a command is needed."""
    alone = cli.run()
    assert alone.returncode == 2
    assert "usage: trio-lease" in alone.stderr and "name a command" in alone.stderr
    assert "command_name" not in alone.stderr
    version = cli.run("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("trio-lease ")
    bare = cli.run("run", "job")
    assert bare.returncode == 2
    assert bare.stderr.startswith("usage: trio-lease run ")
    assert "a command to run is needed after --" in bare.stderr


def test_a_program_that_cannot_be_executed_exits_126_before_taking_the_lease(cli: Cli) -> None:
    """A file without execute permission, and an executable file that is no program, exit 126
    (as shells do) before the lease is taken: the database is not even created."""
    script = cli.tmp / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    garbage = cli.tmp / "garbage"
    garbage.write_bytes(b"\x00garbage\x01")
    garbage.chmod(0o755)
    plain = cli.run("run", "job", "--", str(script))
    assert plain.returncode == 126
    assert "not executable" in plain.stderr
    junk = cli.run("run", "job", "--", str(garbage))
    assert junk.returncode == 126
    assert "not an executable format" in junk.stderr
    assert not cli.db.exists()


def _interpreter_start(env: dict[str, str]) -> float:
    """The longest of three starts of a bare interpreter that imports what the console script
    imports before ``_trio_lease_cli`` (``re``), measured now: the time before any code of
    ours can catch a SIGINT on this machine, as loaded as it is."""
    times = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import re"], env=env, check=True)
        times.append(time.monotonic() - start)
    return max(times)


def test_the_console_scripts_sigint_handler_is_in_place_once_its_module_is_imported() -> None:
    """The console script's wrapper runs code of its own between importing ``_trio_lease_cli``
    and calling its ``main`` (a regular expression compiled for ``sys.argv[0]``): the quiet
    SIGINT handler is installed by the import, so a Ctrl-C there prints no traceback."""
    probe = (
        "import signal, _trio_lease_cli\n"
        "print(signal.getsignal(signal.SIGINT) is _trio_lease_cli._interrupted)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == "True", shown


def _before_our_code(stderr: str) -> bool:
    """Whether a traceback lies wholly before the console script imports ``_trio_lease_cli``
    (Python's own start, or the wrapper's ``import re``): no code of ours could catch it."""
    command = trio_lease_command()
    if len(command) != 1 or TRACEBACK not in stderr:
        return False
    lines = Path(command[0]).read_text().splitlines()
    ours = next(n for n, line in enumerate(lines, 1) if "_trio_lease_cli" in line)
    wrapper = f'File "{command[0]}", line '
    frames = [line.split(wrapper, 1)[1] for line in stderr.splitlines() if wrapper in line]
    return "_trio_lease_cli" not in stderr and all(int(f.split(",")[0]) < ours for f in frames)


def test_ctrl_c_while_starting_ends_without_a_traceback(cli: Cli) -> None:
    """SIGINT while `run` or `status --watch` is still starting (importing, parsing, entering
    the loop) ends it with one line, never a KeyboardInterrupt traceback.

    The signals are sent once the interpreter itself has started (twice its measured start
    time): before that no code of ours runs, and Python prints its own traceback. On a loaded
    machine a start can still take longer than that; a traceback wholly before the console
    script imports ``_trio_lease_cli`` is then sent again, later, up to three times. The
    processes run without coverage's start-up hook, whose ``.pth`` line wraps
    ``import coverage`` in a bare ``except:`` that swallows a KeyboardInterrupt."""
    env = {key: value for key, value in cli.env.items() if not key.startswith("COVERAGE_")}
    started = 2 * _interpreter_start(env)
    _, once = cli.child("once", sleep=0)
    # A database to watch: `status --watch` of a missing one says so and ends on its own.
    assert cli.run("run", "job", *FAST, "--", *once).returncode == 0
    _, child = cli.child("never", sleep=30)
    for argv in (["run", "job", *FAST, "--", *child], ["status", "--watch"]):
        for delay in (0.0, 0.15, 0.45, 1.05):
            for attempt in range(4):
                running = cli.start(*argv, env=env)
                time.sleep(started * 1.5**attempt + delay)
                running.process.send_signal(signal.SIGINT)
                code = running.wait()
                if attempt < 3 and _before_our_code(running.stderr()):
                    continue
                break
            assert TRACEBACK not in running.stderr(), (argv, delay, running.stderr())
            assert code in (0, 130), (argv, delay, code, running.stderr())


def test_a_traceback_is_put_before_our_code_only_from_the_wrappers_first_lines() -> None:
    """The retry above forgives a traceback only where the console script has not imported
    ``_trio_lease_cli`` yet: one from the wrapper's later lines, or from our modules, is not."""
    command = trio_lease_command()
    if len(command) != 1:
        pytest.skip("no console script installed: `python -m trio_lease._cli` has no wrapper")
    lines = Path(command[0]).read_text().splitlines()
    ours = next(n for n, line in enumerate(lines, 1) if "_trio_lease_cli" in line)

    def trace(line: int, *more: str) -> str:
        frame = f'  File "{command[0]}", line {line}, in <module>'
        return "\n".join([TRACEBACK + ":", frame, *more, "KeyboardInterrupt"])

    assert _before_our_code(trace(ours - 2))
    assert not _before_our_code(trace(ours + 2))
    assert not _before_our_code(trace(ours - 2, '  File "/x/_trio_lease_cli.py", line 9'))
    assert not _before_our_code("trio-lease: interrupted")


@pytest.mark.parametrize(
    ("moment", "loop"), [("finaliser", "asyncio"), ("finaliser", "trio"), ("loop", "asyncio")]
)
def test_ctrl_c_where_python_would_lose_it_still_ends_the_command(
    cli: Cli, moment: str, loop: str
) -> None:
    """A SIGINT that lands where Python loses or garbles a KeyboardInterrupt while the command
    starts (a weak-reference callback, as the import system runs during imports; a half-built
    event loop, whose finaliser prints a traceback) still ends it with one line and exit 130.

    ``tests/cli/interrupting.py`` sends the signal at that moment. Python's own handler there
    let ``status`` run on and print its table (exit 0), or printed an ignored-exception
    traceback. (trio builds no asyncio loop.)"""
    env = {key: value for key, value in cli.env.items() if not key.startswith("COVERAGE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(INTERRUPTING), moment, "status", "--anyio-backend", loop]
    result = subprocess.run(argv, env=env, cwd=cli.tmp, capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (130, "trio-lease: interrupted\n")
    assert result.stdout == ""


def test_status_of_a_missing_database_creates_nothing(cli: Cli) -> None:
    """`status --sqlite-path` of a file that does not exist shows no records and creates
    nothing; `handover` and `release --force` create nothing either."""
    new = cli.tmp / "new.sqlite3"
    result = cli.run("status", "--json", "job", "--sqlite-path", str(new))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [no_record("job")]
    assert "nothing was created" in result.stderr
    assert cli.run("handover", "job", "--sqlite-path", str(new)).returncode == 1
    assert cli.run("release", "job", "--force", "--sqlite-path", str(new)).returncode == 0
    assert not new.exists()


def test_handover_of_a_lease_with_no_record_writes_nothing(cli: Cli) -> None:
    """`handover --timeout 3 nosuchlease` says the lease has no record, exits 1 and writes no
    record (it took the lease with token 1)."""
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *FAST, "--", *child).returncode == 0
    result = cli.run("handover", "nosuchlease", "--timeout", "3", *ONE_SHOT)
    assert result.returncode == 1
    assert "'nosuchlease' has no record" in result.stderr
    assert cli.status("nosuchlease") == [no_record("nosuchlease")]


def test_config_with_sqlite_path_is_refused(cli: Cli) -> None:
    """`--config good.toml --section leases.cli --sqlite-path X` exits 78 naming --sqlite-path
    (it was ignored, exit 0)."""
    config = cli.tmp / "good.toml"
    config.write_text(f'[leases.cli]\nlease-class = "sqlite"\npath = "{cli.tmp / "s.db"}"\n')
    other = cli.tmp / "x.sqlite3"
    args = ["--config", str(config), "--section", "leases.cli", "--sqlite-path", str(other)]
    result = cli.run("status", *args)
    assert result.returncode == 78
    assert "--sqlite-path: with --config the section configures the backend" in result.stderr
    assert not other.exists()


def test_the_status_table_stays_aligned_with_long_names(cli: Cli) -> None:
    """Long lease names and holders widen their columns: every row's token ends under TOKEN."""
    name = "a-lease-name-longer-than-the-twenty-four-columns"
    _, child = cli.child("once", sleep=0)
    owner = "an-owner-name-much-longer-than-thirty-six-columns-" + "x" * 20
    assert cli.run("run", name, "--owner", owner, *FAST, "--", *child).returncode == 0
    assert cli.run("run", "short", *FAST, "--", *child).returncode == 0
    lines = cli.run("status").stdout.splitlines()
    token_end = lines[0].index("TOKEN") + len("TOKEN")
    assert len(lines) == 3
    for line in lines[1:]:
        assert line[token_end - 1] == "1", lines
        assert line[token_end] == " ", lines


def test_the_emulator_logs_a_failed_handshake_as_one_line(cli: Cli) -> None:
    """A plain-HTTP client and one that does not trust the CA on `trio-lease emulate`'s port:
    one line each on its stderr, no traceback, and it goes on serving."""
    emulator = start_emulator(cli)
    port = emulator.url.rsplit(":", 1)[1]
    with httpx.Client(timeout=10) as plain, contextlib.suppress(httpx.HTTPError):
        plain.get(f"http://127.0.0.1:{port}/")
    untrusting = ssl.create_default_context(cadata=trustme.CA().cert_pem.bytes().decode())
    with (
        httpx.Client(verify=untrusting, timeout=10) as client,
        contextlib.suppress(httpx.HTTPError),
    ):
        client.get(f"https://127.0.0.1:{port}/")
    deadline = time.monotonic() + 20
    while emulator.process.stderr().count("TLS handshake") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stderr = emulator.process.stderr()
    assert TRACEBACK not in stderr
    assert "a plain-HTTP request on the HTTPS port" in stderr
    assert "does not trust the emulator's CA" in stderr
    assert stderr.count("\n") == 2, stderr
    assert emulator.lease("job") is None  # still serving


def test_akka_leases_work_with_the_default_timings(cli: Cli) -> None:
    """`run --lease-kind akka.io/v1` with the CLI's default timings works (it exited 78 on
    holder_deadline); `check` reports a holder deadline Akka's rule refuses, naming the
    option that fixes it, as `run` does."""
    emulator = start_emulator(cli)
    akka = _kube(emulator, "--lease-kind", "akka.io/v1")
    _, child = cli.child("once", sleep=0)
    result = cli.run("run", "job", *akka, "--", *child)
    assert result.returncode == 0, result.stderr
    assert emulator.lease("job", "akka.io") is not None
    assert cli.run("check", *akka).returncode == 0
    too_long = cli.run("check", *akka, "--holder-deadline", "10s")
    assert too_long.returncode == 1
    assert "lower --holder-deadline (at most 9s)" in too_long.stdout
    refused = cli.run("run", "job", *akka, "--holder-deadline", "10s", "--", *child)
    assert refused.returncode == 78
    assert "lower --holder-deadline (at most 9s)" in refused.stderr


def test_check_of_a_config_section_checks_the_timings_run_uses(cli: Cli) -> None:
    """`check --config F --section S` checks the section's timings as `run` would use them
    (it checked the command's defaults): a combination the lease kind refuses fails `check`
    (exit 1) as it fails `run` (exit 78), both naming the section's key and the option; the
    option given over the section fixes it for both."""
    emulator = start_emulator(cli)
    config = cli.tmp / "leases.toml"
    config.write_text(
        f'[leases.akka]\nlease-class = "kubernetes"\nkubeconfig = "{emulator.kubeconfig}"\n'
        'lease-kind = "akka.io/v1"\nheartbeat-timeout = "15s"\nheartbeat-interval = "2s"\n\n'
        f'[leases.halves]\nlease-class = "kubernetes"\nkubeconfig = "{emulator.kubeconfig}"\n'
        'heartbeat-timeout = "2.5s"\n'
    )
    _, child = cli.child("once", sleep=0)
    for section, names in [
        ("leases.akka", f"holder-deadline in {config} [leases.akka], or --"),
        ("leases.halves", f"heartbeat-timeout in {config} [leases.halves], or --heartbeat-timeout"),
    ]:
        where = ["--config", str(config), "--section", section]
        check = cli.run("check", *where)
        assert check.returncode == 1, (section, check.stdout, check.stderr)
        assert "the timings do not work" in check.stdout
        assert names in check.stdout
        run = cli.run("run", "job", *where, "--", *child)
        assert run.returncode == 78, (section, run.stderr)
        assert names in run.stderr
        if section == "leases.akka":
            assert "lower holder_deadline (to at most 9 s)" in run.stderr
        assert TRACEBACK not in check.stdout + check.stderr + run.stderr
    fixed = ["--config", str(config), "--section", "leases.akka", "--holder-deadline", "9s"]
    assert cli.run("check", *fixed).returncode == 0
    assert cli.run("run", "job", *fixed, "--", *child).returncode == 0
    assert emulator.lease("job", "akka.io") is not None


def test_check_status_and_run_agree_on_a_missing_namespace(cli: Cli) -> None:
    """With `--namespace nosuchns`: check reports the problem (exit 1), status and run exit 78,
    all saying the namespace does not exist (check said OK, status showed an empty table)."""
    emulator = start_emulator(cli)
    missing = _kube(emulator, "--namespace", "nosuchns")
    check = cli.run("check", *missing)
    assert check.returncode == 1
    assert "namespace 'nosuchns' does not exist" in check.stdout
    for argv in (["status"], ["status", "job", "--json"], ["run", "job"]):
        tail = ["--", "true"] if argv[0] == "run" else []
        result = cli.run(*argv, *missing, *tail)
        assert result.returncode == 78, (argv, result.stderr)
        assert "namespace 'nosuchns' does not exist" in result.stderr


def test_status_marks_a_foreign_lease_named_or_listed_with_one_schema(cli: Cli) -> None:
    """A Lease another program wrote is `"foreign": true` in `status NAME --json` as in the
    listing, and both rows have the same keys (one schema)."""
    emulator = start_emulator(cli)
    emulator.create_foreign_lease("controller-leader", "controller-7")
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *_kube(emulator), *FAST, "--", *child).returncode == 0
    listed = {row["name"]: row for row in cli.status(*_kube(emulator))}
    named = {row["name"]: row for row in cli.status("controller-leader", "job", *_kube(emulator))}
    assert listed["controller-leader"]["foreign"] is True
    assert named["controller-leader"]["foreign"] is True
    assert listed["job"]["foreign"] is False
    assert named["job"]["foreign"] is False
    assert set(listed["job"]) == set(named["controller-leader"]) == set(no_record("x"))
    table = cli.run("status", "controller-leader", *_kube(emulator)).stdout
    assert "(foreign: not written by trio-lease)" in table


def test_check_says_how_to_apply_the_shipped_crd(cli: Cli) -> None:
    """`check --lease-kind akka.io/v1` without the CRD points to `trio-lease manifests`, which
    an installed user has, not to a lease.yml file they do not."""
    emulator = start_emulator(cli, apply=False)
    result = cli.run("check", *_kube(emulator, "--lease-kind", "akka.io/v1"))
    assert result.returncode == 1
    assert "trio-lease manifests --lease-kind akka.io/v1 | kubectl apply -f -" in result.stdout
    assert "kubectl apply -f lease.yml" not in result.stdout
    assert NAMESPACE in result.stdout


def test_https_to_a_plain_etcd_says_it_closed_in_the_tls_handshake(
    cli: Cli, etcd_server: EtcdCluster
) -> None:
    """`status --endpoints https://` on a real plain-HTTP etcd, which closes on a ClientHello:
    exit 69, saying a plain-HTTP server does this and to use http://; no traceback."""
    endpoint = "https://" + etcd_server.endpoints[0].split("://", 1)[1]
    for argv in (["status", "job"], ["status", "--json"]):
        result = cli.run(*argv, "--endpoints", endpoint, "--prefix", "/plain-tls/")
        assert result.returncode == 69, (argv, result.stderr)
        assert "closed the connection during the TLS handshake" in result.stderr
        assert "a plain-HTTP server does this" in result.stderr
        assert "use http://" in result.stderr
        assert TRACEBACK not in result.stderr + result.stdout


def test_an_https_kubeconfig_on_the_plain_http_emulator_says_use_http(cli: Cli) -> None:
    """A kubeconfig with https:// on `trio-lease emulate --plain-http`: `status`, `check` and
    `run --timeout 3` say the server closed in the TLS handshake and to use http://."""
    emulator = start_emulator(cli, "--plain-http")
    server = "https://" + emulator.url.split("://", 1)[1]
    kubeconfig = emulator.kubeconfig_with(cli.tmp / "https.kubeconfig", server=server)
    _, child = cli.child("never", sleep=30)
    store = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    commands = (["status"], ["check"], ["run", "job", "--timeout", "3", *store, "--", *child])
    for argv in commands:
        result = cli.run(*argv) if argv[0] == "run" else cli.run(*argv, *store)
        assert result.returncode != 0, (argv, result.stdout)
        output = result.stderr + result.stdout
        assert "closed the connection during the TLS handshake" in output, (argv, output)
        assert "a plain-HTTP server does this" in output and "use http://" in output
        assert "could not connect to the API server; the outcome is unknown" not in output
        assert TRACEBACK not in output, (argv, output)


def test_status_into_a_pipe_closed_early_ends_quietly_with_141(cli: Cli) -> None:
    """`status | head -1` and `status --json | head -1`: the reader closes the pipe after one
    line while status still writes; it exits 141 (128 + SIGPIPE) with no traceback."""
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *FAST, "--", *child).returncode == 0
    names = [f"lease-{i:05d}" for i in range(3000)]  # far more than a pipe's 64 KiB buffer
    for extra in ([], ["--json"]):
        process = subprocess.Popen(
            [*trio_lease_command(), "status", *extra, "job", *names],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=cli.env,
            cwd=cli.tmp,
        )
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()  # as `head -1` does, then close
        process.stdout.close()
        try:
            code = process.wait(PATIENCE)
        finally:
            process.kill()
        stderr = process.stderr.read().decode()
        process.stderr.close()
        assert first, (extra, stderr)
        assert TRACEBACK not in stderr and "BrokenPipeError" not in stderr, (extra, stderr)
        assert code == 141, (extra, code, stderr)


def test_a_backend_variable_beside_config_is_refused_naming_it(cli: Cli) -> None:
    """`TRIO_LEASE_SQLITE_PATH=X status --config F --section S` (and the other variables that
    choose a backend) exit 78 naming the variable and the fix; the variable was ignored."""
    config = cli.tmp / "good.toml"
    config.write_text(f'[leases.cli]\nlease-class = "sqlite"\npath = "{cli.tmp / "s.db"}"\n')
    other = cli.tmp / "x.sqlite3"
    base = {k: v for k, v in cli.env.items() if k != "TRIO_LEASE_SQLITE_PATH"}
    args = ["--config", str(config), "--section", "leases.cli"]
    assert cli.run("status", *args, env=base).returncode == 0
    for variable, value in (
        ("TRIO_LEASE_SQLITE_PATH", str(other)),
        ("TRIO_LEASE_BACKEND", "etcd"),
        ("TRIO_LEASE_ENDPOINTS", "http://127.0.0.1:2379"),
        ("TRIO_LEASE_KUBECONFIG", str(cli.tmp / "kubeconfig")),
    ):
        for argv in (["status", *args], ["run", "job", *args, "--", "true"]):
            result = cli.run(*argv, env={**base, variable: value})
            assert result.returncode == 78, (variable, argv, result.stderr)
            assert f"{variable} set in the environment" in result.stderr
            assert "unset it" in result.stderr and "leave out --config" in result.stderr
            assert TRACEBACK not in result.stderr
    assert not other.exists()
