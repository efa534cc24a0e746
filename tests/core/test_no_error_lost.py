"""§4.5 "no exception is lost": every public scope and runner, every way of leaving it.

The matrix: each entry point of tests/core/_entry_points.py × each scenario of
tests/core/_matrix.py, on asyncio and trio, on the memory store and virtual time. The
real-socket part (the entry points that listen on sockets, and every entry point on SQLite, the
emulator over HTTP and etcd, on asyncio, uvloop and trio) is tests/test_no_error_lost_sockets.py.
Each case asserts the exception the caller sees, that nothing is left running or open, and that
what was held is free for the next owner in time.
"""

from __future__ import annotations

import pytest

from tests.conftest import World

from ._entry_points import ENTRIES, Ctx, Entry
from ._matrix import cases, run_case

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("entry", "scenario"), cases([e for e in ENTRIES if not e.sockets]))
async def test_no_error_is_lost(entry: Entry, scenario: str, world: World) -> None:
    """The caller sees exactly the body's error, the library's, or nothing, as the scenario
    says; no task, thread or socket is left; the lease is free for the next owner in time."""
    await run_case(entry, scenario, Ctx(world, world.faulty()))
