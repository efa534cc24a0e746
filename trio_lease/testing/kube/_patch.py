"""PATCH: JSON patch, merge patch, strategic merge patch and server-side apply.

Follows ``apiserver/pkg/endpoints/handlers/patch.go``:

- The content type (its parameters cut at ``;``) must be one the resource accepts, else 415
  ``UnsupportedMediaType`` naming them (``negotiation.NewUnsupportedMediaTypeError``). Built-in
  types accept JSON patch, merge patch, strategic merge patch and apply; custom resources
  (``apiextensions-apiserver/pkg/apiserver/customresource_handler.go``) all but strategic
  merge patch.
- ``PatchOptions`` are validated first (``ValidatePatchOptions``): apply needs
  ``?fieldManager=`` and ``force`` is only for apply, else 422 on ``PatchOptions.meta.k8s.io``.
- JSON patch (RFC 6902) runs through evanphx/json-patch v4: an operation that does not apply
  (a failed ``test``, a missing path) is 422 ``Invalid`` with the generic message "the server
  rejected our request due to an error in our request" (``NewGenericServerResponse`` keeps
  only the code); a body that is not a patch is 400 with the decoder's error.
- JSON and merge patch apply to the stored object (resourceVersion and managedFields
  included), so a patch that sets a stale ``metadata.resourceVersion`` is 409 Conflict. A
  missing object is 404; only apply creates (``forceAllowCreate``), answering 201.
- Strategic merge patch on a built-in type (:mod:`._smp`) merges maps as a merge patch does
  and lists by ``ObjectMeta``'s patch strategies (``finalizers``, ``ownerReferences``), with
  the ``$patch`` and ``$deleteFromPrimitiveList`` directives.
- Apply (``application/apply-patch+yaml``) merges the configuration into the live object,
  prunes the fields this manager applied before and no longer does, and refuses with a 409
  listing the conflicting managers and fields unless ``force=true``
  (``util/managedfields/internal/conflict.go``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import yaml

from ._cluster import Cluster
from ._http import Request
from ._managed import Entry, apply_set, changes, decode_entries, encode_entries, zero_object
from ._options import check_options
from ._resources import ResourceType
from ._smp import strategic_merge
from ._status import JSON, ApiError, FieldError, status_body
from ._store import MODIFIED_MSG

__all__ = ["patch"]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_BUILT_IN_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH)
_CUSTOM_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)


def patch(emulator: Cluster, rt: ResourceType, namespace: str, name: str, request: Request,
          manager: str) -> tuple[int, JSON]:
    """Answer one PATCH: (200 or 201, the object)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    accepted = _CUSTOM_TYPES if rt.custom else _BUILT_IN_TYPES
    if content_type not in accepted:
        raise ApiError.unsupported_media_type(accepted)
    _validate_options(request, content_type)
    store = emulator.store
    if content_type == APPLY_PATCH:
        return _apply(emulator, rt, namespace, name, request, manager)
    existing = store.find(rt, namespace, name)
    if existing is None:
        raise ApiError.not_found(rt.plural, rt.group, name)
    patched = _PATCHERS[content_type](store.present(rt, existing), _json_body(request))
    _check_patched(rt, name, patched, existing)
    return 200, store.update(rt, namespace, name, patched)[1]


def _check_patched(rt: ResourceType, name: str, patched: Any, existing: JSON) -> None:
    """A patched object names its object and, if it names a resourceVersion, the stored one;
    a built-in object's patch without one updates unconditionally."""
    if not isinstance(patched, dict):
        raise ApiError.bad_request("the patch did not produce an object")
    meta = patched.get("metadata")
    if not isinstance(meta, dict):
        raise ApiError.bad_request("metadata must be an object")
    _check_name(meta, name)
    rv = meta.get("resourceVersion")
    if not rv and not rt.custom:
        meta["resourceVersion"] = existing["metadata"]["resourceVersion"]  # unconditional
    elif rv and rv != existing["metadata"]["resourceVersion"]:
        raise ApiError.conflict(rt.plural, rt.group, name, MODIFIED_MSG)


def _validate_options(request: Request, content_type: str) -> None:
    errors: list[FieldError] = []
    if content_type == APPLY_PATCH:
        if not request.query.get("fieldManager"):
            errors.append(FieldError("fieldManager", "Required", "is required for apply patch"))
    elif "force" in request.query:
        errors.append(FieldError("force", "Forbidden", "may not be specified for non-apply patch"))
    check_options("patch", request, errors)


def _json_body(request: Request) -> Any:
    try:
        return json.loads(request.body or b"null")
    except ValueError as exc:
        raise ApiError.bad_request(str(exc)) from None


def _parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, as the query parameter codec uses it (400 otherwise)."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ApiError.bad_request(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _check_name(meta: JSON, name: str) -> None:
    given = meta.get("name") or ""
    if given != name:
        raise ApiError.bad_request(
            f"the name of the object ({given}) does not match the name on the URL ({name})"
        )


