"""Reading replies safely: bounded JSON parsing and typed field checks, shared by the backends.

A reply from a server is input, and input is hostile until checked. The backends parse every
body with :func:`load_json` (size and nesting capped before parsing, ``NaN``/``Infinity``
refused, integers of absurd length refused, strings that are not Unicode text refused) and read
every field through the checkers below, which raise :class:`Malformed` naming the field's path
and what was wrong. A backend then turns
:class:`Malformed` into a :class:`~trio_lease.BackendProtocolError` (the reply is not a record)
or into a record with :attr:`~trio_lease.LeaseRecord.unreadable` set (the record exists, its
content cannot be trusted): never into a free lease, never into a grant.

Messages describe types and ranges, never quote a value: a reply may carry anything,
including text a proxy copied from a request.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from ._exceptions import BackendProtocolError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "JsonObject",
    "Malformed",
    "describe",
    "integer",
    "load_json",
    "number",
    "obj",
    "optional_obj",
    "string",
]

JsonObject = dict[str, Any]

#: Largest reply body read, in bytes. A Lease object is about 1 KiB (a few KiB with
#: managedFields); etcd's default request limit is 1.5 MiB, Kubernetes objects are smaller.
MAX_BODY_BYTES: Final = 4 * 1024 * 1024
#: Deepest nesting of objects and arrays accepted in a reply (a Lease with managedFields is < 12).
MAX_DEPTH: Final = 64
#: Longest integer literal accepted (int64 has 19 digits; Python refuses > 4,300 on its own).
_MAX_INT_DIGITS: Final = 24

_DECIMAL: Final = re.compile(r"-?[0-9]+")
#: The escapes of a JSON text, left to right: a surrogate pair (which the decoder joins into one
#: character), a lone surrogate (\ud800 to \udfff, group 1), or any other escape (``\\``
#: taken whole, so a backslash after it starts a new escape).
_ESCAPES: Final = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)"
)

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


class Malformed(Exception):
    """A reply, or a field of it, does not have the shape the protocol promises.

    ``path`` names the field (``spec.holderIdentity``), ``problem`` what was wrong with it.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


