"""The probe port of `trio-lease run` under hostile clients, as real processes on real sockets.

Each test starts `trio-lease run --health-port 0 --metrics-port 0` (one server for both) on a
SQLite file, lets it take the lease, then attacks the port from this process: file descriptors
run out in the holder, 64 idle sockets, 3,000 idle connections. What must hold is read where a
user would see it: the lease record in the SQLite file (its holder, fencing token and version;
each renewal writes a new version), the holder's RSS in ``/proc``, ``/healthz`` and ``/metrics``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import resource
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import REAL_TIME_RERUNS, STARVED
from trio_lease import LeaseLost

from .conftest import FAST, PATIENCE, SETTINGS, STARVED_TEXT, Cli, Running, wait_for_event
from .test_operations_flags import metric, served, until_status

#: The heartbeat interval of FAST: the record gets a new version about this often.
R = SETTINGS.heartbeat_interval
#: The holder's deadline of FAST (4 R): a renewal later than this after the one before ends
#: the hold, and the holder says so (``no renewal was confirmed before the holder's deadline``).
D = SETTINGS.deadline
#: The kubelet's default probe timeout (``timeoutSeconds: 1``).
PROBE_TIMEOUT = 1.0

loops = pytest.mark.parametrize("loop", ["asyncio", "trio"])


@dataclasses.dataclass(frozen=True)
class Record:
    holder: str
    fencing_token: int
    version: int
    #: When the holder made this write (its wall clock, seconds), stamped before sending it.
    renewed_at: float


def read_record(db: Path, name: str = "job") -> Record | None:
    """The lease record as the SQLite file has it now (None if there is none)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        row = conn.execute(
            "SELECT holder, fencing_token, version, renewed_at FROM leases WHERE name = ?",
            (name,),
        ).fetchone()
    if row is None:
        return None
    renewed_at = datetime.fromisoformat(row[3]).timestamp()
    return Record(row[0], int(row[1]), int(row[2]), renewed_at)


