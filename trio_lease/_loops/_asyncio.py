"""The seam on asyncio (and loops built on it, such as uvloop).

- Clock: the loop's ``time`` method (what :func:`anyio.current_time` returns there), bound once;
  on asyncio's own loops ``time.monotonic`` itself, which that method returns.
- Scopes: the caller's effective deadline and the check for a pending cancellation read
  anyio's cancel scopes directly (its asyncio backend's own walk, without its properties).
- Waiter: a bare future; an anyio Event cost twice as much per wait, and most renewals wait
  for a slot when a process holds hundreds of leases.
- Safety timer (:class:`LoopAlarm`): one loop timer per grant, not a deadline on each scope.
  anyio arms a loop timer for a scope's deadline and, when the deadline moves, cancels it and
  arms a new one; the cancelled timer stays in the loop's heap until its time (the deadline is
  L ahead, so some L / R of them per grant), and each is a few objects the garbage collector
  promotes and walks: at 1,000 leases that was about a tenth of the client's CPU per renewal
  (tools/benchmarks/README.md, "Design measurements"). The alarm fires at the deadline it last
  read and asks its owner again: about one timer per lease duration instead of one per renewal,
  with the same timing (a timer callback like anyio's own, run with the other expired timers).
- Write bounds (:class:`SharedBound`): one loop timer for the bounds of every holder's writes
  in flight. A bound is a scope's deadline while a write is in flight, set and cleared once per
  renewal; as the scope's own deadline, each set armed a loop timer, and the cleared one stayed
  in the loop's heap for T (its handle, a copy of the task's context and what that holds: a
  fifth of the objects a renewal left to the garbage collector's oldest generation). The
  scope's deadline field is written without a timer (so
  :func:`anyio.current_effective_deadline` reads the bound, as the backends need), and one
  timer per loop, set for the earliest bound of a write still in flight, cancels the scope
  whose bound passed, as anyio's timer would (tools/benchmarks/README.md, "A write bound on
  asyncio").
- Connection (:class:`NativeConnection`): asyncio's own transport with reading left on. anyio's
  stream switches reading on and off around every receive (two ``epoll_ctl`` calls each) plus a
  checkpoint: about 60 to 90 µs per request on the benchmark machine, a quarter of the request.
  The protocol's callbacks only queue bytes and wake the waiting task; every byte is parsed in
  that task, under its cancel scope.
- Start (:func:`loop_factory`): the runner's loop, built before a given call.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import math
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import Any, cast

import anyio
import anyio.lowlevel

from .._connect import HandshakeClosed
from ._quiet import quiet

__all__ = [
    "FAILURES",
    "LoopAlarm",
    "NativeConnection",
    "SharedBound",
    "checkpoint_if_cancelled",
    "clock",
    "connect",
    "deadline_keeper",
    "effective_deadline",
    "loop_factory",
    "sleep_until",
    "waiter",
    "write_bound",
]

_READ_SIZE = 65536
_BUFFER_LIMIT = 4 * _READ_SIZE
FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    ssl.SSLError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
)


def clock() -> Callable[[], float]:
    loop = asyncio.get_running_loop()
    if type(loop).time is asyncio.BaseEventLoop.time:
        # What asyncio's own loops read (BaseEventLoop.time returns it), without the method's
        # frame: a renewal reads the clock about eight times.
        return time.monotonic
    return loop.time


def _anyio_task_states() -> Any:
    """anyio's cancel scope state per task on asyncio (``_task_states``: each task's innermost
    scope), or None where this anyio lacks it: then anyio's public functions are used."""
    try:
        from anyio._backends._asyncio import CancelScope, _task_states
    except ImportError:  # pragma: no cover - anyio 4.11 to 4.x have both
        return None
    fields = ("_deadline", "_cancel_called", "_shield", "_parent_scope")
    if not all(hasattr(CancelScope(), field) for field in fields) or not isinstance(
        getattr(_task_states, "data", None), dict
    ):  # pragma: no cover
        return None
    return _task_states


#: anyio's ``_task_states`` (a WeakKeyDictionary: task → its state, whose ``cancel_scope`` is
#: the task's innermost scope), or None.
_TASK_STATES: Any = _anyio_task_states()


#: An iterator that is already exhausted: what awaiting :data:`_DONE` iterates, shared (an
#: exhausted iterator stays exhausted), so that nothing is made per await.
#: (Typed as the generator ``await`` expects: it only calls ``next`` on it.)
_EXHAUSTED: Any = iter(())


