"""Prometheus metrics of the leases of a process: an observer writing to a registry.

``pip install 'trio_lease[prometheus]'``, then::

    from prometheus_client import CollectorRegistry
    import trio_lease
    from trio_lease.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    trio_lease.add_observer(PrometheusMetrics(registry))

Metrics (``trio_lease_`` is the default ``namespace``; ``name`` is the lease name):

====================================================  =========  ==================================
metric                                                type       what
====================================================  =========  ==================================
``trio_lease_held{name}``                             gauge      1 while this process holds the
                                                                 lease, else 0 (client-go's
                                                                 ``leader_election_master_status``)
``trio_lease_acquisitions_total{name}``               counter    new grants
``trio_lease_handover_wait_seconds{name}``            histogram  how long each acquisition waited
``trio_lease_renewal_latency_seconds{name}``          histogram  confirmed renewals, their latency
``trio_lease_renewal_failures_total{name,cause}``     counter    renewal attempts that confirmed
                                                                 nothing, by :data:`RENEWAL_CAUSES`
``trio_lease_losses_total{name,cause}``               counter    grants lost, by :data:`LOSS_CAUSES`
``trio_lease_releases_total{name,written}``           counter    grants ended without a loss;
                                                                 ``written="false"``: left to expire
``trio_lease_key_failures_total{name}``               counter    errors of run_partitioned's ``fn``
                                                                 for the key whose lease is ``name``
====================================================  =========  ==================================

A :class:`~trio_lease.health.HealthServer` given the registry adds its own
``trio_lease_probe_*`` counters to what it serves (shed connections, timeouts, accept errors).

The ``cause`` label is a category from a fixed set (:func:`cause_category`), never the cause's
text, so the number of series stays bounded whatever the backend says.
"""

from __future__ import annotations

import functools

try:
    import prometheus_client
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a subprocess
    if _missing.name != "prometheus_client":
        raise
    raise ImportError(
        "trio_lease.metrics needs prometheus_client, which is not installed: "
        "pip install 'trio_lease[prometheus]'"
    ) from _missing

from . import _public
from ._observer import LeaseInfo, LeaseObserver

__all__ = ["LOSS_CAUSES", "RENEWAL_CAUSES", "PrometheusMetrics", "cause_category"]

#: Categories of a renewal failure: the request timed out; the record's version moved on (a
#: re-read tells whose write it was); the store answered with an error (``unavailable``:
#: BackendUnavailable, ``auth``: BackendAuthError, ``error``: any other); the record cannot be
#: read; the answer did not confirm the renewal; anything else is ``other``.
RENEWAL_CAUSES: tuple[str, ...] = (
    "timeout",
    "conflict",
    "unavailable",
    "auth",
    "error",
    "unreadable",
    "unconfirmed",
    "other",
)

#: Categories of a loss: no renewal was confirmed before the holder's deadline; another owner
#: (or a rewrite with another fencing token) took the record; the record was deleted.
LOSS_CAUSES: tuple[str, ...] = ("deadline", "taken_over", "deleted", "other")

#: (category, how the core's cause text starts or what it contains), first match wins.
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("deadline", "no renewal was confirmed before the holder's deadline"),
    ("deleted", "the lease record was deleted"),
    ("taken_over", "taken over by "),
    ("taken_over", "the record was rewritten"),
    ("timeout", "timed out"),
    ("conflict", "conflict"),
    ("unreadable", "the record is unreadable"),
    ("unconfirmed", "the answer to a renewal did not confirm it"),
    ("unconfirmed", "no renewal was confirmed"),
    ("unavailable", "BackendUnavailable:"),
    ("auth", "BackendAuthError:"),
)

