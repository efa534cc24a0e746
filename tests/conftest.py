"""Shared fixtures: both anyio backends on virtual time, and a World on every lease backend.

``anyio_backend`` is parametrised over asyncio and trio; each test gets a fresh virtual clock
(trio's MockClock with autojump, or trio_lease.testing's VirtualTimeEventLoop on asyncio), so
sleeps and timeouts cost no real time and no test depends on the machine's speed. Tests that
need real time (real sockets, threads, subprocesses) use the ``real_time_backend`` fixture
instead, by overriding ``anyio_backend`` in their module.

``every_world`` is the backend-parametrised fixture: a :class:`World` (a shared store, its
settings and its clients) on each :class:`Store` of :data:`STORES`, on asyncio and trio. The
docs/design.md §4 guarantee tests (tests/core/test_guarantees.py) and the conformance suite
(tests/backends/test_conformance.py) take it, so both run on every backend. A store decides its
clock: ``anyio_backend`` gives a test that uses ``every_world`` real time when its store needs
it (SQLite, etcd), and such a test is bounded by the store's ``limit``.

The etcd store's server is started here (``etcd_server``, one per session, via
tests/etcd_server.py); without an etcd binary its tests skip with the reason, unless
``TRIO_LEASE_REQUIRE_ETCD`` is set (CI sets it), in which case they fail.

Modules this file needs beyond the package (the etcd launcher, the Kubernetes test helpers)
are imported when a store is opened, so a copy of only tests/core and this file (the mutation
tests make one) still imports; the stores it then cannot open error instead of passing.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib.util
import os
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from trio_lease import Lease, LeaseBackend, LeaseLost, LeaseSettings
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend, virtual_time_backends

if TYPE_CHECKING:
    from tests.etcd_server import EtcdCluster

#: Virtual time: L = 15 s, R = 1.5 s, T = 0.5 s, so D = 10 s and the safety margin is ~4.98 s.
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)

#: Real time: L = 1.2 s, R = 0.3 s, T = 0.2 s, T_stop = 0.1 s, so D = 0.8 s: a cut-off holder
#: is cancelled 0.4 s before any contender may take over, 0.3 s more than T_stop. T is well
#: above a real store's usual latency (a few ms); a request in its tail times out and is
#: retried, as in production.
REAL_TIME_SETTINGS = LeaseSettings(
    heartbeat_timeout=1.2, heartbeat_interval=0.3, lease_operation_timeout=0.2, stop_timeout=0.1
)

#: Slack (seconds) for "at about" and "within" assertions on real time: a store request usually
#: takes a few ms, but its tail (fsync, a new connection, a busy worker thread) reaches tens.
REAL_TIME_TOLERANCE = 0.1

#: Upper bound of one real-time test in seconds (the longest, 10 L of renewals, takes ~12 s).
REAL_TIME_LIMIT = 60.0

#: How often a test on a real-time store runs again when its holder lost the lease by its
#: deadline (:data:`STARVED`). There a store that answered no renewal for L = 1.2 s (etcd's
#: fsync, SQLite's writer, the machine's other work) makes the holder lose, as docs/design.md §4.3
#: requires, and says nothing about the guarantee the test checks; a test broken by the code
#: fails every run. Each rerun shows in the summary ("rerun"); virtual time never reruns.
REAL_TIME_RERUNS = 2

#: A holder that lost its lease by its deadline: pytest-rerunfailures matches it against
#: ``"<exception type>: <message>"`` of the failure and every exception it was raised from.
STARVED = r"LeaseLost: .*no renewal was confirmed before the holder's deadline"

#: A real store that answered no request within the lease operation timeout before a case's
#: body could run (an fsync, the machine's other work): the case never reached what it checks,
#: so it runs again, as under :data:`STARVED` (tests/core/_matrix.py ``StoreStalled``).
STALLED = r"StoreStalled: "


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Both anyio backends, each on a fresh virtual clock (real time for a real-time store)."""
    name: str = request.param
    if "world_store" in request.fixturenames and request.getfixturevalue("world_store").real_time:
        return name
    specs = dict(virtual_time_backends())
    return name, specs[name]