class _Done:
    """An awaitable that is done at once (no coroutine or generator made for it)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return cast("Generator[None, None, None]", _EXHAUSTED)


_DONE = _Done()


def _innermost_scope() -> Any:
    """The running task's innermost anyio cancel scope (None: the task is in none)."""
    # The mapping's own dict, keyed by weak references (a reference to the task compares as
    # the task): WeakKeyDictionary.get is a Python frame around this very lookup.
    task = asyncio.current_task()
    state = None if task is None else _TASK_STATES.data.get(weakref.ref(task))
    return None if state is None else state.cancel_scope


def _cancel_pending() -> bool:
    """Whether a scope around the running task, up to the first shield, has been cancelled:
    the test of anyio's ``checkpoint_if_cancelled`` (anyio 4's asyncio backend), on the
    scopes' fields rather than through their properties (with the deadline's walk below,
    about 20 property reads per request, and a coroutine per check)."""
    scope = _innermost_scope()
    while scope is not None:
        if scope._cancel_called:
            return True
        if scope._shield:
            return False
        scope = scope._parent_scope
    return False


def _checkpoint_if_cancelled() -> Awaitable[None]:
    """:func:`anyio.lowlevel.checkpoint_if_cancelled` on asyncio: a checkpoint (where the
    cancellation is delivered) only if a scope around the task has been cancelled; otherwise
    done at once, without a coroutine."""
    return _deliver_cancellation() if _cancel_pending() else _DONE


async def _deliver_cancellation() -> None:
    # anyio's own loop: checkpoints until its cancellation reaches the task (no event to wait
    # for: anyio delivers it from a callback of the loop, between two steps of the task).
    while _cancel_pending():  # noqa: ASYNC110
        await asyncio.sleep(0)


def _effective_deadline() -> float:
    """:func:`anyio.current_effective_deadline` on asyncio (anyio 4's own walk, on the fields):
    the nearest deadline of the scopes around the task up to the first shield; minus infinity
    once one of them has been cancelled."""
    scope = _innermost_scope()
    deadline = math.inf
    while scope is not None:
        if scope._deadline < deadline:
            deadline = scope._deadline
        if scope._cancel_called:
            return -math.inf
        if scope._shield:
            break
        scope = scope._parent_scope
    return deadline


#: :func:`anyio.lowlevel.checkpoint_if_cancelled` and :func:`anyio.current_effective_deadline`
#: on asyncio, read from anyio's scopes directly (tests/core/test_loop_seam_scopes.py checks
#: them against anyio's own in every arrangement of scopes); anyio's public functions where
#: this anyio keeps its scopes otherwise.
checkpoint_if_cancelled: Callable[[], Awaitable[None]]
effective_deadline: Callable[[], float]
if _TASK_STATES is not None:
    checkpoint_if_cancelled, effective_deadline = _checkpoint_if_cancelled, _effective_deadline
else:  # pragma: no cover - anyio 4.11 to 4.x keep them so
    checkpoint_if_cancelled = anyio.lowlevel.checkpoint_if_cancelled
    effective_deadline = anyio.current_effective_deadline


_Sleepers = dict[float, list["asyncio.Future[None]"]]
#: Per event loop, the futures of the tasks sleeping until each instant (one timer each).
_SLEEPERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sleepers] = (
    weakref.WeakKeyDictionary()
)


def sleep_until(deadline: float) -> Awaitable[None]:
    """Sleep until the loop's clock reads ``deadline``: a future per task, one loop timer per
    instant (asyncio's own sleep sets a timer per task, each pushed through the timer heap,
    whose entries compare in Python). The future itself is awaited, not a coroutine around
    it: a sleeping holder's objects outlive the garbage collector's young generations, and
    a coroutine per sleep was one more of them per renewal."""
    loop = asyncio.get_running_loop()
    if deadline <= loop.time():
        return asyncio.sleep(0)
    groups = _SLEEPERS.get(loop)
    if groups is None:
        groups = _SLEEPERS[loop] = {}
    future = loop.create_future()
    sleepers = groups.get(deadline)
    if sleepers is None:
        sleepers = groups[deadline] = [future]
        loop.call_at(deadline, _wake, groups, deadline)
    else:
        sleepers.append(future)
    return future  # cancelled with its task: the timer skips it


def _wake(groups: _Sleepers, deadline: float) -> None:
    for future in groups.pop(deadline, ()):
        if not future.done():
            future.set_result(None)