#: Buckets of the handover wait: from at once to ten minutes (a wait spans heartbeat timeouts).
_WAIT_BUCKETS = (0.0, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def cause_category(cause: str) -> str:
    """The category of a cause the core tells (``lost`` or ``renewal_failed``).

    One of :data:`LOSS_CAUSES` or :data:`RENEWAL_CAUSES`: ``other`` for a text it does not
    know, ``error`` for another exception (``"TypeName: message"``).
    """
    for category, pattern in _PATTERNS:
        if cause.startswith(pattern):
            return category
    head, colon, _ = cause.partition(":")
    if colon and head.isidentifier():
        return "error"
    return "other"


class PrometheusMetrics(LeaseObserver):
    """A :class:`~trio_lease.LeaseObserver` keeping Prometheus metrics of every lease it sees.

    Args:
        registry: where the metrics are registered (default: prometheus_client's global
            ``REGISTRY``, which its ``start_http_server`` serves). One instance per registry:
            a second raises prometheus_client's duplicate error.
        namespace: the metric names' prefix.
    """

    def __init__(
        self,
        registry: prometheus_client.CollectorRegistry | None = None,
        namespace: str = "trio_lease",
    ) -> None:
        into = prometheus_client.REGISTRY if registry is None else registry
        self.registry: prometheus_client.CollectorRegistry = into
        # Every metric in ``namespace``, registered with ``into``.
        gauge = functools.partial(prometheus_client.Gauge, namespace=namespace, registry=into)
        counter = functools.partial(prometheus_client.Counter, namespace=namespace, registry=into)
        histogram = functools.partial(
            prometheus_client.Histogram, namespace=namespace, registry=into
        )
        self.held: prometheus_client.Gauge = gauge(
            "held", "1 while this process holds the lease, else 0", ["name"]
        )
        self.acquisitions: prometheus_client.Counter = counter(
            "acquisitions", "New grants of the lease to this process", ["name"]
        )
        self.handover_wait: prometheus_client.Histogram = histogram(
            "handover_wait_seconds",
            "How long an acquisition waited for the lease",
            ["name"],
            buckets=_WAIT_BUCKETS,
        )
        self.renewal_latency: prometheus_client.Histogram = histogram(
            "renewal_latency_seconds", "Latency of confirmed renewals", ["name"]
        )
        self.renewal_failures: prometheus_client.Counter = counter(
            "renewal_failures",
            "Renewal attempts that confirmed nothing, by cause category",
            ["name", "cause"],
        )
        self.losses: prometheus_client.Counter = counter(
            "losses", "Grants lost, by cause category", ["name", "cause"]
        )
        self.releases: prometheus_client.Counter = counter(
            "releases",
            "Grants ended without a loss (written=false: left to expire)",
            ["name", "written"],
        )
        self.key_failures: prometheus_client.Counter = counter(
            "key_failures", "Errors of run_partitioned's fn, by the key's lease name", ["name"]
        )
        #: The identities holding each name in this process (two Lease objects may share one).
        self._holders: dict[str, set[str]] = {}

    def _set_held(self, lease: LeaseInfo, holding: bool) -> None:
        holders = self._holders.setdefault(lease.name, set())
        if holding:
            holders.add(lease.identity)
        else:
            holders.discard(lease.identity)
        self.held.labels(lease.name).set(1 if holders else 0)

    def waiting(self, lease: LeaseInfo, *, holder: str, expires_in: float) -> None:
        """Make the gauge exist (at 0) as soon as this process wants the lease."""
        if lease.name not in self._holders:
            self._set_held(lease, False)

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, valid_for: float
    ) -> None:
        self._set_held(lease, True)
        self.acquisitions.labels(lease.name).inc()
        self.handover_wait.labels(lease.name).observe(waited)

    def renewed(
        self, lease: LeaseInfo, *, fencing_token: int, latency: float, valid_for: float
    ) -> None:
        self.renewal_latency.labels(lease.name).observe(latency)

    def renewal_failed(
        self, lease: LeaseInfo, *, fencing_token: int, cause: str, time_left: float
    ) -> None:
        self.renewal_failures.labels(lease.name, cause_category(cause)).inc()

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        self._set_held(lease, False)
        self.losses.labels(lease.name, cause_category(cause)).inc()

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        self._set_held(lease, False)
        self.releases.labels(lease.name, "true" if written else "false").inc()

    def key_failed(self, lease: LeaseInfo, **details: object) -> None:
        self.key_failures.labels(lease.name).inc()


_public.publish(globals())