#: Real-time event loops for tests on real sockets: asyncio, asyncio on uvloop's event loop
#: (what uvicorn runs by default; its transports are not asyncio's classes) and trio. The lean
#: HTTP client's tests, the Kubernetes backend's real-socket and shared-watch socket tests,
#: every etcd test and the hostile servers' socket tests take these as ``anyio_backend``
#: params; other real-socket modules (the emulator's own tests, interop, multiprocess) run on
#: asyncio and trio. ``anyio_backend_name`` is "asyncio" on both asyncio loops.
REAL_LOOPS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param(
        ("asyncio", {"use_uvloop": True}),
        id="uvloop",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("uvloop") is None,
            reason="uvloop is not installed (pip install uvloop; not on Windows)",
        ),
    ),
    pytest.param("trio", id="trio"),
]


@pytest.fixture(params=["asyncio", "trio"])
def real_time_backend(request: pytest.FixtureRequest) -> str:
    """Both anyio backends on real time, for tests with threads, sockets or processes."""
    backend: str = request.param
    return backend


# -- worlds ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class World:
    """A store shared by several clients, and the settings leases use on it."""

    name: str
    settings: LeaseSettings
    new_backend: Callable[[], LeaseBackend]
    #: Slack (seconds) that timing assertions allow for scheduling jitter and request latency:
    #: 0 on virtual time, where every assertion is exact; a small margin on real time (a real
    #: server). Guarantee tests use it only where real time can add to what virtual time does.
    tolerance: float = 0.0
    opened: list[LeaseBackend] = dataclasses.field(default_factory=list)

    def backend(self) -> LeaseBackend:
        backend = self.new_backend()
        self.opened.append(backend)
        return backend

    def faulty(self, **faults: Any) -> FaultyBackend:
        return FaultyBackend(self.backend(), **faults)

    def lease(
        self, owner: str, *, backend: LeaseBackend | None = None, name: str = "job", **kw: Any
    ) -> Lease:
        return Lease(name, owner, backend or self.backend(), self.settings, **kw)

    async def aclose(self) -> None:
        for backend in self.opened:
            await backend.aclose()


#: Opens one shared store for a test and returns a factory of new clients of it.
Opener = Callable[[pytest.FixtureRequest], Callable[[], LeaseBackend]]


@dataclasses.dataclass(frozen=True)
class Store:
    """A lease backend the shared tests run on: how to open a store, and on which clock.

    ``excluded`` maps a test's name to the reason it does not run on this store; it is skipped
    with that reason, printed in the summary.
    """

    name: str
    open: Opener
    real_time: bool = False
    excluded: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def settings(self) -> LeaseSettings:
        return REAL_TIME_SETTINGS if self.real_time else SETTINGS

    @property
    def tolerance(self) -> float:
        return REAL_TIME_TOLERANCE if self.real_time else 0.0

    @property
    def limit(self) -> float | None:
        """Real seconds a test may take before it fails instead of hanging (real time only)."""
        return REAL_TIME_LIMIT if self.real_time else None

    def world(self, request: pytest.FixtureRequest) -> World:
        return World(self.name, self.settings, self.open(request), tolerance=self.tolerance)


def _memory(request: pytest.FixtureRequest) -> Callable[[], LeaseBackend]:
    store = MemoryStore()
    return lambda: MemoryBackend(store)


def _sqlite(request: pytest.FixtureRequest) -> Callable[[], LeaseBackend]:
    from trio_lease.backends.sqlite import SqliteBackend

    path: Path = request.getfixturevalue("tmp_path") / "leases.sqlite3"
    return lambda: SqliteBackend(path, watch_interval=0.01)