def describe(value: object) -> str:
    """A value's JSON type for messages (``a list``, ``a string``), never the value itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"contains {name}, which JSON does not allow")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(f"contains an integer of {len(text)} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: valid JSON, but no double holds it, and no JSON
        raise ValueError(f"contains a number out of range ({text[:24]})")  # writer can re-send it
    return value


#: The decoder of every reply: NaN/Infinity, over-long integers and out-of-range numbers refused.
_DECODER: Final = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_int=_parse_int, parse_float=_parse_float
)


def _depth_exceeds(content: bytes, limit: int) -> bool:
    """Whether objects/arrays in ``content`` nest deeper than ``limit`` (strings skipped)."""
    # Fast path: fewer opening brackets than the limit cannot nest deeper than it (a Lease
    # reply has a few dozen), so the byte scan below runs only on unusual bodies.
    if content.count(b"{") + content.count(b"[") <= limit:
        return False
    depth = 0
    in_string = False
    escaped = False
    for byte in content:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
    return False


def load_json(
    content: bytes | str,
    what: str,
    *,
    max_bytes: int = MAX_BODY_BYTES,
    max_depth: int = MAX_DEPTH,
) -> object:
    """Parse a reply body, or raise :class:`BackendProtocolError` saying why it is unreadable.

    ``what`` names the reply for the message (``"the answer to update of leases … 'job'"``).
    Refused before parsing: bodies over ``max_bytes`` and nesting deeper than ``max_depth``;
    while parsing: invalid JSON or UTF-8, ``NaN``/``Infinity``, integers longer than 24 digits,
    numbers out of a double's range (``1e999``, which would read as infinity); after: a key or
    string anywhere holding a lone surrogate (``"\\ud800"``: valid JSON, but not Unicode text,
    so no such value could be written back: a PUT's UTF-8 body would fail to encode).
    Surrogates encoded as UTF-8 bytes are invalid UTF-8 (strict decoding).
    """
    data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
    if len(data) > max_bytes:
        raise BackendProtocolError(
            f"{what} is {len(data):,} bytes, over the {max_bytes:,} accepted; the outcome is "
            "unknown"
        )
    if _depth_exceeds(data, max_depth):
        raise BackendProtocolError(
            f"{what} nests deeper than {max_depth} levels; the outcome is unknown"
        )
    try:
        # What json.loads(data, **hooks) does, with one decoder for every reply, but strict
        # UTF-8 (json.loads lets encoded surrogates through).
        if data[:1] == b"{" and data[1:2] != b"\x00":
            text = data.decode()  # what detect_encoding says of an object's bytes: UTF-8
        else:
            text = data.decode(json.detect_encoding(data))
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        if isinstance(exc, json.JSONDecodeError):
            reason = "is not valid JSON"
        elif isinstance(exc, UnicodeDecodeError):
            reason = "is not valid UTF-8"
        elif isinstance(exc, RecursionError):
            reason = "nests too deeply"
        else:
            reason = str(exc)
        raise BackendProtocolError(f"{what} {reason}; the outcome is unknown") from None
    # Strict decoding let no raw surrogate through: only an escape can make one. (A search for
    # one character is a memchr; most replies have no escape at all.)
    if "\\" in text and _lone_surrogate_escape(text):
        raise BackendProtocolError(
            f"{what} contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not "
            "Unicode text; the outcome is unknown"
        )
    return value


def _lone_surrogate_escape(text: str) -> bool:
    """Whether valid JSON ``text`` escapes a lone surrogate, in a key or a string at any depth.

    A scan of the escapes, not a walk of the decoded value: backslashes occur only inside
    strings, and each escape is read whole from the left, so ``\\\\ud800`` (a backslash, then
    the text "ud800") is no surrogate and ``\\ud83d\\ude00`` is one character.
    """
    return any(escape.group(1) for escape in _ESCAPES.finditer(text))


def obj(value: object, path: str) -> JsonObject:
    """``value`` as a JSON object, or :class:`Malformed`."""
    if not isinstance(value, dict):
        raise Malformed(path, f"expected an object, got {describe(value)}")
    return value


def optional_obj(value: object, path: str) -> JsonObject:
    """``value`` as a JSON object; absent or null reads as empty."""
    if value is None:
        return {}
    return obj(value, path)


def string(value: object, path: str, *, default: str | None = "") -> str:
    """``value`` as a string; absent or null gives ``default`` (``None``: required)."""
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise Malformed(path, f"expected a string, got {describe(value)}")
    return value


def integer(
    value: object,
    path: str,
    *,
    low: int = 0,
    high: int = INT64_MAX,
    default: int | None = None,
    from_string: bool = False,
) -> int:
    """``value`` as an integer in ``[low, high]``; absent or null gives ``default`` (if any).

    ``from_string`` also accepts a decimal string (protobuf's JSON mapping sends 64-bit integers
    as strings). Booleans and floats are refused, even ``1.0``.
    """
    if value is None and default is not None:
        return default
    if isinstance(value, str) and from_string:
        text = value.strip()
        if len(text) > _MAX_INT_DIGITS or _DECIMAL.fullmatch(text) is None:
            raise Malformed(path, "expected a decimal integer string")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(path, f"expected an integer, got {describe(value)}")
    if not low <= value <= high:
        raise Malformed(path, f"integer out of range [{low}, {high}]")
    return value


def number(
    value: object,
    path: str,
    *,
    low: float = 0.0,
    high: float = float(INT32_MAX),
    default: float | None = None,
) -> float:
    """``value`` as a finite number in ``[low, high]``; absent or null gives ``default``."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Malformed(path, f"expected a number, got {describe(value)}")
    result = float(value)
    if not math.isfinite(result) or not low <= result <= high:
        raise Malformed(path, f"number out of range [{low:g}, {high:g}]")
    return result
