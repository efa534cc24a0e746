"""LeaseSettings' upper bound: no duration longer than a store can keep (2**31 - 1 s)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from trio_lease import LeaseConfigError, LeaseSettings
from trio_lease._settings import MAX_DURATION
from trio_lease._wire import INT32_MAX
from trio_lease.backends.kubernetes._writing import _duration_seconds


def test_the_bound_is_what_the_stores_keep() -> None:
    """MAX_DURATION is the int32 bound the stores read lease durations with."""
    assert MAX_DURATION == INT32_MAX == 2**31 - 1


def test_the_longest_heartbeat_timeout_is_accepted_and_fits_kubernetes() -> None:
    """L = 2**31 - 1 s validates, and Kubernetes' rounded-up leaseDurationSeconds fits int32."""
    settings = LeaseSettings(heartbeat_timeout=MAX_DURATION)
    assert settings.heartbeat_timeout == MAX_DURATION
    assert _duration_seconds(settings.heartbeat_timeout) == INT32_MAX


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("heartbeat_timeout", "1e12"),
        ("heartbeat_timeout", MAX_DURATION + 0.5),
        ("heartbeat_timeout", timedelta(days=30000)),
        ("holder_deadline", 2**31),
        ("poll_interval", "1e10"),
        ("stop_timeout", 2**40),
    ],
    ids=["L-1e12", "L-just-over", "L-timedelta", "D", "poll", "stop"],
)
def test_a_longer_duration_is_refused_naming_the_setting(field: str, value: object) -> None:
    """A duration over 2**31 - 1 s is a LeaseConfigError naming the setting and the bound
    (it was accepted, and the first write failed on an internal field's range)."""
    with pytest.raises(LeaseConfigError) as caught:
        LeaseSettings.from_mapping({field: value})
    assert f"{field} must be at most {MAX_DURATION} s" in str(caught.value)
