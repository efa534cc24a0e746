"""Field selectors and the whole selection of a list or watch.

``fieldSelector`` follows ``apimachinery/pkg/fields/selector.go`` (terms ``f=v``, ``f==v``,
``f!=v`` joined by ``,``; ``\\`` escapes): Leases and custom resources select only on
``metadata.name`` and ``metadata.namespace`` (``runtime.DefaultMetaV1FieldSelectorConversion``),
any other field is 400 ``"spec.x" is not a known field selector: only "metadata.name",
"metadata.namespace"``. :func:`exact_name` is what ``endpoints/request/requestinfo.go`` reads to
give a list or watch a name for RBAC: the value of a ``metadata.name=`` (or ``==``) term.
Label selectors are in :mod:`._labels`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._labels import LabelRequirement, parse_labels
from ._status import JSON, ApiError

__all__ = ["Selection", "exact_name", "parse_fields", "parse_labels"]


# --- field selectors -------------------------------------------------------------------------

_FIELDS = ("metadata.name", "metadata.namespace")
#: An Event's selectable fields (``pkg/registry/core/event/strategy.go``, core v1 names), and
#: where the stored (events.k8s.io/v1) object keeps each.
EVENT_FIELDS = {
    **{f"involvedObject.{k}": ("regarding", k) for k in (
        "kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": ("reason",), "reportingComponent": ("reportingController",),
    "source": ("deprecatedSource", "component"), "type": ("type",),
}


def _split_unescaped(text: str, separators: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in separators:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current + ("\\" if escaped else ""))
    return parts


def _split_term(term: str) -> tuple[str, str, str] | None:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
        i += 1
    return None


def _unescape(value: str) -> str:
    out, escaped = "", False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise ApiError.bad_request(
                    f"invalid field selector: invalid escape sequence: \\{char}"
                )
            out += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise ApiError.bad_request(f"invalid field selector: unescaped {char} in value")
        else:
            out += char
    if escaped:
        raise ApiError.bad_request("invalid field selector: invalid escape sequence: \\")
    return out


def parse_fields(text: str, events: bool = False) -> tuple[tuple[str, str, str], ...]:
    """The (field, operator, value) terms of a ``fieldSelector``; 400 if malformed or unknown.

    ``events``: an Event's fields are selectable too (:data:`EVENT_FIELDS`); any other is
    the field label conversion's ``field label not supported: <field>``.
    """
    terms = []
    for part in sorted(_split_unescaped(text, ",")):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise ApiError.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = split
        if events and field not in _FIELDS and field not in EVENT_FIELDS:
            raise ApiError.bad_request(f"field label not supported: {field}")
        if not events and field not in _FIELDS:
            raise ApiError.bad_request(
                f'"{field}" is not a known field selector: only "metadata.name", '
                '"metadata.namespace"'
            )
        terms.append((field, "!=" if op == "!=" else "=", _unescape(value)))
    return tuple(terms)


def exact_name(text: str) -> str:
    """The name a list/watch is narrowed to by ``metadata.name=`` (for RBAC), or ``""``.

    As ``requestinfo.go``: a selector that does not parse gives no name, and the name must
    be a valid path segment (not ``.``/``..``, no ``/`` or ``%``).
    """
    try:
        terms = parse_fields(text)
    except ApiError:
        return ""
    for field, op, value in terms:
        if field == "metadata.name" and op == "=":
            if value in (".", "..") or "/" in value or "%" in value:
                return ""
            return value
    return ""


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a list or watch selects: label requirements and field terms (all must match)."""

    labels: tuple[LabelRequirement, ...] = ()
    fields: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def from_query(cls, query: dict[str, str], events: bool = False) -> Selection:
        return cls(
            parse_labels(query.get("labelSelector", "")),
            parse_fields(query.get("fieldSelector", ""), events),
        )

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    @property
    def name(self) -> str | None:
        """The one name an exact ``metadata.name`` term narrows to (None: any)."""
        for field, op, value in self.fields:
            if field == "metadata.name" and op == "=":
                return value
        return None

    def matches(self, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        for field, op, value in self.fields:
            if field in EVENT_FIELDS:
                found: Any = obj
                for key in EVENT_FIELDS[field]:
                    found = found.get(key) if isinstance(found, dict) else None
                actual = str(found or "")
            else:
                actual = meta.get("name" if field == "metadata.name" else "namespace") or ""
            if (actual == value) != (op == "="):
                return False
        return True