def _kubernetes(kind: str) -> Opener:
    def open_store(request: pytest.FixtureRequest) -> Callable[[], LeaseBackend]:
        from tests.backends.kubernetes._helpers import emulator_with_crd, make_backend

        # One transport for all clients, as all backends of a process share one server: they
        # are one store (for reentrancy) and share one pooled client.
        transport = emulator_with_crd().transport()
        return lambda: make_backend(transport, kind=kind)

    return open_store


def _etcd(request: pytest.FixtureRequest) -> Callable[[], LeaseBackend]:
    from trio_lease.backends.etcd import EtcdBackend

    server: EtcdCluster = request.getfixturevalue("etcd_server")
    # Clients under one prefix no other test uses: one store (``store_key``) for reentrancy,
    # each with its own HTTP connections, as clients in separate processes would be.
    prefix = f"test-{secrets.token_hex(4)}/"
    return lambda: EtcdBackend(server.endpoints, prefix=prefix)


#: Every backend, those on virtual time first (see ``every_world`` for why SQLite is not).
STORES = (
    Store("memory", _memory),
    Store("kubernetes-v1", _kubernetes("coordination.k8s.io/v1")),
    Store("kubernetes-akka", _kubernetes("akka.io/v1")),
    Store("sqlite", _sqlite, real_time=True),
    Store(
        "etcd",
        _etcd,
        real_time=True,
        excluded={
            "test_g2_unknown_outcome_counts_as_not_renewed": (
                "needs virtual time: its first check must fall between a lost renewal reply and "
                "the retry's confirmation, a window of T/4 (50 ms here) narrower than etcd's "
                "write-latency tail (fsync: tens of ms, ~0.2 s seen under CPU load). Timed-out "
                "renewals counting as not renewed still run here "
                "(test_g2_every_request_is_bounded_by_operation_timeout)"
            ),
        },
    ),
)


def parametrized_store(request: pytest.FixtureRequest) -> Store:
    """The store a ``world_store`` fixture was given; a test excluded on it is skipped with the
    reason."""
    chosen: Store = request.param
    reason = chosen.excluded.get(request.function.__name__)
    if reason is not None:
        pytest.skip(f"excluded on {chosen.name}: {reason}")
    return chosen


@pytest.fixture(params=STORES, ids=[store.name for store in STORES])
def world_store(request: pytest.FixtureRequest) -> Store:
    """Each backend of :data:`STORES` (a test excluded on one is skipped with the reason)."""
    return parametrized_store(request)


