"""Reading an etcd gateway stream: its lines (each capped), or a failure body (capped)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

from ..._exceptions import BackendProtocolError
from ..._http import body_pieces
from ..._lean_http import LeanStream
from ..._wire import MAX_BODY_BYTES

__all__ = ["MAX_WATCH_LINE", "Lines", "read_capped"]

#: Longest line of a watch stream read (one ``WatchResponse``; a record's event is < 1 KiB).
MAX_WATCH_LINE = MAX_BODY_BYTES


async def read_capped(response: httpx.Response | LeanStream, cap: int) -> bytes:
    """At most ``cap`` + 1 bytes of a streamed body (enough to tell it is too long)."""
    content = bytearray()
    chunks = (
        body_pieces(response) if isinstance(response, httpx.Response) else response.aiter_bytes()
    )
    try:
        async for chunk in chunks:
            content += chunk
            if len(content) > cap:
                break
    finally:
        if isinstance(chunks, AsyncGenerator):  # httpx's: closed here, never by the GC
            await chunks.aclose()
    return bytes(content[: cap + 1])


class Lines:
    """The lines of a streamed body, each at most :data:`MAX_WATCH_LINE` bytes.

    An iterator object, not an async generator: one abandoned mid-stream holds nothing a
    finalizer must run. Its owner closes it (``contextlib.aclosing``), which closes the body's
    iterator (httpx's is an async generator).
    """

    __slots__ = ("_buffer", "_chunks", "_ended", "_searched", "_where")

    def __init__(self, response: httpx.Response | LeanStream, where: str) -> None:
        self._chunks = (
            body_pieces(response)
            if isinstance(response, httpx.Response)
            else response.aiter_bytes()
        )
        self._where = where
        self._buffer = bytearray()
        self._searched = 0  # the buffer before this holds no newline
        self._ended = False

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> bytes:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n", self._searched)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                self._searched = 0
                return line
            self._searched = len(buffer)
            if len(buffer) > MAX_WATCH_LINE:
                raise BackendProtocolError(
                    f"etcd's answer to {self._where} has a line longer than "
                    f"{MAX_WATCH_LINE:,} bytes"
                )
            if self._ended:
                if not buffer:
                    raise StopAsyncIteration
                line = bytes(buffer)
                buffer.clear()
                return line
            chunk = await anext(self._chunks, None)
            if chunk is None:
                self._ended = True
            else:
                buffer += chunk

    async def aclose(self) -> None:
        """Close the body's iterator (httpx's is an async generator)."""
        if isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()
