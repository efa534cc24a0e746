"""The records of Semaphore, Group and run_partitioned never share a name with a user's lease,
a key or each other (trio_lease/_namespace.py), on every store's name rules."""

from __future__ import annotations

import functools

import anyio
import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from trio_lease import (
    Grant,
    Group,
    Lease,
    LeaseConfigError,
    Semaphore,
    run_partitioned,
)
from trio_lease._group import partition_group
from trio_lease._namespace import SEPARATOR
from trio_lease._partitioned import _KeyLeases
from trio_lease.backends.kubernetes import lease_name_for
from trio_lease.backends.memory import MemoryBackend, MemoryStore

from .conftest import SETTINGS

#: Names and keys as users write them: any text (lone surrogates aside), the separator included
#: often, so the refusal is tested as well as the names that pass.
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(f"{SEPARATOR}.-_/0123456789abcMEMBERSlotkey")),
        st.characters(codec="utf-8"),  # no lone surrogates: no store keeps them
    ),
    min_size=1,
    max_size=12,
)


def _records(
    backend: MemoryBackend, leases: list[str], features: list[str], keys: list[str]
) -> dict[str, tuple[str, ...]]:
    """Every record name the given user leases, semaphores, groups and run_partitioned names
    (with ``keys``) make, each with what made it; a name or key refused is left out."""
    made: dict[str, set[tuple[str, ...]]] = {}

    def add(record: str, *origin: str) -> None:
        made.setdefault(record, set()).add(origin)

    for name in leases:
        try:
            add(Lease(name, "o", backend).name, "lease", name)
        except LeaseConfigError:
            assert SEPARATOR in name
    for name in features:
        try:
            sem = Semaphore(name, "o", backend, limit=3)
            group = Group(name, "o", backend)
            members = partition_group(name, "o", backend, None)
        except LeaseConfigError:
            assert SEPARATOR in name
            continue
        for slot in range(3):
            add(sem.slot_lease(slot).name, "semaphore slot", name, str(slot))
            add(group.slot_lease(slot).name, "group member", name, str(slot))
            add(members.slot_lease(slot).name, "partition member", name, str(slot))
        key_leases = _KeyLeases(name, "o", backend, None)
        for key in keys:
            try:
                add(key_leases.of(key).name, "key", name, key)
            except LeaseConfigError:
                assert SEPARATOR in key
    collided = {record: origins for record, origins in made.items() if len(origins) > 1}
    assert not collided, f"records made twice: {collided}"
    return {record: next(iter(origins)) for record, origins in made.items()}


@settings(max_examples=300, deadline=None)
@given(
    leases=st.lists(_TEXT, max_size=6),
    features=st.lists(_TEXT, max_size=4),
    keys=st.lists(_TEXT, max_size=6),
)
def test_no_two_origins_make_one_record(
    leases: list[str], features: list[str], keys: list[str]
) -> None:
    """Over any user lease names, feature names and keys, every record name (as stored, and as
    the Kubernetes object it maps to) has one origin only."""
    backend = MemoryBackend(MemoryStore())

    async def made() -> dict[str, tuple[str, ...]]:  # a key's lease is made in an event loop
        # The feature names also as user lease names and as keys.
        return _records(backend, leases + features, features, keys + features)

    records = anyio.run(made)
    objects: dict[str, str] = {}
    for record in records:
        # Kubernetes: a record of a feature is always mapped (its name has the separator).
        obj = lease_name_for(record)
        assert objects.setdefault(obj, record) == record, f"{record!r} and {objects[obj]!r}"


@pytest.mark.parametrize(
    "make",
    [
        lambda b: Lease(f"p{SEPARATOR}slot{SEPARATOR}0", "o", b),
        lambda b: Semaphore(f"p{SEPARATOR}x", "o", b, limit=1),
        lambda b: Group(f"g{SEPARATOR}", "o", b),
    ],
    ids=["lease", "semaphore", "group"],
)
def test_a_name_with_the_separator_is_refused_saying_why(make: object) -> None:
    """A lease, semaphore or group name holding the reserved separator is a LeaseConfigError
    that names the separator and why it is reserved."""
    backend = MemoryBackend(MemoryStore())
    with pytest.raises(LeaseConfigError, match="reserved"):
        make(backend)  # type: ignore[operator]


@pytest.mark.anyio
async def test_run_partitioned_refuses_a_name_or_key_with_the_separator() -> None:
    """run_partitioned refuses a name or a key in the reserved namespace before it joins."""
    backend = MemoryBackend(MemoryStore())

    async def fn(key: str, grant: Grant) -> None:
        del key, grant

    with pytest.raises(LeaseConfigError, match="reserved"):
        await run_partitioned(["a"], fn, name=f"p{SEPARATOR}", owner="o", backend=backend)
    with pytest.raises(LeaseConfigError, match="reserved"):
        await run_partitioned(
            ["a", f"members{SEPARATOR}0"], fn, name="p", owner="o", backend=backend
        )


@pytest.mark.anyio
async def test_keys_named_like_the_members_records_all_run() -> None:
    """Keys that spell what the members' records were once named (``members.0``) are keys like
    any other: with two members every key runs."""
    store = MemoryStore()
    keys = ["members.0", "members.1", "k1", "0"]
    started: set[str] = set()

    async def fn(key: str, grant: Grant) -> None:
        del grant
        started.add(key)

    with anyio.move_on_after(3 * SETTINGS.heartbeat_timeout):
        async with anyio.create_task_group() as tg:
            for owner in ("m1", "m2"):
                run = functools.partial(
                    run_partitioned, name="p", owner=owner, backend=MemoryBackend(store)
                )
                tg.start_soon(functools.partial(run, keys, fn, settings=SETTINGS))
            while started != set(keys):
                await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    assert started == set(keys)
