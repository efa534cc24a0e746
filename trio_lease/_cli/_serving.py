"""``run --health-port N`` and ``--metrics-port N``: probes and a scrape endpoint while CMD runs.

:func:`serving` opens the servers before the lease is waited for and closes them when the run
ends, and gives the observers the lease reports to: a :class:`~trio_lease.health.HealthObserver`
for ``/healthz`` and ``/readyz``, a :class:`~trio_lease.metrics.PrometheusMetrics` on a registry
of its own (with the process, platform and GC collectors) for ``/metrics``. The same host and
port for both make one server answering all three. Each server says where it listens on stderr
(useful with port 0, which picks a free one). A port that cannot be listened on is a
configuration error (exit 78), before anything else happens.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .._exceptions import LeaseConfigError
from .._observer import LeaseObserver
from .._settings import LeaseSettings
from ..health import HealthObserver, HealthServer
from ._options import env, env_value

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["add_serving_options", "serving"]


def port_number(value: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: any free port)."""
    port = int(value) if value.strip().isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {value!r}")
    return port


def add_serving_options(parser: argparse.ArgumentParser) -> None:
    """The health and metrics options of ``run``."""
    group = parser.add_argument_group("operations (probes and metrics while the command runs)")
    group.add_argument(
        "--health-port",
        type=port_number,
        default=env_value("health_port", port_number),
        help="serve /healthz and /readyz (?leader=1: 200 only while holding) on this port",
    )
    group.add_argument(
        "--health-host",
        default=env("health_host", "127.0.0.1"),
        help="address to serve health on (default: 127.0.0.1; 0.0.0.0 for a pod's probes, "
        ":: in an IPv6 cluster)",
    )
    group.add_argument(
        "--metrics-port",
        type=port_number,
        default=env_value("metrics_port", port_number),
        help="serve Prometheus /metrics on this port (may be the health port; needs "
        "trio_lease[prometheus])",
    )
    group.add_argument(
        "--metrics-host",
        default=env("metrics_host", "127.0.0.1"),
        help="address to serve metrics on (default: 127.0.0.1; :: for IPv6)",
    )


def _registry() -> CollectorRegistry:
    """A registry with the process, platform and GC collectors; an install hint if missing."""
    try:
        import prometheus_client
    except ImportError:
        raise LeaseConfigError(
            "--metrics-port needs prometheus_client, which is not installed: "
            "pip install 'trio_lease[prometheus]'"
        ) from None
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    prometheus_client.PlatformCollector(registry=registry)
    prometheus_client.GCCollector(registry=registry)
    return registry


@contextlib.asynccontextmanager
async def serving(
    args: argparse.Namespace, settings: LeaseSettings
) -> AsyncIterator[list[LeaseObserver]]:
    """Serve what the options ask for while the block runs; yields the lease's observers."""
    observers: list[LeaseObserver] = []
    #: (host, port) -> [option, health, registry]: one server per address.
    servers: dict[tuple[str, int], tuple[str, HealthObserver | None, CollectorRegistry | None]]
    servers = {}
    if args.health_port is not None:
        health = HealthObserver(heartbeat_timeout=settings.heartbeat_timeout)
        observers.append(health)
        servers[args.health_host, args.health_port] = ("--health-port", health, None)
    if args.metrics_port is not None:
        registry = _registry()  # first: it says what to install if prometheus_client is missing
        from ..metrics import PrometheusMetrics

        observers.append(PrometheusMetrics(registry))
        address = (args.metrics_host, args.metrics_port)
        option, shared, _ = servers.get(address, ("--metrics-port", None, None))
        servers[address] = (option, shared, registry)
    async with contextlib.AsyncExitStack() as stack:
        for (host, port), (option, health_observer, served) in servers.items():
            server = HealthServer(health_observer, metrics=served, host=host, port=port)
            try:
                await stack.enter_async_context(server)
            except OSError as exc:
                raise LeaseConfigError(
                    f"{option} {port}: cannot listen on {host}:{port} "
                    f"({exc.strerror or exc}); pick a free port or another host"
                ) from None
            paths = [
                *(["/healthz", "/readyz"] if health_observer else []),
                *(["/metrics"] if served else []),
            ]
            shown = f"[{host}]" if ":" in host else host
            print(
                f"trio-lease: serving {', '.join(paths)} on http://{shown}:{server.port}",
                file=sys.stderr,
            )
        yield observers
