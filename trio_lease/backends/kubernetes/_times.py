"""Kubernetes times: MicroTime as written, RFC 3339 read leniently, Akka's epoch milliseconds.

MicroTime is always written ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: the server requires exactly six
digits, and ``datetime.isoformat()`` drops them when microseconds are 0. Times read from the
server are informational (expiry is judged by the core's local countdown), so reading is total:
junk reads as None, never an exception.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["akka_time", "format_micro_time", "parse_time"]

#: 9999-12-31T23:59:59.999Z in epoch milliseconds: the latest spec.time read as a time.
_MAX_EPOCH_MS: Final = 253_402_300_799_999
_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?",
    re.ASCII,
)


#: The times this process formatted, by their text: a renewal's answer echoes the renewTime and
#: acquireTime it wrote, so :func:`parse_time` finds them here instead of parsing them again.
_FORMATTED: dict[str, datetime] = {}
#: How many formatted times are kept (two per lease renewed in the last moments, with room).
FORMATTED_KEPT: Final = 8192


#: The text of each time in :data:`_FORMATTED`: a held lease's acquireTime is written again
#: with every renewal, unchanged.
_TEXTS: dict[datetime, str] = {}


def format_micro_time(value: datetime) -> str:
    """Format as Kubernetes MicroTime: UTC, ``Z``, exactly six fraction digits."""
    if value.tzinfo is None:
        raise ValueError("MicroTime needs an aware datetime (UTC)")
    known = _TEXTS.get(value)
    if known is not None:
        return known
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # isoformat() ends in "+00:00" in UTC, and has no fraction when the microseconds are 0:
    # cut and completed here, the value is neither copied nor formatted with keywords (either
    # cost as much as the formatting itself; strftime four times as much).
    text = value.isoformat()[:-6]
    text = f"{text}Z" if value.microsecond else f"{text}.000000Z"
    if len(_FORMATTED) >= FORMATTED_KEPT:
        _FORMATTED.clear()
        _TEXTS.clear()
    _FORMATTED[text] = value
    _TEXTS[value] = text
    return text


def parse_time(value: object) -> datetime | None:
    """Parse MicroTime or RFC 3339 leniently (any fraction, ``Z`` or offset); junk reads as None.

    Total: any value (a list, a 4 MiB string, year 0, an offset past year 1) gives a datetime
    or None, never an exception. Times are informational, so junk never fails a record.
    """
    if not isinstance(value, str) or len(value) > 64:
        return None
    known = _FORMATTED.get(value)  # a time we wrote: exactly what parsing it gives
    if known is not None:
        return known
    match = _TIME.fullmatch(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, UTC
        )
        if zone and zone not in "Zz":
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            offset = sign * (int(digits[:2]) * 60 + int(digits[2:]))
            parsed -= timedelta(minutes=offset)
    except (ValueError, OverflowError):
        return None
    return parsed


def akka_time(value: object) -> datetime | None:
    """spec.time (epoch milliseconds) as a datetime; informational, so junk reads as None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_EPOCH_MS:
        return None
    return datetime.fromtimestamp(value / 1000, UTC)
