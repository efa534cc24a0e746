"""A release that races a handover request still releases: the requester gets the lease at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from trio_lease import Lease, LeaseRecord
from trio_lease.backends.memory import MemoryBackend, MemoryStore

from .conftest import SETTINGS

pytestmark = pytest.mark.anyio


class WriteAfterRead(MemoryBackend):
    """Runs ``after_read`` (once) between its next read and the caller's write."""

    after_read: Callable[[], Awaitable[object]] | None = None
    ran = False

    async def get(self, name: str) -> LeaseRecord | None:
        record = await super().get(name)
        if self.after_read is not None:
            after_read, self.after_read = self.after_read, None
            await after_read()
            self.ran = True
        return record


async def test_a_handover_request_between_the_release_read_and_write_does_not_stop_it() -> None:
    """The request's write makes the release's compare-and-swap conflict; the release reads
    again, finds the grant still its own and releases, keeping the request: the requester
    takes the lease at once (not after L) with the next token."""
    store = MemoryStore()
    backend = WriteAfterRead(store)
    holder = Lease("job", "a", backend, SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    async with holder.held() as grant:
        backend.after_read = requester.request_handover  # lands inside the release
    assert backend.ran  # the release read the record, then the request landed
    released = store.records["job"]
    assert released.holder == ""
    assert released.handover_to == requester.identity
    assert released.fencing_token == grant.fencing_token
    start = anyio.current_time()
    async with requester.held() as taken:
        assert taken.fencing_token == grant.fencing_token + 1
    assert anyio.current_time() - start < SETTINGS.heartbeat_interval
