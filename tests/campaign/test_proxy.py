"""The TCP fault proxy: bytes pass, and each toxic does what it says (real sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from tools.campaign._proxy import FaultProxy, open_proxy


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: these tests use real sockets."""
    backend: str = request.param
    return backend


async def _echo(stream: SocketStream) -> None:
    async with stream:
        try:
            async for data in stream:
                await stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


@asynccontextmanager
async def proxied_echo() -> AsyncIterator[FaultProxy]:
    """An echo server on a free loopback port behind a fault proxy."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        async with open_proxy("127.0.0.1", port, seed=1) as proxy:
            yield proxy
        tg.cancel_scope.cancel()


@asynccontextmanager
async def echo_client() -> AsyncIterator[tuple[FaultProxy, SocketStream]]:
    """A client connected through the fault proxy of :func:`proxied_echo`."""
    async with (
        proxied_echo() as proxy,
        await anyio.connect_tcp("127.0.0.1", proxy.port) as client,
    ):
        yield proxy, client


async def is_reset(client: SocketStream) -> None:
    """The connection was broken under ``client``: its next receive fails."""
    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
        await client.receive()


async def _receive_exactly(stream: SocketStream, size: int) -> list[bytes]:
    chunks: list[bytes] = []
    while sum(map(len, chunks)) < size:
        chunks.append(await stream.receive())
    return chunks


@pytest.mark.anyio
async def test_bytes_pass_through() -> None:
    """Without toxics the proxy is transparent."""
    async with proxied_echo() as proxy:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", proxy.port) as client:
                await client.send(b"hello")
                assert b"".join(await _receive_exactly(client, 5)) == b"hello"
        assert proxy.connections == 1


@pytest.mark.anyio
async def test_latency_delays_each_direction() -> None:
    """Latency applies on the way there and back (a lower bound: sleeps never end early)."""
    async with proxied_echo() as proxy:
        proxy.latency(0.05, 0.0)
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", proxy.port) as client:
                started = anyio.current_time()
                await client.send(b"x")
                await _receive_exactly(client, 1)
                assert anyio.current_time() - started >= 0.1


@pytest.mark.anyio
async def test_reset_breaks_open_connections() -> None:
    """reset() closes every open connection at once."""
    with anyio.fail_after(10):
        async with echo_client() as (proxy, client):
            await client.send(b"x")
            await _receive_exactly(client, 1)
            assert proxy.reset() == 2  # our side and the upstream side
            await is_reset(client)


@pytest.mark.anyio
async def test_blackhole_stalls_then_resets() -> None:
    """A blackhole moves no bytes; when it ends, the stalled connection is reset."""
    with anyio.fail_after(10):
        async with echo_client() as (proxy, client):
            proxy.blackhole()
            await client.send(b"x")
            with anyio.move_on_after(0.3) as scope:
                await client.receive()
            assert scope.cancelled_caught
            proxy.clear()
            await is_reset(client)


@pytest.mark.anyio
async def test_slicer_splits_responses() -> None:
    """Responses arrive in slices no larger than the slice size."""
    with anyio.fail_after(10):
        async with echo_client() as (proxy, client):
            proxy.slicer(4, 0.01)
            await client.send(b"0123456789abcdef")
            chunks = await _receive_exactly(client, 16)
            assert b"".join(chunks) == b"0123456789abcdef"
            assert max(map(len, chunks)) <= 4
