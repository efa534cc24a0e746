"""examples/fastapi_partitioned.py under uvicorn: replicas as real processes on one SQLite file
share the partitions, one replica per partition, and take over those of a replica that stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from trio_lease.backends.sqlite import SqliteBackend

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = {f"orders-{i}" for i in range(6)}

pytestmark = pytest.mark.processes

#: partition -> fencing token, by replica (what each replica's /partitions says)
Views = dict[str, dict[str, int]]


class Replica:
    """``uvicorn --app-dir examples fastapi_partitioned:app`` on a free loopback port."""

    def __init__(self, name: str, database: Path) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"),
             "fastapi_partitioned:app", "--host", "127.0.0.1", "--port", "0", "--no-access-log"],
            env={**os.environ, "REPLICA": name, "LEASES_DATABASE": str(database)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        self._port: int | None = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self._port = int(found[1])
                self._listening.set()
        self._listening.set()  # exited

    @property
    def url(self) -> str:
        assert self._listening.wait(60), f"{self.name} did not start: {''.join(self.log)}"
        assert self._port is not None, f"{self.name} exited: {''.join(self.log)}"
        return f"http://127.0.0.1:{self._port}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5)

    def partitions(self) -> dict[str, int]:
        body = self.get("/partitions").json()
        assert body["replica"] == self.name
        return {p: state["fencing_token"] for p, state in body["partitions"].items()}

    def close(self) -> None:
        """Kill the replica if it still runs, reap it, and close its log pipe once read."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(timeout=30)
        assert self.process.stderr is not None
        self.process.stderr.close()

    def stop(self) -> int:
        """SIGTERM: uvicorn shuts down gracefully (the lifespan's exit), then re-raises the
        signal so that the exit status says what stopped it; the exit code."""
        self.process.terminate()
        return self.process.wait(timeout=30)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Callable[[str], Replica]]:
    """Start replicas on one SQLite file; every one still running is stopped at the end."""
    started: list[Replica] = []

    def start(name: str) -> Replica:
        started.append(Replica(name, tmp_path / "leases.sqlite3"))
        return started[-1]

    yield start
    for replica in started:
        replica.close()


def balanced_views(running: list[Replica], timeout: float = 60) -> Views:
    """Poll every replica's /partitions until each partition runs on exactly one of them and
    each runs 6/len(running); the views then."""
    deadline = time.monotonic() + timeout
    while True:
        views = {replica.name: replica.partitions() for replica in running}
        owners = Counter(p for view in views.values() for p in view)
        if set(owners) == PARTITIONS and set(owners.values()) == {1} and {
            len(view) for view in views.values()
        } == {len(PARTITIONS) // len(running)}:
            return views
        assert time.monotonic() < deadline, f"never balanced: {views}"
        time.sleep(0.2)


async def read_holders(database: Path, partitions: list[str]) -> dict[str, str]:
    """The holder identity (``owner_incarnation``, "" when free) of each partition's lease."""
    async with SqliteBackend(database) as backend:
        records = {p: await backend.get(f"orders.{p}") for p in partitions}
    return {p: record.holder for p, record in records.items() if record is not None}


def test_replicas_share_the_partitions_and_take_over_a_stopped_ones(
    replicas: Callable[[str], Replica], tmp_path: Path
) -> None:
    """One replica consumes all six partitions; with three each consumes two, one replica per
    partition; a replica stopped with SIGTERM shuts down cleanly, releasing its partitions,
    which move to the two others, each move with a larger fencing token; their /healthz: 200."""
    first = replicas("api-1")
    alone = balanced_views([first])
    assert set(alone["api-1"]) == PARTITIONS

    second, third = replicas("api-2"), replicas("api-3")
    three = balanced_views([first, second, third])
    for partition, token in three["api-1"].items():
        # Kept, or kept under a new grant with a larger token: when api-2's join is seen before
        # api-3's (a loaded machine starts them apart), the two-member assignment may move a
        # partition away from api-1 and the three-member one give it back; or the machine
        # starved api-1's renewals past its deadline and it took the partition again.
        assert token >= alone["api-1"][partition]
    for name in ("api-2", "api-3"):
        for partition, token in three[name].items():
            assert token > alone["api-1"][partition]  # moved: a new grant, a larger token

    assert third.stop() == -signal.SIGTERM
    shutdown = "".join(third.log)
    assert "Application shutdown complete" in shutdown  # the lifespan left without an error
    assert "Traceback" not in shutdown
    # Released on the way out: no record still names the stopped replica (its leases would
    # otherwise stay its own until they expire, L later).
    holders = anyio.run(read_holders, tmp_path / "leases.sqlite3", sorted(three["api-3"]))
    assert not [h for h in holders.values() if h.startswith("api-3_")], holders
    two = balanced_views([first, second])
    before = {p: token for view in three.values() for p, token in view.items()}
    for partition in three["api-3"]:
        (now,) = [view[partition] for view in two.values() if partition in view]
        assert now > before[partition]
    for replica in (first, second):
        health = replica.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "replica": replica.name}