def rss_kib(pid: int) -> int:
    """The resident set size of ``pid``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@contextlib.contextmanager
def idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``port`` that never send a byte, fewer if the port stops
    taking them (its server is gone: the test's checks then say why); all closed on exit."""
    sockets: list[socket.socket] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = count + 256  # the sockets, and what pytest and the test already have open
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.fail(f"this test needs {needed} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        for _ in range(count):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=PATIENCE))
            except ConnectionError:
                break
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def start_holder(cli: Cli, loop: str) -> tuple[Running, str, int]:
    """A holder of "job" with one probe and metrics server: (process, base URL, port)."""
    log, running = cli.run_serving(loop)
    base = served(running, 1)["/healthz"]
    wait_for_event(log, "start", running)
    assert until_status(base + "/readyz?leader=1", 200).status_code == 200
    return running, base, int(base.rpartition(":")[2])


def watch_renewals(db: Path, seconds: float) -> tuple[list[Record], float]:
    """The distinct records seen while polling every 20 ms for ``seconds``, and the longest
    time the holder took from one renewal to the next, as its own stamps (``renewed_at``) of
    two successive versions say: how late this process read them does not count."""
    seen: list[Record] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record = read_record(db)
        assert record is not None
        if not seen or record != seen[-1]:
            seen.append(record)
        time.sleep(0.02)
    # Only "job" is written, and each write takes the file's next version: successive
    # versions are successive renewals (one this process missed splits no gap).
    gaps = [
        b.renewed_at - a.renewed_at
        for a, b in itertools.pairwise(seen)
        if b.version == a.version + 1
    ]
    return seen, max(gaps, default=0.0)


def starved_holder(running: Running) -> None:
    """Raise the holder's LeaseLost if it lost the lease by its deadline: a holder the machine
    starved (pytest reruns the test, the STARVED rule of tests/conftest.py); a holder that the
    clients starve does so on every run, and the test fails."""
    for _ in range(50):  # its last lines may still be on the way
        if running.process.poll() is not None:
            break
        time.sleep(0.01)
    if STARVED_TEXT in running.stderr():
        raise LeaseLost("job", f"{STARVED_TEXT} (in the holder):\n{running.stderr()}")


#: Tests whose holder must renew on time while attacked: a holder that lost the lease by its
#: deadline runs the test again (:func:`starved_holder`).
on_time = pytest.mark.flaky(reruns=REAL_TIME_RERUNS, only_rerun=[STARVED])


def probe(url: str) -> int | None:
    """One kubelet-style probe: a new connection, a 1 s timeout; the status, None on timeout."""
    try:
        return httpx.get(url, timeout=PROBE_TIMEOUT).status_code
    except httpx.TransportError:
        return None


@on_time
@loops
def test_running_out_of_file_descriptors_leaves_the_lease_held_and_the_process_running(
    cli: Cli, loop: str
) -> None:
    """The holder's RLIMIT_NOFILE lowered to 16 above what it has open, then 300 connections:
    accept() fails (EMFILE), the server backs off and sheds; the process runs on, its record
    keeps its holder and fencing token and gets new versions, /healthz answers, and /metrics
    counts the accept errors."""
    running, base, port = start_holder(cli, loop)
    before = read_record(cli.db)
    assert before is not None
    limit = open_fds(running.pid) + 16
    _, hard = resource.prlimit(running.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(running.pid, resource.RLIMIT_NOFILE, (limit, hard))
    with idle_connections(port, 300):
        seen, _ = watch_renewals(cli.db, 6 * R)
        starved_holder(running)
        assert running.process.poll() is None, running.stderr()
        answered = [probe(base + "/healthz") for _ in range(3)]
    starved_holder(running)
    assert running.process.poll() is None, running.stderr()
    assert {(r.holder, r.fencing_token) for r in seen} == {(before.holder, before.fencing_token)}
    assert len(seen) >= 3, seen  # renewals went on while the descriptors were gone
    assert 200 in answered, answered
    scrape = until_status(base + "/metrics", 200).text
    accept_errors = metric(scrape, "trio_lease_probe_accept_errors_total")
    assert accept_errors is not None and accept_errors > 0, scrape
    assert "accept() failed: EMFILE" in running.stderr()
    assert until_status(base + "/readyz?leader=1", 200).status_code == 200


@loops
def test_64_idle_sockets_leave_healthz_answering_within_the_probe_timeout(
    cli: Cli, loop: str
) -> None:
    """64 connections that send nothing, then three kubelet-style probes (new connection, 1 s
    timeout) of /healthz: one answering 200 suffices, as the kubelet restarts only after three
    failures in a row. The 1 s is the kubelet's own timeout; an answer takes milliseconds on
    loopback, so only a probe stuck behind the idle sockets misses it."""
    running, base, port = start_holder(cli, loop)
    with idle_connections(port, 64):
        answered = [probe(base + "/healthz") for _ in range(3)]
        assert 200 in answered, answered
    assert running.process.poll() is None, running.stderr()


@on_time
@loops
def test_thousands_of_idle_connections_leave_renewals_on_time_and_rss_bounded(
    cli: Cli, loop: str
) -> None:
    """3,000 connections that send nothing, held for 8 heartbeat intervals: the record keeps
    its holder and each renewal follows the one before within the holder's deadline D = 4 R
    (by the holder's own stamps; a holder the machine starved runs the test again), the RSS
    grows by less than 8 MiB (the server keeps at most its cap of connections; unbounded, each
    held connection costs several KiB), /healthz answers, and /metrics counts what was shed."""
    running, base, port = start_holder(cli, loop)
    before = read_record(cli.db)
    assert before is not None
    baseline = rss_kib(running.pid)
    with idle_connections(port, 3000):
        seen, longest_gap = watch_renewals(cli.db, 8 * R)
        starved_holder(running)
        peak = rss_kib(running.pid)
        answered = [probe(base + "/healthz") for _ in range(3)]
    starved_holder(running)
    assert running.process.poll() is None, running.stderr()
    assert {(r.holder, r.fencing_token) for r in seen} == {(before.holder, before.fencing_token)}
    assert len(seen) >= 4 and longest_gap < D, (seen, longest_gap)
    assert peak - baseline < 8 * 1024, (baseline, peak)
    assert 200 in answered, answered
    scrape = until_status(base + "/metrics", 200).text
    shed = metric(scrape, "trio_lease_probe_connections_shed_total")
    assert shed is not None and shed >= 3000 - 128, scrape


@contextlib.contextmanager
def slow_and_flooding_clients(port: int, slow: int, flooders: int) -> Iterator[list[int]]:
    """``slow`` connections sending a 140-byte request head a byte every 100 ms (14 s for the
    whole head, longer than the test), and ``flooders`` threads sending whole requests back to
    back, each on a new connection; the list counts the flood's requests. All stopped and
    closed on exit."""
    stop = threading.Event()
    counts = [0] * flooders
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    padded = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100 + b"\r\n\r\n"

    def trickle() -> None:
        sockets: list[socket.socket] = []
        try:
            for _ in range(slow):
                with contextlib.suppress(OSError):
                    sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            offset = 0
            while not stop.wait(0.1):
                for sock in sockets:
                    with contextlib.suppress(OSError):
                        sock.send(padded[offset : offset + 1])
                offset += 1
        finally:
            for sock in sockets:
                sock.close()

    def flood(index: int) -> None:
        while not stop.is_set():
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
            ):
                sock.sendall(request)
                while sock.recv(4096):
                    pass
                counts[index] += 1

    threads = [threading.Thread(target=trickle)]
    threads += [threading.Thread(target=flood, args=(i,)) for i in range(flooders)]
    for thread in threads:
        thread.start()
    try:
        yield counts
    finally:
        stop.set()
        for thread in threads:
            thread.join()


@on_time
@loops
def test_slow_and_flooding_clients_leave_probes_and_renewals_on_time(cli: Cli, loop: str) -> None:
    """64 clients trickling their request a byte every 100 ms and 4 threads sending requests
    back to back, for 8 heartbeat intervals: three kubelet-style probes (1 s timeout; the
    kubelet restarts after three failures in a row) get at least one 200, the record keeps its
    holder and each renewal follows the one before within the holder's deadline D = 4 R (a
    holder the machine starved runs the test again), and the trickling clients are timed out
    (counted on /metrics)."""
    running, base, port = start_holder(cli, loop)
    before = read_record(cli.db)
    assert before is not None
    with slow_and_flooding_clients(port, slow=64, flooders=4) as flooded:
        seen, longest_gap = watch_renewals(cli.db, 8 * R)
        starved_holder(running)
        answered = [probe(base + "/healthz") for _ in range(3)]
    starved_holder(running)
    assert running.process.poll() is None, running.stderr()
    assert 200 in answered, answered
    assert sum(flooded) > 0
    assert {(r.holder, r.fencing_token) for r in seen} == {(before.holder, before.fencing_token)}
    assert len(seen) >= 4 and longest_gap < D, (seen, longest_gap)
    scrape = until_status(base + "/metrics", 200).text
    timeouts = metric(scrape, "trio_lease_probe_timeouts_total")
    assert timeouts is not None and timeouts >= 64, scrape


def test_healthz_answers_with_a_reason_phrase_and_nosniff(cli: Cli) -> None:
    """`trio-lease run --health-port 0`: /healthz's status line is ``HTTP/1.1 200 OK`` and the
    answer says ``X-Content-Type-Options: nosniff``."""
    _, _, port = start_holder(cli, "asyncio")
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    head = reply.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK"
    assert b"X-Content-Type-Options: nosniff" in head


def test_the_probe_server_binds_ipv6(cli: Cli) -> None:
    """--health-host ::1 listens on IPv6 loopback: the serving line shows ``http://[::1]:PORT``
    and /healthz answers there."""
    log, child = cli.child("child")
    running = cli.start(
        "run", "job", *FAST, "--health-port", "0", "--health-host", "::1", "--", *child
    )
    base = served(running, 1)["/healthz"]
    assert base.startswith("http://[::1]:")
    wait_for_event(log, "start", running)
    assert until_status(base + "/healthz", 200).status_code == 200
