"""A backend standing for another process, for the tests of the many-holder layer."""

from __future__ import annotations

from collections.abc import Hashable

from trio_lease.testing import FaultyBackend


class OwnProcess(FaultyBackend):
    """A client of the store standing for a process of its own: its own store key, so the
    process-local bookkeeping (reentrancy, the semaphore's local queue, the shared watch) is not
    shared; a FaultyBackend, so a test can pause it as a crash."""

    @property
    def store_key(self) -> Hashable:
        return ("own process", id(self))
