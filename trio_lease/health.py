"""Health and readiness over HTTP: ``/healthz``, ``/readyz`` and ``/metrics``, for probes.

A :class:`HealthObserver` follows the leases of the process through the observer hooks
(:class:`~trio_lease.LeaseObserver`); a :class:`HealthServer` answers from it::

    import trio_lease
    from trio_lease.health import HealthObserver, HealthServer

    health = HealthObserver()
    trio_lease.add_observer(health)
    async with HealthServer(health, port=8080):  # 127.0.0.1 unless host= says otherwise
        ...  # hold leases; the server answers until the block ends

======================  ===========================================================================
request                 answer
======================  ===========================================================================
``/healthz``            503 when a held lease's heartbeat is stuck: no renewal, loss or release was
                        told for ``margin`` seconds past the end of its last known validity (the
                        renewing task is wedged; restart the process). 200 otherwise, whether or
                        not the process holds anything.
``/readyz``             200 while the server runs.
``/readyz?leader=1``    200 while the process holds a lease (``&name=NAME``: that lease), else 503.
``/metrics``            the Prometheus text format of ``registry`` (when one is given), else 404.
======================  ===========================================================================

The server answers one request per connection and bounds every client's work (at most 128
connections, the oldest waiting one closed for a new one; 2 s from accept to answer; a 4 KiB
head; no body); its failures are logged and never reach the lease or the ``async with`` block
(:mod:`trio_lease._serve`, docs/operations.md "The probe server"). With ``metrics``, ``/metrics``
also has the server's own ``trio_lease_probe_*`` counters.

A lease that fails to renew is not stuck: its heartbeat loses it at its deadline, and the
loss is told. Stuck means that did not happen. The observer's clock (default
:func:`anyio.current_time`) is the one its deadlines are measured on.
"""

from __future__ import annotations

import dataclasses
import math
import urllib.parse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from . import _public
from ._observer import LeaseInfo, LeaseObserver
from ._outcome import ExcInfo, Outcome
from ._serve import Answer, ProbeServer, ServerStats
from ._settings import check_seconds

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["HealthObserver", "HealthServer", "serve_health"]

_TEXT = "text/plain; charset=utf-8"
#: The longest lease name a 503 body repeats from a request.
_NAME_SHOWN = 64


def _plain(text: str) -> str:
    """``text`` from a request, safe to repeat in a plain-text body: printable ASCII only
    (anything else is ``?``), at most :data:`_NAME_SHOWN` characters."""
    shown = "".join(c if c.isascii() and c.isprintable() else "?" for c in text[:_NAME_SHOWN])
    return shown + ("..." if len(text) > _NAME_SHOWN else "")


@dataclasses.dataclass
class _Held:
    """One held grant: its token and when its heartbeat is overdue (inf: not known yet)."""

    fencing_token: int
    overdue_at: float


class HealthObserver(LeaseObserver):
    """Tracks the leases held by the process and whether their heartbeats still run.

    Args:
        margin: seconds past a grant's validity before its heartbeat counts as stuck (the
            watchdog tells the loss at the deadline itself; this absorbs a busy event loop).
        heartbeat_timeout: the leases' heartbeat timeout, if known: it bounds the first
            validity after an acquisition (``acquired`` does not tell it). Without it, a
            heartbeat is judged from its first renewal on.
        clock: monotonic seconds; default :func:`anyio.current_time` (read in the event loop).
    """

    def __init__(
        self,
        *,
        margin: float = 2.0,
        heartbeat_timeout: float | None = None,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self.margin: float = check_seconds(margin, "HealthObserver(margin=...)")
        self.heartbeat_timeout: float | None = check_seconds(
            heartbeat_timeout,
            "HealthObserver(heartbeat_timeout=...)",
            none="judge a heartbeat from its first renewal",
        )
        self._clock = clock
        #: Held grants by (lease name, holder identity).
        self._held: dict[tuple[str, str], _Held] = {}

    # -- the hooks -------------------------------------------------------------------------------

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, **details: Any
    ) -> None:
        valid_for = details.get("valid_for", self.heartbeat_timeout)
        overdue_at = math.inf if valid_for is None else self._clock() + valid_for + self.margin
        self._held[lease.name, lease.identity] = _Held(fencing_token, overdue_at)

    def renewed(
        self, lease: LeaseInfo, *, fencing_token: int, latency: float, valid_for: float
    ) -> None:
        overdue_at = self._clock() + valid_for + self.margin
        self._held[lease.name, lease.identity] = _Held(fencing_token, overdue_at)

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        self._forget(lease, fencing_token)

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        self._forget(lease, fencing_token)

    def _forget(self, lease: LeaseInfo, fencing_token: int) -> None:
        held = self._held.get((lease.name, lease.identity))
        if held is not None and held.fencing_token == fencing_token:
            del self._held[lease.name, lease.identity]

    # -- the answers -----------------------------------------------------------------------------

    def holding(self, name: str | None = None) -> bool:
        """True while the process holds a lease (``name``: that one)."""
        return any(name is None or held_name == name for held_name, _ in self._held)

    def stuck(self) -> list[str]:
        """What is wrong: one line per held lease whose heartbeat is overdue (empty: healthy)."""
        now = self._clock()
        return [
            f"lease {name!r} held by {identity!r} (fencing token {held.fencing_token}): no "
            f"renewal or loss told for {now - held.overdue_at + self.margin:.1f} s past its "
            "validity; its heartbeat is stuck, restart the process"
            for (name, identity), held in sorted(self._held.items())
            if now >= held.overdue_at
        ]


