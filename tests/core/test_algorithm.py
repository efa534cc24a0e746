"""The pure decisions, table-driven, with no event loop (STYLE rule 2)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from trio_lease import LeaseRecord, LeaseSettings
from trio_lease import _algorithm as algo

S = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
WALL = datetime(2026, 1, 1, tzinfo=UTC)
ME = "me_1"


def rec(
    holder: str = "", *, version: str = "v1", token: int = 3, duration: float = 15
) -> LeaseRecord:
    return LeaseRecord(
        name="job", holder=holder, lease_duration=duration, fencing_token=token, version=version
    )


def decide(
    record: LeaseRecord | None, obs: algo.Observation | None, now: float
) -> algo.Busy | algo.Write:
    return algo.decide_acquire(
        record, name="job", identity=ME, observation=obs, now=now, settings=S, wall_now=WALL
    )


@pytest.mark.parametrize(
    ("record", "observation", "now", "expected"),
    [
        # (record, observation, now) -> Write(token, expected_version) or Busy(expires_in)
        (None, None, 0.0, ("write", 1, None)),
        (rec(""), None, 0.0, ("write", 4, "v1")),
        (rec(ME), None, 0.0, ("write", 4, "v1")),  # a leftover of ours: a new grant
        (rec("other"), None, 100.0, ("busy", 15.0)),  # first sight: full countdown
        (rec("other"), algo.Observation("v1", 100.0), 110.0, ("busy", 5.0)),
        (rec("other"), algo.Observation("v1", 100.0), 115.0, ("write", 4, "v1")),
        (rec("other"), algo.Observation("v0", 100.0), 115.0, ("busy", 15.0)),  # version moved
        (rec("other", duration=60), algo.Observation("v1", 100.0), 130.0, ("busy", 30.0)),
        (
            rec("other", duration=5),
            algo.Observation("v1", 100.0),
            110.0,
            ("busy", 5.0),
        ),  # our L wins
    ],
)
def test_decide_acquire_table(
    record: LeaseRecord | None,
    observation: algo.Observation | None,
    now: float,
    expected: tuple[object, ...],
) -> None:
    """decide_acquire: create when missing, new grant when free/ours/expired, else busy."""
    decision = decide(record, observation, now)
    if expected[0] == "write":
        assert isinstance(decision, algo.Write)
        assert decision.record.fencing_token == expected[1]
        assert decision.expected_version == expected[2]
        assert decision.record.holder == ME
        assert decision.record.lease_duration == S.heartbeat_timeout
    else:
        assert isinstance(decision, algo.Busy)
        assert decision.holder == "other"
        assert decision.expires_in == pytest.approx(expected[1])


def test_observe_restarts_countdown_only_on_new_version() -> None:
    """observe: re-reading the same version keeps the first sighting; a new version restarts."""
    first = algo.observe(None, rec("x", version="a"), 10.0)
    assert first == algo.Observation("a", 10.0)
    assert algo.observe(first, rec("x", version="a"), 20.0) is first
    assert algo.observe(first, rec("x", version="b"), 20.0) == algo.Observation("b", 20.0)
    assert algo.observe(first, None, 20.0) is None


def test_wall_clock_fields_do_not_influence_expiry() -> None:
    """expires_in ignores acquired_at/renewed_at entirely."""
    obs = algo.Observation("v1", 0.0)
    plain = rec("x")
    for stamp in (datetime(1990, 1, 1, tzinfo=UTC), datetime(2090, 1, 1, tzinfo=UTC)):
        stamped = dataclasses.replace(plain, acquired_at=stamp, renewed_at=stamp)
        assert algo.expires_in(stamped, obs, 7.0, S) == algo.expires_in(plain, obs, 7.0, S) == 8.0


def test_renewal_keeps_token_and_release_keeps_history() -> None:
    """renewal keeps holder and token; release empties holder, keeps token, duration 1 s."""
    held = rec(ME, token=9)
    renewed = algo.renewal(held, WALL)
    assert (renewed.holder, renewed.fencing_token, renewed.renewed_at) == (ME, 9, WALL)
    released = algo.release_record(held, WALL)
    assert (released.holder, released.fencing_token, released.lease_duration) == ("", 9, 1.0)


def test_renewal_keeps_every_field_but_renewed_at() -> None:
    """Each field of LeaseRecord set apart from its default: the renewal keeps all of them
    except ``renewed_at`` (a field added to the record and forgotten here fails this)."""
    values: dict[str, object] = {
        "name": "n",
        "holder": ME,
        "lease_duration": 7.5,
        "fencing_token": 11,
        "acquired_at": datetime(2020, 1, 1, tzinfo=UTC),
        "renewed_at": datetime(2021, 1, 1, tzinfo=UTC),
        "version": "v9",
        "unreadable": "spec: bad",
        "handover_to": "next",
    }
    assert sorted(values) == sorted(field.name for field in dataclasses.fields(LeaseRecord))
    renewed = algo.renewal(LeaseRecord(**values), WALL)  # type: ignore[arg-type]
    assert renewed == LeaseRecord(**{**values, "renewed_at": WALL})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "token", "ours"),
    [
        (rec(ME, token=3), 3, True),
        (rec(ME, token=4), 3, False),
        (rec("x", token=3), 3, False),
        (None, 3, False),
    ],
)
def test_still_ours(record: LeaseRecord | None, token: int, ours: bool) -> None:
    """still_ours: our identity and our token, nothing less."""
    assert algo.still_ours(record, ME, token) is ours


def test_deadline_and_request_bound() -> None:
    """holder_deadline is send time + D; request_bound is min(T, time left)."""
    assert algo.holder_deadline(100.0, S) == 100.0 + S.deadline
    assert algo.request_bound(0.0, 100.0, S) == S.lease_operation_timeout
    assert algo.request_bound(99.8, 100.0, S) == pytest.approx(0.2)
    assert algo.request_bound(101.0, 100.0, S) < 0


def _every(interval: float) -> LeaseSettings:
    return LeaseSettings(
        heartbeat_timeout=10 * interval,
        heartbeat_interval=interval,
        lease_operation_timeout=interval / 10,
    )


@pytest.mark.parametrize("last_send", [0.0, 0.01, 1.2345, 46.875, 1e5 + 0.3, 123456.789])
@pytest.mark.parametrize("interval", [0.3, 1.5, 3.0, 12.0])
def test_next_renewal_is_on_the_grid_never_late_at_most_a_tick_early(
    last_send: float, interval: float
) -> None:
    """The next renewal falls on a multiple of R/32, in (last_send + R − R/32, last_send + R]."""
    settings = _every(interval)
    tick = interval / algo.RENEWAL_TICKS
    due = algo.next_renewal(last_send, settings)
    natural = last_send + interval
    assert natural - tick < due <= natural + 1e-6 * tick
    assert due / tick == pytest.approx(round(due / tick), abs=1e-6)


@pytest.mark.parametrize("interval", [0.3, 1.5, 2.2, 3.0, 12.0])
def test_renewals_sent_on_the_grid_keep_the_interval(interval: float) -> None:
    """A renewal sent exactly on the grid (as on a virtual clock) is followed by the next one R
    later, not R − R/32: ``k * tick + R`` divided by the tick may come out a hair below
    ``k + 32`` (for R = 2.2 s, k = 114,668 among others), and must still count as on it."""
    settings = _every(interval)
    tick = interval / algo.RENEWAL_TICKS
    for k in range(100_000, 120_000, 7):
        send = k * tick
        assert algo.next_renewal(send, settings) - send == pytest.approx(interval, rel=1e-9)


def test_holders_with_different_phases_renew_at_the_same_instants() -> None:
    """Two grants taken a fraction of a tick apart fall due at the same time: one wake-up."""
    tick = S.heartbeat_interval / algo.RENEWAL_TICKS
    first = algo.next_renewal(3200.1 * tick, S)
    second = algo.next_renewal(3200.9 * tick, S)
    assert first == second == pytest.approx(3232 * tick)
