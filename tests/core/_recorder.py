"""An observer that records every call, for the tests of what leases tell their observers."""

from __future__ import annotations

from typing import Any

from trio_lease import LeaseInfo, LeaseObserver


class Recorder(LeaseObserver):
    """Records (step, lease name, details) for every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def steps(self) -> list[str]:
        return [step for step, _, _ in self.calls]

    def details(self, step: str) -> list[dict[str, Any]]:
        return [d for s, _, d in self.calls if s == step]

    def _record(self, step: str, lease: LeaseInfo, details: dict[str, Any]) -> None:
        self.calls.append((step, lease.name, details))

    def waiting(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("waiting", lease, details)

    def acquired(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("acquired", lease, details)

    def renewed(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("renewed", lease, details)

    def renewal_failed(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("renewal_failed", lease, details)

    def lost(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("lost", lease, details)

    def released(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("released", lease, details)

    def key_failed(self, lease: LeaseInfo, **details: Any) -> None:
        self._record("key_failed", lease, details)
