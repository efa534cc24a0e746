"""The summary ``_alternate --floor`` prints: each row against its loop's floor, by round."""

from __future__ import annotations

from tools.benchmarks._alternate import medians


def _run(round_: int, tree: str, lib: str, cpu: float) -> dict[str, object]:
    return {"round": round_, "tree": tree, "lib": lib, "client_cpu_us_per_renewal": cpu,
            "client_gc_us_per_renewal": None}


def test_each_round_is_set_against_the_floor_of_that_round() -> None:
    doc = {
        "plan": {"trees": ["/new"], "libs": ["ours"], "floor": True},
        "runs": [
            _run(0, "/new", "ours", 200.0), _run(0, "floor", "asyncio", 100.0),
            _run(1, "/new", "ours", 150.0), _run(1, "floor", "asyncio", 50.0),
            _run(2, "/new", "ours", 190.0), _run(2, "floor", "asyncio", 95.0),
        ],
    }
    lines = medians(doc)
    # Rounds: 2.00, 3.00, 2.00: the median of the ratios, not the ratio of the medians
    # (190 / 95 = 2.00 too here, but 200 / 95 would not be).
    assert "/new ours against its floor: median 2.00× (2.00, 3.00, 2.00)" in lines
    assert "/new ours above its floor: median 100 µs per renewal (100, 100, 95)" in lines
