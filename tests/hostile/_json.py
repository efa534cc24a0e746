"""JSON text the standard encoder will not write: bare NaN/Infinity, absurd numbers, deep nesting.

A hostile value inside a Python structure is a :class:`Bare` token: :func:`dumps` writes its text
verbatim where the value sits, so ``{"spec": {"leaseDurationSeconds": Bare("NaN")}}`` becomes
``{"spec":{"leaseDurationSeconds":NaN}}``. :data:`DELETE` in a mutation means "remove the field".
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Final

__all__ = ["DELETE", "Bare", "deep_text", "dumps", "huge_string"]


class Bare:
    """A token written without quotes (``NaN``, ``1e999``, a 400-digit integer)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Bare({self.text[:20]!r})"


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


#: A mutation value meaning "the field is absent".
DELETE: Final = _Delete()


def dumps(value: Any) -> bytes:
    """Encode ``value`` compactly, writing :class:`Bare` tokens verbatim."""
    tokens: dict[str, str] = {}

    def swap(item: Any) -> Any:
        if isinstance(item, Bare):
            key = f"\x00{secrets.token_hex(6)}\x00"
            tokens[json.dumps(key)] = item.text
            return key
        if isinstance(item, dict):
            return {k: swap(v) for k, v in item.items()}
        if isinstance(item, list):
            return [swap(v) for v in item]
        return item

    text = json.dumps(swap(value), separators=(",", ":"))
    for quoted, raw in tokens.items():
        text = text.replace(quoted, raw)
    return text.encode()


def deep_text(
    levels: int, *, inner: str = "1", opener: str = '{"a":', closer: str = "}"
) -> str:
    """``levels`` nested objects (or lists: ``opener="["``, ``closer="]"``) around ``inner``."""
    return opener * levels + inner + closer * levels


def huge_string(size: int) -> str:
    """A string of ``size`` characters (a body over the 4 MiB cap when embedded)."""
    return "x" * size
