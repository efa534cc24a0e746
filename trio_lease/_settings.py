"""LeaseSettings: the timing of a lease, validated at construction.

Notation (docs/design.md §4): L = ``heartbeat_timeout``, R = ``heartbeat_interval``,
T = ``lease_operation_timeout``, D = the holder's self-expiry (``holder_deadline``),
ρ = ``clock_rate_tolerance``, T_stop = ``stop_timeout``.

The holder renews every R; each request is bounded by min(T, time left to its deadline); its
validity ends D after it *sent* its last confirmed renewal. Contenders take over only after
seeing the same record version unchanged for L on their own clock. Safety needs
``D·(1+ρ) + T_stop < L·(1−ρ)``: the holder (whose clock may run slow) has stopped, guarded work
included, before any contender (whose clock may run fast) can count L from the renewal it saw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self, overload

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from ._exceptions import LeaseConfigError

__all__ = [
    "MAX_DURATION",
    "SECTION_KEYS",
    "SETTINGS_KEYS",
    "Duration",
    "DurationInput",
    "LeaseSettings",
    "check_seconds",
    "parse_duration",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


def _duration_text(value: str) -> float:
    """A duration written as a string: seconds ("1.5") or parts with units ("1m30s")."""
    text = value.strip().lower().replace(" ", "")
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith("-") and len(text) > 1:
        try:
            _duration_text(text[1:])
        except ValueError:
            pass
        else:
            raise ValueError(
                f"durations must be positive, got {value!r} (seconds, or a string such as "
                '"1.5s", "250ms", "2m")'
            )
    pos = 0
    seconds = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(
            f"cannot read {value!r} as a duration: use seconds (1.5), or a string such "
            'as "1.5s", "250ms", "2m", "1h" or "1m30s"'
        )
    return seconds


def parse_duration(value: object) -> float:
    """Turn seconds (int/float), a ``timedelta`` or a string like "1.5s", "250ms", "2m",
    "1m30s" into seconds. Raises ``ValueError`` with the accepted forms on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"a duration cannot be a boolean ({value!r})")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_text(value)
    else:
        raise ValueError(
            f"a duration must be seconds, a timedelta or a string like '1.5s', "
            f"not {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]

#: What a duration setting accepts: seconds, a ``timedelta``, or a string such as "1.5s".
DurationInput = float | str | timedelta


@overload
def check_seconds(value: object, where: str) -> float: ...
@overload
def check_seconds(value: object, where: str, *, none: str) -> float | None: ...
def check_seconds(value: object, where: str, *, none: str | None = None) -> float | None:
    """``value`` as seconds of waiting: a number >= 0 (``math.inf``: no bound), or None where
    ``none`` says what None means. Raises :class:`LeaseConfigError` naming ``where`` (such as
    "lease.held(timeout=...)") and the rule for anything else: a negative number, NaN, a
    boolean, a string."""
    if value is None and none is not None:
        return None
    allowed = f"None ({none}) or " if none is not None else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LeaseConfigError(
            f"{where}: must be {allowed}a number of seconds >= 0, got {value!r} "
            f"({type(value).__name__})"
        )
    if math.isnan(value) or value < 0:
        raise LeaseConfigError(f"{where}: must be {allowed}a number of seconds >= 0, got {value!r}")
    return float(value)

#: The longest duration a setting may have: 2**31 - 1 s. Stores keep the lease duration (the
#: heartbeat timeout, rounded up to whole seconds for Kubernetes' ``leaseDurationSeconds``) as
#: a 32-bit number, so a longer one would be accepted here and refused at the first write.
MAX_DURATION = 2**31 - 1
_DURATIONS = (
    "heartbeat_timeout",
    "heartbeat_interval",
    "lease_operation_timeout",
    "holder_deadline",
    "stop_timeout",
    "poll_interval",
)


def _kebab(name: str) -> str:
    return name.replace("_", "-")


#: How an unset setting follows from the others (``derive`` gets the settings resolved so far).
#: R = L/10 is the ratio of Akka's defaults (120 s / 12 s); T = R/2, at most 5 s (Akka's default
#: lease-operation-timeout), so a request is abandoned in time for a retry; T_stop = 1 s where the
#: safety margin
#: holds it, else half the margin, so stopping work never eats the whole margin.
_DERIVED: dict[str, tuple[str, Callable[[LeaseSettings], float]]] = {
    "heartbeat_interval": ("heartbeat_timeout / 10", lambda s: s.heartbeat_timeout / 10),
    "lease_operation_timeout": (
        "heartbeat_interval / 2, at most 5 s",
        lambda s: min(5.0, s.heartbeat_interval / 2),
    ),
    "stop_timeout": (
        "1 s if the safety margin holds it, else half the margin",
        lambda s: 1.0 if s.safety_margin > 1.0 else max(0.0, s.safety_margin / 2),
    ),
}


class _Problems(ValueError):
    """The rules a set of settings breaks, each its own sentence."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _rules(error: Any) -> list[str]:
    """The failed rules in one pydantic error: several for :class:`_Problems`, else one."""
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, _Problems):
        return cause.problems
    return [str(error["msg"]).removeprefix("Value error, ")]


class LeaseSettings(BaseModel):
    """Timing of a lease (frozen; validated at construction).

    Every duration accepts seconds, a ``timedelta`` or a string ("1.5s", "250ms", "2m").
    Keys may be given in snake_case or in Akka's kebab-case (``heartbeat-timeout``).
    Settings left unset follow from those given (docs/tuning.md), so
    ``LeaseSettings(heartbeat_timeout="2s")`` alone is valid.

    Attributes:
        heartbeat_timeout: L. How long a silent holder keeps the lease, as judged by contenders
            on their own clocks. Default 120 s (Akka's default).
        heartbeat_interval: R. How often the holder renews. Default: L/10 (12 s for the
            default L).
        lease_operation_timeout: T. Upper bound of one backend request. Default: R/2, at most
            5 s.
        holder_deadline: D. How long after sending its last confirmed renewal the holder keeps
            believing it holds the lease. Default: max(2L/3, R + 2T), so that at least two
            renewal attempts fit before it. Read the resolved value from :attr:`deadline`.
        stop_timeout: T_stop. How long guarded work may take to stop after it is cancelled.
            Default: 1 s where the safety margin L(1−ρ) − D(1+ρ) holds it, else half the
            margin.
        clock_rate_tolerance: ρ. Tolerated rate error of any participant's monotonic clock.
            Default 1e-3 (NTP slews at most 5e-4).
        poll_interval: how often a waiting contender re-reads the record when no watch event
            arrives (jittered). Default: the heartbeat interval.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", alias_generator=_kebab, populate_by_name=True
    )

    heartbeat_timeout: Duration = 120.0
    heartbeat_interval: Duration = 12.0
    lease_operation_timeout: Duration = 5.0
    holder_deadline: Duration | None = None
    stop_timeout: Duration = 1.0
    clock_rate_tolerance: float = 1e-3
    poll_interval: Duration | None = None

    if TYPE_CHECKING:
        # What type checkers see: each setting by name, with the types it accepts, so a
        # misspelled or mistyped setting is an error before the program runs. (At run time
        # ``__init__`` below also takes kebab-case keys from ``**mapping``, as
        # :meth:`from_mapping` does, and names an unknown key in a LeaseConfigError.)
        def __init__(
            self,
            *,
            heartbeat_timeout: DurationInput = ...,
            heartbeat_interval: DurationInput = ...,
            lease_operation_timeout: DurationInput = ...,
            holder_deadline: DurationInput | None = ...,
            stop_timeout: DurationInput = ...,
            clock_rate_tolerance: float = ...,
            poll_interval: DurationInput | None = ...,
        ) -> None: ...

    else:

        def __init__(self, **data: Any) -> None:
            self._set_checked(data)

    def _set_checked(self, data: Mapping[str, object]) -> None:
        # Surface every problem as LeaseConfigError (a ValueError) naming the fix, instead of
        # pydantic's ValidationError, so callers catch one exception tree.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = [
                ": ".join(part for part in (".".join(str(p) for p in err["loc"]), rule) if part)
                for err in exc.errors()
                for rule in _rules(err)
            ]
            raise LeaseConfigError(
                f"invalid lease settings: {'; '.join(problems)}", problems=problems
            ) from None

    @property
    def derived(self) -> frozenset[str]:
        """The settings that were not given and follow from the others (R, T, T_stop)."""
        return frozenset(_DERIVED) - self.model_fields_set

    @model_validator(mode="after")
    def _derive_and_check(self) -> LeaseSettings:
        problems = self._non_positive()
        if not problems:
            for field, (_, rule) in _DERIVED.items():  # in order: R, then T, then T_stop
                if field not in self.model_fields_set:
                    object.__setattr__(self, field, rule(self))  # frozen: set once, here
            problems = self._inequalities()
        if problems:
            raise _Problems(problems)
        return self

    def _non_positive(self) -> list[str]:
        """Durations out of range (too long, not positive) and a tolerance out of [0, 0.1)."""
        return list(dict.fromkeys([*self._too_long(), *self._below_range()]))

    def _too_long(self) -> list[str]:
        return [
            f"{field} must be at most {MAX_DURATION} s (about 68 years, the longest lease a "
            f"store keeps: a 32-bit number of seconds), got {value:.15g} s"
            for field in _DURATIONS
            if (value := getattr(self, field)) is not None and value > MAX_DURATION
        ]

    def _below_range(self) -> list[str]:
        problems: list[str] = []
        for field in ("heartbeat_timeout", "heartbeat_interval", "lease_operation_timeout"):
            value = getattr(self, field)
            if field in self.model_fields_set and value <= 0:
                problems.append(f"{field} must be positive, got {value} s")
        if self.heartbeat_timeout <= 0:  # nothing to derive the others from
            problems.append(f"heartbeat_timeout must be positive, got {self.heartbeat_timeout} s")
        for field in ("holder_deadline", "poll_interval"):
            value = getattr(self, field)
            if value is not None and value <= 0:
                problems.append(f"{field} must be positive, got {value} s")
        if self.stop_timeout < 0:
            problems.append(f"stop_timeout must not be negative, got {self.stop_timeout} s")
        if not 0 <= self.clock_rate_tolerance < 0.1:
            problems.append(
                f"clock_rate_tolerance must be in [0, 0.1), got {self.clock_rate_tolerance}"
            )
        return problems

    def _unset(self, *fields: str) -> str:
        """Where the values in a failed rule came from when not given: '' if all were given."""
        notes = []
        for field in fields:
            if field in self.model_fields_set:
                continue
            if field in _DERIVED:
                rule = _DERIVED[field][0]
                notes.append(f"{field} = {getattr(self, field):g} s (derived: {rule})")
            elif field == "holder_deadline":
                rule = "max(2L/3, R + 2T)"
                notes.append(f"holder_deadline = {self.deadline:g} s (default: {rule})")
            elif field == "clock_rate_tolerance":
                notes.append(f"clock_rate_tolerance = {self.clock_rate_tolerance:g} (default)")
            else:
                notes.append(f"{field} = {getattr(self, field):g} s (default)")
        return f" [not given: {', '.join(notes)}]" if notes else ""

    def _inequalities(self) -> list[str]:
        """Every failed inequality of docs/design.md §6 (all of them, not only the first)."""
        L, R, T = self.heartbeat_timeout, self.heartbeat_interval, self.lease_operation_timeout
        problems = []
        if R >= L / 2:
            problems.append(
                f"heartbeat_interval must be < heartbeat_timeout / 2: {R:g} s >= {L / 2:g} s "
                f"(too large by {R - L / 2:g} s); renew more often or raise the timeout"
                + self._unset("heartbeat_interval", "heartbeat_timeout")
            )
        if T > R:
            problems.append(
                f"lease_operation_timeout must be <= heartbeat_interval: {T:g} s > {R:g} s "
                f"(too large by {T - R:g} s)"
                + self._unset("lease_operation_timeout", "heartbeat_interval")
            )
        D = self.deadline
        if D < R + 2 * T:
            problems.append(
                f"holder_deadline must be >= heartbeat_interval + 2 * lease_operation_timeout so "
                f"that two renewal attempts fit before it: {D:g} s < {R + 2 * T:g} s "
                f"(short by {R + 2 * T - D:g} s)"
                + self._unset("holder_deadline", "heartbeat_interval", "lease_operation_timeout")
            )
        rho = self.clock_rate_tolerance
        lhs = D * (1 + rho) + self.stop_timeout
        rhs = L * (1 - rho)
        if lhs >= rhs:
            problems.append(
                "the safety inequality holder_deadline*(1+rho) + stop_timeout < "
                f"heartbeat_timeout*(1-rho) fails: {lhs:g} s >= {rhs:g} s (short by "
                f"{lhs - rhs:g} s); lower holder_deadline or stop_timeout, or raise "
                "heartbeat_timeout"
                + self._unset("holder_deadline", "stop_timeout", "heartbeat_timeout")
            )
        return problems

    @property
    def deadline(self) -> float:
        """D, resolved: how long the holder stays valid after sending a confirmed renewal."""
        if self.holder_deadline is not None:
            return self.holder_deadline
        return max(
            2 * self.heartbeat_timeout / 3,
            self.heartbeat_interval + 2 * self.lease_operation_timeout,
        )

    @property
    def safety_margin(self) -> float:
        """L(1−ρ) − D(1+ρ): the time guarded work has to stop after the holder's deadline."""
        rho = self.clock_rate_tolerance
        return self.heartbeat_timeout * (1 - rho) - self.deadline * (1 + rho)

    @property
    def wait_interval(self) -> float:
        """How often a waiting contender re-reads the record without a watch event."""
        return self.poll_interval if self.poll_interval is not None else self.heartbeat_interval

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> Self:
        """Build settings from a mapping with kebab-case or snake_case keys (a TOML section,
        a parsed file): an unknown key or a wrong value is a :class:`LeaseConfigError`."""
        if not all(isinstance(key, str) for key in values):
            raise LeaseConfigError(
                f"invalid lease settings: keys must be strings, got {sorted(map(repr, values))}"
            )
        settings = cls.__new__(cls)
        settings._set_checked(values)
        return settings


#: The keys of a :class:`~trio_lease.LeaseProvider` section that set :class:`LeaseSettings`
#: (kebab-case, as written in TOML).
SETTINGS_KEYS: frozenset[str] = frozenset(_kebab(field) for field in LeaseSettings.model_fields)
#: The keys of a provider section that are not the backend's: ``lease-class`` and the settings'.
#: The provider gives a backend every other key (:meth:`LeaseBackend.from_config`); a backend
#: handed a whole section (the Kubernetes CLI does) skips these.
SECTION_KEYS: frozenset[str] = frozenset({"lease-class"}) | SETTINGS_KEYS