# --- RFC 6902, with evanphx/json-patch v4's messages --------------------------------------

def _unprocessable() -> ApiError:
    message = "the server rejected our request due to an error in our request"
    return ApiError(422, status_body(422, "Invalid", message, {}))


def _decode_key(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _container(doc: Any, path: str) -> tuple[Any, str] | None:
    """``findObject``: the object or list holding ``path``'s last element, and that element."""
    split = path.split("/")
    if len(split) < 2:
        return None
    node = doc
    for part in split[1:-1]:
        key = _decode_key(part)
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and key.lstrip("-").isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
        if not isinstance(node, dict | list):
            return None
    return node, _decode_key(split[-1])


def _index(node: list[Any], key: str, *, adding: bool) -> int:
    if adding and key == "-":
        return len(node)
    try:
        idx = int(key)
    except ValueError:
        raise _unprocessable() from None
    size = len(node) + (1 if adding else 0)
    if idx >= size or idx < -size:
        raise _unprocessable()
    return idx + size if idx < 0 else idx


def _get(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    return node[_index(node, key, adding=False)]


def _add(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    else:
        node.insert(_index(node, key, adding=True), value)


def _remove(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        if key not in node:
            raise _unprocessable()
        return node.pop(key)
    return node.pop(_index(node, key, adding=False))


def apply_json_patch(doc: JSON, operations: Any) -> Any:
    """Apply RFC 6902 ``operations`` to a copy of ``doc``; 400 / 422 as the apiserver."""
    if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
        raise ApiError.bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), op.get("path")
        if kind not in _OPERATIONS or not isinstance(path, str):
            raise _unprocessable()
        value = _operand(doc, op, kind)
        found = _container(doc, path)
        if found is None:
            raise _unprocessable()
        _OPERATIONS[kind](*found, value, op)
    return doc


def _operand(doc: Any, op: JSON, kind: str) -> Any:
    """The value an operation writes: ``from``'s (taken away by a move) or its ``value``."""
    if kind not in ("move", "copy"):
        return copy.deepcopy(op.get("value"))
    source = op.get("from")
    found = _container(doc, source) if isinstance(source, str) else None
    if found is None:
        raise _unprocessable()
    return _remove(*found) if kind == "move" else copy.deepcopy(_get(*found))


def _op_add(node: Any, key: str, value: Any, op: JSON) -> None:
    _add(node, key, value)


def _op_remove(node: Any, key: str, value: Any, op: JSON) -> None:
    _remove(node, key)


def _op_replace(node: Any, key: str, value: Any, op: JSON) -> None:
    # v4 sets a missing key of an object too (its ``get`` does not fail there).
    if isinstance(node, dict):
        node[key] = value
    else:
        node[_index(node, key, adding=False)] = value


def _op_test(node: Any, key: str, value: Any, op: JSON) -> None:
    if not _equal(_get(node, key), op.get("value"), "value" in op):
        raise _unprocessable()


#: What each RFC 6902 operation does at its path (move and copy add what :func:`_operand` took).
_OPERATIONS: dict[str, Callable[[Any, str, Any, JSON], None]] = {
    "add": _op_add, "move": _op_add, "copy": _op_add, "remove": _op_remove,
    "replace": _op_replace, "test": _op_test,
}


def _equal(current: Any, wanted: Any, given: bool) -> bool:
    if current is None:
        return wanted is None
    if not given:
        return False
    return json.dumps(current, sort_keys=True) == json.dumps(wanted, sort_keys=True)


# --- server-side apply ----------------------------------------------------------------------

def _merge(live: Any, config: Any) -> Any:
    """Merge an applied configuration into the live object: objects recursively, rest replaced."""
    if not (isinstance(live, dict) and isinstance(config, dict)):
        return copy.deepcopy(config)
    out = copy.deepcopy(live)
    for key, value in config.items():
        out[key] = _merge(out.get(key), value)
    return out


def _prune(obj: JSON, paths: set[tuple[str, ...]]) -> None:
    for path in sorted(paths, key=len, reverse=True):
        node: Any = obj
        for element in path[:-1]:
            node = node.get(element[2:]) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1][2:], None)


def _conflict(conflicts: list[tuple[Entry, tuple[str, ...]]]) -> ApiError:
    def dotted(path: tuple[str, ...]) -> str:
        return "".join("." + p[2:] for p in path)

    conflicts.sort(key=lambda c: (c[0].describe(), c[1]))
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}",
         "field": dotted(p)}
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {entry.describe()}: {dotted(path)}"
    else:
        lines: list[str] = []
        for described in sorted({e.describe() for e, _ in conflicts}):
            lines.append(f"conflicts with {described}:")
            lines += [f"- {dotted(p)}" for e, p in conflicts if e.describe() == described]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, status_body(409, "Conflict", message, {"causes": causes}))


