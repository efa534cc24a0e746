"""httpx's MockTransport, its bodies served by an iterator object rather than an async generator.

httpx serves a reply's ``content=`` bytes through an async generator, which a watch that stops
reading early leaves unfinished for the garbage collector (on trio a ResourceWarning, an error
in this suite). The backend closes what it iterates; these bodies then leave nothing behind.
"""

from __future__ import annotations

import httpx


class _Body(httpx.AsyncByteStream):
    """The whole body as one piece, from an iterator object."""

    def __init__(self, content: bytes) -> None:
        self._content: bytes | None = content

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        content, self._content = self._content, None
        if content is None:
            raise StopAsyncIteration
        return content


class MockTransport(httpx.MockTransport):
    """:class:`httpx.MockTransport` whose replies' bodies are iterator objects."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if isinstance(response.stream, httpx.ByteStream):
            body = b"".join([piece async for piece in response.stream])
            response.stream = _Body(body)
        return response
