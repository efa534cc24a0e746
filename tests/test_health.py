"""trio_lease.health: /healthz, /readyz and /metrics over real sockets.

HealthObserver's judgement of real leases runs on virtual time (memory store, faults from
FaultyBackend). The stuck heartbeat is made with a controllable clock given to the observer: the
lease's own heartbeat cannot be wedged from outside without patching the core. The HTTP tests
use real sockets on both loops (``anyio_backend`` parametrised to real time) and httpx, or a raw
connection where a client misbehaves on purpose.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from trio_lease import Lease, LeaseConfigError, LeaseInfo, LeaseLost
from trio_lease._serve import (
    ACCEPT_BACKOFF,
    ACCEPT_BACKOFF_MAX,
    MAX_CONNECTIONS,
    MAX_REQUEST_BYTES,
    TIMEOUT,
    ProbeServer,
)
from trio_lease.backends.memory import MemoryBackend
from trio_lease.health import HealthObserver, HealthServer, serve_health
from trio_lease.metrics import PrometheusMetrics
from trio_lease.testing import FaultyBackend

from .conftest import REAL_TIME_SETTINGS, SETTINGS

pytestmark = pytest.mark.anyio

#: Real time on both loops, for the tests on real sockets.
real_time = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])

JOB = LeaseInfo(name="job", owner="me", identity="me@1")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the observer, on virtual time --------------------------------------------------------------


async def test_a_renewing_heartbeat_is_never_stuck_even_with_no_margin() -> None:
    """A lease renewing normally for 10 heartbeat timeouts: stuck() stays empty at every
    check, with margin 0 (the validity told by renewed is the holder's real deadline)."""
    health = HealthObserver(margin=0.0, heartbeat_timeout=SETTINGS.heartbeat_timeout)
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[health])
    async with lease.held():
        for _ in range(int(10 * SETTINGS.heartbeat_timeout / 0.25)):
            assert health.stuck() == []
            assert health.holding("job")
            await anyio.sleep(0.25)
    assert not health.holding()


async def test_a_failing_store_is_a_loss_not_a_stuck_heartbeat() -> None:
    """Renewals failing until the deadline: the heartbeat tells the loss, so health stays ok
    throughout and the lease is no longer held."""
    health = HealthObserver(margin=0.0)
    backend = FaultyBackend(MemoryBackend())
    lease = Lease("job", "me", backend, SETTINGS, observers=[health])
    with pytest.raises(LeaseLost):
        async with lease.held():
            await anyio.sleep(SETTINGS.heartbeat_interval + 0.1)  # one renewal told
            backend.error_rate = 1.0
            while True:
                assert health.stuck() == []
                await anyio.sleep(0.1)
    assert health.stuck() == [] and not health.holding()


def test_a_heartbeat_silent_past_its_validity_and_margin_is_stuck() -> None:
    """After renewed(valid_for=v), stuck only once v + margin have passed with no renewed,
    lost or released; a later renewed clears it."""
    clock = Clock()
    health = HealthObserver(margin=2.0, clock=clock)
    health.acquired(JOB, fencing_token=7, waited=0.0)
    health.renewed(JOB, fencing_token=7, latency=0.01, valid_for=10.0)
    clock.now += 11.9
    assert health.stuck() == []
    clock.now += 0.1
    (problem,) = health.stuck()
    assert "'job'" in problem and "fencing token 7" in problem and "restart" in problem
    health.renewed(JOB, fencing_token=7, latency=0.01, valid_for=10.0)
    assert health.stuck() == []


def test_a_lost_or_released_grant_is_forgotten() -> None:
    """lost or released of the held token ends the hold; a stale token's does not."""
    clock = Clock()
    health = HealthObserver(clock=clock)
    health.renewed(JOB, fencing_token=7, latency=0.0, valid_for=1.0)
    health.lost(JOB, fencing_token=6, cause="taken over by 'x'")  # an older grant's news
    assert health.holding("job")
    health.lost(JOB, fencing_token=7, cause="taken over by 'x'")
    assert not health.holding()
    health.renewed(JOB, fencing_token=8, latency=0.0, valid_for=1.0)
    health.released(JOB, fencing_token=8, held=3.0, written=True)
    clock.now += 100
    assert not health.holding() and health.stuck() == []


