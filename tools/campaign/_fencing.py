"""The fencing store: a separate process that keeps the highest token per resource.

    python -m tools.campaign._fencing PORT_FILE LOG_FILE [--no-check]

It serves newline-delimited JSON on a free 127.0.0.1 port (written to PORT_FILE once
listening): a request ``{"r": resource, "token": n, "w": writer}`` is accepted when ``n`` is at
least the highest token accepted for ``r`` so far, else rejected; the reply is
``{"ok": bool, "max": highest}``. Every write, accepted or rejected, is appended to LOG_FILE as
one JSON line stamped with ``time.monotonic()`` (system-wide on Linux) in the order it was
applied, which is the order the checker replays.

``--no-check`` accepts every write: the deliberately broken store that proves the checker
notices accepted stale writes. The process exits when its stdin closes (so it never outlives
the harness) or on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import IO

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from ._proc import exit_with_parent

__all__ = ["FencingClient", "FencingStore", "main"]


class FencingStore:
    """The store's state: highest accepted token per resource, and the write log."""

    def __init__(self, log: IO[str], *, check: bool = True) -> None:
        self.highest: dict[str, int] = {}
        self.check = check
        self._log = log

    def apply(self, resource: str, token: int, writer: str) -> tuple[bool, int]:
        """Accept or reject one write, log it, and return (accepted, highest)."""
        highest = self.highest.get(resource, -1)
        ok = token >= highest or not self.check
        if ok:
            highest = max(highest, token)
            self.highest[resource] = highest
        entry = {"t": time.monotonic(), "r": resource, "token": token, "w": writer, "ok": ok}
        self._log.write(json.dumps(entry) + "\n")
        self._log.flush()
        return ok, highest

    async def serve_one(self, stream: SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            try:
                while True:
                    line = await reader.receive_until(b"\n", 65536)
                    request = json.loads(line)
                    ok, highest = self.apply(
                        str(request["r"]), int(request["token"]), str(request["w"])
                    )
                    await stream.send(json.dumps({"ok": ok, "max": highest}).encode() + b"\n")
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                    anyio.ClosedResourceError, anyio.DelimiterNotFound, ValueError, KeyError):
                return


class FencingClient:
    """A worker's connection to the store (reconnects after a cancelled or failed write)."""

    def __init__(self, port: int, writer: str) -> None:
        self.port = port
        self.writer = writer
        self._stream: SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None

    async def write(self, resource: str, token: int) -> bool:
        """Send one write and return whether the store accepted it."""
        completed = False
        try:
            if self._stream is None:
                self._stream = await anyio.connect_tcp("127.0.0.1", self.port)
                self._reader = BufferedByteReceiveStream(self._stream)
            assert self._reader is not None
            request = {"r": resource, "token": token, "w": self.writer}
            await self._stream.send(json.dumps(request).encode() + b"\n")
            reply = json.loads(await self._reader.receive_until(b"\n", 65536))
            completed = True
            return bool(reply["ok"])
        finally:
            if not completed:  # cancelled or failed mid-request: the stream's state is unknown
                await self.aclose()

    async def aclose(self) -> None:
        stream, self._stream, self._reader = self._stream, None, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()


async def _watch_stdin(cancel: anyio.CancelScope) -> None:
    """Stop when stdin closes (the harness exited or closed our pipe)."""
    await anyio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)
    cancel.cancel()


async def _watch_signals(cancel: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            cancel.cancel()
            return


def _publish_port(port_file: str, port: int) -> None:
    """Write the port atomically, so the harness never reads half a number."""
    tmp = port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(str(port))
    os.replace(tmp, port_file)


async def main(port_file: str, log_file: str, check: bool) -> None:
    """Serve until stdin closes or SIGTERM."""
    with open(log_file, "w", encoding="utf-8") as log:  # noqa: ASYNC230 - once, at start
        store = FencingStore(log, check=check)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        _publish_port(port_file, listener.extra(SocketAttribute.local_port))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_stdin, tg.cancel_scope)
            tg.start_soon(_watch_signals, tg.cancel_scope)
            tg.start_soon(exit_with_parent, tg.cancel_scope)
            await listener.serve(store.serve_one)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], "--no-check" not in sys.argv[3:])