class _StatsCollector:
    """The probe server's own counters, for ``/metrics`` next to the registry's."""

    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.stats
        yield CounterMetricFamily(
            "trio_lease_probe_connections_shed",
            "Probe server connections closed unanswered to make room for newer ones",
            value=stats.shed,
        )
        yield CounterMetricFamily(
            "trio_lease_probe_timeouts",
            "Probe server connections closed at their deadline from accept",
            value=stats.timeouts,
        )
        yield CounterMetricFamily(
            "trio_lease_probe_accept_errors",
            "Errors of accept() on the probe port (each one backs off)",
            value=stats.accept_errors,
        )
        yield GaugeMetricFamily(
            "trio_lease_probe_connections", "Probe server connections open", value=stats.open
        )
        yield GaugeMetricFamily(
            "trio_lease_probe_connections_max",
            "Probe server connections served at once at most",
            value=stats.capacity,
        )


def _server_metrics(stats: ServerStats) -> CollectorRegistry:
    """A registry of the probe server's counters alone."""
    import prometheus_client

    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    registry.register(_StatsCollector(stats))
    return registry


def _answer(
    health: HealthObserver | None,
    metrics: CollectorRegistry | None,
    target: str,
    server: CollectorRegistry | None = None,
) -> Answer:
    """The answer to a GET of ``target`` (path and query); ``server``: the probe server's own
    metrics, served after ``metrics``."""
    parts = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(parts.query)
    if health is not None and parts.path == "/healthz":
        return _healthz(health)
    if health is not None and parts.path == "/readyz":
        return _readyz(health, query)
    if metrics is not None and parts.path == "/metrics":
        import prometheus_client

        return (
            200,
            prometheus_client.CONTENT_TYPE_LATEST,
            prometheus_client.generate_latest(metrics)
            + (b"" if server is None else prometheus_client.generate_latest(server)),
        )
    return 404, _TEXT, b"not found: try /healthz, /readyz or /metrics\n"


def _healthz(health: HealthObserver) -> Answer:
    """``/healthz``: 200 unless a heartbeat or wait is stuck (503 naming each)."""
    problems = health.stuck()
    if problems:
        return 503, _TEXT, ("\n".join(problems) + "\n").encode()
    return 200, _TEXT, b"ok\n"


def _readyz(health: HealthObserver, query: dict[str, list[str]]) -> Answer:
    """``/readyz``: ready; with ``?leader=1``, only while holding the lease (``?name=``) or any."""
    if query.get("leader", ["0"])[-1] in ("", "0", "false", "no"):
        return 200, _TEXT, b"ok\n"
    name = query.get("name", [None])[-1]
    if health.holding(name):
        return 200, _TEXT, b"leading\n"
    which = f"the lease named {_plain(name)}" if name is not None else "any lease"
    return 503, _TEXT, f"not holding {which}\n".encode()


async def serve_health(
    health: HealthObserver | None = None,
    *,
    metrics: CollectorRegistry | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status`` gets the port (``tg.start(serve_health, ...)``).

    ``health`` serves ``/healthz`` and ``/readyz``, ``metrics`` (a prometheus_client
    registry) serves ``/metrics``; give either or both. ``port=0`` picks a free port.
    """
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
    await _server(health, metrics).serve(listener)


def _server(health: HealthObserver | None, metrics: CollectorRegistry | None) -> ProbeServer:
    """A probe server answering from ``health`` and ``metrics`` (its own counters included)."""
    stats = ServerStats()
    own = None if metrics is None else _server_metrics(stats)
    return ProbeServer(lambda target: _answer(health, metrics, target, own), stats=stats)


class HealthServer:
    """:func:`serve_health` as an ``async with`` block; :attr:`port` is the port it listens on.

    Entering raises :class:`OSError` if it cannot listen (the port is in use, the host is not
    an address of this machine).
    """

    def __init__(
        self,
        health: HealthObserver | None = None,
        *,
        metrics: CollectorRegistry | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if health is None and metrics is None:
            raise ValueError("HealthServer needs a HealthObserver, a metrics registry, or both")
        self.health = health
        self.metrics = metrics
        self.host = host
        #: The port asked for; once entered, the port listened on.
        self.port: int = port
        #: Once entered, what the server had to refuse (shed connections, timeouts, ...).
        self.stats: ServerStats = ServerStats()
        self._running: tuple[anyio.abc.TaskGroup, anyio.abc.Listener[Any]] | None = None

    async def __aenter__(self) -> HealthServer:
        # Listen before the task group, so a port in use raises OSError itself, not a group.
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        server = _server(self.health, self.metrics)
        self.stats = server.stats
        group = anyio.create_task_group()
        try:
            await group.__aenter__()
        except BaseException:
            await anyio.aclose_forcefully(listener)  # not shielded: forceful, no wait
            raise
        group.start_soon(server.serve, listener)  # noqa: ASYNC113  the listener is bound above; serving may start later
        self._running = group, listener
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> bool | None:
        assert self._running is not None, "HealthServer was not entered"
        (group, listener), self._running = self._running, None
        # serve() never raises (it logs a failure and stops serving), so the group is only
        # ever cancelled here: the block never sees the server fail. The block's own error
        # is not handed to the group, so it leaves as itself, not inside an exception group,
        # also when the caller's scope was cancelled meanwhile (Outcome).
        outcome = Outcome()
        outcome.given(exc_info[1])
        with outcome.settled():
            group.cancel_scope.cancel()
            try:
                await group.__aexit__(None, None, None)  # noqa: ASYNC102  exits the server's task group, cancelled above
            finally:
                await anyio.aclose_forcefully(listener)  # if never started; forceful, no wait
        return None


_public.publish(globals())
