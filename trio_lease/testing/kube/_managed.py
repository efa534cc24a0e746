"""``metadata.managedFields``: which field manager set which fields, as the apiserver records it.

The real server runs every write through ``k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager``
and sigs.k8s.io/structured-merge-diff. What this module reproduces:

- The manager is ``?fieldManager=`` or, without it, the User-Agent up to its first ``/``
  (non-printable characters dropped, at most 128 bytes): ``managerOrUserAgent`` and
  ``prefixFromUserAgent`` in ``apiserver/pkg/endpoints/handlers/create.go``.
- An ``Update`` (create, update, JSON / merge patch) compares the live object with the new one
  (``typed.Compare``): the fields it added or changed join the manager's entry and leave every
  other entry (an update always forces); removed fields leave every entry. An update that
  changes nothing adds no entry and keeps the old time (``managedFieldsUpdater.Update``).
  A create compares with the Go zero value of the type: a built-in type's struct fields
  (``spec``) already exist there, so they are not owned themselves (no ``"."`` under
  ``f:spec`` of a Lease), while a custom resource's ``spec`` is added and is (``{".": {}}``).
- An ``Apply`` owns exactly the fields of the applied configuration (``ToFieldSet``): leaves,
  empty objects and map keys (labels, annotations), not the structs holding them. Entries are
  keyed by manager and operation, plus apiVersion for ``Update``
  (``BuildManagerIdentifier``), and sorted by operation, time, manager, apiVersion
  (``sortEncodedManagedFields``).
- Never owned (``stripMetaManager``): apiVersion, kind, metadata itself and its name,
  namespace, uid, resourceVersion, generation, creationTimestamp, selfLink, managedFields.
- A write that carries a non-empty ``managedFields`` list replaces the recorded one before the
  comparison, as the real ``FieldManager.Update`` allows; an empty or missing list keeps it;
  ``[{}]`` clears it (the server-side apply documentation's "Clearing managedFields").

Simplified (not structured-merge-diff): every JSON object other than ``metadata.labels`` and
``metadata.annotations`` is treated as a struct and every list as atomic (a real server keys
``finalizers`` as a set and ``ownerReferences`` by uid); there is no cap of ten update entries
(``capManagersManager``) and no schema-driven conversion between versions.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from typing import Any

from ._resources import ResourceType
from ._status import JSON

__all__ = [
    "FieldSet",
    "apply_set",
    "changes",
    "decode_entries",
    "encode_entries",
    "field_manager",
    "record_update",
    "zero_object",
]

Path = tuple[str, ...]
FieldSet = set[Path]

_MANAGER_MAX = 128
_STRIPPED_META = frozenset({
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "selfLink", "managedFields", "clusterName",
})
_MAPS = frozenset({("f:metadata", "f:labels"), ("f:metadata", "f:annotations")})
_ABSENT: Any = object()


def field_manager(query_manager: str, user_agent: str) -> str:
    """``managerOrUserAgent``: the ``fieldManager`` given, else the User-Agent's prefix."""
    if query_manager:
        return query_manager
    out = ""
    for char in user_agent.split("/")[0]:
        if not char.isprintable() and unicodedata.category(char) != "Zs":
            continue
        if len((out + char).encode()) > _MANAGER_MAX:
            break
        out += char
    return out


def zero_object(rt: ResourceType, new: JSON) -> JSON:
    """The Go zero value of ``rt`` as JSON: built-in structs (``spec``) present and empty."""
    if rt.custom:
        return {}
    return {k: {} for k, v in new.items() if isinstance(v, dict) and k != "metadata"}


def _stripped(obj: JSON) -> JSON:
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _STRIPPED_META}
    if meta:
        out["metadata"] = meta
    return out


def _same(left: Any, right: Any) -> bool:
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def _walk(lhs: Any, rhs: Any, path: Path, changed: FieldSet, removed: FieldSet) -> None:
    lmap = isinstance(lhs, dict) and bool(lhs)
    rmap = isinstance(rhs, dict) and bool(rhs)
    if not (lmap or rmap):
        _compare_leaf(lhs, rhs, path, changed, removed)
        return
    lhs, rhs = _as_maps(lhs, rhs, path, changed, removed)
    right = rhs if isinstance(rhs, dict) else {}
    for key in list(lhs) + [k for k in right if k not in lhs]:
        _walk(
            lhs.get(key, _ABSENT), _ABSENT if rhs is _ABSENT else right.get(key, _ABSENT),
            (*path, f"f:{key}"), changed, removed,
        )


def _compare_leaf(lhs: Any, rhs: Any, path: Path, changed: FieldSet, removed: FieldSet) -> None:
    """A leaf (a scalar, a list, atomic here, null or an empty object): added, removed or
    changed."""
    if lhs is _ABSENT:
        changed.add(path)
    elif rhs is _ABSENT:
        removed.add(path)
    elif not _same(lhs, rhs):
        changed.add(path)


