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

from ._status import ApiError

__all__ = ["strategic_merge"]

JSON = dict[str, Any]

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
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise ApiError.unknown(f"unknown patch type: {_go(directive)} in map: {_go(patch)}")
    out: JSON = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key.startswith(_IGNORED_PREFIXES):
            continue
        if key.startswith(_DELETE_PREFIX):
            field = key[len(_DELETE_PREFIX):]
            current = out.get(field)
            if isinstance(current, list) and isinstance(value, list):
                out[field] = [item for item in current if item not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        child = (*path, key)
        if isinstance(value, dict):
            merged = _merge_map(out.get(key), value, child)
        elif isinstance(value, list) and child in _MERGE_LISTS:
            merged = _merge_list(out.get(key), value, _MERGE_LISTS[child], child)
        else:
            merged = copy.deepcopy(value)
        if merged is _DELETE:
            out.pop(key, None)
        else:
            out[key] = merged
    return out


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
        out: list[Any] = []
        for item in [*current, *patch]:
            if item not in out:
                out.append(item)
        return out
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch
                if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict):
            continue
        index = next((n for n, o in enumerate(out)
                      if isinstance(o, dict) and o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[index] = _merge_map(out[index], item, path)
    return out
