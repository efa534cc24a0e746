"""Fixtures for the core tests: ``world``, the memory backend on virtual time.

Core tests take ``world`` (a :class:`~tests.conftest.World`: a shared store, its settings and
its clients) and use only the public API plus ``world.new_backend()``. The guarantee tests
(test_guarantees.py) take the same fixture but get every backend: that module overrides
``world`` with ``every_world`` from tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import SETTINGS, STORES, World

__all__ = ["SETTINGS", "World"]

#: The memory store: the first of the backends every_world runs on.
MEMORY = STORES[0]


@pytest.fixture
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """The memory backend on virtual time (every test runs on asyncio and trio)."""
    w = MEMORY.world(request)
    yield w
    await w.aclose()