def _as_maps(
    lhs: Any, rhs: Any, path: Path, changed: FieldSet, removed: FieldSet
) -> tuple[JSON, Any]:
    """Both sides of a map node as maps to walk into, the node itself marked where one side
    is no map (an absent right side stays absent: all below it is removed)."""
    if lhs is _ABSENT or not isinstance(lhs, dict):
        changed.add(path)
        return {}, rhs
    if rhs is _ABSENT:
        removed.add(path)
        return lhs, _ABSENT
    if not isinstance(rhs, dict):
        changed.add(path)
        return lhs, {}
    return lhs, rhs


def changes(live: JSON, new: JSON) -> tuple[FieldSet, FieldSet]:
    """``typed.Compare`` of two objects: (added or modified, removed) paths, metadata stripped."""
    changed: FieldSet = set()
    removed: FieldSet = set()
    _walk(_stripped(live), _stripped(new), (), changed, removed)
    for found in (changed, removed):
        found.discard(())
        found.discard(("f:metadata",))
    return changed, removed


def apply_set(config: JSON) -> FieldSet:
    """``ToFieldSet`` of an applied configuration: leaves, empty objects and map keys."""
    out: FieldSet = set()

    def visit(value: Any, path: Path) -> None:
        if not isinstance(value, dict) or not value:
            out.add(path)
            return
        for key, item in value.items():
            child = (*path, f"f:{key}")
            if path in _MAPS and isinstance(item, dict) and item:
                out.add(child)
            visit(item, child)

    visit(_stripped(config), ())
    out.discard(())
    out.discard(("f:metadata",))
    return out


def _encode_set(paths: FieldSet) -> JSON:
    tree: JSON = {}
    members: set[Path] = set()
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        members.add(path)

    def emit(node: JSON, path: Path) -> JSON:
        out: JSON = {}
        if node and path in members:
            out["."] = {}
        for key in sorted(node):
            out[key] = emit(node[key], (*path, key))
        return out

    return emit(tree, ())


def _decode_set(fields: Any, path: Path = ()) -> FieldSet:
    out: FieldSet = set()
    if not isinstance(fields, dict):
        return out
    for key, child in fields.items():
        if key == ".":
            out.add(path)
            continue
        sub = (*path, key)
        if not child:
            out.add(sub)
        else:
            out |= _decode_set(child, sub)
    return out


@dataclasses.dataclass(slots=True, eq=False)
class Entry:
    """One ``ManagedFieldsEntry``, its fields decoded to a set of paths."""

    manager: str
    operation: str
    api_version: str
    time: str
    fields: FieldSet

    @property
    def key(self) -> tuple[str, str, str]:
        """``BuildManagerIdentifier``: an applier is one manager across apiVersions."""
        version = "" if self.operation == "Apply" else self.api_version
        return (self.manager, self.operation, version)

    def describe(self) -> str:
        """``printManager`` in conflict messages (the identifier has no time)."""
        if self.operation == "Update":
            return f"{json.dumps(self.manager)} using {self.api_version}"
        return json.dumps(self.manager)


def decode_entries(raw: Any) -> list[Entry]:
    """The entries of a ``managedFields`` list; anything malformed is skipped."""
    out: list[Entry] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or item.get("operation") not in ("Apply", "Update"):
            continue
        out.append(Entry(
            str(item.get("manager", "")), item["operation"], str(item.get("apiVersion", "")),
            str(item.get("time", "")), _decode_set(item.get("fieldsV1")),
        ))
    return out


def encode_entries(entries: list[Entry]) -> list[JSON]:
    """The ``managedFields`` list in the server's order and field order."""
    kept = [e for e in entries if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time, e.manager, e.api_version))
    out: list[JSON] = []
    for entry in kept:
        item: JSON = {}
        if entry.manager:
            item["manager"] = entry.manager
        item["operation"] = entry.operation
        item["apiVersion"] = entry.api_version
        if entry.time:
            item["time"] = entry.time
        item["fieldsType"] = "FieldsV1"
        item["fieldsV1"] = _encode_set(entry.fields)
        out.append(item)
    return out


def _entries_before(live: JSON | None, given: Any) -> list[Entry]:
    """The managers an update starts from: the request's list if it carries one (``[{}]``
    clears them, the documented way), else the live object's."""
    if isinstance(given, list) and given and all(item == {} for item in given):
        return []
    return decode_entries(given) or decode_entries(
        (live or {}).get("metadata", {}).get("managedFields")
    )


def record_update(
    rt: ResourceType, live: JSON | None, new: JSON, given: Any, manager: str, now: str
) -> list[JSON]:
    """The ``managedFields`` after an ``Update`` by ``manager`` from ``live`` to ``new``.

    ``live`` is None for a create; ``given`` is the list the request carried (used when non
    empty, as the real server lets a client rewrite it), else the live object's list.
    """
    entries = _entries_before(live, given)
    changed, removed = changes(live if live is not None else zero_object(rt, new), new)
    for entry in entries:
        entry.fields -= changed | removed
    if changed:
        key = (manager, "Update", rt.api_version)
        mine = next((e for e in entries if e.key == key), None)
        if mine is None:
            entries.append(Entry(manager, "Update", rt.api_version, now, set(changed)))
        else:
            mine.fields |= changed
            mine.time = now
    return encode_entries(entries)