def waiter() -> asyncio.Future[None]:
    """A bare future: a request waiting for a slot holds it alone (what the dozens of
    renewals waiting at a tick of the grid hold sets off the garbage collector's young
    collections; tools/benchmarks/README.md)."""
    return asyncio.get_running_loop().create_future()


class LoopAlarm:
    """A :class:`~trio_lease._loops.DeadlineKeeper` with one loop timer (see the module)."""

    __slots__ = ("_handle", "_loop", "_ring", "timers_set")

    reads_on_ring = True

    def __init__(self, ring: Callable[[float], float | None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._ring = ring
        self._handle: asyncio.TimerHandle | None = None
        self.timers_set = 0

    def start(self, deadline: float) -> None:
        if self._handle is None:
            self._set(deadline)

    def add(self, scope: anyio.CancelScope, deadline: float) -> None:
        """Nothing to do: the alarm cancels every scope its owner holds when it rings."""

    def moved(self, deadline: float) -> None:
        """Nothing to do: the alarm reads the deadline again when it fires."""

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _set(self, deadline: float) -> None:
        self._handle = self._loop.call_at(deadline, self._fire)
        self.timers_set += 1

    def _fire(self) -> None:
        self._handle = None
        again = self._ring(self._loop.time())
        if again is not None:
            self._set(again)  # renewed since the alarm was set


def deadline_keeper(
    scopes: list[anyio.CancelScope], ring: Callable[[float], float | None]
) -> LoopAlarm:
    return LoopAlarm(ring)


class _Bounds:
    """The bounds of the writes in flight on one loop, by one loop timer.

    A heap of (bound, write) and the writes still in flight by number; an entry whose write
    has ended stays in the heap until it reaches the top (tuples of a float and an int compare
    in C, and the collector stops tracking them: an entry outlives the young generations, and
    one that held its :class:`SharedBound` was one more object per renewal for every full
    collection to walk). The timer is set for the earliest bound of a write still in flight:
    when it fires it drops the ended writes before that one, cancels the scopes whose bounds
    passed and is set again for the next. A write ends long before its bound, so the timer
    fires about once per bound's length (T), not once per write.
    """

    __slots__ = ("_at", "_handle", "_heap", "_loop", "in_flight", "timers_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int]] = []
        #: The writes in flight, by number.
        self.in_flight: dict[int, SharedBound] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf
        #: Loop timers set so far (for tests and the benchmarks).
        self.timers_set = 0

    def add(self, deadline: float, write: int, bound: SharedBound) -> None:
        self.in_flight[write] = bound
        heapq.heappush(self._heap, (deadline, write))
        if deadline < self._at:
            self._set(deadline)

    def _set(self, deadline: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(deadline, self._fire)
        self._at = deadline
        self.timers_set += 1

    def _fire(self) -> None:
        self._handle, self._at = None, math.inf
        heap, in_flight, now = self._heap, self.in_flight, self._loop.time()
        while heap:
            deadline, write = heap[0]
            bound = in_flight.get(write)
            if bound is None:
                heapq.heappop(heap)  # that write ended: its bound is void
            elif deadline > now:
                self._set(deadline)
                return
            else:
                heapq.heappop(heap)
                del in_flight[write]
                bound.expire()


#: Per event loop, the bounds of its writes in flight.
_BOUNDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Bounds] = (
    weakref.WeakKeyDictionary()
)
#: Numbers the writes (0: none in flight).
_WRITES = itertools.count(1)


class SharedBound:
    """A :class:`~trio_lease._loops.WriteBound` kept by its loop's one timer (:class:`_Bounds`).

    The scope's deadline is anyio's ``_deadline`` field, written directly: the public setter
    arms a loop timer for each new value. Where that field is missing (another anyio), the
    public setter is used and each write arms its timer, as before.
    """

    __slots__ = ("_bounds", "_scope", "write")

    def __init__(self, scope: anyio.CancelScope) -> None:
        loop = asyncio.get_running_loop()
        bounds = _BOUNDS.get(loop)
        if bounds is None:
            bounds = _BOUNDS[loop] = _Bounds(loop)
        self._bounds = bounds
        self._scope = scope
        #: The write in flight (its number), 0 when none.
        self.write = 0

    def set(self, deadline: float) -> None:
        scope = self._scope
        if not _DEADLINE_FIELD or deadline <= self._bounds._loop.time():
            scope.deadline = deadline  # anyio's own: a deadline already past cancels at once
            return
        scope._deadline = deadline  # type: ignore[attr-defined]
        if self.write:
            del self._bounds.in_flight[self.write]  # set again before it was cleared
        self.write = write = next(_WRITES)
        self._bounds.add(deadline, write, self)

    def clear(self) -> None:
        if self.write:
            del self._bounds.in_flight[self.write]
            self.write = 0
        scope = self._scope
        if _DEADLINE_FIELD:
            scope._deadline = math.inf  # type: ignore[attr-defined]
        else:
            scope.deadline = math.inf

    def expire(self) -> None:
        """The bound passed with the write still in flight: cancel the scope."""
        self.write = 0
        self._scope.cancel()


def _has_deadline_field() -> bool:
    """Whether anyio's asyncio cancel scope keeps its deadline in ``_deadline`` (and reads it
    back through ``deadline``), so that writing the field is setting the deadline."""
    from anyio._backends._asyncio import CancelScope

    scope = CancelScope()
    if getattr(scope, "_deadline", None) != math.inf:
        return False
    scope._deadline = 1.0
    return scope.deadline == 1.0


_DEADLINE_FIELD = _has_deadline_field()


def write_bound(scope: anyio.CancelScope) -> SharedBound:
    return SharedBound(scope)


class _Reader(asyncio.Protocol):
    """asyncio's side of a :class:`NativeConnection`: received bytes, the end, and a waiter.

    Its callbacks only queue bytes and wake the task (nothing is parsed or decided here).
    Reading stays on for the connection's life, paused only while more than
    ``_BUFFER_LIMIT`` bytes wait to be read.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.ended = False
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport by construction (create_connection). Not an isinstance check:
        # other event loops' transports (uvloop's) do not derive from asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _BUFFER_LIMIT and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class NativeConnection:
    """One connection on asyncio's own transport (see the module): costs a future per wait."""

    __slots__ = ("fd", "reader", "transport")

    def __init__(self, transport: asyncio.Transport, reader: _Reader) -> None:
        self.transport = transport
        self.reader = reader
        raw = transport.get_extra_info("socket")
        self.fd: int = raw.fileno() if raw is not None else -1

    def is_alive(self) -> bool:
        reader = self.reader
        if reader.ended or reader.chunks or self.transport.is_closing():
            return False
        return quiet(self.fd)

    def send(self, data: bytes) -> Awaitable[None]:
        # As anyio's streams do: no byte leaves a scope that is already cancelled (a task that
        # runs on after an event-loop stall, its wait having completed, must not write).
        if _TASK_STATES is None or _cancel_pending():
            return self._send_after_checkpoint(data)
        self._write(data)
        return _DONE  # written: nothing to wait for, and no coroutine made

    async def _send_after_checkpoint(self, data: bytes) -> None:
        await checkpoint_if_cancelled()
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self.transport.is_closing() or self.reader.ended:
            raise anyio.BrokenResourceError("the connection is closed")
        self.transport.write(data)  # a request is small: the kernel takes it whole or buffers

    async def receive(self) -> bytes:
        reader = self.reader
        while not reader.chunks:
            if reader.ended:
                return b""
            waiter = reader.waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                reader.waiter = None
        data = reader.chunks.popleft()
        reader.buffered -= len(data)
        if reader.paused and reader.buffered <= _BUFFER_LIMIT // 2:
            reader.paused = False
            self.transport.resume_reading()
        return data

    async def close(self) -> None:
        self.transport.abort()


async def connect(
    host: str, port: int, ssl_context: ssl.SSLContext | None, server_hostname: str | None
) -> NativeConnection:
    try:
        transport, reader = await asyncio.get_running_loop().create_connection(
            _Reader,
            host,
            port,
            ssl=ssl_context,
            server_hostname=server_hostname if ssl_context is not None else None,
        )
    except (ConnectionResetError, ssl.SSLEOFError) as exc:
        # A refused TCP connect is ConnectionRefusedError: a reset or an EOF here came after
        # the connect, while the TLS handshake ran (asyncio and uvloop raise a bare reset).
        if ssl_context is None:
            raise
        raise HandshakeClosed("the server closed the connection during the TLS handshake") from exc
    # No isinstance check on the transport: uvloop's do not derive from asyncio.Transport.
    return NativeConnection(transport, reader)


def loop_factory(built: Callable[[], None]) -> Callable[[], asyncio.AbstractEventLoop]:
    """A loop factory for asyncio's runner that calls ``built`` once the loop exists."""

    def factory() -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        built()
        return loop

    return factory
