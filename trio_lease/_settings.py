"""LeaseSettings: the timing of a lease, validated at construction.

Notation (DESIGN §4): L = ``heartbeat_timeout``, R = ``heartbeat_interval``,
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
from datetime import timedelta
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from ._exceptions import LeaseConfigError

__all__ = ["SECTION_KEYS", "SETTINGS_KEYS", "Duration", "LeaseSettings", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


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
        text = value.strip().lower().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
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
                ) from None
    else:
        raise ValueError(
            f"a duration must be seconds, a timedelta or a string like '1.5s', "
            f"not {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class LeaseSettings(BaseModel):
    """Timing of a lease (frozen; validated at construction).

    Every duration accepts seconds, a ``timedelta`` or a string ("1.5s", "250ms", "2m").
    Keys may be given in snake_case or in the seed's kebab-case (``heartbeat-timeout``).

    Attributes:
        heartbeat_timeout: L. How long a silent holder keeps the lease, as judged by contenders
            on their own clocks. Default 120 s (the seed's default).
        heartbeat_interval: R. How often the holder renews. Default 12 s.
        lease_operation_timeout: T. Upper bound of one backend request. Default 5 s.
        holder_deadline: D. How long after sending its last confirmed renewal the holder keeps
            believing it holds the lease. Default: max(2L/3, R + 2T), so that at least two
            renewal attempts fit before it. Read the resolved value from :attr:`deadline`.
        stop_timeout: T_stop. How long guarded work may take to stop after it is cancelled.
            Default 1 s.
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

    def __init__(self, **data: Any) -> None:
        # Surface every problem as LeaseConfigError (a ValueError) naming the fix, instead of
        # pydantic's ValidationError, so callers catch one exception tree.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = "; ".join(
                ": ".join(
                    part
                    for part in (
                        ".".join(str(p) for p in err["loc"]),
                        err["msg"].removeprefix("Value error, "),
                    )
                    if part
                )
                for err in exc.errors()
            )
            raise LeaseConfigError(f"invalid lease settings: {problems}") from None

    @model_validator(mode="after")
    def _check_inequalities(self) -> LeaseSettings:
        L, R, T = self.heartbeat_timeout, self.heartbeat_interval, self.lease_operation_timeout
        for field in ("heartbeat_timeout", "heartbeat_interval", "lease_operation_timeout"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)} s")
        for field in ("holder_deadline", "poll_interval"):
            value = getattr(self, field)
            if value is not None and value <= 0:
                raise ValueError(f"{field} must be positive, got {value} s")
        if self.stop_timeout < 0:
            raise ValueError(f"stop_timeout must not be negative, got {self.stop_timeout} s")
        if not 0 <= self.clock_rate_tolerance < 0.1:
            raise ValueError(
                f"clock_rate_tolerance must be in [0, 0.1), got {self.clock_rate_tolerance}"
            )
        if R >= L / 2:
            raise ValueError(
                f"heartbeat_interval must be < heartbeat_timeout / 2: {R:g} s >= {L / 2:g} s "
                f"(too large by {R - L / 2:g} s); renew more often or raise the timeout"
            )
        if T >= R:
            raise ValueError(
                f"lease_operation_timeout must be < heartbeat_interval: {T:g} s >= {R:g} s "
                f"(too large by {T - R:g} s)"
            )
        D = self.deadline
        if D < R + 2 * T:
            raise ValueError(
                f"holder_deadline must be >= heartbeat_interval + 2 * lease_operation_timeout so "
                f"that two renewal attempts fit before it: {D:g} s < {R + 2 * T:g} s "
                f"(short by {R + 2 * T - D:g} s)"
            )
        rho = self.clock_rate_tolerance
        lhs = D * (1 + rho) + self.stop_timeout
        rhs = L * (1 - rho)
        if lhs >= rhs:
            raise ValueError(
                "the safety inequality holder_deadline*(1+rho) + stop_timeout < "
                f"heartbeat_timeout*(1-rho) fails: {lhs:g} s >= {rhs:g} s (short by "
                f"{lhs - rhs:g} s); lower holder_deadline or stop_timeout, or raise "
                "heartbeat_timeout"
            )
        return self

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
    def from_mapping(cls, values: dict[str, Any]) -> LeaseSettings:
        """Build settings from a mapping with kebab-case or snake_case keys."""
        return cls(**values)


#: The keys of a :class:`~trio_lease.LeaseProvider` section that set :class:`LeaseSettings`
#: (kebab-case, as written in TOML).
SETTINGS_KEYS: frozenset[str] = frozenset(_kebab(field) for field in LeaseSettings.model_fields)
#: The keys of a provider section that are not the backend's: ``lease-class`` and the settings'.
#: The provider gives a backend every other key (:meth:`LeaseBackend.from_config`); a backend
#: handed a whole section (the Kubernetes CLI does) skips these.
SECTION_KEYS: frozenset[str] = frozenset({"lease-class"}) | SETTINGS_KEYS
