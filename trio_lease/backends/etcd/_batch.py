"""The writes one etcd backend object is asked for while its requests wait: one txn.

A process holding hundreds of leases renews them on one grid (``_algorithm.next_renewal``), and
a member of ``run_partitioned`` acquires its keys in a burst. Sent one request each, they queue
for the client's few request slots (:data:`._client.MAX_IN_FLIGHT`) and each costs the gateway
a request, so under load the queue outgrows the operation timeout. Instead, the writes waiting
together form a :class:`Batch`, sent as one txn:

- the txn has no compare of its own; each write is a nested txn (``request_txn``) that compares
  its own key (``mod_revision`` for an update, ``create_revision == 0`` for a create) and puts
  its record only if that holds. A write whose compare fails (``ConflictError``) or whose answer
  cannot be read (an unknown outcome) fails alone; the others are written;
- every write of the txn gets the txn's revision as its new version (etcd gives one revision
  to a txn), checked above the revision that write compared against (:func:`._replies.read_txns`);
- the batch stays open while its request waits for a slot: it closes when the request takes its
  slot, the moment it is sent. Every caller read its clock before it joined, so the time a
  holder counts its renewal from is never later than the batch's send;
- a key is at most once in a batch (etcd refuses a txn that puts one key twice), at most
  :data:`BATCH_MAX` writes (etcd's ``--max-txn-ops`` is 128 by default), and urgent writes
  (renewals, releases: :func:`trio_lease._slots.urgent`) never share a batch with the others,
  so a batch waits for its slot with its writes' priority;
- a batch of one write is sent as the plain txn of that write.

The first caller of a batch drives it: one checkpoint (the writes of this turn join), then the
request. A driver cancelled before the request took its slot leaves the batch unsent and the
next waiting caller drives it; a caller cancelled before the send takes its write out. A driver
cancelled while the request is in flight abandons it, as any cancelled call does: every write
of the batch then has an unknown outcome (``BackendUnavailable``), which each holder resolves
with a read, as after any write whose answer was lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.lowlevel

from ..._exceptions import BackendProtocolError, BackendUnavailable, LeaseError, own_copy
from ..._wire import JsonObject, Malformed
from ._replies import read_txn, read_txns

__all__ = ["BATCH_MAX", "Batch", "Write"]

#: Most writes in one batched txn (etcd's default ``--max-txn-ops`` is 128).
BATCH_MAX: Final = 64

#: What a write of a batch ends with: its new revision, None (its compare failed) or its error.
Outcome = int | None | LeaseError


@dataclass(slots=True)
class Write:
    """One write of a batch: its txn branch (compare and put) and what it compared against."""

    name: str
    compare: dict[str, Any]
    put: dict[str, Any]
    above: int
    #: A held state without a handover request (its watch event may be skipped, ``._feed``).
    held: bool = False


@dataclass(slots=True, eq=False)
class Batch:
    """The writes sent in one txn; see the module docstring.

    ``writes`` holds None for a caller that left before the send. ``outcomes`` (one per write
    sent, in order) is set once the answer was read; ``error`` when the request failed as a
    whole.
    """

    urgent: bool
    writes: list[Write | None] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    sent: list[Write] | None = None  # the writes as sent, once the request took its slot
    outcomes: list[Outcome] | None = None
    error: LeaseError | None = None
    driving: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)

    def takes(self, name: str) -> bool:
        """Whether a write of lease ``name`` may join (unsent, not full, key not in it)."""
        return self.sent is None and len(self.names) < BATCH_MAX and name not in self.names

    def add(self, write: Write) -> int:
        """Join ``write``; its index."""
        self.writes.append(write)
        self.names.add(write.name)
        return len(self.writes) - 1

    def withdraw(self, index: int) -> None:
        """Take the write at ``index`` out (its caller left before the send)."""
        write = self.writes[index]
        if self.sent is None and write is not None:
            self.writes[index] = None
            self.names.discard(write.name)

    def body(self) -> dict[str, Any]:
        """The txn to send, built once: called when the request takes its slot, it closes the
        batch (a retry on another endpoint sends the same body)."""
        if self.sent is None:
            self.sent = [write for write in self.writes if write is not None]
        sent = self.sent
        if len(sent) == 1:
            only = sent[0]
            return {"compare": [only.compare], "success": [only.put], "failure": []}
        nested = [
            {"request_txn": {"compare": [write.compare], "success": [write.put], "failure": []}}
            for write in sent
        ]
        return {"compare": [], "success": nested, "failure": []}

    def read(self, answer: JsonObject) -> list[int | Malformed | None]:
        """The answer to :meth:`body`, per write sent (see :func:`._replies.read_txns`)."""
        assert self.sent is not None
        if len(self.sent) == 1:
            return [read_txn(answer, above=self.sent[0].above)]
        return read_txns(answer, above=[write.above for write in self.sent])

    def outcome(self, index: int) -> Outcome:
        """The outcome of the write at ``index`` (the batch is done); an error of the whole
        batch as this caller's own copy (each raise sets its own traceback)."""
        write = self.writes[index]
        if self.error is not None:
            return own_copy(self.error)
        assert self.sent is not None and self.outcomes is not None and write is not None
        return next(o for w, o in zip(self.sent, self.outcomes, strict=True) if w is write)

    async def wait(
        self,
        send: Callable[[Batch], Awaitable[list[int | Malformed | None]]],
        where: Callable[[Batch], str],
    ) -> None:
        """Until the batch is done, driving it when nobody else does."""
        while not self.done.is_set():
            if self.driving:
                await self.wake.wait()
            else:
                await self._drive(send, where)

    async def _drive(
        self,
        send: Callable[[Batch], Awaitable[list[int | Malformed | None]]],
        where: Callable[[Batch], str],
    ) -> None:
        self.driving = True
        try:
            if self.sent is None:
                await anyio.lowlevel.checkpoint()  # the writes of this turn join
            try:
                answers = await send(self)
            except LeaseError as exc:
                self.error = exc
                self.done.set()
            except BaseException as exc:
                if self.sent is None:
                    raise  # never sent: the next waiting caller sends it
                self.error = BackendUnavailable(
                    f"etcd kv/txn{where(self)}: the request was abandoned "
                    f"({type(exc).__name__}); the outcome is unknown"
                )
                self.done.set()
                raise
            else:
                self.outcomes = [
                    BackendProtocolError(
                        f"etcd's answer to kv/txn{where(self)} is not valid: {answer}; the "
                        "outcome is unknown"
                    )
                    if isinstance(answer, Malformed)
                    else answer
                    for answer in answers
                ]
                self.done.set()
        finally:
            self.driving = False
            wake, self.wake = self.wake, anyio.Event()
            wake.set()


