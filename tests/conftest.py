"""Shared fixtures: every async test runs on asyncio and on trio, on virtual time.

``anyio_backend`` is parametrised over both backends; each test gets a fresh virtual clock
(trio's MockClock with autojump, or trio_lease.testing's VirtualTimeEventLoop on asyncio), so
sleeps and timeouts cost no real time and no test depends on the machine's speed. Tests that
need real time (real sockets, threads, subprocesses) use the ``real_time_backend`` fixture
instead, by overriding ``anyio_backend`` in their module.
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_lease.testing import virtual_time_backends


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both anyio backends, each on a fresh virtual clock."""
    specs = dict(virtual_time_backends())
    name: str = request.param
    return name, specs[name]


@pytest.fixture(params=["asyncio", "trio"])
def real_time_backend(request: pytest.FixtureRequest) -> str:
    """Both anyio backends on real time, for tests with threads, sockets or processes."""
    backend: str = request.param
    return backend
