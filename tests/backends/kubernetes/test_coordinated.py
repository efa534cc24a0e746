"""Coordinated leader election fields: strategy/preferredHolder kept; the holder steps down."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from trio_lease import Lease, LeaseLost, LeaseSettings
from trio_lease.testing.kube import KubeEmulator

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
# The fields exist only with the CoordinatedLeaderElection feature gate on (off by default up to
# 1.35: pkg/registry/coordination/lease/strategy.go drops them), so every test here turns it on.
#: L = 15 s, R = 1.5 s, T = 0.5 s, D = 10 s.
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)


def _prefer(emulator: KubeEmulator, preferred: str) -> None:
    """What the coordinated-election controller does: set strategy and preferredHolder."""
    lease = emulator.get_lease("job")
    assert lease is not None
    lease["spec"]["strategy"] = "OldestEmulationVersion"
    lease["spec"]["preferredHolder"] = preferred
    emulator.apply(lease)


def _spec(emulator: KubeEmulator) -> dict[str, Any]:
    lease = emulator.get_lease("job")
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


async def test_holder_steps_down_after_grace_when_another_is_preferred() -> None:
    """preferredHolder naming another identity stops renewals after the grace; body cancelled."""
    emulator = emulator_with_crd(coordinated_leader_election=True)
    transport = emulator.transport()
    async with make_backend(transport, preferred_holder_grace=5) as backend:
        lease = Lease("job", "a", backend, SETTINGS)
        start = anyio.current_time()
        marks: list[float] = []
        identities: list[str] = []

        async def hold() -> None:
            async with lease.held() as grant:
                identities.append(grant.identity)
                await anyio.sleep(3)
                _prefer(emulator, "b_1")
                marks.append(anyio.current_time())
                await anyio.sleep(3600)

        with pytest.raises(LeaseLost):
            await hold()
        lost_after = anyio.current_time() - marks[0]
    assert 5 <= lost_after <= 5 + SETTINGS.deadline + SETTINGS.heartbeat_interval
    assert anyio.current_time() - start < 60
    spec = _spec(emulator)
    assert spec["holderIdentity"] == identities[0]  # not released: it expires for "b_1"
    assert spec["preferredHolder"] == "b_1"
    assert spec["strategy"] == "OldestEmulationVersion"


async def test_body_ending_first_releases_and_keeps_the_fields() -> None:
    """A body that ends before the grace releases at once; strategy/preferredHolder are kept."""
    emulator = emulator_with_crd(coordinated_leader_election=True)
    async with make_backend(emulator.transport(), preferred_holder_grace=60) as backend:
        lease = Lease("job", "a", backend, SETTINGS)
        async with lease.held():
            _prefer(emulator, "b_1")
            await anyio.sleep(5)  # renewals go on inside the grace period
        spec = _spec(emulator)
        assert spec["holderIdentity"] == ""
        assert spec["preferredHolder"] == "b_1"
        assert spec["strategy"] == "OldestEmulationVersion"


async def test_preferred_holder_naming_us_changes_nothing() -> None:
    """preferredHolder naming the holder itself does not stop renewals."""
    emulator = emulator_with_crd(coordinated_leader_election=True)
    async with make_backend(emulator.transport()) as backend:
        lease = Lease("job", "a", backend, SETTINGS)
        async with lease.held() as grant:
            _prefer(emulator, grant.identity)
            await anyio.sleep(60)  # six holder deadlines: renewals must have continued
            assert lease.check_lease()
