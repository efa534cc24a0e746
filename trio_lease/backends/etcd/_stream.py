"""Reading an etcd gateway stream: its lines (each capped), or a failure body (capped)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from ..._exceptions import BackendProtocolError
from ..._lean_http import LeanStream
from ..._wire import MAX_BODY_BYTES

__all__ = ["MAX_WATCH_LINE", "lines", "read_capped"]

#: Longest line of a watch stream read (one ``WatchResponse``; a record's event is < 1 KiB).
MAX_WATCH_LINE = MAX_BODY_BYTES


async def read_capped(response: httpx.Response | LeanStream, cap: int) -> bytes:
    """At most ``cap`` + 1 bytes of a streamed body (enough to tell it is too long)."""
    content = bytearray()
    async for chunk in response.aiter_bytes():
        content += chunk
        if len(content) > cap:
            break
    return bytes(content[: cap + 1])


async def lines(response: httpx.Response | LeanStream, where: str) -> AsyncIterator[bytes]:  # noqa: ASYNC900  internal; no scope at its yields
    """The lines of a streamed body, each at most :data:`MAX_WATCH_LINE` bytes."""
    buffer = bytearray()
    async for chunk in response.aiter_bytes():
        searched = len(buffer)
        buffer += chunk
        while (end := buffer.find(b"\n", searched)) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            searched = 0
            yield line
        if len(buffer) > MAX_WATCH_LINE:
            raise BackendProtocolError(
                f"etcd's answer to {where} has a line longer than {MAX_WATCH_LINE:,} bytes"
            )
    if buffer:
        yield bytes(buffer)