@pytest.fixture
async def every_world(world_store: Store, request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """A World on each backend of :data:`STORES`, on asyncio and trio.

    The clock follows the store. Memory and the emulator's in-process transport wait only on
    timers and other tasks, so they run on virtual time with L = 15 s. A real etcd answers in
    real time, and so does SQLite: it runs each call in a worker thread, and an autojump clock
    cannot wait for threads (a thread's real milliseconds look, to the clock, like a task
    blocked with nothing to do, so it jumps over the operation timeout before the thread
    answers; 23 of the 56 guarantee runs on SQLite failed that way). Freezing the clock while
    a thread runs would hide exactly what real time tests here (a request bounded by T while
    its thread works), so both run on real time with L = 1.2 s (:data:`REAL_TIME_SETTINGS`),
    ``world.tolerance`` as the slack for latency, and each test failing after
    :data:`REAL_TIME_LIMIT` s instead of hanging. On real time a guarantee test takes up to
    10 L: SQLite and etcd add about 90 s each to the suite on two cores.
    """
    world = world_store.world(request)
    yield world
    await world.aclose()


def _bounded(test: Callable[..., Awaitable[None]], limit: float) -> Callable[..., Awaitable[None]]:
    """``test``, failing after ``limit`` real seconds instead of hanging on a real store."""

    @functools.wraps(test)
    async def bounded(**kwargs: Any) -> None:
        try:
            with anyio.fail_after(limit):
                await test(**kwargs)
        except BaseExceptionGroup as group:  # a test's own task group: find a starved holder
            starved = _starved_in(group)
            if starved is None:
                raise
            raise starved from group  # the STARVED rule reruns the test

    return bounded


def _starved_in(group: BaseExceptionGroup[BaseException]) -> LeaseLost | None:
    """A LeaseLost in ``group`` that says its holder was starved (:data:`STARVED`), if any."""
    for leaf in group.exceptions:
        if isinstance(leaf, BaseExceptionGroup):
            found = _starved_in(leaf)
            if found is not None:
                return found
        elif isinstance(leaf, LeaseLost) and re.search(STARVED, f"LeaseLost: {leaf}"):
            return leaf
    return None


def _store_of(item: pytest.Item) -> Store | None:
    callspec = getattr(item, "callspec", None)
    chosen = callspec.params.get("world_store") if callspec is not None else None
    return chosen if isinstance(chosen, Store) else None


# -- layers by cost ------------------------------------------------------------------------------

#: The suite's layers by what a test costs. A test in none of them is in the fast layer
#: (``pytest -m "not slow"``): pure logic, virtual time, in-process fakes and the Kubernetes
#: emulator's in-process transport. Each slow layer is a marker of its own and adds ``slow``.
LAYERS = {
    "real_store": "a SQLite file or an etcd server, on real time",
    "sockets": "real sockets, threads or a blocked event loop, on real time",
    "processes": "real subprocesses: trio-lease, etcd, kubectl, interpreters running examples",
    "campaign": "long randomised or repeated runs: fault campaign, benchmarks, mutations",
}

#: Paths (a folder, a file, or a file-name prefix) whose every test is in a layer. Tests are
#: also put in layers by what they use (:func:`layer_of`), so in-process tests in these
#: folders' neighbours stay fast.
LAYER_OF_PATH = {
    "tests/campaign/": "campaign",
    "tests/benchmarks/": "campaign",
    "tests/test_mutations.py": "campaign",
    "tests/core/test_stateful.py": "campaign",
    "tests/multiprocess/": "processes",
    "tests/backends/kubernetes/test_interop.py": "processes",
    "tests/backends/kubernetes/test_multiprocess.py": "processes",
    "tests/backends/kubernetes/test_check_cli.py": "processes",
    "tests/kube_emulator/test_clients.py": "processes",
    "tests/kube_emulator/test_kubectl_fidelity.py": "processes",
    "tests/test_examples.py": "processes",
    "tests/test_example_singleton.py": "processes",
    "tests/test_doc_snippets.py": "processes",
    "tests/cli/test_cli_docs.py": "processes",
    "tests/backends/etcd/": "real_store",
    "tests/backends/test_sqlite": "real_store",
    "tests/hostile/": "sockets",
}

#: Fixtures that put a test in a layer.
LAYER_OF_FIXTURE = {"cli": "processes", "etcd_server": "real_store"}


def layer_of(item: pytest.Item) -> str | None:
    """The slow layer ``item`` belongs to, or None for the fast layer."""
    for layer in LAYERS:  # a test may name its layer itself (``@pytest.mark.campaign``)
        if item.get_closest_marker(layer) is not None:
            return layer
    path = Path(str(item.path)).relative_to(Path(__file__).parent.parent).as_posix()
    for prefix, layer in LAYER_OF_PATH.items():
        if path.startswith(prefix):
            return layer
    store = _store_of(item)
    if store is not None and store.real_time:
        return "real_store"
    for fixture, layer in LAYER_OF_FIXTURE.items():
        if fixture in getattr(item, "fixturenames", ()):
            return layer
    module = getattr(item, "module", None)
    if module is not None and "anyio_backend" in vars(module):  # the module's own clock: real
        return "sockets"
    return None


def pytest_configure(config: pytest.Config) -> None:
    for layer, what in LAYERS.items():
        config.addinivalue_line("markers", f"{layer}: {what} (slow)")
    # On xdist workers (`-n`), unless --dist was given: a worker that has run out of tests takes
    # some from another's queue, so the long tests (started first, LONG_FIRST) do not leave one
    # worker running alone at the end. Set here, not in addopts: `-p no:xdist` must still work.
    given = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    if getattr(config.option, "dist", None) == "load" and not any(
        arg.startswith("--dist") for arg in given
    ):
        config.option.dist = "worksteal"


#: Directories whose tests fail on a ResourceWarning (an unclosed socket, file, pipe, memory
#: stream or async generator), as every test fails on an unraisable exception (pyproject.toml
#: filterwarnings). A test on real resources collects garbage when it ends
#: (:func:`_finalized_in_their_own_test`), so what it left open fails it, not a later test.
RESOURCE_CHECKED: tuple[str, ...] = (
    "tests/backends/",
    "tests/benchmarks/",
    "tests/campaign/",
    "tests/cli/",
    "tests/core/",
    "tests/hostile/",
    "tests/kube_emulator/",
    "tests/multiprocess/",
    "tests/test_",
)

#: Loops whose runs keep ResourceWarning a warning: none. (uvloop's were left out while a
#: test's unclosed etcd sockets were finalized as errors during ``loop.close()``, which then
#: hung; that test closes its backends now.)
UNCHECKED_LOOPS: tuple[str, ...] = ()

#: httpx's and httpcore's own nested body generators, which no caller can close (pyproject.toml).
HTTPX_GENERATORS = "ignore:Async generator 'http(x|core)\\.:ResourceWarning"


@pytest.fixture(autouse=True)
def _finalized_in_their_own_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on real resources, collect garbage: an object it left unclosed (a socket, a
    pipe, an async generator) is finalized now, and its ResourceWarning or unraisable exception
    fails this test, not a later one."""
    yield
    if layer_of(request.node) is not None:
        gc.collect()


def _resource_checked(item: pytest.Item) -> bool:
    """Whether ``item`` runs with ResourceWarning as an error (:data:`RESOURCE_CHECKED`, except
    on the loops of :data:`UNCHECKED_LOOPS`)."""
    params = item.nodeid.partition("[")[2]
    return item.nodeid.startswith(RESOURCE_CHECKED) and not any(
        loop in params for loop in UNCHECKED_LOOPS
    )


#: The layers whose tests start first, longest first: on xdist workers a long test started last
#: would keep one worker busy alone after the others have finished.
LONG_FIRST = {"campaign": 0, "processes": 1}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its layer (:data:`LAYERS`); bound every test on a real-time store by
    the store's limit (and run it again when its holder lost the lease by its deadline,
    :data:`REAL_TIME_RERUNS`), and run each test on the stores in :data:`STORES` order (both
    loops of one store, then the next store): the memory store first, so a broken guarantee
    fails there before any real-time store runs. The long layers (:data:`LONG_FIRST`) run
    first."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.nodeid.partition("[")[0], index)
        if _resource_checked(item):
            item.add_marker(pytest.mark.filterwarnings("error::ResourceWarning", HTTPX_GENERATORS))
        layer = layer_of(item)
        if layer is not None:
            item.add_marker(layer)
            item.add_marker(pytest.mark.slow)
        chosen = _store_of(item)
        if isinstance(item, pytest.Function) and chosen is not None and chosen.limit:
            item.obj = _bounded(item.obj, chosen.limit)
            item.add_marker(pytest.mark.flaky(reruns=REAL_TIME_RERUNS, only_rerun=[STARVED]))

    def position(item: pytest.Item) -> tuple[int, int, int]:
        chosen = _store_of(item)
        # A store of a module's own (not in STORES) goes after them.
        order = -1 if chosen is None else STORES.index(chosen) if chosen in STORES else len(STORES)
        return (
            LONG_FIRST.get(layer_of(item) or "", len(LONG_FIRST)),
            first[item.nodeid.partition("[")[0]],
            order,
        )

    items.sort(key=position)


#: Variables by which coverage.py measures the Python processes a test starts
#: (pyproject.toml ``patch = ["subprocess"]``).
COVERAGE_VARIABLES = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


@pytest.fixture(autouse=True)
def _campaign_unmeasured(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run a campaign-layer test, and the processes it starts, without coverage measurement.

    The campaign repeats, many times over, code the other layers already run once; measured
    under Python 3.11's line tracer, its randomised runs take up to seven times as long (the
    stateful test: 10 minutes instead of 1.5), which is most of CI's run. Its setup (a
    benchmark run) and teardown are left out too, not only the call (pytest-cov's
    ``no_cover``). Without ``--cov`` this does nothing."""
    if request.node.get_closest_marker("campaign") is None:
        yield
        return
    collector = sys.modules.get("coverage.collector")
    # Every collector pytest-cov and coverage's subprocess patch have started in this process.
    tracing = list(getattr(getattr(collector, "Collector", None), "_collectors", ()))
    saved = {name: os.environ.pop(name) for name in COVERAGE_VARIABLES if name in os.environ}
    for each in tracing:
        each.pause()
    sys.settrace(None)  # a paused C tracer stops itself only at its next event: gone at once
    try:
        yield
    finally:
        for each in tracing:
            each.resume()
        os.environ.update(saved)


# -- etcd -----------------------------------------------------------------------------------------


def require_etcd() -> None:
    """Skip (or, with TRIO_LEASE_REQUIRE_ETCD set, fail) when there is no etcd binary."""
    from tests.etcd_server import MISSING_REASON, etcd_binary

    if etcd_binary() is None:
        if os.environ.get("TRIO_LEASE_REQUIRE_ETCD"):
            pytest.fail(MISSING_REASON)
        pytest.skip(MISSING_REASON)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdCluster]:
    """One etcd member for the whole session; tests keep apart by using their own prefix."""
    from tests.etcd_server import etcd_cluster

    require_etcd()
    with etcd_cluster(size=1) as cluster:
        yield cluster


