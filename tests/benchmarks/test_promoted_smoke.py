"""tools/benchmarks/_common.py's ``Promoted``: what the collector moves to its oldest
generation, by kind, counted at each collection of the middle generation."""

from __future__ import annotations

import gc

from tools.benchmarks._common import Promoted, kind_of


class _Kept:
    """Made and kept across a collection of the middle generation: moved to the oldest."""


class _Dropped:
    """Made and dropped before any collection: never moved."""


def test_objects_alive_at_a_middle_collection_are_counted_and_dropped_ones_are_not() -> None:
    gc.collect()
    kept: list[_Kept] = []
    with Promoted() as counted:
        for _ in range(300):
            _Dropped()
            kept.append(_Kept())
        gc.collect(1)
        later = [_Kept() for _ in range(50)]
        gc.collect(0)  # a young collection alone moves nothing to the oldest generation
    assert counted.collections == 1
    kinds = dict(counted.most())
    assert kinds[kind_of(kept[0])] == 300
    assert kind_of(_Dropped()) not in kinds
    assert len(later) == 50


def test_kinds_name_what_made_the_object() -> None:
    async def sleeper() -> None:
        """A coroutine function."""

    coroutine = sleeper()
    try:
        assert kind_of(coroutine).endswith(".<locals>.sleeper)")
    finally:
        coroutine.close()
    assert kind_of((1.0, 2)) == "builtins.tuple (float, int)"
    assert kind_of({"kind": 1, "apiVersion": 2}) == "builtins.dict (kind, apiVersion)"
    assert kind_of([].append) == "builtins.builtin_function_or_method (append of list)"
