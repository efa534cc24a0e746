"""Put a fake behind the socket server or the transport, and collect the fake's own errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._checks import Failure, Tally
from ._fake import FakeBase
from ._server import HostileServer, HostileTransport

__all__ = ["serving", "settle"]


@asynccontextmanager
async def serving(
    fake: FakeBase, path: str, tally: Tally
) -> AsyncIterator[tuple[str | None, HostileTransport | None]]:
    """(url, None) on the socket server, or (None, transport); fake errors become failures."""
    if path == "socket":
        async with HostileServer(fake) as server:
            try:
                yield server.url, None
            finally:
                _collect(server.errors, tally)
    else:
        transport = HostileTransport(fake)
        try:
            yield None, transport
        finally:
            _collect(transport.errors, tally)


def _collect(errors: list[BaseException], tally: Tally) -> None:
    for error in errors:
        tally.fail(Failure("(fake)", "(server)", "(any)",
                           f"the fake itself failed: {type(error).__name__}: {error}"))


def settle(fake: FakeBase, tally: Tally) -> None:
    """Turn the fake's invariant violations (takeover before L, fencing) into failures."""
    for violation in fake.violations:
        tally.fail(Failure("(store)", "(invariant)", "(any)", violation))
