"""LeaseSettings: defaults, duration parsing, and validation per docs/design.md §6."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from trio_lease import LeaseConfigError, LeaseSettings
from trio_lease._settings import SECTION_KEYS, SETTINGS_KEYS, parse_duration
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes._section import check_section

#: One value for each section key that is not the backend's (valid settings as a whole).
SECTION = {
    "lease-class": "etcd",
    "heartbeat-timeout": "15s",
    "heartbeat-interval": "1.5s",
    "lease-operation-timeout": "500ms",
    "holder-deadline": "10s",
    "stop-timeout": "1s",
    "clock-rate-tolerance": 0.001,
    "poll-interval": "1s",
}


def test_defaults_are_the_seeds() -> None:
    """Akka's reference defaults: 120 s timeout, 12 s interval, 5 s operation timeout."""
    s = LeaseSettings()
    assert (s.heartbeat_timeout, s.heartbeat_interval, s.lease_operation_timeout) == (120, 12, 5)
    assert s.deadline == 80
    assert s.safety_margin == pytest.approx(120 * 0.999 - 80 * 1.001)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (3, 3.0),
        (1.5, 1.5),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        (" 2 s ", 2.0),
        ("7", 7.0),
        (timedelta(milliseconds=1500), 1.5),
    ],
)
def test_durations_in_every_form(text: object, seconds: float) -> None:
    """Durations: seconds, timedelta, or strings with ms/s/m/h units."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["abc", "5 parsecs", "", True, None, float("nan"), "s", "1ms2"])
def test_bad_durations_are_rejected(bad: object) -> None:
    """A duration that is not a number of seconds fails with the accepted forms."""
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("kwargs", "inequality"),
    [
        ({"heartbeat_timeout": 0}, "heartbeat_timeout must be positive"),
        ({"heartbeat_interval": -1}, "heartbeat_interval must be positive"),
        ({"heartbeat_interval": 60}, "heartbeat_interval must be < heartbeat_timeout / 2"),
        ({"lease_operation_timeout": 13}, "lease_operation_timeout must be <= heartbeat_interval"),
        ({"holder_deadline": 21}, "two renewal attempts fit"),
        ({"holder_deadline": 119.9}, "safety inequality"),
        ({"holder_deadline": 119.5, "stop_timeout": 1}, "safety inequality"),
        ({"stop_timeout": 40}, "safety inequality"),
        ({"clock_rate_tolerance": 0.5}, "clock_rate_tolerance"),
        ({"poll_interval": 0}, "poll_interval must be positive"),
        ({"heartbeat_timeout": "soon"}, "cannot read 'soon' as a duration"),
        ({"unknown_key": 1}, "unknown_key"),
    ],
)
def test_invalid_settings_name_the_failed_inequality(
    kwargs: dict[str, object], inequality: str
) -> None:
    """Each invalid combination is a LeaseConfigError (a ValueError) naming what failed."""
    with pytest.raises(LeaseConfigError, match=inequality) as info:
        LeaseSettings.from_mapping(kwargs)
    assert isinstance(info.value, ValueError)


def test_a_negative_duration_string_says_durations_are_positive() -> None:
    """`LeaseSettings(heartbeat_timeout="-1s")` names the rule (it said "cannot read")."""
    for value in ("-1s", "-1m30s", " -250ms"):
        with pytest.raises(LeaseConfigError, match="durations must be positive") as info:
            LeaseSettings(heartbeat_timeout=value)
        assert "heartbeat_timeout" in str(info.value) and "cannot read" not in str(info.value)
    with pytest.raises(ValueError, match=r"durations must be positive, got '-2m'"):
        parse_duration("-2m")


def test_failed_inequality_says_by_how_much() -> None:
    """The message gives both sides and the shortfall."""
    with pytest.raises(LeaseConfigError, match=r"70 s >= 60 s \(too large by 10 s\)"):
        LeaseSettings(heartbeat_interval=70)


def test_unset_settings_follow_from_those_given() -> None:
    """Only L given: R = L/10, T = R/2 (at most 5 s), T_stop = 1 s or half a smaller margin."""
    s = LeaseSettings(heartbeat_timeout="2s")
    assert (s.heartbeat_interval, s.lease_operation_timeout) == pytest.approx((0.2, 0.1))
    assert s.deadline == pytest.approx(4 / 3)
    assert s.stop_timeout == pytest.approx(s.safety_margin / 2)
    assert s.derived == {"heartbeat_interval", "lease_operation_timeout", "stop_timeout"}
    seed = LeaseSettings()
    assert (seed.heartbeat_interval, seed.lease_operation_timeout, seed.stop_timeout) == (12, 5, 1)
    # 1 s where it fits (as before derivation existed): L = 5 s leaves a margin of 1.658 s.
    assert LeaseSettings(heartbeat_timeout=5).stop_timeout == 1


def test_given_settings_are_never_replaced_by_derived_ones() -> None:
    """A value given is kept as given, even where the derived one would differ."""
    s = LeaseSettings(heartbeat_timeout=60, heartbeat_interval=3, lease_operation_timeout=2,
                      stop_timeout=0.5)
    assert (s.heartbeat_interval, s.lease_operation_timeout, s.stop_timeout) == (3, 2, 0.5)
    assert s.derived == frozenset()


#: Published configurations and how they map (docs/tuning.md, "Published configurations").
PUBLISHED = {
    # client-go leader election: LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s.
    "client-go": {"heartbeat_timeout": "15s", "holder_deadline": "10s",
                  "heartbeat_interval": "2s"},
    # kubernetes (official Python client) leader election example: 17 / 15 / 5.
    "kubernetes-python": {"heartbeat_timeout": 17, "holder_deadline": 15,
                          "heartbeat_interval": 5},
    # Akka's documented Kubernetes lease example: 100 s / 1 s / 1 s.
    "akka-example": {"heartbeat-timeout": "100s", "heartbeat-interval": "1s",
                     "lease-operation-timeout": "1s"},
    # Akka's reference.conf defaults.
    "akka-reference": {"heartbeat-timeout": "120s", "heartbeat-interval": "12s",
                       "lease-operation-timeout": "5s"},
    "timeout-only-short": {"heartbeat_timeout": "1s"},
    "timeout-only-3s": {"heartbeat_timeout": 3},
}


@pytest.mark.parametrize("values", PUBLISHED.values(), ids=PUBLISHED.keys())
def test_published_configurations_are_accepted(values: dict[str, object]) -> None:
    """Configurations people copy from client-go, the Python client and Akka just work."""
    s = LeaseSettings.from_mapping(values)
    assert s.safety_margin > s.stop_timeout >= 0
    assert s.lease_operation_timeout <= s.heartbeat_interval < s.heartbeat_timeout / 2


def test_every_failed_inequality_is_listed_at_once_with_unset_values_marked() -> None:
    """Two rules fail: both are named in one error, with the derived T marked as not given."""
    with pytest.raises(LeaseConfigError) as info:
        LeaseSettings(heartbeat_timeout=10, heartbeat_interval=6, holder_deadline=9.9)
    message = str(info.value)
    assert "heartbeat_interval must be < heartbeat_timeout / 2: 6 s >= 5 s" in message
    assert "two renewal attempts fit before it: 9.9 s < 12 s" in message
    assert "lease_operation_timeout = 3 s (derived: heartbeat_interval / 2, at most 5 s)" in message
    with pytest.raises(LeaseConfigError, match=r"heartbeat_timeout = 120 s \(default\)"):
        LeaseSettings(heartbeat_interval=70)


def test_each_failed_rule_is_in_the_errors_problems() -> None:
    """`LeaseConfigError.problems` lists each failed rule of the message, as a tuple that
    survives pickling; an error of one sentence has none."""
    with pytest.raises(LeaseConfigError) as info:
        LeaseSettings(heartbeat_timeout=10, heartbeat_interval=6, holder_deadline=9.9)
    problems = info.value.problems
    assert isinstance(problems, tuple)
    assert [problem.split(" must")[0] for problem in problems] == [
        "heartbeat_interval",
        "holder_deadline",
    ]
    assert str(info.value) == f"invalid lease settings: {'; '.join(problems)}"
    assert pickle.loads(pickle.dumps(info.value)).problems == problems
    assert LeaseConfigError("one sentence").problems == ()


def test_kebab_case_keys_and_strings() -> None:
    """Akka's kebab-case keys and duration strings are accepted."""
    s = LeaseSettings.from_mapping(
        {
            "heartbeat-timeout": "15s",
            "heartbeat-interval": "1500ms",
            "lease-operation-timeout": "0.5s",
        }
    )
    assert (s.heartbeat_timeout, s.heartbeat_interval, s.lease_operation_timeout) == (15, 1.5, 0.5)
    assert s.deadline == 10
    assert s.wait_interval == 1.5