def test_the_first_validity_after_acquiring_is_bounded_by_the_heartbeat_timeout() -> None:
    """With heartbeat_timeout, a grant never renewed after acquired is stuck after L + margin;
    without it, it is judged from its first renewal on."""
    clock = Clock()
    bounded = HealthObserver(margin=1.0, heartbeat_timeout=15.0, clock=clock)
    unbounded = HealthObserver(margin=1.0, clock=clock)
    for health in (bounded, unbounded):
        health.acquired(JOB, fencing_token=1, waited=0.0)
    clock.now += 15.9
    assert bounded.stuck() == []
    clock.now += 0.1
    assert len(bounded.stuck()) == 1
    assert unbounded.stuck() == [] and unbounded.holding("job")


def test_a_negative_margin_is_refused() -> None:
    """margin below 0 raises ValueError naming it."""
    with pytest.raises(ValueError, match="margin"):
        HealthObserver(margin=-1)


def test_a_server_with_nothing_to_serve_is_refused() -> None:
    """HealthServer() with neither health nor metrics raises ValueError."""
    with pytest.raises(ValueError, match="HealthObserver"):
        HealthServer()


# -- over HTTP, real sockets --------------------------------------------------------------------


@real_time
async def test_healthz_answers_503_naming_the_stuck_lease_then_200_again() -> None:
    """/healthz: 200 "ok" with nothing held, 503 naming the lease while its heartbeat is
    stuck (controlled clock), 200 once a renewal is told."""
    clock = Clock()
    health = HealthObserver(margin=1.0, clock=clock)
    async with HealthServer(health) as server, httpx.AsyncClient() as client:
        url = f"http://127.0.0.1:{server.port}/healthz"
        first = await client.get(url)
        assert (first.status_code, first.text) == (200, "ok\n")
        health.renewed(JOB, fencing_token=3, latency=0.0, valid_for=5.0)
        assert (await client.get(url)).status_code == 200
        clock.now += 6.0
        stuck = await client.get(url)
        assert stuck.status_code == 503
        assert "lease 'job'" in stuck.text and "stuck" in stuck.text
        health.renewed(JOB, fencing_token=3, latency=0.0, valid_for=5.0)
        assert (await client.get(url)).status_code == 200


@real_time
async def test_readyz_with_leader_answers_200_only_while_holding() -> None:
    """/readyz is 200 while serving; /readyz?leader=1 (and &name=job) is 200 only while a real
    lease is held, 503 before and after; &name=other stays 503."""
    health = HealthObserver()
    lease = Lease("job", "me", MemoryBackend(), REAL_TIME_SETTINGS, observers=[health])
    async with HealthServer(health) as server, httpx.AsyncClient() as client:
        base = f"http://127.0.0.1:{server.port}"

        async def status(path: str) -> int:
            return (await client.get(base + path)).status_code

        assert await status("/readyz") == 200
        assert await status("/readyz?leader=1") == 503
        async with lease.held():
            assert await status("/readyz?leader=1") == 200
            assert await status("/readyz?leader=1&name=job") == 200
            assert await status("/readyz?leader=1&name=other") == 503
            assert await status("/readyz") == 200
        assert await status("/readyz?leader=1") == 503
        assert await status("/readyz") == 200


