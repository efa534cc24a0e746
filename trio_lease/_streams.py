"""Streams of changes handed to callers: context managers that own the task producing them.

An async generator that yields while one of its own cancel scopes or task groups is open runs
the caller's loop body inside that scope: the library's timer can cancel the caller's awaits,
and the caller leaving its own scope unwinds the scope stack out of order (trio raises "Cancel
scope stack corrupted", asyncio lets a cancellation escape the caller's task group). So every
stream of changes the library hands out is a :class:`Changes`: an async context manager that
runs the producer in a task it owns and gives the caller the receiving end of an anyio memory
object stream::

    async with backend.watch(name) as records:
        async for record in records:
            ...

The producer is an async function given ``emit``; it awaits ``emit(item)`` for each item (the
stream has no buffer: the producer waits for the caller, as a generator would). Its scopes are
its own: the caller's body runs in the caller's task, under the caller's scopes only.

- The producer returns: the stream ends (the caller's ``async for`` ends).
- The producer raises: the stream ends after the items already handed out (the caller's
  ``async for`` ends; nothing is cancelled), and the error is raised from the ``async with``
  when the caller leaves the block, by itself (never inside an ExceptionGroup); a caller
  that reads past the end (``receive()``, ``anext()``) gets that error instead.
- The caller leaves the block (``break``, its own timeout, an error): the producer is
  cancelled and its cleanup runs before ``async with`` returns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Generic, NoReturn, TypeAlias, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from ._outcome import ExcInfo, Outcome, sole_error

__all__ = ["Changes", "Emit", "Produce"]

T = TypeVar("T")
Emit: TypeAlias = Callable[[T], Awaitable[None]]
Produce: TypeAlias = Callable[[Emit[T]], Awaitable[None]]

_USAGE = "async with {what} as items: async for item in items: ..."


class Changes(Generic[T]):
    """An async context manager handing the caller a receive stream fed by ``produce``.

    See the module docstring. ``what`` names the call in the error for a caller that iterates
    it directly (``async for x in backend.watch(name)``, the form of older versions).
    """

    __slots__ = ("_cm", "_produce", "_what")

    def __init__(self, produce: Produce[T], *, what: str = "this stream") -> None:
        self._produce = produce
        self._what = what
        self._cm: AbstractAsyncContextManager[MemoryObjectReceiveStream[T]] | None = None

    def __repr__(self) -> str:
        return f"<Changes of {self._what}>"

    async def __aenter__(self) -> MemoryObjectReceiveStream[T]:
        if self._cm is not None:
            raise RuntimeError(f"{self._what} was entered twice; call it again for a new stream")
        self._cm = _running(self._produce)
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc_info: *ExcInfo) -> bool | None:
        assert self._cm is not None
        # Not shielded: this cancels the producer and waits for its cleanup (which bounds itself).
        return await self._cm.__aexit__(*exc_info)  # noqa: ASYNC102  cancels its task

    def __aiter__(self) -> NoReturn:
        raise TypeError(
            f"{self._what} is an async context manager, not an async iterator: "
            + _USAGE.format(what=self._what)
        )


@asynccontextmanager
async def _running(produce: Produce[T]) -> AsyncIterator[MemoryObjectReceiveStream[T]]:
    send, receive = anyio.create_memory_object_stream[T](0)
    failures: list[Exception] = []

    async def feed() -> None:
        with send:  # closed when the producer ends, however it ends: the stream ends
            try:
                await produce(send.send)
            except anyio.BrokenResourceError:
                pass  # the caller left while an item was on its way
            except Exception as exc:  # raised when the caller leaves the block
                single = sole_error(exc) if isinstance(exc, ExceptionGroup) else exc
                failures.append(single if isinstance(single, Exception) else exc)

    outcome = Outcome()
    # `with send` here too: a producer cancelled before its first step (asyncio) never ran its
    # own `with send`, and the stream would be left to the garbage collector.
    with outcome.settled(), send:  # the caller's own error bare, also after its deadline passed
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            try:
                with outcome.body():
                    yield receive
            finally:
                tg.cancel_scope.cancel()  # before closing: the producer stops, it does not fail
                receive.close()
        ended = isinstance(outcome.body_error, anyio.EndOfStream | StopAsyncIteration)
        if failures and ended:  # the caller read past the end the producer's failure made
            outcome.body_error = None
            raise failures[0] from None
        if failures:
            raise failures[0]
