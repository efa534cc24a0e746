"""DESIGN §4 guarantee tests (tests/core/test_guarantees.py) on the etcd backend, real etcd.

The core's guarantee tests are written against a ``world`` fixture; this module re-runs them
with a world whose clients are EtcdBackends of the session's real etcd member (each test under
its own key prefix), on asyncio and trio. A real server answers in real time, so these run on
real time with settings scaled down (L = 1.2 s instead of 15 s) and ``world.tolerance`` as the
slack for scheduling jitter and loopback latency. Each test is bounded by :data:`TEST_LIMIT`,
so a hang fails with a message instead of stalling the run.

Excluded (reported as skipped, with the reason, see :data:`EXCLUDED`): a test that never
touches the backend, and one whose timing window only virtual time can hit reliably.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest

from tests.core import test_guarantees as _guarantees
from tests.core.conftest import World
from trio_lease import LeaseSettings
from trio_lease.backends.etcd import EtcdBackend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

#: L = 1.2 s, R = 0.3 s, T = 0.2 s, T_stop = 0.1 s, so D = 0.8 s: a cut-off holder is cancelled
#: 0.4 s before any contender may take over, 0.3 s more than T_stop. T is well above etcd's
#: usual loopback latency (a few ms); a request in its tail times out and is retried, as in
#: production. The whole module takes about 80 s for both anyio backends.
SETTINGS = LeaseSettings(
    heartbeat_timeout=1.2, heartbeat_interval=0.3, lease_operation_timeout=0.2, stop_timeout=0.1
)

#: Slack for "at about" and "within" assertions on real time (seconds): a linearizable etcd
#: request usually takes a few ms, but its tail (fsync, a new connection) reaches tens of ms.
TOLERANCE = 0.1

#: Upper bound of one test in real seconds (the longest, 10 L of renewals, takes about 12 s).
TEST_LIMIT = 60.0

#: Guarantee tests not re-run here, and why.
EXCLUDED = {
    "test_g2_unknown_outcome_counts_as_not_renewed": (
        "needs virtual time: its first check must fall between a lost renewal reply and the "
        "retry's confirmation, a window of T/4 (50 ms here) narrower than etcd's write-latency "
        "tail (fsync: tens of ms, ~0.2 s seen under CPU load). Timed-out renewals counting as not "
        "renewed still run here (test_g2_every_request_is_bounded_by_operation_timeout)"
    ),
    "test_g7_forked_child_gets_a_new_incarnation": (
        "process-local: forks and compares incarnation ids without any world or backend; "
        "it runs once in tests/core"
    ),
}

Test = Callable[[World], Awaitable[None]]


def _bounded(test: Test) -> Test:
    """``test``, failing after TEST_LIMIT real seconds instead of hanging on a real server."""

    @functools.wraps(test)
    async def bounded(world: World) -> None:
        with anyio.fail_after(TEST_LIMIT):
            await test(world)

    return bounded


def _excluded(name: str, reason: str) -> Callable[[], None]:
    """A stand-in for the excluded test ``name`` that skips with ``reason``."""

    def excluded() -> None:
        pytest.skip(f"excluded on etcd: {reason}")

    excluded.__name__ = excluded.__qualname__ = name
    excluded.__doc__ = getattr(_guarantees, name).__doc__
    return excluded


for _name in dir(_guarantees):
    if _name.startswith("test_"):
        if _name in EXCLUDED:
            globals()[_name] = _excluded(_name, EXCLUDED[_name])
        else:
            globals()[_name] = _bounded(getattr(_guarantees, _name))


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both anyio backends on real time: a real server does not follow a virtual clock."""
    backend: str = request.param
    return backend


@pytest.fixture
async def world(etcd_backend_factory: Callable[[], EtcdBackend]) -> AsyncIterator[World]:
    """EtcdBackends of one real etcd member, all under this test's own key prefix, real time.

    They share the prefix, so they are one store (``store_key``) for reentrancy, each with its
    own HTTP connections, as clients in separate processes would be.
    """
    w = World("etcd", SETTINGS, etcd_backend_factory, tolerance=TOLERANCE)
    yield w
    await w.aclose()