@real_time
async def test_one_server_serves_health_and_metrics() -> None:
    """HealthServer(health, metrics=registry): /healthz, /readyz and a parseable /metrics on
    one port; other paths 404, POST 405, HEAD 200 without a body."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    async with (
        HealthServer(HealthObserver(), metrics=registry) as server,
        httpx.AsyncClient() as client,
    ):
        base = f"http://127.0.0.1:{server.port}"
        assert (await client.get(f"{base}/healthz")).status_code == 200
        assert (await client.get(f"{base}/readyz")).status_code == 200
        scraped = await client.get(f"{base}/metrics")
        names = {family.name for family in text_string_to_metric_families(scraped.text)}
        assert "trio_lease_held" in names
        assert (await client.get(f"{base}/nothing")).status_code == 404
        assert (await client.post(f"{base}/healthz", content=b"x")).status_code == 405
        head = await client.head(f"{base}/healthz")
        assert (head.status_code, head.content) == (200, b"")
        assert head.headers["connection"] == "close"


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        received = b""
        with anyio.fail_after(10):
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return received


@real_time
async def test_an_oversized_request_is_refused_and_the_connection_closed() -> None:
    """A request head over MAX_REQUEST_BYTES gets 431 and a closed connection; a body over it,
    413; garbage, 400. The server keeps answering afterwards."""
    async with HealthServer(HealthObserver()) as server:
        huge = b"X-Big: " + b"a" * (MAX_REQUEST_BYTES + 1) + b"\r\n"
        reply = await raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + huge)
        assert reply.startswith(b"HTTP/1.1 431 ")
        body = b"a" * (MAX_REQUEST_BYTES + 1)
        head = f"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        assert (await raw_exchange(server.port, head.encode() + body)).startswith(b"HTTP/1.1 413 ")
        assert (await raw_exchange(server.port, b"NOT HTTP\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        async with httpx.AsyncClient() as client:
            ok = await client.get(f"http://127.0.0.1:{server.port}/healthz")
            assert ok.status_code == 200


@real_time
async def test_a_silent_connection_does_not_block_other_requests() -> None:
    """A client that connects and sends nothing does not delay a probe on another connection."""
    async with HealthServer(HealthObserver()) as server, httpx.AsyncClient() as client:
        silent = await anyio.connect_tcp("127.0.0.1", server.port)
        async with silent:
            with anyio.fail_after(5):
                reply = await client.get(f"http://127.0.0.1:{server.port}/healthz")
            assert reply.status_code == 200


@real_time
async def test_serve_health_reports_its_port_and_stops_when_cancelled() -> None:
    """tg.start(serve_health, ...) returns the bound port; cancelling closes the listener."""
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_health, HealthObserver())
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
        tg.cancel_scope.cancel()
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", port)


def test_the_operations_guide_snippet_prints_what_its_comments_say(tmp_path: Path) -> None:
    """docs/operations.md's Python snippet runs as written: 503 before holding, then 200, 200
    and the held gauge at 1 in the scrape."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    [snippet] = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    expected = re.findall(r"# (\S+)$", snippet, flags=re.MULTILINE)
    assert result.stdout.split() == expected == ["503", "200", "200", "True"]


# -- the probe server's bounds and its answers to what it does not serve ------------------------