def _decode_apply(request: Request, rt: ResourceType) -> JSON:
    """The applied configuration: a YAML object of ``rt``'s apiVersion, without managedFields."""
    # sigs.k8s.io/yaml's wrapping; the YAML parser's own words are PyYAML's, not go-yaml's.
    try:
        config = yaml.safe_load(request.body or b"")
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise ApiError.bad_request(
            f"error decoding YAML: error converting YAML to JSON: yaml: {problem}"
        ) from None
    if config is None:
        config = {}
    if not isinstance(config, dict):
        go_type = {list: "array", str: "string", bool: "bool"}.get(type(config), "number")
        raise ApiError.bad_request(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
            f"unmarshal {go_type} into Go value of type map[string]interface {{}}"
        )
    given = str(config.get("apiVersion") or "")
    if given != rt.api_version:
        raise ApiError.bad_request(
            "Incorrect version specified in apply patch. Specified patch version: "
            f"{given}, expected: {rt.api_version}"
        )
    if not isinstance(config.get("metadata"), dict):
        config["metadata"] = {}
    if config["metadata"].get("managedFields") is not None:
        raise ApiError.bad_request("metadata.managedFields must be nil")
    return config


def _apply(emulator: Cluster, rt: ResourceType, namespace: str, name: str, request: Request,
           manager: str) -> tuple[int, JSON]:
    store = emulator.store
    config = _decode_apply(request, rt)
    force = _parse_bool(request.query.get("force", "false"))
    existing = store.find(rt, namespace, name)
    if existing is None:
        live: JSON = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {}}
        live.update(zero_object(rt, config))
        config["metadata"].pop("resourceVersion", None)  # WipeObjectMetaSystemFields on create
    else:
        live = store.present(rt, existing)
    merged = _merge(live, config)
    _check_name(merged["metadata"], name)
    rv = merged["metadata"].get("resourceVersion")
    if existing is not None and rv != existing["metadata"]["resourceVersion"]:
        raise ApiError.conflict(rt.plural, rt.group, name, MODIFIED_MSG)
    owners = _Owners(decode_entries(live["metadata"].get("managedFields")), manager, config)
    owners.prune(merged)
    managed = owners.after_apply(live, merged, rt.api_version, store.timestamp, force=force)
    if existing is None:
        _ensure_namespace(emulator, rt, namespace)
        merged["metadata"].pop("resourceVersion", None)
        return 201, store.create(rt, namespace, merged, managed_fields=managed)
    return 200, store.update(rt, namespace, name, merged, managed_fields=managed)[1]


class _Owners:
    """The field managers of an object one manager applies a configuration to."""

    def __init__(self, entries: list[Entry], manager: str, config: JSON) -> None:
        self.entries = entries
        self.manager = manager
        self.applied = apply_set(config)
        key = (manager, "Apply", "")
        self.mine = next((e for e in entries if e.key == key), None)
        self.others = [e for e in entries if e is not self.mine]

    def prune(self, merged: JSON) -> None:
        """Remove from ``merged`` the fields this manager applied before and no longer does,
        unless another manager (or this configuration, deeper down) still owns them."""
        if self.mine is None:
            return
        owned = set().union(*(e.fields for e in self.others)) | self.applied
        dropped = {p for p in self.mine.fields - self.applied
                   if not any(q[: len(p)] == p for q in owned)}
        _prune(merged, dropped)

    def after_apply(
        self, live: JSON, merged: JSON, api_version: str, timestamp: Callable[[], str],
        *, force: bool,
    ) -> list[JSON]:
        """The managedFields once ``merged`` replaces ``live``; 409 on another manager's
        changed fields unless forced (then they move to this manager)."""
        changed, removed = changes(live, merged)
        conflicts = [(e, p) for e in self.others for p in sorted(e.fields & changed)]
        if conflicts and not force:
            raise _conflict(conflicts)
        for entry in self.others:
            entry.fields -= changed | removed
        now = timestamp()
        if self.mine is None:
            self.entries.append(Entry(self.manager, "Apply", api_version, now, self.applied))
        else:
            self.mine.fields = self.applied
            self.mine.api_version = api_version
            if changed or removed:
                self.mine.time = now
        return encode_entries(self.entries)


def _ensure_namespace(emulator: Cluster, rt: ResourceType, namespace: str) -> None:
    namespaces = emulator.types[("", "v1", "namespaces")]
    if rt.namespaced and emulator.store.find(namespaces, "", namespace) is None:
        raise ApiError.not_found("namespaces", "", namespace)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


#: The patches other than apply: (the current object, the decoded patch) → the patched object.
_PATCHERS: dict[str, Callable[[JSON, Any], Any]] = {
    JSON_PATCH: apply_json_patch, STRATEGIC_PATCH: strategic_merge, MERGE_PATCH: merge_patch,
}
