"""The commands against `trio-lease emulate` (a real HTTPS server) through the Kubernetes
options: every command reaches it, status lists the namespace, and errors say what failed."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import trustme

from ._stores import NAMESPACE, Emulator, closed_port, start_emulator
from .conftest import FAST, ONE_SHOT, PATIENCE, Cli, no_record, wait_for_event

KINDS = {"coordination.k8s.io/v1": "coordination.k8s.io", "akka.io/v1": "akka.io"}


@pytest.fixture
def emulator(cli: Cli) -> Emulator:
    """`trio-lease emulate` serving on a loopback port, killed at teardown with the others."""
    return start_emulator(cli)


def _kube(emulator: Emulator, kind: str = "coordination.k8s.io/v1") -> list[str]:
    kubeconfig = str(emulator.kubeconfig)
    return ["--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--lease-kind", kind]


#: akka.io/v1 leases expire by Akka's wall-clock rule: the holder's deadline (2L/3) must be at
#: most L - 3R, so L = 6 s there (and R = 0.5 s, T = 0.25 s, T_stop = 0.5 s as in FAST).
TIMINGS = {"coordination.k8s.io/v1": FAST, "akka.io/v1": [*FAST, "--heartbeat-timeout", "6s"]}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_command_reaches_kubernetes_through_its_options(
    cli: Cli, emulator: Emulator, kind: str
) -> None:
    """run, status, handover and release take --kubeconfig/--namespace/--lease-kind, which
    select the Kubernetes backend: the lease is an object of that kind in that namespace."""
    log, child = cli.child("holder")
    options = [*_kube(emulator, kind), *TIMINGS[kind]]
    holder = cli.start("run", "job", "--owner", "alpha", *options, "--", *child)
    identity = wait_for_event(log, "start", holder)["owner"]
    obj = emulator.lease("job", KINDS[kind])
    assert obj is not None
    assert identity in json.dumps(obj)

    [row] = cli.status("job", *_kube(emulator, kind))
    assert (row["holder"], row["fencing_token"]) == (identity, 1)
    listed = cli.run("status", *_kube(emulator, kind))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:3] == ["job", identity, "1"]

    released = cli.run("release", "job", "--force", *_kube(emulator, kind))
    assert released.returncode == 0, released.stderr
    assert holder.wait() == 125

    log2, child2 = cli.child("second")
    second = cli.start("run", "job", *options, "--", *child2)
    wait_for_event(log2, "start", second)
    handover = cli.run("handover", "job", "--timeout", "20", *_kube(emulator, kind), *ONE_SHOT)
    assert handover.returncode == 0, handover.stderr
    assert second.wait() == 0
    assert not cli.db.exists()  # never the SQLite default


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_kubernetes_options_come_from_the_environment(
    loop: str, cli: Cli, emulator: Emulator
) -> None:
    """TRIO_LEASE_KUBECONFIG and TRIO_LEASE_NAMESPACE alone select the Kubernetes backend, on
    either event loop."""
    env = cli.env | {
        "TRIO_LEASE_ANYIO_BACKEND": loop,
        "TRIO_LEASE_KUBECONFIG": str(emulator.kubeconfig),
        "TRIO_LEASE_NAMESPACE": NAMESPACE,
    }
    log, child = cli.child("once", sleep=0)
    assert cli.run("run", "env-job", *FAST, "--", *child, env=env).returncode == 0
    assert wait_for_event(log, "start")["token"] == 1
    assert emulator.lease("env-job") is not None
    assert [row["name"] for row in cli.status(env=env)] == ["env-job"]


def test_status_lists_the_namespace_with_foreign_leases_marked(
    cli: Cli, emulator: Emulator
) -> None:
    """status with no names lists every Lease of the namespace: ours, and another program's
    marked foreign, each with holder, age, time left and token."""
    emulator.create_foreign_lease("kube-scheduler", "scheduler-1_abc")
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *_kube(emulator), *FAST, "--", *child).returncode == 0
    rows = {row["name"]: row for row in cli.status(*_kube(emulator))}
    assert set(rows) == {"job", "kube-scheduler"}
    assert rows["job"]["foreign"] is False
    foreign = rows["kube-scheduler"]
    assert foreign["foreign"] is True
    assert (foreign["holder"], foreign["fencing_token"]) == ("scheduler-1_abc", 3)
    assert foreign["expired"] is True
    table = cli.run("status", *_kube(emulator))
    [line] = [line for line in table.stdout.splitlines() if line.startswith("kube-scheduler")]
    assert line.split()[:3] == ["kube-scheduler", "scheduler-1_abc", "3"]
    assert "expired" in line and "(foreign: not written by trio-lease)" in line


def test_status_watch_prints_each_change_until_interrupted(cli: Cli, emulator: Emulator) -> None:
    """status --watch --json prints the lease, then a line when it is taken and released,
    and exits 0 on SIGINT."""
    watcher = cli.start("status", "--watch", "--json", "job", *_kube(emulator))
    _wait_for_lines(watcher.stdout, 1)
    assert json.loads(watcher.stdout().splitlines()[0]) == no_record("job")
    log, child = cli.child("holder", sleep=1)
    assert cli.run("run", "job", *_kube(emulator), *FAST, "--", *child).returncode == 0
    identity = wait_for_event(log, "start")["owner"]
    _wait_for_lines(watcher.stdout, 3)
    held, freed = (json.loads(line) for line in watcher.stdout().splitlines()[1:3])
    assert (held["holder"], freed["holder"]) == (identity, None)
    os.kill(watcher.pid, signal.SIGINT)
    assert watcher.wait() == 0


def test_status_watch_keeps_watching_while_the_server_is_away(cli: Cli) -> None:
    """status --watch says once that the server cannot be reached and goes on; once a server
    answers on that address again, it prints the leases there as before."""
    port = str(closed_port())
    first = start_emulator(cli, "--plain-http", "--port", port)
    watcher = cli.start("status", "--watch", "--kubeconfig", str(first.kubeconfig))
    _wait_for_lines(watcher.stdout, 1)  # the header: nothing in the namespace yet
    os.kill(first.process.pid, signal.SIGTERM)
    assert first.process.wait() == 0
    watcher.wait_for_stderr(f"connection refused by 127.0.0.1:{port}; nothing was sent")
    watcher.wait_for_stderr("; still watching")
    again = start_emulator(cli, "--plain-http", "--port", port, token=first.token)
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *_kube(again), *FAST, "--", *child).returncode == 0
    deadline = time.monotonic() + PATIENCE
    while ["job", "(free)"] not in [line.split()[:2] for line in watcher.stdout().splitlines()]:
        assert time.monotonic() < deadline, watcher.stdout()
        time.sleep(0.05)
    assert watcher.stderr().count("still watching") == 1
    os.kill(watcher.pid, signal.SIGTERM)
    assert watcher.wait() == 0


def _wait_for_lines(read: object, count: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while len(read().splitlines()) < count:  # type: ignore[operator]
        assert time.monotonic() < deadline, read()  # type: ignore[operator]
        time.sleep(0.05)


def test_a_refused_connection_names_the_host_and_port(cli: Cli, emulator: Emulator) -> None:
    """A kubeconfig pointing at a closed port: status exits 69 naming 127.0.0.1:PORT as a
    refused connection whose request was not sent (not an unknown outcome); run --timeout
    ends with the same words; check names the SelfSubjectAccessReview it sent."""
    port = closed_port()
    closed = emulator.kubeconfig_with(cli.tmp / "closed", server=f"https://127.0.0.1:{port}")
    refused = f"connection refused by 127.0.0.1:{port}; nothing was sent"
    status = cli.run("status", "--kubeconfig", str(closed))
    assert status.returncode == 69
    assert refused in status.stderr and "outcome is unknown" not in status.stderr
    _, child = cli.child("never")
    run = cli.run("run", "job", "--kubeconfig", str(closed), "--timeout", "2", "--", *child)
    assert run.returncode == 69
    assert refused in run.stderr.splitlines()[-1]
    assert "outcome is unknown" not in run.stderr
    check = cli.run("check", "--kubeconfig", str(closed))
    assert check.returncode == 1
    assert f"create of a SelfSubjectAccessReview (asking which verbs this identity may use on " \
        f"leases.coordination.k8s.io in namespace '{NAMESPACE}')" in check.stdout
    assert refused in check.stdout and "'selfsubjectaccessreview'" not in check.stdout
    for shown in (status.stderr, run.stderr, check.stdout + check.stderr):
        assert emulator.token not in shown


def test_an_unknown_host_name_is_named(cli: Cli, emulator: Emulator) -> None:
    """A server whose host name does not resolve: exit 69 naming the host."""
    unknown = emulator.kubeconfig_with(cli.tmp / "dns", server="https://no-such-host.invalid:6443")
    result = cli.run("status", "job", "--kubeconfig", str(unknown))
    assert result.returncode == 69
    assert "cannot resolve the host name 'no-such-host.invalid'" in result.stderr


def test_a_certificate_that_does_not_verify_says_what_failed(
    cli: Cli, emulator: Emulator
) -> None:
    """A kubeconfig trusting another CA: exit 78 naming the server and OpenSSL's reason."""
    other_ca = trustme.CA().cert_pem.bytes()
    untrusted = emulator.kubeconfig_with(cli.tmp / "other-ca", ca=other_ca)
    result = cli.run("status", "job", "--kubeconfig", str(untrusted))
    assert result.returncode == 78
    assert f"could not verify the TLS certificate of the API server {emulator.url}" in result.stderr
    assert "(self-signed certificate in certificate chain)" in result.stderr or (
        "unable to get local issuer certificate" in result.stderr
    )
    assert emulator.token not in result.stderr


def test_kubeconfig_errors_name_the_option_or_variable(cli: Cli, emulator: Emulator) -> None:
    """A missing kubeconfig is blamed on --kubeconfig or KUBECONFIG, whichever named it."""
    missing = str(cli.tmp / "nope")
    flag = cli.run("status", "--kubeconfig", missing)
    assert (flag.returncode, flag.stderr) == (
        78,
        f"trio-lease: --kubeconfig: no kubeconfig file found (looked at {missing})\n",
    )
    env = cli.env | {"KUBECONFIG": missing}
    variable = cli.run("status", "--backend", "kubernetes", env=env)
    assert variable.returncode == 78
    assert f"KUBECONFIG: no kubeconfig file found (looked at {missing})" in variable.stderr
    assert "--backend" not in variable.stderr
    check = cli.run("check", "--kubeconfig", missing)
    assert (check.returncode, check.stderr) == (
        78,
        f"trio-lease: --kubeconfig: no kubeconfig file found (looked at {missing})\n",
    )