async def raw_head(port: int, data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """Send ``data``, read the whole reply: (status line, headers by lowercase name, body)."""
    reply = await raw_exchange(port, data)
    head, _, body = reply.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {name.lower(): value for name, _, value in (li.partition(b": ") for li in lines)}
    return status, headers, body


@real_time
async def test_every_answer_has_a_reason_phrase_and_nosniff() -> None:
    """200, 404 and 503 answers: a status line with its reason phrase (``200 OK``), plain text,
    ``X-Content-Type-Options: nosniff``, ``Connection: close``."""
    async with HealthServer(HealthObserver()) as server:
        for target, line in (
            (b"/healthz", b"HTTP/1.1 200 OK"),
            (b"/nothing", b"HTTP/1.1 404 Not Found"),
            (b"/readyz?leader=1", b"HTTP/1.1 503 Service Unavailable"),
        ):
            request = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            status, headers, _ = await raw_head(server.port, request)
            assert status == line
            assert headers[b"x-content-type-options"] == b"nosniff"
            assert headers[b"content-type"].startswith(b"text/plain")
            assert headers[b"connection"] == b"close"


@real_time
async def test_refusals_say_what_they_refuse() -> None:
    """405 names the allowed methods in Allow; 413 (a GET announcing a body, answered before
    the body is sent), 431 and 505 have their own reason and text, not "bad request"; absolute-
    form and asterisk targets get 400."""
    async with HealthServer(HealthObserver()) as server:
        status, headers, body = await raw_head(
            server.port, b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        assert (status, headers[b"allow"]) == (b"HTTP/1.1 405 Method Not Allowed", b"GET, HEAD")
        with anyio.fail_after(5):  # the 10 announced bytes never come: no wait for them
            status, _, body = await raw_head(
                server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
            )
        assert status == b"HTTP/1.1 413 Content Too Large" and b"no body" in body
        huge = b"X-Big: " + b"a" * MAX_REQUEST_BYTES + b"\r\n"
        status, _, body = await raw_head(server.port, b"GET / HTTP/1.1\r\n" + huge)
        assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
        assert f"at most {MAX_REQUEST_BYTES} bytes".encode() in body
        status, _, body = await raw_head(server.port, b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n")
        assert status == b"HTTP/1.1 505 HTTP Version Not Supported" and b"HTTP/1.1" in body
        for target in (b"http://x/healthz", b"*"):
            request = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            status, _, body = await raw_head(server.port, request)
            assert status == b"HTTP/1.1 400 Bad Request" and b"path" in body
        for reply in (b"bad request", b"bad request\n"):
            assert body != reply


@real_time
async def test_a_requested_lease_name_is_repeated_as_bounded_plain_text() -> None:
    """/readyz?leader=1&name=... answers 503 naming the lease with control and non-ASCII
    characters as ``?``, no repr() quoting, and at most 64 characters of it."""
    async with HealthServer(HealthObserver()) as server, httpx.AsyncClient() as client:
        base = f"http://127.0.0.1:{server.port}/readyz?leader=1&name="
        odd = await client.get(base + "a%0D%0AX-Evil:%201%27%C3%A9")
        assert odd.status_code == 503
        assert odd.text == "not holding the lease named a??X-Evil: 1'?\n"
        long = await client.get(base + "n" * 500)
        assert long.text == f"not holding the lease named {'n' * 64}...\n"


@real_time
async def test_a_silent_connection_is_closed_at_its_deadline_and_counted() -> None:
    """A connection that sends nothing is closed TIMEOUT after accept (the wait for its close
    is bounded generously, at TIMEOUT + 8 s, against a loaded machine) and counted as a
    timeout."""
    async with HealthServer(HealthObserver()) as server:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as silent:
            started = anyio.current_time()
            with anyio.fail_after(TIMEOUT + 8), pytest.raises(anyio.EndOfStream):
                await silent.receive()
            assert anyio.current_time() - started >= TIMEOUT * 0.9
        with anyio.fail_after(5):
            while server.stats.open:
                await anyio.sleep(0.01)
        assert (server.stats.timeouts, server.stats.shed) == (1, 0)


@real_time
async def test_a_full_server_sheds_its_oldest_waiting_connection_for_a_probe() -> None:
    """MAX_CONNECTIONS idle connections fill the server; a probe still gets its 200, the
    oldest idle connection is the one closed, and each shed connection is counted."""
    async with HealthServer(HealthObserver()) as server, contextlib.AsyncExitStack() as stack:
        idle = [
            await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", server.port))
            for _ in range(MAX_CONNECTIONS)
        ]
        with anyio.fail_after(5):
            while server.stats.open < MAX_CONNECTIONS:
                await anyio.sleep(0.01)
        async with httpx.AsyncClient() as client:
            with anyio.fail_after(5):
                reply = await client.get(f"http://127.0.0.1:{server.port}/healthz")
        assert reply.status_code == 200
        assert server.stats.shed == 1
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await idle[0].receive()


@real_time
async def test_metrics_count_what_the_probe_server_refused() -> None:
    """With a registry, /metrics also has the probe server's own counters and gauges: a
    timed-out connection shows in trio_lease_probe_timeouts_total."""
    registry = CollectorRegistry()
    async with HealthServer(metrics=registry) as server, httpx.AsyncClient() as client:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as silent:
            with anyio.fail_after(TIMEOUT + 8), pytest.raises(anyio.EndOfStream):
                await silent.receive()
        scraped = (await client.get(f"http://127.0.0.1:{server.port}/metrics")).text
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }
    assert samples["trio_lease_probe_timeouts_total"] == 1
    assert samples["trio_lease_probe_connections_shed_total"] == 0
    assert samples["trio_lease_probe_accept_errors_total"] == 0
    assert samples["trio_lease_probe_connections_max"] == MAX_CONNECTIONS
    assert samples["trio_lease_probe_connections"] == 1  # the scrape itself


class FailingListener(anyio.abc.Listener[anyio.abc.ByteStream]):
    """A listener whose accept() fails like a process out of file descriptors, then waits."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[float] = []

    async def accept(self) -> anyio.abc.ByteStream:
        self.calls.append(anyio.current_time())
        if len(self.calls) <= self.failures:
            error = OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            if len(self.calls) % 2:  # as trio's arrive through anyio
                raise anyio.BrokenResourceError from error
            raise error
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def serve(self, handler: Any, task_group: Any = None) -> None:
        raise AssertionError("the probe server accepts by itself")

    async def aclose(self) -> None:
        pass

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {}


async def test_accept_errors_back_off_doubling_are_counted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Twelve EMFILE accept errors in a row (plain and wrapped in BrokenResourceError): the
    pauses double from ACCEPT_BACKOFF to ACCEPT_BACKOFF_MAX, all are counted, one WARNING
    names EMFILE (rate-limited), the cap drops, and the caller's task never sees an error."""
    listener = FailingListener(12)
    server = ProbeServer(lambda target: (200, "text/plain", b"ok\n"))
    with caplog.at_level(logging.WARNING, logger="trio_lease"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, listener)
            await anyio.sleep(30)
            tg.cancel_scope.cancel()
    pauses = [round(b - a, 3) for a, b in itertools.pairwise(listener.calls)]
    expected = [min(ACCEPT_BACKOFF * 2**n, ACCEPT_BACKOFF_MAX) for n in range(12)]
    assert pauses == pytest.approx(expected, abs=0.002)
    assert server.stats.accept_errors == 12
    assert server.stats.capacity < MAX_CONNECTIONS
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "EMFILE" in warnings[0], warnings


@real_time
async def test_an_error_in_the_block_leaves_the_server_as_itself() -> None:
    """An exception raised in the HealthServer block comes out as itself, not in a group, and
    the port is closed."""
    with pytest.raises(LookupError, match="from the block") as caught:
        async with HealthServer(HealthObserver()) as server:
            raise LookupError("from the block")
    assert type(caught.value) is LookupError
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", server.port)


@real_time
async def test_a_cancelled_block_leaves_the_server_promptly() -> None:
    """A cancel scope around the HealthServer block, expiring while the block waits: the scope
    catches its cancellation (nothing else comes out) well within its 10 s bound, and the port
    is closed."""
    with anyio.move_on_after(10) as outer:
        with anyio.move_on_after(0.2) as inner:
            async with HealthServer(HealthObserver()) as server:
                await anyio.sleep_forever()
    assert inner.cancelled_caught and not outer.cancelled_caught
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", server.port)


class ServeOnlyListener(FailingListener):
    """A listener that can only serve(), not accept(): the probe server cannot use it."""

    accept = None  # type: ignore[assignment]


async def test_a_server_that_cannot_run_logs_and_returns_without_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """serve() on a listener it cannot accept from: a WARNING with the reason, and serve()
    returns instead of raising into the caller's task group, whose other task runs on."""
    server = ProbeServer(lambda target: (200, "text/plain", b"ok\n"))
    ticks = 0
    with caplog.at_level(logging.WARNING, logger="trio_lease"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, ServeOnlyListener(0))
            for _ in range(10):
                await anyio.sleep(1)
                ticks += 1
    assert ticks == 10
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "stopped by an error" in warning.getMessage() and warning.exc_info is not None


@pytest.mark.parametrize(
    "options",
    [{"margin": -1.0}, {"margin": float("nan")}, {"heartbeat_timeout": float("nan")},
     {"heartbeat_timeout": -5.0}],
)
def test_a_negative_or_nan_duration_is_refused(options: dict[str, Any]) -> None:
    """HealthObserver(margin=NaN) or a negative heartbeat_timeout: LeaseConfigError naming it."""
    (option,) = options
    with pytest.raises(LeaseConfigError, match=rf"HealthObserver\({option}=\.\.\.\).*>= 0"):
        HealthObserver(**options)
