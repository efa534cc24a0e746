"""Fencing tokens: a resource that refuses a stale holder's write, which no lease can stop.

    python examples/fenced_writes.py [trio|asyncio] [--real-time]

Two nodes share the lease "report". node-a holds it and writes through a store that keeps the
highest fencing token it has seen per key. Then node-a is cut off from the lease store (a
partition, injected with ``trio_lease.testing.FaultyBackend``) while one more write of its own
is still in flight on the network. node-a cannot renew: at its deadline its guarded work is
cancelled (cancel-on-loss), and only after that can node-b take the lease over, with a greater
token. But cancelling node-a's code cannot recall a request already on the wire: when the
partition heals, node-a's delayed write arrives after node-b's, carrying the old token, and the
store rejects it. That is what fencing tokens are for (docs/guarantees.md, "A paused process").

Both nodes run in this one process on the in-memory backend. By default the program runs on
virtual time (``trio_lease.testing.virtual_time_backends``: the clock jumps ahead whenever every
task is waiting), so its output is the same on every machine and it finishes at once; with
``--real-time`` it takes about two seconds.
"""

from __future__ import annotations

import contextlib
import sys

import anyio

from trio_lease import Lease, LeaseLost, LeaseSettings
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend, virtual_time_backends

# L = 1.5 s, R = 0.2 s, T = 0.1 s: node-a's deadline D = 1 s after its last renewal, so it
# stops about 0.5 s before node-b may take over.
SETTINGS = LeaseSettings(
    heartbeat_timeout="1.5s",
    heartbeat_interval="200ms",
    lease_operation_timeout="100ms",
    stop_timeout="100ms",
)


class StaleTokenError(Exception):
    """A write carried a fencing token lower than one the store has already seen."""


class FencedStore:
    """A toy resource that keeps the highest fencing token per key and refuses lower ones.

    A real resource does the same in one atomic step, for example a SQL
    ``UPDATE ... SET value = ?, token = ? WHERE key = ? AND token <= ?``, or a conditional put.
    Equal tokens are accepted: one holder writes many times under one grant.
    """

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.highest: dict[str, int] = {}

    def write(self, key: str, value: str, token: int) -> None:
        highest = self.highest.get(key, 0)
        if token < highest:
            print(f"store: rejected {value!r} (token {token} < {highest})")
            raise StaleTokenError(f"{key!r}: token {token} is older than {highest}")
        self.highest[key] = token
        self.values[key] = value
        print(f"store: accepted {value!r} (token {token})")


async def main() -> None:
    store = FencedStore()
    lease_store = MemoryStore()
    node_a_link = FaultyBackend(MemoryBackend(lease_store))  # node-a's path to the lease store
    node_a = Lease("report", "node-a", node_a_link, SETTINGS)
    node_b = Lease("report", "node-b", MemoryBackend(lease_store), SETTINGS)
    node_a_holds = anyio.Event()
    healed = anyio.Event()

    async def deliver_late(value: str, token: int) -> None:
        """A request already on the wire: it arrives when the partition heals."""
        await healed.wait()
        print("network: partition healed, delivering node-a's delayed write")
        # The store refuses the stale holder's write: node-b's value is not overwritten.
        with contextlib.suppress(StaleTokenError):
            store.write("report", value, token)

    async def run_node_a() -> None:
        try:
            async with node_a.held() as grant:
                print(f"node-a: holds 'report' with fencing token {grant.fencing_token}")
                store.write("report", "draft by node-a", grant.fencing_token)
                node_a_link.pause()  # partitioned: renewals hang from now on
                network.start_soon(deliver_late, "final by node-a", grant.fencing_token)
                print("node-a: partitioned; its next write is stuck in the network")
                node_a_holds.set()
                await anyio.sleep_forever()  # more guarded work, cancelled at the deadline
        except LeaseLost:
            print("node-a: lease lost, guarded work cancelled")

    async def run_node_b() -> None:
        await node_a_holds.wait()
        async with node_b.held() as grant:  # waits until node-a's record has gone stale
            print(f"node-b: holds 'report' with fencing token {grant.fencing_token}")
            store.write("report", "final by node-b", grant.fencing_token)
        node_a_link.resume()
        healed.set()

    # The network outlives the nodes' code: cancelling a sender does not recall its packets.
    async with anyio.create_task_group() as network:
        network.start_soon(run_node_a)
        network.start_soon(run_node_b)
    print(f"store: report = {store.values['report']!r}")


if __name__ == "__main__":
    backend = next((arg for arg in sys.argv[1:] if arg in ("trio", "asyncio")), "trio")
    if "--real-time" in sys.argv[1:]:
        anyio.run(main, backend=backend)
    else:
        anyio.run(main, backend=backend, backend_options=dict(virtual_time_backends())[backend])
