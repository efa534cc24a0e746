"""Cooperative handover on etcd: handover_to in the stored JSON value, against a real server."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import anyio
import pytest

from tests.backends._handover import hand_over
from trio_lease import Lease, LeaseRecord, LeaseSettings
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._codec import decode_record, encode_record

pytestmark = pytest.mark.anyio

#: Renewals a minute apart: within a test only the watch (the shared feed) can tell the holder.
SLOW = LeaseSettings(heartbeat_timeout=180, heartbeat_interval=60, lease_operation_timeout=2)

#: A value as versions before handover wrote it: no field handover_to.
OLD_VALUE = {"format": 1, "name": "x", "holder": "h", "lease_duration": 5.0, "fencing_token": 3}


async def test_the_holder_is_told_and_the_requester_gets_the_lease_next(
    etcd_backend_factory: Callable[[], EtcdBackend],
) -> None:
    """request_handover on etcd: grant.handover_requested fires (through the shared feed, long
    before a renewal), the requester is next."""
    first, second = etcd_backend_factory(), etcd_backend_factory()
    holder = Lease("job", "a", first, SLOW)
    requester = Lease("job", "b", second, SLOW)
    with anyio.fail_after(20):
        async with first, second:
            order, _ = await hand_over(holder, requester)
    assert order == ["a:1", "a:asked", "b:2"]


async def test_handover_to_round_trips_through_the_server(
    etcd_backend_factory: Callable[[], EtcdBackend],
) -> None:
    """create, update and get keep handover_to on a real server; "" clears it."""
    async with etcd_backend_factory() as backend, etcd_backend_factory() as other:
        made = await backend.create(LeaseRecord("job", "a", 5.0, 1, handover_to="b"))
        got = await other.get("job")
        assert got is not None and got.handover_to == "b" and not got.unreadable
        cleared = await backend.update(dataclasses.replace(made, handover_to=""), made.version)
        got = await other.get("job")
        assert got is not None and got.handover_to == "" and got.version == cleared.version


def test_an_empty_request_is_left_out_and_an_old_value_reads_as_none() -> None:
    """No field when there is no request, so values of earlier versions read the same."""
    stored = json.loads(encode_record(LeaseRecord("x", "h", 5.0, 3)))
    assert "handover_to" not in stored
    old = decode_record("x", json.dumps(OLD_VALUE).encode(), "7")
    assert (old.holder, old.handover_to, old.unreadable) == ("h", "", "")
    asked = decode_record("x", encode_record(LeaseRecord("x", "h", 5.0, 3, handover_to="b")), "7")
    assert (asked.holder, asked.handover_to, asked.unreadable) == ("h", "b", "")


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        pytest.param(["b"], "expected a string, got a list", id="list"),
        pytest.param(7, "expected a string, got an integer", id="integer"),
        pytest.param(None, "expected a string, got null", id="null"),
    ],
)
def test_a_handover_to_of_the_wrong_type_makes_the_record_unreadable(
    stored: object, problem: str
) -> None:
    """handover_to that is not a string: an unreadable record, its token kept."""
    value = json.dumps(OLD_VALUE | {"handover_to": stored}).encode()
    record = decode_record("x", value, "7")
    assert record.unreadable == f"value.handover_to: {problem}"
    assert (record.holder, record.handover_to, record.fencing_token) == ("", "", 3)
    assert not record.is_free
