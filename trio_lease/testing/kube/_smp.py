"""Strategic merge patch for the built-in types (``apimachinery/pkg/util/strategicpatch``).

Maps merge recursively and ``null`` deletes a key, as in a JSON merge patch; lists follow the
Go struct's ``patchStrategy`` tags instead of being replaced. The emulator knows the tags of
``ObjectMeta`` (the only lists a Lease has): ``finalizers`` is ``merge`` on a list of strings
(the union, original order first, no duplicates: ``deduplicateScalars``) and
``ownerReferences`` is ``merge`` with the merge key ``uid``; every other list is replaced.
The directives (``patch.go``, the server's ``MergeParallelList`` options):

- ``$deleteFromPrimitiveList/<field>: [values]`` removes those values from the list;
- ``$patch: replace`` in a map replaces the map; ``$patch: delete`` removes it;
- in a list merged by key, an element ``{uid: ..., $patch: delete}`` removes that element and
  an element ``{$patch: replace}`` makes the list the patch's own;
- ``$setElementOrder/<field>`` and ``$retainKeys`` are accepted and not applied (the merged
  list keeps the original's order, new items last).

An unknown ``$patch`` value is ``mergepatch.ErrBadPatchType``, which the patch handler passes
on as a 500: ``unknown patch type: bogus in map: map[$patch:bogus a:b]`` (Go's ``%v`` of the
map, keys sorted; nested values are shown in the same style).
"""

from __future__ import annotations

import copy
from typing import Any

from ._status import JSON, ApiError

__all__ = ["strategic_merge"]


#: List fields with a merge strategy, by path: None for a list of scalars, else the merge key.
_MERGE_LISTS: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
}
_DELETE_PREFIX = "$deleteFromPrimitiveList/"
_IGNORED_PREFIXES = ("$setElementOrder/", "$retainKeys")
_DELETE = object()


def strategic_merge(original: JSON, patch: Any) -> JSON:
    """``StrategicMergePatch`` of a built-in object; 400 for a patch that is no object."""
    if not isinstance(patch, dict):
        raise ApiError.bad_request(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )
    merged = _merge_map(copy.deepcopy(original), patch, ())
    return merged if isinstance(merged, dict) else {}


def _merge_map(original: Any, patch: JSON, path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive not in (None, "merge"):
        return _map_directive(directive, patch)
    out: JSON = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key.startswith(_IGNORED_PREFIXES):
            continue
        if key.startswith(_DELETE_PREFIX):
            _delete_from_list(out, key[len(_DELETE_PREFIX):], value)
            continue
        merged = _DELETE if value is None else _merge_value(out.get(key), value, (*path, key))
        if merged is _DELETE:
            out.pop(key, None)
        else:
            out[key] = merged
    return out


def _map_directive(directive: Any, patch: JSON) -> Any:
    """A map patch's ``$patch: delete`` or ``$patch: replace``; 500 for another directive."""
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    raise ApiError.unknown(f"unknown patch type: {_go(directive)} in map: {_go(patch)}")


def _delete_from_list(out: JSON, field: str, value: Any) -> None:
    """``$deleteFromPrimitiveList/<field>``: the listed values leave that list."""
    current = out.get(field)
    if isinstance(current, list) and isinstance(value, list):
        out[field] = [item for item in current if item not in value]


def _merge_value(original: Any, value: Any, path: tuple[str, ...]) -> Any:
    """A patch's value for one field merged into the original's: maps and the merge lists
    by their strategy, anything else replaced."""
    if isinstance(value, dict):
        return _merge_map(original, value, path)
    if isinstance(value, list) and path in _MERGE_LISTS:
        return _merge_list(original, value, _MERGE_LISTS[path], path)
    return copy.deepcopy(value)


def _go(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (maps print with sorted keys)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _merge_list(original: Any, patch: list[Any], key: str | None, path: tuple[str, ...]
                ) -> list[Any]:
    current = list(original) if isinstance(original, list) else []
    if key is None:  # scalars: the union, original order first
        return _union(current, patch)
    if any(_directive(i) == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if _directive(i) != "replace"]
    out: list[Any] = [copy.deepcopy(i) for i in current]
    for item in patch:
        if isinstance(item, dict):
            _merge_item(out, item, key, path)
    return out


def _union(current: list[Any], patch: list[Any]) -> list[Any]:
    """A list of scalars merged: each value once, the original's in their order first."""
    out: list[Any] = []
    for item in [*current, *patch]:
        if item not in out:
            out.append(item)
    return out


def _directive(item: Any) -> Any:
    """The ``$patch`` directive of a list item; None for an item without one."""
    return item.get("$patch") if isinstance(item, dict) else None


def _merge_item(out: list[Any], item: JSON, key: str, path: tuple[str, ...]) -> None:
    """One patch item into a list merged by ``key``: deleted, merged into its match, or added."""
    index = next(
        (n for n, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item.get(key)),
        None,
    )
    if item.get("$patch") == "delete":
        if index is not None:
            del out[index]
    elif index is None:
        out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
    else:
        out[index] = _merge_map(out[index], item, path)
