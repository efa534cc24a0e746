"""A write's JSON body, decoded as the apiserver's strict JSON decoder sees it
(``sigs.k8s.io/json``): a repeated key keeps its last value and is reported as
``duplicate field "spec.owner"`` for ``fieldValidation`` (:mod:`._prepare`).
"""

from __future__ import annotations

import json
from typing import Any

from ._http import Request
from ._status import JSON, ApiError
from ._store import Store

__all__ = ["decode_body"]


class _Fields(dict[str, Any]):
    """A decoded JSON object that remembers the keys it saw twice (the last value wins)."""

    repeated: list[str]


def _fields(pairs: list[tuple[str, Any]]) -> _Fields:
    obj = _Fields(pairs)
    seen: set[str] = set()
    obj.repeated = []
    for key, _ in pairs:
        if key in seen:
            obj.repeated.append(key)
        seen.add(key)
    return obj


def _duplicates(value: Any, path: str = "") -> list[str]:
    """``duplicate field "spec.x"`` for each repeated key, as sigs.k8s.io/json reports them."""
    found: list[str] = []
    if isinstance(value, _Fields):
        found += [f'duplicate field "{path}{key}"' for key in value.repeated]
        for key, item in value.items():
            found += _duplicates(item, f"{path}{key}.")
    elif isinstance(value, list):
        stem = path[:-1]
        for index, item in enumerate(value):
            found += _duplicates(item, f"{stem}[{index}].")
    return found


def decode_body(request: Request, store: Store | None = None) -> JSON:
    """The JSON body; a ``store`` is told the fields the body repeats (strict decoding)."""
    try:
        body = json.loads(request.body or b"{}", object_pairs_hook=_fields)
    except ValueError as exc:
        raise ApiError.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError.bad_request("couldn't get version/kind; json parse error: not an object")
    if store is not None:
        store.duplicates = _duplicates(body)
    return body
