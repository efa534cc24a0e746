"""Test helpers for a backend's watch (an async context manager handing out a receive stream)."""

from __future__ import annotations

from trio_lease import LeaseBackend, LeaseRecord


async def first_state(backend: LeaseBackend, name: str) -> LeaseRecord | None:
    """The first state ``backend.watch(name)`` delivers (or the error it fails with)."""
    async with backend.watch(name) as states:
        return await anext(states)
