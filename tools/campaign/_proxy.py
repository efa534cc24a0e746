"""A TCP fault proxy on anyio (the Toxiproxy model, in-process, loopback only).

One :class:`FaultProxy` listens on a free 127.0.0.1 port and forwards every connection to one
upstream. Faults (toxics) are switched on and off by the harness while traffic flows:

- ``latency(seconds, jitter)``: each chunk, in each direction, waits latency ± jitter (order
  is kept, so jitter never reorders bytes of one connection);
- ``blackhole()``: bytes stop moving in both directions and new connections get no answer
  (a partition); when it ends, the connections that were stalled are reset, as a peer's TCP
  would after retransmitting in vain;
- ``reset()``: every open connection is closed at once with RST (SO_LINGER 0);
- ``slicer(size, gap)``: responses (downstream) arrive in ``size``-byte slices ``gap`` apart
  (sliced slow responses).

``clear()`` removes every toxic. A proxy never outlives its ``async with`` block.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
from collections.abc import AsyncIterator

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

__all__ = ["FaultProxy", "open_proxy"]


class FaultProxy:
    """Forward 127.0.0.1:``port`` to ``upstream``, with switchable toxics."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.latency_s = 0.0
        self.jitter_s = 0.0
        self.slice_size = 0
        self.slice_gap = 0.0
        self.connections = 0
        self._blackholed = False
        self._heal = anyio.Event()
        self._random = random.Random(seed)
        self._open: set[SocketStream] = set()
        self._stalled: set[SocketStream] = set()
        self._aborted: set[SocketStream] = set()

    # -- toxics --------------------------------------------------------------------------------

    def latency(self, seconds: float, jitter: float = 0.0) -> None:
        """Delay every chunk by ``seconds`` ± ``jitter``."""
        self.latency_s, self.jitter_s = seconds, jitter

    def slicer(self, size: int, gap: float) -> None:
        """Deliver responses in ``size``-byte slices, ``gap`` seconds apart."""
        self.slice_size, self.slice_gap = size, gap

    def blackhole(self) -> None:
        """Stop moving bytes (both ways) until :meth:`clear`."""
        self._blackholed = True

    def reset(self) -> int:
        """Close every open connection with RST now; returns how many were open."""
        streams = list(self._open)
        for stream in streams:
            self._abort(stream)
        return len(streams)

    def _abort(self, stream: SocketStream) -> None:
        """Make the next close send RST and wake the pumps reading ``stream``."""
        self._aborted.add(stream)
        with contextlib.suppress(OSError):
            sock = stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RD)

    def clear(self) -> None:
        """Remove every toxic; connections stalled by a blackhole are reset."""
        self.latency_s = self.jitter_s = self.slice_gap = 0.0
        self.slice_size = 0
        if self._blackholed:
            self._blackholed = False
            for stream in list(self._stalled):
                self._abort(stream)
            self._stalled.clear()
            self._heal.set()
            self._heal = anyio.Event()

    # -- forwarding ----------------------------------------------------------------------------

    async def _pass(self, stream: SocketStream) -> None:
        """Wait while blackholed (then the connection is reset by :meth:`clear`)."""
        while self._blackholed:
            self._stalled.add(stream)
            await self._heal.wait()

    async def _delay(self) -> None:
        if self.latency_s > 0 or self.jitter_s > 0:
            jitter = self._random.uniform(-self.jitter_s, self.jitter_s)
            await anyio.sleep(max(0.0, self.latency_s + jitter))

    async def _pump(
        self, source: SocketStream, sink: SocketStream, downstream: bool, tg: TaskGroup
    ) -> None:
        try:
            while source not in self._aborted and sink not in self._aborted:
                await self._pass(source)
                data = await source.receive()
                await self._pass(source)
                await self._delay()
                if source in self._aborted or sink in self._aborted:
                    break
                if downstream and self.slice_size > 0:
                    for start in range(0, len(data), self.slice_size):
                        await sink.send(data[start : start + self.slice_size])
                        if start + self.slice_size < len(data):
                            await anyio.sleep(self.slice_gap)
                else:
                    await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            tg.cancel_scope.cancel()

    async def _handle(self, client: SocketStream) -> None:
        self.connections += 1
        self._open.add(client)
        try:
            await self._pass(client)
            try:
                with anyio.fail_after(5):
                    server = await anyio.connect_tcp(*self.upstream)
            except (OSError, TimeoutError):
                self._abort(client)
                return
            self._open.add(server)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, client, server, False, tg)
                    tg.start_soon(self._pump, server, client, True, tg)
            finally:
                self._open.discard(server)
                self._stalled.discard(server)
                with anyio.CancelScope(shield=True):
                    await server.aclose()
                self._aborted.discard(server)
        finally:
            self._open.discard(client)
            self._stalled.discard(client)
            with anyio.CancelScope(shield=True):
                await client.aclose()
            self._aborted.discard(client)


@contextlib.asynccontextmanager
async def open_proxy(upstream_host: str, upstream_port: int, seed: int = 0) -> AsyncIterator[
    FaultProxy
]:
    """Run a :class:`FaultProxy` on a free loopback port until the block exits."""
    proxy = FaultProxy(upstream_host, upstream_port, seed)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    proxy.port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy._handle)
        try:
            yield proxy
        finally:
            proxy.clear()
            tg.cancel_scope.cancel()
