"""Every command of docs/cli.md with wrong inputs, against SQLite, the emulator and etcd.

Each row of the table is a command line, the exit code it must end with and a phrase its
message must hold; no output of any row, nor of the emulator serving them, may hold a
traceback. The rows of one store run in one process (tests/cli/many.py), since a process per
row would cost about a second each here.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

from tests.etcd_server import EtcdCluster

from ._stores import Emulator, start_emulator
from .conftest import ONE_SHOT, Cli

MANY = Path(__file__).with_name("many.py")
TRACEBACK = "Traceback (most recent call last)"


@dataclasses.dataclass(frozen=True)
class Row:
    """A wrong command line, its exit code and a phrase of its message (stderr or stdout)."""

    argv: tuple[str, ...]
    code: int
    phrase: str
    env: tuple[tuple[str, str], ...] = ()


#: Wrong options any lease command refuses before it reads a record, whatever the store.
ANY_STORE: list[tuple[tuple[str, ...], int, str]] = [
    (("--heartbeat-timeout", "-1s"), 78, "--heartbeat-timeout: durations must be positive"),
    (("--heartbeat-timeout=-1s",), 78, "--heartbeat-timeout: durations must be positive"),
    (("--heartbeat-timeout", "0"), 78, "durations must be positive"),
    (("--heartbeat-timeout", "soon"), 78, "cannot read 'soon' as a duration"),
    (("--heartbeat-timeout", "1e12"), 78, "heartbeat_timeout must be at most 2147483647 s"),
    (("--heartbeat-interval", "20s"), 78, "(set by --heartbeat-timeout, --heartbeat-interval)"),
    (("--lease-operation-timeout", "-.5"), 78, "durations must be positive"),
    (("--stop-timeout", "-1"), 78, "--stop-timeout: durations must be positive"),
    (("--holder-deadline", "-2s"), 78, "--holder-deadline: durations must be positive"),
    (("--anyio-backend", "curio"), 78, "--anyio-backend: invalid choice"),
    (("--section", "leases.x"), 78, "--section needs --config"),
    (("--no-such-option",), 2, "unrecognized arguments: --no-such-option"),
]

#: Wrong options of one store, given with that store's own options.
SQLITE: list[tuple[tuple[str, ...], int, str]] = [
    (("--sqlite-path", "/no/such/dir/x.sqlite3"), 78, "the folder of '/no/such/dir/x.sqlite3'"),
    (("--sqlite-path", "/tmp", "--endpoints", "http://127.0.0.1:2379"), 78,
     "name different backends"),
    (("--backend", "nosuch"), 78, "nosuch"),
    (("--config", "{tmp}/good.toml", "--section", "leases.cli", "--sqlite-path", "{tmp}/x.db"),
     78, "--sqlite-path: with --config the section configures the backend"),
    (("--config", "{tmp}/no-such.toml", "--section", "leases.cli"), 78, "no-such.toml"),
    (("--config", "{tmp}/good.toml"), 78, "--config needs --section"),
]
KUBE: list[tuple[tuple[str, ...], int, str]] = [
    (("--namespace", "nosuchns"), 78, "namespace 'nosuchns' does not exist"),
    (("--lease-kind", "foo/v1"), 78, "foo/v1"),
    (("--context", "nosuch"), 78, "nosuch"),
    (("--kubeconfig", "/no/such/kubeconfig"), 78, "/no/such/kubeconfig"),
    (("--lease-kind", "akka.io/v1", "--holder-deadline", "10s"), 78,
     "lower --holder-deadline (at most 9s)"),
    (("--endpoints", "http://127.0.0.1:2379"), 78, "name different backends"),
]
ETCD: list[tuple[tuple[str, ...], int, str]] = [
    (("--endpoints", "http://127.0.0.1:99999"), 78, "'http://127.0.0.1:99999' has port '99999'"),
    (("--endpoints", "http://127.0.0.1:-5"), 78, "has port '-5', not a number from 1 to 65535"),
    (("--endpoints", "http://127.0.0.1:abc"), 78, "has port 'abc'"),
    (("--endpoints", "http://127.0.0.1:0"), 78, "has port '0'"),
    (("--endpoints", "ftp://127.0.0.1:2379"), 78, "is not an http:// or https:// URL"),
    (("--endpoints", "http://:2379"), 78, "has no host"),
    (("--user", "root:secret"), 78, "give the user name only"),
    (("--password-file", "/no/such/password"), 78,
     "--password-file (`password-file`) could not be read"),
    (("--cacert", "/no/such/ca.pem"), 78, "--cacert (`ca-file`) could not be read"),
    (("--key", "/no/such/key.pem"), 78, "needs"),
]


def _lease_commands(name: str) -> list[tuple[str, ...]]:
    """Every command of docs/cli.md that reads or writes a lease, ready for more options."""
    return [
        ("status",),
        ("status", name, "--json"),
        ("status", "--watch"),
        ("handover", name, "--timeout", "3"),
        ("release", name, "--force"),
        ("run", name, "--timeout", "3"),
    ]


def _table(store: list[str], own: list[tuple[tuple[str, ...], int, str]]) -> list[Row]:
    """Each lease command with each wrong option of any store and of this one."""
    rows = []
    for command in _lease_commands("job"):
        tail = ("--", "true") if command[0] == "run" else ()
        for options, code, phrase in ANY_STORE:
            rows.append(Row((*command, *store, *options, *tail), code, phrase))
        for options, code, phrase in own:
            rows.append(Row((*command, *options, *tail), code, phrase))
    return rows


def _store_free_rows(tmp: Path) -> list[Row]:
    """Commands and options whose errors do not depend on the store."""
    script = tmp / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    garbage = tmp / "garbage"
    garbage.write_bytes(b"\x00\x01garbage")
    garbage.chmod(0o755)
    return [
        Row((), 2, "name a command"),
        Row(("no-such-command",), 2, "invalid choice: 'no-such-command'"),
        Row(("--version",), 0, "trio-lease "),
        Row(("run", "job"), 2, "trio-lease run: a command to run is needed after --"),
        Row(("run", "job", "--", str(script)), 126, "not executable"),
        Row(("run", "job", "--", str(garbage)), 126, "not an executable format"),
        Row(("run", "job", "--", "no-such-program-x"), 78, "no such command on PATH"),
        Row(("run", "job", "--", "/no/such/program"), 78, "no such file"),
        Row(("run", "job", "--timeout=-1s", "--", "true"), 78, "durations must be positive"),
        Row(("run", "job", "--timeout", "-1s", "--", "true"), 78, "durations must be positive"),
        Row(("run", "job", "--timeout", "0", "--", "true"), 78, "durations must be positive"),
        Row(("run", "job", "--limit", "0", "--", "true"), 78, "--limit: must be at least 1"),
        Row(("run", "job", "--limit", "2", "--handover", "--", "true"), 78, "drop one"),
        Row(("run", "job", "--health-port", "99999", "--", "true"), 78, "--health-port"),
        Row(("run", "job", "--metrics-port", "-5", "--", "true"), 78, "--metrics-port"),
        Row(("run", "", "--", "true"), 2, "a lease name cannot be blank"),
        Row(("run", "job", "--", "true"), 78, "TRIO_LEASE_TIMEOUT",
            env=(("TRIO_LEASE_TIMEOUT", "0"),)),
        Row(("run", "job", "--", "true"), 78, "TRIO_LEASE_NO_WAIT",
            env=(("TRIO_LEASE_NO_WAIT", "maybe"),)),
        Row(("status",), 78, "TRIO_LEASE_HEARTBEAT_TIMEOUT",
            env=(("TRIO_LEASE_HEARTBEAT_TIMEOUT", "-3s"),)),
        Row(("release", "job"), 2, "release needs --force"),
        Row(("handover", "job", "--timeout", "-1s"), 78, "durations must be positive"),
        Row(("manifests", "--namespace", "Bad_NS"), 78, "is not a valid namespace"),
        Row(("manifests", "--lease-kind", "foo/v1"), 78, "--lease-kind"),
        Row(("manifests", "--service-account", "Bad SA"), 78, "--service-account"),
        Row(("check", "--kubeconfig", "/no/such/kubeconfig"), 78, "/no/such/kubeconfig"),
        Row(("check", "--config", str(tmp / "good.toml")), 78, "--config needs --section"),
        Row(("check", "--heartbeat-timeout", "-1s"), 78, "durations must be positive"),
        Row(("emulate", "--port", "99999"), 78, "a port is a number from 0 to 65535"),
        Row(("emulate", "--namespace", "Bad_NS"), 78, "is not a valid namespace"),
        Row(("emulate", "--crd-establish-delay", "-1"), 78, "must be seconds, 0 or more"),
        Row(("emulate", "--apply", "/no/such.yml"), 78, "--apply '/no/such.yml': cannot apply"),
        Row(("emulate", "--host", "192.0.2.1"), 78, "cannot listen on 192.0.2.1"),
    ]


def _run_rows(cli: Cli, rows: list[Row], label: str) -> float:
    """Run ``rows`` in one process and check each; the wall time it took."""
    # As Cli.start does: a --config row runs without the fixture's TRIO_LEASE_SQLITE_PATH,
    # which trio-lease refuses beside --config.
    cases = [
        {
            "argv": [arg.format(tmp=cli.tmp) for arg in row.argv],
            "env": {"TRIO_LEASE_SQLITE_PATH": None, **dict(row.env)}
            if "--config" in row.argv
            else dict(row.env),
        }
        for row in rows
    ]
    cases_file, results_file = cli.tmp / f"{label}.json", cli.tmp / f"{label}.results.json"
    cases_file.write_text(json.dumps(cases))
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(MANY), str(cases_file), str(results_file)],
        env=cli.env, cwd=cli.tmp, check=True, timeout=600,
    )
    took = time.monotonic() - started
    results = json.loads(results_file.read_text())
    wrong = []
    for case, row, result in zip(cases, rows, results, strict=True):
        output = result["stdout"] + result["stderr"]
        if TRACEBACK in output:
            wrong.append(f"{case['argv']}: a traceback:\n{output}")
        elif result["code"] != row.code or row.phrase not in output:
            wrong.append(
                f"{case['argv']}: exit {result['code']} (expected {row.code}), expected "
                f"{row.phrase!r} in:\n{output}"
            )
    assert not wrong, f"{len(wrong)} of {len(rows)} rows wrong:\n" + "\n".join(wrong)
    return took


def _good_config(cli: Cli) -> None:
    (cli.tmp / "good.toml").write_text(
        f'[leases.cli]\nlease-class = "sqlite"\npath = "{cli.tmp / "section.sqlite3"}"\n'
    )


def test_wrong_inputs_on_sqlite_exit_with_their_code_and_message_and_no_traceback(
    cli: Cli,
) -> None:
    """Every lease command with wrong options on SQLite, and the store-free commands (manifests,
    check, emulate, the top level): each exits with its code and message, none with a
    traceback, and nothing is created."""
    _good_config(cli)
    rows = _table([], SQLITE) + _store_free_rows(cli.tmp)
    assert len(rows) >= 100
    took = _run_rows(cli, rows, "sqlite")
    print(f"{len(rows)} rows on SQLite in {took:.1f} s")
    assert not cli.db.exists()
    assert not (cli.tmp / "x.db").exists()


def test_wrong_inputs_on_the_emulator_exit_with_their_code_and_message_and_no_traceback(
    cli: Cli,
) -> None:
    """Every lease command with wrong options against `trio-lease emulate`: each exits with its
    code and message, none with a traceback, neither does the emulator."""
    _good_config(cli)
    emulator: Emulator = start_emulator(cli)
    store = ["--kubeconfig", str(emulator.kubeconfig)]
    rows = _table(store, [(( *store, *options), code, phrase) for options, code, phrase in KUBE])
    rows += [
        Row(("check", *store, "--namespace", "nosuchns"), 1, "namespace 'nosuchns' does not exist"),
        Row(("check", *store, "--lease-kind", "akka.io/v1", "--holder-deadline", "10s"), 1,
            "lower --holder-deadline"),
        Row(("handover", "nosuchlease", *store, *ONE_SHOT, "--timeout", "3"), 1,
            "'nosuchlease' has no record"),
    ]
    took = _run_rows(cli, rows, "emulator")
    print(f"{len(rows)} rows on the emulator in {took:.1f} s")
    assert emulator.lease("nosuchlease") is None
    assert TRACEBACK not in emulator.process.stderr()


def test_wrong_inputs_on_etcd_exit_with_their_code_and_message_and_no_traceback(
    cli: Cli, etcd_server: EtcdCluster
) -> None:
    """Every lease command with wrong options against a real etcd: each exits with its code and
    message, none with a traceback."""
    prefix = f"wrong-{secrets.token_hex(4)}/"
    store = ["--endpoints", ",".join(etcd_server.endpoints), "--prefix", prefix]
    own = [
        ((*options, *(["--prefix", prefix] if "--endpoints" in options else store)), code, phrase)
        for options, code, phrase in ETCD
    ]
    rows = _table(store, own)
    rows.append(
        Row(("handover", "nosuchlease", *store, *ONE_SHOT, "--timeout", "3"), 1,
            "'nosuchlease' has no record")
    )
    took = _run_rows(cli, rows, "etcd")
    print(f"{len(rows)} rows on etcd in {took:.1f} s")


def test_the_table_covers_every_command_of_docs_cli_md(tmp_path: Path) -> None:
    """The wrong-inputs table has rows for every command the synopsis of docs/cli.md names."""
    synopsis = (Path(__file__).parents[2] / "docs" / "cli.md").read_text().split("```")[1]
    commands = {line.split()[1] for line in synopsis.splitlines() if line.startswith("trio-lease ")}
    rows = _table([], SQLITE) + _store_free_rows(tmp_path)
    covered = {row.argv[0] for row in rows if row.argv}
    assert commands <= covered, commands - covered
