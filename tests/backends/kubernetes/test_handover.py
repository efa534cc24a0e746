"""Cooperative handover on Kubernetes: the annotation trio-lease.io/handover-to, both kinds."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from tests.backends._handover import hand_over
from tests.conftest import SETTINGS
from trio_lease import Lease, LeaseRecord
from trio_lease.backends.kubernetes._reading import HANDOVER_TO_ANNOTATION, read_record
from trio_lease.testing.kube import KubeEmulator

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio

KINDS = ["coordination.k8s.io/v1", "akka.io/v1"]


def stored_annotations(emulator: KubeEmulator, kind: str) -> dict[str, str]:
    obj = emulator.get(kind, "leases", "job", "default")
    assert obj is not None
    annotations: dict[str, str] = obj["metadata"].get("annotations", {})
    return annotations


@pytest.mark.parametrize("kind", KINDS)
async def test_the_holder_is_told_and_the_requester_gets_the_lease_next(kind: str) -> None:
    """request_handover on the emulator: grant.handover_requested fires (on the watch, before
    the next renewal), the requester is next."""
    emulator = emulator_with_crd()
    holder = Lease("job", "a", make_backend(emulator.transport(), kind=kind), SETTINGS)
    requester = Lease("job", "b", make_backend(emulator.transport(), kind=kind), SETTINGS)
    order, handed_over_in = await hand_over(holder, requester)
    assert order == ["a:1", "a:asked", "b:2"]
    assert handed_over_in < SETTINGS.heartbeat_interval


@pytest.mark.parametrize("kind", KINDS)
async def test_the_annotation_is_written_when_asked_and_removed_when_cleared(kind: str) -> None:
    """handover_to is the annotation, other annotations kept; "" removes it; a reader and a
    watcher of another client see both."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), kind=kind) as backend, \
            make_backend(emulator.transport(), kind=kind) as other:
        made = await backend.create(LeaseRecord("job", "a", 15.0, 1))
        assert HANDOVER_TO_ANNOTATION not in stored_annotations(emulator, kind)
        async with other.watch("job") as states:
            first = await anext(states)
            assert first is not None and first.handover_to == ""
            asked = await backend.update(dataclasses.replace(made, handover_to="b"), made.version)
            assert asked.handover_to == "b"
            assert stored_annotations(emulator, kind)[HANDOVER_TO_ANNOTATION] == "b"
            with anyio.fail_after(1):
                seen = await anext(states)
            assert seen is not None and seen.handover_to == "b"
            got = await other.get("job")
            assert got is not None and got.handover_to == "b" and not got.unreadable
            cleared = await backend.update(
                dataclasses.replace(asked, handover_to=""), asked.version
            )
            assert cleared.handover_to == ""
            assert HANDOVER_TO_ANNOTATION not in stored_annotations(emulator, kind)
            with anyio.fail_after(1):
                seen = await anext(states)
            assert seen is not None and seen.handover_to == ""


@pytest.mark.parametrize("coordination", [True, False], ids=["coordination", "akka"])
@pytest.mark.parametrize(
    ("stored", "described"),
    [(7, "an integer"), (["b"], "a list"), (None, "null"), ({"x": 1}, "an object")],
    ids=["int", "list", "null", "obj"],
)
def test_an_annotation_that_is_not_a_string_makes_the_record_unreadable(
    coordination: bool, stored: object, described: str
) -> None:
    """A handover-to annotation of the wrong type: unreadable, held by an unknown holder."""
    obj = {
        "metadata": {
            "resourceVersion": "5",
            "annotations": {HANDOVER_TO_ANNOTATION: stored, "trio-lease.io/fencing-token": "3"},
        },
        "spec": {"holderIdentity": "a", "owner": "a", "leaseTransitions": 3},
    }
    record = read_record("job", obj, coordination=coordination)
    assert record.unreadable == (
        f'metadata.annotations["{HANDOVER_TO_ANNOTATION}"]: expected a string, got {described}'
    )
    assert (record.holder, record.handover_to, record.is_free) == ("", "", False)


@pytest.mark.parametrize("coordination", [True, False], ids=["coordination", "akka"])
def test_a_string_annotation_reads_as_the_request(coordination: bool) -> None:
    """The annotation's string is handover_to; without it there is no request."""
    spec = {"holderIdentity": "a", "owner": "a", "leaseTransitions": 3}
    metadata = {"resourceVersion": "5", "generation": 3}  # akka's token without annotations
    asked = {"metadata": metadata | {"annotations": {HANDOVER_TO_ANNOTATION: "b"}}}
    record = read_record("job", asked | {"spec": spec}, coordination=coordination)
    assert (record.holder, record.handover_to, record.unreadable) == ("a", "b", "")
    plain = {"metadata": metadata, "spec": spec}
    assert read_record("job", plain, coordination=coordination).handover_to == ""
