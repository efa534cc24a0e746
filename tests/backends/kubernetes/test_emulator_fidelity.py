"""The backend against the emulator's real-server answers (404 bodies, the gate)."""

from __future__ import annotations

import pytest

from trio_lease import LeaseConfigError
from trio_lease.testing.kube import KubeEmulator

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio


async def test_missing_crd_text_plain_404_is_a_config_error_naming_the_manifests() -> None:
    """No CRD: the emulator answers text/plain '404 page not found' as the real not-found handler
    does (apiserver/pkg/util/notfoundhandler/not_found_handler.go); the backend names the
    ``trio-lease manifests`` command that prints the CRD."""
    emulator = KubeEmulator()
    async with make_backend(emulator.transport(), kind="akka.io/v1") as backend:
        with pytest.raises(LeaseConfigError, match=r"trio-lease manifests --lease-kind akka"):
            await backend.get("job")
    assert emulator.requests[-1].status == 404


async def test_preferred_holder_is_dropped_on_a_default_cluster() -> None:
    """Gate off (the default): a preferredHolder written by anyone is dropped, so the backend
    sees none and never steps down (pkg/registry/coordination/lease/strategy.go)."""
    emulator = emulator_with_crd()
    emulator.apply({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"holderIdentity": "", "strategy": "OldestEmulationVersion",
                 "preferredHolder": "pod-b"},
    })
    async with make_backend(emulator.transport()) as backend:
        current = await backend.get("job")
    assert getattr(current, "preferred_holder", "") == ""
