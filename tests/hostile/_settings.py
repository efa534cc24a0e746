"""Lease timing for the core-level hostile tests: small L so real time stays short.

Kubernetes coordination leases need L in whole seconds (>= 1); akka.io/v1 leases need
D <= L - 3R (Akka's wall-clock rule); etcd takes any L. T is small so that many calls fit,
yet large enough for loopback requests on a loaded 2-core machine.
"""

from __future__ import annotations

from trio_lease import LeaseSettings

__all__ = ["AKKA_SETTINGS", "SETTINGS"]

#: L = 2 s, R = 0.5 s, T = 0.25 s, D = 1.333 s (coordination.k8s.io/v1 and etcd).
SETTINGS = LeaseSettings(
    heartbeat_timeout=2, heartbeat_interval=0.5, lease_operation_timeout=0.25, stop_timeout=0.3
)
#: L = 3 s, R = 0.5 s, T = 0.25 s, D = 1.5 s (akka.io/v1: D <= L - 3R).
AKKA_SETTINGS = LeaseSettings(
    heartbeat_timeout=3,
    heartbeat_interval=0.5,
    lease_operation_timeout=0.25,
    holder_deadline=1.5,
    stop_timeout=0.3,
)
