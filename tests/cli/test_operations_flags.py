"""`trio-lease run --health-port / --metrics-port` as real processes: probes and scrapes while
the command runs, one server when both name the same port, a port in use refused before anything.

Ports are 0 (a free one); the process says where it listens on stderr, and the tests read it
there. Requests go to 127.0.0.1 only, with httpx.
"""

from __future__ import annotations

import re
import signal
import socket
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from trio_lease import LeaseConfigError
from trio_lease._cli import _serving

from .conftest import FAST, PATIENCE, Cli, Running, wait_for_event

SERVING = re.compile(r"trio-lease: serving (?P<paths>[^\n]*) on (?P<url>http://[^\s]+)")


def served(running: Running, count: int) -> dict[str, str]:
    """The URL of each served path, from the ``count`` "serving" lines on stderr."""
    deadline = time.monotonic() + PATIENCE
    while len(found := SERVING.findall(running.stderr())) < count:
        assert running.process.poll() is None, running.stderr()
        assert time.monotonic() < deadline, f"no serving line; stderr:\n{running.stderr()}"
        time.sleep(0.02)
    return {path: url for paths, url in found for path in paths.split(", ")}


def metric(text: str, sample_name: str, **labels: str) -> float | None:
    """The value of a sample of a scrape (None if absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = all(sample.labels.get(key) == want for key, want in labels.items())
            if sample.name == sample_name and wanted:
                value: float = sample.value
                return value
    return None


def until_status(url: str, status: int) -> httpx.Response:
    """GET ``url`` until it answers ``status`` (within PATIENCE)."""
    deadline = time.monotonic() + PATIENCE
    while True:
        response = httpx.get(url)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_health_and_metrics_on_separate_ports_while_the_command_runs(cli: Cli, loop: str) -> None:
    """--health-port 0 --metrics-port P: two servers; /healthz 200, /readyz?leader=1 200 while
    the command runs, /metrics with trio_lease_held 1 and the process collector; both close
    when the run ends (on both event loops of the CLI)."""
    metrics_port = _free_port()
    log, running = cli.run_serving(loop, str(metrics_port))
    urls = served(running, 2)
    assert urls["/metrics"] == f"http://127.0.0.1:{metrics_port}"
    assert urls["/healthz"] == urls["/readyz"] != urls["/metrics"]
    wait_for_event(log, "start", running)
    assert httpx.get(urls["/healthz"] + "/healthz").status_code == 200
    assert until_status(urls["/readyz"] + "/readyz?leader=1&name=job", 200).status_code == 200
    scrape = httpx.get(urls["/metrics"] + "/metrics").text
    assert metric(scrape, "trio_lease_held", name="job") == 1
    assert metric(scrape, "trio_lease_acquisitions_total", name="job") == 1
    assert metric(scrape, "process_cpu_seconds_total") is not None
    assert httpx.get(urls["/metrics"] + "/healthz").status_code == 404  # metrics only there
    running.process.send_signal(signal.SIGTERM)
    assert running.wait() == 128 + signal.SIGTERM
    for url in {urls["/healthz"], urls["/metrics"]}:
        try:
            httpx.get(url + "/readyz")
        except httpx.ConnectError:
            continue
        raise AssertionError(f"{url} still answers after the run ended")


def test_the_same_port_for_both_is_one_server(cli: Cli) -> None:
    """--health-port and --metrics-port naming one address (both 0 here) make one server
    answering /healthz, /readyz and /metrics."""
    log, child = cli.child("child")
    running = cli.start(
        "run", "job", *FAST, "--health-port", "0", "--metrics-port", "0", "--", *child
    )
    urls = served(running, 1)
    assert urls["/healthz"] == urls["/readyz"] == urls["/metrics"]
    wait_for_event(log, "start", running)
    assert until_status(urls["/readyz"] + "/readyz?leader=1", 200).status_code == 200
    scrape = httpx.get(urls["/metrics"] + "/metrics").text
    assert metric(scrape, "trio_lease_held", name="job") == 1
    assert len(SERVING.findall(running.stderr())) == 1


def test_a_waiting_run_is_healthy_but_not_leader_ready(cli: Cli) -> None:
    """A run waiting for a held lease: /healthz 200, /readyz 200, /readyz?leader=1 503; the
    port comes from TRIO_LEASE_HEALTH_PORT."""
    holder_log, holder_child = cli.child("holder")
    holder = cli.start("run", "job", "--owner", "a", *FAST, "--", *holder_child)
    wait_for_event(holder_log, "start", holder)
    _, child = cli.child("waiter")
    waiter = cli.start(
        "run",
        "job",
        "--owner",
        "b",
        *FAST,
        "--",
        *child,
        env=cli.env | {"TRIO_LEASE_HEALTH_PORT": "0"},
    )
    waiter.wait_for_stderr("waiting for 'job'")
    base = served(waiter, 1)["/healthz"]
    assert httpx.get(base + "/healthz").status_code == 200
    assert httpx.get(base + "/readyz").status_code == 200
    not_leader = httpx.get(base + "/readyz?leader=1")
    assert not_leader.status_code == 503 and "not holding" in not_leader.text


def test_a_port_in_use_is_a_configuration_error_before_the_command_runs(cli: Cli) -> None:
    """--health-port on a port already listened on: exit 78, a message naming the option and
    the port, and the command never starts."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        log, child = cli.child("child")
        result = cli.run("run", "job", *FAST, "--health-port", str(port), "--", *child)
    assert result.returncode == 78
    assert f"--health-port {port}: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert not log.exists()


def test_a_bad_port_is_a_configuration_error(cli: Cli) -> None:
    """--metrics-port 70000 or a word: one line with the accepted range, exit 78."""
    _, child = cli.child("child")
    for bad in ("70000", "http"):
        result = cli.run("run", "job", "--metrics-port", bad, "--", *child)
        assert result.returncode == 78
        assert len(result.stderr.splitlines()) == 1
        assert "a port is a number from 0 to 65535" in result.stderr


def test_run_help_explains_each_operations_option(cli: Cli) -> None:
    """`run --help` lists --health-port, --health-host, --metrics-port, --metrics-host with help."""
    result = cli.run("run", "--help")
    assert result.returncode == 0
    for option, words in (
        ("--health-port", "/readyz"),
        ("--health-host", "127.0.0.1"),
        ("--metrics-port", "trio_lease[prometheus]"),
        ("--metrics-host", "127.0.0.1"),
    ):
        assert option in result.stdout and words in result.stdout


def test_metrics_without_prometheus_client_is_a_configuration_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--metrics-port without prometheus_client: LeaseConfigError (exit 78) saying
    `pip install 'trio_lease[prometheus]'`, quoted so that zsh does not expand the brackets."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    with pytest.raises(LeaseConfigError, match=r"pip install 'trio_lease\[prometheus\]'"):
        _serving._registry()