def test_settings_are_frozen() -> None:
    """Settings cannot change after validation."""
    s = LeaseSettings()
    with pytest.raises(Exception, match="frozen"):
        s.heartbeat_timeout = 1


def test_section_keys_are_lease_class_and_each_setting_in_kebab_case() -> None:
    """SETTINGS_KEYS spells each LeaseSettings field as TOML does; SECTION_KEYS adds lease-class."""
    assert {key.replace("-", "_") for key in SETTINGS_KEYS} == set(LeaseSettings.model_fields)
    provider_keys = SECTION_KEYS - SETTINGS_KEYS
    assert provider_keys == {"lease-class"}
    assert set(SECTION) == SECTION_KEYS
    settings = LeaseSettings.from_mapping({k: v for k, v in SECTION.items() if k in SETTINGS_KEYS})
    assert settings.holder_deadline == 10 and settings.poll_interval == 1


def test_backends_handed_a_whole_section_skip_the_section_keys() -> None:
    """The etcd and Kubernetes backends accept every section key that is not theirs."""
    backend = EtcdBackend.from_config(SECTION | {"endpoints": ["http://127.0.0.1:2379"]})
    assert backend.endpoints == ("http://127.0.0.1:2379",)
    check_section(SECTION | {"namespace": "jobs"})
    with pytest.raises(LeaseConfigError, match="unknown etcd backend key `colour`"):
        EtcdBackend.from_config(SECTION | {"colour": "blue"})
