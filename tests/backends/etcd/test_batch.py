"""The writes one etcd backend object is asked for while its requests wait go in one txn.

Each write is a nested txn comparing its own key (trio_lease/backends/etcd/_batch.py): one
whose compare fails, whose answer cannot be read or whose caller left before the send fails
alone; the batch is sent when its request takes a slot, and a holder's renewal counts from no
later than that moment. Against a real etcd (and, for unreadable answers, scripted ones).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import anyio
import httpx
import pytest

from tests.backends.etcd._mock import MockTransport
from trio_lease import (
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease import _algorithm as algo
from trio_lease._heartbeat import registry
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._batch import BATCH_MAX
from trio_lease.backends.etcd._client import MAX_IN_FLIGHT

pytestmark = pytest.mark.anyio

Sent = list[tuple[float, dict[str, Any], int, bytes]]


def record_sends(backend: EtcdBackend, monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Every kv/txn the backend sends from now on: (the loop's time when sent, the body, the
    status, the answer)."""
    sent: Sent = []
    client = backend._client
    send = client._send

    async def stamped(
        endpoint: str, path: str, body: dict[str, Any], headers: Any, bounds: Any
    ) -> tuple[int, bytes]:
        at = anyio.current_time()
        status, content = await send(endpoint, path, body, headers, bounds)
        if path == "kv/txn":
            sent.append((at, body, status, content))
        return status, content

    monkeypatch.setattr(client, "_send", stamped)
    return sent


def writes_in(body: dict[str, Any]) -> int:
    """How many writes a kv/txn body carries (a batch's nested txns, or the plain one)."""
    nested = [op for op in body["success"] if "request_txn" in op]
    return len(nested) if nested else 1


async def all_at_once(
    calls: Sequence[Callable[[], Awaitable[LeaseRecord]]],
) -> list[LeaseRecord | Exception]:
    """Start every call in one turn; each one's result or error."""
    results: list[LeaseRecord | Exception] = [ValueError("not run")] * len(calls)

    async def one(i: int) -> None:
        try:
            results[i] = await calls[i]()
        except Exception as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return results


