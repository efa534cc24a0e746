"""The object the Kubernetes backend keeps for its next PUT (``_cache.ObjectCache``).

Each new answer goes into the dicts kept before (the object and its ``metadata``), so a held
lease does not hand the garbage collector two new long-lived containers per renewal
(tools/benchmarks/README.md, "Promoted per renewal"). What is kept must still be exactly the
last answer (without ``managedFields``), and nothing built from a kept object before may change
when the next answer comes in.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from trio_lease import LeaseRecord
from trio_lease.backends.kubernetes._cache import ObjectCache
from trio_lease.backends.kubernetes._models import COORDINATION


def _answer(version: int, holder: str = "me", renewed: str = "2026-11-30T08:00:00.000000Z"
            ) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "job",
            "namespace": "default",
            "uid": "8b3c3c3e-0000-4000-8000-000000000001",
            "resourceVersion": str(version),
            "labels": {"app.kubernetes.io/managed-by": "trio-lease"},
            "managedFields": [{"manager": "trio-lease", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "leaseTransitions": 3,
            "renewTime": renewed,
        },
    }


def test_each_answer_is_kept_in_the_dicts_kept_before() -> None:
    cache = ObjectCache(COORDINATION, map_names=False)
    cache.record("job", _answer(1))
    kept = cache.get("job")
    assert kept is not None
    kept_metadata = kept["metadata"]
    for version in (2, 3, 4):
        answer = _answer(version, renewed=f"2026-11-30T08:00:0{version}.000000Z")
        expected = copy.deepcopy(answer)
        del expected["metadata"]["managedFields"]
        record = cache.record("job", answer)
        now = cache.get("job")
        assert now is kept and now["metadata"] is kept_metadata  # the same two dicts
        assert now == expected  # holding exactly the last answer, without managedFields
        assert now["metadata"] is not answer["metadata"]
        assert record.version == str(version)
        assert record.renewed_at == datetime(2026, 11, 30, 8, 0, version, tzinfo=UTC)


def test_a_body_built_from_the_kept_object_does_not_change_with_the_next_answer() -> None:
    """A PUT's body is built from the kept object before the request is sent; the answer to
    another request for the same object (a watch event, a read) may be kept while it is in
    flight, and must not change that body."""
    cache = ObjectCache(COORDINATION, map_names=False)
    cache.record("job", _answer(1))
    base = cache.get("job")
    assert base is not None
    record = LeaseRecord("job", holder="me", lease_duration=15.0, fencing_token=3,
                         renewed_at=datetime(2026, 11, 30, 8, 1, tzinfo=UTC), version="1")
    body = COORDINATION.apply(base, record)
    before = copy.deepcopy(body)
    cache.record("job", _answer(2, holder="other", renewed="2026-11-30T09:00:00.000000Z"))
    assert body == before
    assert base["spec"]["holderIdentity"] == "other"  # the kept object itself moved on


def test_keeping_the_object_already_kept_keeps_it() -> None:
    cache = ObjectCache(COORDINATION, map_names=False)
    answer = _answer(1)
    cache.keep("job", answer)
    cache.keep("job", answer)
    assert cache.get("job") is answer
    assert answer["metadata"]["resourceVersion"] == "1"
    assert "managedFields" not in answer["metadata"]


def test_an_answer_whose_metadata_is_not_an_object_replaces_what_was_kept() -> None:
    """Kept whole (the next write reads it and refuses it); the old metadata is not reused."""
    cache = ObjectCache(COORDINATION, map_names=False)
    cache.keep("job", _answer(1))
    odd: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": "junk"}
    cache.keep("job", odd)
    assert cache.get("job") == odd