# -- time per layer -------------------------------------------------------------------------------

_LAYER_TIME: dict[str, float] = {}
_LAYER_COUNT: dict[str, int] = {}
_RUN_START: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note when the run starts (on the controller under xdist), for its wall time."""
    _RUN_START.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the report's duration to its layer (under xdist the controller gets every worker's
    reports, so the figures cover the whole run)."""
    layer = next((name for name in LAYERS if name in report.keywords), "fast")
    _LAYER_TIME[layer] = _LAYER_TIME.get(layer, 0.0) + report.duration
    if report.when == "call" and str(report.outcome) != "rerun":  # pytest-rerunfailures' first go
        _LAYER_COUNT[layer] = _LAYER_COUNT.get(layer, 0) + 1


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Each layer's test count and summed test time, and the run's wall time, so growth is
    visible."""
    if not _LAYER_TIME or hasattr(config, "workerinput"):  # an xdist worker: the controller sums
        return
    workers = getattr(config.option, "numprocesses", None) or 0
    terminalreporter.section("time per layer")
    overlap = f"; {workers} xdist workers at once, so it exceeds the wall time" if workers else ""
    terminalreporter.write_line(f"summed test time per layer (setup, call and teardown{overlap}):")
    for layer in ("fast", *LAYERS):
        if layer in _LAYER_TIME:
            count, spent = _LAYER_COUNT.get(layer, 0), _LAYER_TIME[layer]
            terminalreporter.write_line(f"{layer:<11} {count:5d} tests {spent:8.1f} s")
    wall = time.monotonic() - _RUN_START[0]
    where = f"on {workers} xdist workers" if workers else "in one process"
    terminalreporter.write_line(
        f"{'all':<11} {sum(_LAYER_COUNT.values()):5d} tests {sum(_LAYER_TIME.values()):8.1f} s"
        f"  (wall time of the whole run {where}: {wall:.1f} s)"
    )