async def test_writes_waiting_together_go_as_one_txn_each_on_its_own_key(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates and updates started in one turn: one kv/txn each time, every write stored with
    the txn's revision as its version, read back as written."""
    async with etcd_backend_factory() as backend, etcd_backend_factory() as reader:
        sent = record_sends(backend, monkeypatch)
        made = await all_at_once(
            [partial(backend.create, LeaseRecord(f"job{i}", "alice", 5.0, 1)) for i in range(6)]
        )
        assert [len(sent), writes_in(sent[0][1])] == [1, 6]
        assert all(isinstance(r, LeaseRecord) for r in made)
        assert len({r.version for r in made if isinstance(r, LeaseRecord)}) == 1
        renewed = await all_at_once(
            [
                partial(backend.update, dataclasses.replace(r, fencing_token=2), r.version)
                for r in made
                if isinstance(r, LeaseRecord)
            ]
        )
        assert [len(sent), writes_in(sent[1][1])] == [2, 6]
        for i, record in enumerate(renewed):
            assert isinstance(record, LeaseRecord)
            assert int(record.version) > int(made[i].version)  # type: ignore[union-attr]
            stored = await reader.get(f"job{i}")
            assert stored is not None
            assert (stored.fencing_token, stored.version) == (2, record.version)


async def test_a_conflict_in_a_batch_fails_only_that_write(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One update of a batch compares a stale version: it alone gets ConflictError and writes
    nothing; the others in the same txn are written."""
    async with etcd_backend_factory() as backend:
        made = [await backend.create(LeaseRecord(f"job{i}", "alice", 5.0, 1)) for i in range(4)]
        moved = await backend.update(dataclasses.replace(made[2], holder="bob"), made[2].version)
        sent = record_sends(backend, monkeypatch)
        results = await all_at_once(
            [
                partial(backend.update, dataclasses.replace(r, fencing_token=5), r.version)
                for r in made
            ]
        )
        assert [len(sent), writes_in(sent[0][1])] == [1, 4]
        assert isinstance(results[2], ConflictError)
        assert all(isinstance(results[i], LeaseRecord) for i in (0, 1, 3))
        stored = [await backend.get(f"job{i}") for i in range(4)]
        assert [s.fencing_token for s in stored if s is not None] == [5, 5, 1, 5]
        assert stored[2] is not None and stored[2].version == moved.version


async def test_a_caller_cancelled_before_the_send_is_not_written_and_the_others_are(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the client's slots are all taken, the batch waits open; a caller that leaves
    (the batch's driver itself) is taken out, and the others are sent without it."""
    async with etcd_backend_factory() as backend:
        made = [await backend.create(LeaseRecord(f"job{i}", "alice", 5.0, 1)) for i in range(3)]
        sent = record_sends(backend, monkeypatch)
        slots = backend._client._slots
        for _ in range(MAX_IN_FLIGHT):
            await slots.acquire()
        results: list[object] = [None] * 3
        async with anyio.create_task_group() as tg:

            async def one(i: int, scope: anyio.CancelScope) -> None:
                with scope:
                    new = dataclasses.replace(made[i], fencing_token=7)
                    results[i] = await backend.update(new, made[i].version)

            scopes = [anyio.CancelScope() for _ in range(3)]
            tg.start_soon(one, 0, scopes[0])
            await anyio.sleep(0.05)  # the first caller drives: it waits for a slot
            tg.start_soon(one, 1, scopes[1])
            tg.start_soon(one, 2, scopes[2])
            await anyio.sleep(0.05)  # the others joined its batch
            scopes[0].cancel()
            await anyio.sleep(0.1)
            for _ in range(MAX_IN_FLIGHT):
                slots.release()
        assert [len(sent), writes_in(sent[0][1])] == [1, 2]
        assert results[0] is None
        assert all(isinstance(results[i], LeaseRecord) for i in (1, 2))
        stored = [await backend.get(f"job{i}") for i in range(3)]
        assert [s.fencing_token for s in stored if s is not None] == [1, 7, 7]


async def test_a_batch_is_sent_when_its_request_takes_a_slot_and_renewals_count_from_before(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renewals that fall due while every slot is taken join one batch, sent once a slot
    frees; each holder's deadline counts from a time no later than that send (D after it at
    most)."""
    settings = LeaseSettings(heartbeat_timeout=12, heartbeat_interval=3, lease_operation_timeout=3)
    async with etcd_backend_factory() as backend:
        leases = [Lease(f"job{i}", "alice", backend, settings) for i in range(4)]
        held = anyio.Event()
        holding: list[str] = []
        async with anyio.create_task_group() as tg:

            async def hold(lease: Lease) -> None:
                async with lease.held(timeout=10):
                    holding.append(lease.name)
                    if len(holding) == len(leases):
                        held.set()
                    await anyio.sleep_forever()

            for lease in leases:
                tg.start_soon(hold, lease)
            with anyio.fail_after(10):
                await held.wait()
            holdings = [registry[(backend.store_key, x.name, x.identity)] for x in leases]
            sent = record_sends(backend, monkeypatch)
            slots = backend._client._slots
            for _ in range(MAX_IN_FLIGHT):
                await slots.acquire()
            blocked_at = anyio.current_time()
            with anyio.fail_after(2 * settings.heartbeat_interval):
                while len(getattr(backend._pending.get(True), "names", ())) < len(leases):
                    await anyio.sleep(0.02)  # until every renewal fell due and joined
            freed_at = anyio.current_time()
            for _ in range(MAX_IN_FLIGHT):
                slots.release()
            with anyio.fail_after(5):
                while not all(h.renewals and h.last_send > blocked_at for h in holdings):
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    first = sent[0]
    assert first[0] >= freed_at and writes_in(first[1]) == 4
    revision = json.loads(first[3])["header"]["revision"]
    for h in holdings:
        if h.record.version == revision:  # confirmed by the batch sent after the wait
            assert blocked_at < h.last_send <= first[0]
            assert h.deadline <= algo.holder_deadline(first[0], settings)
    assert any(h.record.version == revision for h in holdings) or len(sent) > 1


# -- answers that cannot be read (scripted: a real etcd sends none) ---------------------------


def scripted(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> EtcdBackend:
    """A backend whose kv/txn answers are ``answer(body)``."""

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer(json.loads(request.content)))

    return EtcdBackend(["http://a.invalid:2379"], transport=MockTransport(handle))


def put_answer() -> dict[str, Any]:
    """A nested txn's answer: it succeeded, and its put answered."""
    return {"response_txn": {"succeeded": True, "responses": [{"response_put": {}}]}}


async def test_a_write_whose_nested_answer_cannot_be_read_fails_alone() -> None:
    """One nested answer of a batch is unreadable: that write's outcome is unknown
    (BackendProtocolError); the others are confirmed at the txn's revision."""

    job1 = base64.b64encode(b"trio_lease/job1").decode()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        responses = [
            {"response_txn": {"succeeded": "yes"}}
            if op["request_txn"]["compare"][0]["key"] == job1
            else put_answer()
            for op in body["success"]
        ]
        return {"header": {"revision": "12"}, "succeeded": True, "responses": responses}

    async with scripted(answer) as backend:
        records = [LeaseRecord(f"job{i}", "alice", 5.0, 1, version="3") for i in range(3)]
        results = await all_at_once([partial(backend.update, r, r.version) for r in records])
    assert isinstance(results[1], BackendProtocolError)
    assert ".response_txn.succeeded: expected a boolean" in str(results[1])
    assert "outcome is unknown" in str(results[1])
    assert [r.version for r in results if isinstance(r, LeaseRecord)] == ["12", "12"]


async def test_a_batch_answer_that_cannot_be_read_as_a_whole_fails_every_write() -> None:
    """An outer answer with a missing nested answer: every write of the batch has an unknown
    outcome, each caller its own BackendProtocolError."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        responses = [put_answer() for _ in body["success"]][1:]
        return {"header": {"revision": "12"}, "succeeded": True, "responses": responses}

    async with scripted(answer) as backend:
        records = [LeaseRecord(f"job{i}", "alice", 5.0, 1, version="3") for i in range(3)]
        results = await all_at_once([partial(backend.update, r, r.version) for r in records])
    assert all(isinstance(r, BackendProtocolError) for r in results)
    assert len({id(r) for r in results}) == 3


async def test_a_batch_success_not_above_a_compared_revision_is_unknown_for_that_write() -> None:
    """A nested success at a revision not above the one its write compared against cannot be
    that write: its outcome is unknown; a write that compared lower is confirmed."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        responses = [put_answer() for _ in body["success"]]
        return {"header": {"revision": "12"}, "succeeded": True, "responses": responses}

    async with scripted(answer) as backend:
        low = LeaseRecord("low", "alice", 5.0, 1, version="3")
        high = LeaseRecord("high", "alice", 5.0, 1, version="12")
        results = await all_at_once(
            [partial(backend.update, low, "3"), partial(backend.update, high, "12")]
        )
    assert isinstance(results[0], LeaseRecord) and results[0].version == "12"
    assert isinstance(results[1], BackendProtocolError)


async def test_one_key_twice_and_more_writes_than_a_txn_takes_go_in_separate_txns(
    etcd_backend_factory: Callable[[], EtcdBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd refuses a txn that puts one key twice or holds more than --max-txn-ops writes: a
    second write of a key, and the writes past BATCH_MAX, go in further txns."""
    async with etcd_backend_factory() as backend:
        sent = record_sends(backend, monkeypatch)
        count = 2 * BATCH_MAX + 2  # more than two full txns take
        calls = [
            partial(backend.create, LeaseRecord(f"job{i}", "alice", 5.0, 1)) for i in range(count)
        ]
        calls.append(partial(backend.create, LeaseRecord("job0", "bob", 5.0, 1)))
        results = await all_at_once(calls)
        sizes = [writes_in(body) for _, body, _, _ in sent]
        assert sum(sizes) == count + 1 and max(sizes) <= BATCH_MAX
        assert all(status == 200 for _, _, status, _ in sent)  # etcd refused none
        job0 = base64.b64encode(f"{backend.prefix}job0".encode()).decode()
        with_job0 = [body for _, body, _, _ in sent if job0 in json.dumps(body)]
        assert len(with_job0) == 2  # never twice in one txn
        assert all(isinstance(r, LeaseRecord) for r in results[1:count])
        assert sorted(type(results[i]).__name__ for i in (0, count)) == [
            "ConflictError",
            "LeaseRecord",
        ]


async def test_a_driver_cancelled_while_its_batch_is_in_flight_leaves_an_unknown_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch's request is abandoned with its driver: every other write of it has an
    unknown outcome (BackendUnavailable), never a result it cannot know."""
    started = anyio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        started.set()
        await anyio.sleep(10)
        raise AssertionError("not reached")

    class Slow(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await slow(request)

    async with EtcdBackend(["http://a.invalid:2379"], transport=Slow()) as backend:
        records = [LeaseRecord(f"job{i}", "alice", 5.0, 1, version="3") for i in range(3)]
        results: list[object] = [None] * 3
        driver = anyio.CancelScope()
        async with anyio.create_task_group() as tg:

            async def one(i: int) -> None:
                try:
                    if i == 0:
                        with driver:
                            results[i] = await backend.update(records[i], "3")
                    else:
                        results[i] = await backend.update(records[i], "3")
                except Exception as exc:
                    results[i] = exc

            slots = backend._client._slots
            for _ in range(MAX_IN_FLIGHT):
                await slots.acquire()
            tg.start_soon(one, 0)
            await anyio.sleep(0.05)  # the first caller drives: it waits for a slot
            tg.start_soon(one, 1)
            tg.start_soon(one, 2)
            await anyio.sleep(0.05)  # the others joined its batch
            slots.release()
            with anyio.fail_after(5):
                await started.wait()
            driver.cancel()
            for _ in range(MAX_IN_FLIGHT - 1):
                slots.release()
    assert results[0] is None
    assert all(isinstance(results[i], BackendUnavailable) for i in (1, 2))
    assert "outcome is unknown" in str(results[1])
