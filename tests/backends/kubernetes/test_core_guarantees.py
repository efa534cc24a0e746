"""DESIGN §4 guarantee tests (tests/core/test_guarantees.py) on the Kubernetes backend.

The core's guarantee tests are written against a ``world`` fixture; this module re-runs every
one of them with a world whose clients are KubernetesBackends on one in-process emulator, for
both lease kinds, on virtual time (asyncio and trio).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.core import test_guarantees as _guarantees
from tests.core.conftest import SETTINGS, World

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio

for _name in dir(_guarantees):
    if _name.startswith("test_"):
        globals()[_name] = getattr(_guarantees, _name)


@pytest.fixture(params=["coordination.k8s.io/v1", "akka.io/v1"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """KubernetesBackends on one in-process emulator, virtual time.

    All clients share one transport, as all backends of a process share one server: they are
    the same store (for reentrancy) and share one pooled httpx client.
    """
    transport = emulator_with_crd().transport()
    kind: str = request.param
    w = World(f"kubernetes {kind}", SETTINGS, lambda: make_backend(transport, kind=kind))
    yield w
    await w.aclose()
