"""The object store: etcd plus the generic registry (``apiserver/pkg/registry/generic``).

One global revision counter gives every write a new ``resourceVersion`` (like etcd's revision),
shared by all types. A write that changes nothing (same spec, labels, annotations) is not
written and keeps its resourceVersion, as ``GuaranteedUpdate`` skips identical bytes. Every
write is also an event in the history that watches and continued lists resume from; the
cluster's compactor (:mod:`._compaction`, every 5 minutes) and ``history=N`` trim it, and a
resourceVersion older than the history is "too old" (410 Expired).

Update order, as in ``Store.Update``: the uid precondition (from ``metadata.uid`` in the body)
is checked first, against the existing object or, for a missing one, against an empty one,
so it fails with the storage layer's ``StorageError: invalid object, Code: 4, Key:
/registry/leases/<ns>/<name>, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID
in precondition: <uid>, UID in object meta: `` as 409 Conflict (``InterpretUpdateError``).
Then a missing object is created (Leases, ``AllowCreateOnUpdate``: 201, the stale
resourceVersion dropped) or is 404 (custom resources). Then a missing
``resourceVersion`` is 422 (``Invalid value: 0x0: must be specified for an update``), a stale
one 409 Conflict, and the new object is validated.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime

from ._events import as_core_event
from ._managed import record_update
from ._prepare import prepare
from ._resources import ResourceType
from ._status import GO_UINT64_ZERO, JSON, ApiError, FieldError, storage_invalid_obj

__all__ = ["Event", "Store"]

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

#: etcd's ``--max-request-bytes`` default (1.5 MiB).
ETCD_REQUEST_LIMIT = 1536 * 1024

MODIFIED_MSG = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


_META_ORDER = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
)


@dataclasses.dataclass(slots=True, eq=False)
class Event:
    """One committed change: ``type`` is ADDED, MODIFIED or DELETED.

    ``prev`` is the object before a MODIFIED (None otherwise): a watch with a label selector
    needs it to turn a change in or out of the selection into ADDED or DELETED.
    """

    rv: int
    type: str
    storage_key: tuple[str, str]
    obj: JSON
    prev: JSON | None = None
    namespace: str = dataclasses.field(init=False)
    name: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.namespace = self.obj["metadata"].get("namespace", "")
        self.name = self.obj["metadata"]["name"]


class Store:
    """Objects by type, a revision counter and the recent event history."""

    #: The revision of the latest write (every write takes the next one, for all types).
    revision: int
    #: The recent events, oldest first, that watches resume from.
    history: deque[Event]
    #: How many events :attr:`history` keeps.
    history_size: int
    #: Every event with a revision above this is still in :attr:`history`.
    compacted: int
    #: Warnings of the request being handled (unknown fields), sent as ``Warning`` headers.
    warnings: list[str]
    #: The request's ``fieldValidation``: ``Strict`` (unknown or duplicate fields are 400),
    #: ``Warn`` (the default: dropped, with a warning each) or ``Ignore`` (dropped silently).
    field_validation: str
    #: ``duplicate field "spec.x"`` for each field the request's JSON body repeats.
    duplicates: list[str]
    #: The ``CoordinatedLeaderElection`` feature gate: off drops Lease strategy/preferredHolder.
    coordinated_leader_election: bool
    #: The field manager of the request being handled (``?fieldManager=`` or User-Agent).
    manager: str
    #: ``dryRun=All`` for the request being handled: writes are validated, never stored.
    dry_run: bool
    #: Objects removed since the cluster last looked (the garbage collector's queue).
    removed: list[tuple[ResourceType, JSON]]

    def __init__(
        self,
        wall_clock: Callable[[], datetime],
        history: int,
        on_event: Callable[[Event], None],
    ) -> None:
        self._wall_clock = wall_clock
        self._objects: dict[tuple[str, str], dict[Key, JSON]] = {}
        self.revision = 1
        self.history = deque()
        self.history_size = history
        self.compacted = 0
        self._on_event = on_event
        self.warnings = []
        self.field_validation = "Warn"
        self.duplicates = []
        self.manager = ""
        self.dry_run = False
        self.removed = []
        self.coordinated_leader_election = False

    # --- plumbing --------------------------------------------------------------------------

    def bucket(self, rt: ResourceType) -> dict[Key, JSON]:
        return self._objects.setdefault(rt.storage_key, {})

    def drop_bucket(self, storage_key: tuple[str, str]) -> None:
        self._objects.pop(storage_key, None)

    def _commit(self, rt: ResourceType, type_: str, obj: JSON, prev: JSON | None = None) -> None:
        old = None if prev is None else self.present(rt, prev)
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        event = Event(self.revision, type_, rt.storage_key, self.present(rt, obj), old)
        self.history.append(event)
        while len(self.history) > self.history_size:
            self.compacted = self.history.popleft().rv
        self._on_event(event)

    def _check_size(self, rt: ResourceType, namespace: str, obj: JSON) -> None:
        """etcd refuses a request over ``--max-request-bytes`` (1.5 MiB by default); the
        apiserver passes the error on as a 500 without a reason. A dry run never reaches etcd.
        The emulator measures the key and the object's compact JSON (etcd stores built-in
        types as protobuf, a little smaller)."""
        if self.dry_run:
            return
        key = rt.etcd_key(namespace, obj["metadata"]["name"])
        size = len(key) + len(json.dumps(obj, separators=(",", ":")).encode())
        if size > ETCD_REQUEST_LIMIT:
            raise ApiError.unknown("etcdserver: request is too large")

    def compact(self) -> None:
        """Forget all history: a watch from any earlier resourceVersion gets 410 Expired."""
        self.history.clear()
        self.compacted = self.revision

    def timestamp(self) -> str:
        """Now, as metadata timestamps are written (seconds, UTC)."""
        return self._timestamp()

    def _timestamp(self) -> str:
        return self._wall_clock().strftime("%Y-%m-%dT%H:%M:%SZ")

    @staticmethod
    def present(rt: ResourceType, obj: JSON) -> JSON:
        """A copy of a stored object as served in ``rt``'s version, metadata in Go order."""
        out = copy.deepcopy(obj)
        out["apiVersion"] = rt.api_version
        meta = out["metadata"]
        out["metadata"] = {k: meta[k] for k in _META_ORDER if k in meta}
        return as_core_event(out) if rt.legacy_event else out

    # --- reads -----------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> JSON:
        obj = self.bucket(rt).get((namespace, name))
        if obj is None:
            raise ApiError.not_found(rt.plural, rt.group, name)
        return self.present(rt, obj)

    def find(self, rt: ResourceType, namespace: str, name: str) -> JSON | None:
        return self.bucket(rt).get((namespace, name))

    def items(self, rt: ResourceType, namespace: str | None) -> list[JSON]:
        """Objects of ``rt`` (in one namespace, or all with ``None``), sorted like etcd keys."""
        return [self.present(rt, obj) for obj in self.stored(rt, namespace)]

    def stored(self, rt: ResourceType, namespace: str | None) -> list[JSON]:
        """The stored objects themselves, sorted like :meth:`items`: read them, never change them.

        For a LIST page, which presents (copies) only the objects it returns: copying every
        object for every page made a paged LIST of 5,000 Leases take ~0.9 s a page.
        """
        return [
            obj for (ns, _), obj in sorted(self.bucket(rt).items())
            if namespace is None or ns == namespace
        ]

    # --- writes ----------------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: JSON,
        managed_fields: list[JSON] | None = None, *, refuse_version: bool = False,
    ) -> JSON:
        """POST: 201 + the object; 409 AlreadyExists; 422 Invalid.

        ``refuse_version`` (a POST): a ``metadata.resourceVersion`` in the body is the storage
        layer's plain error, a 500 (``etcd3/store.go`` Create), checked after validation and
        before AlreadyExists.
        """
        obj = prepare(self, rt, body, namespace)
        name = obj["metadata"]["name"]
        if refuse_version and (body.get("metadata") or {}).get("resourceVersion"):
            raise ApiError.unknown("resourceVersion should not be set on objects to be created")
        self._check_size(rt, namespace, obj)
        if (namespace, name) in self.bucket(rt):
            raise ApiError.already_exists(rt.plural, rt.group, name)
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._timestamp()
        if rt.custom:
            meta["generation"] = 1
        _set_managed(obj, managed_fields if managed_fields is not None else record_update(
            rt, None, obj, (body.get("metadata") or {}).get("managedFields"), self.manager,
            meta["creationTimestamp"],
        ))
        if self.dry_run:  # DryRunnableStorage.Create: no resourceVersion, nothing stored
            return self.present(rt, obj)
        self.bucket(rt)[(namespace, name)] = obj
        self._commit(rt, "ADDED", obj)
        return self.present(rt, obj)

    def update(
        self, rt: ResourceType, namespace: str, name: str, body: JSON,
        managed_fields: list[JSON] | None = None,
    ) -> tuple[int, JSON]:
        """PUT: (200, object) or (201, object) for a Lease created on update; see the module."""
        metadata = body.get("metadata") or {}
        existing = self.bucket(rt).get((namespace, name))
        _check_uid(rt, namespace, name, metadata.get("uid") or "", existing)
        if existing is None:
            if not rt.create_on_update:
                raise ApiError.not_found(rt.plural, rt.group, name)
            return 201, self.create(rt, namespace, body, managed_fields)
        _check_resource_version(rt, name, metadata.get("resourceVersion") or "", existing)
        new = self._updated(rt, namespace, name, body, existing, managed_fields)
        if new == existing:
            return 200, self.present(rt, existing)
        self._check_size(rt, namespace, new)
        if self.dry_run:  # DryRunnableStorage.GuaranteedUpdate: the stored resourceVersion
            return 200, self.present(rt, new)
        self.bucket(rt)[(namespace, name)] = new
        self._commit(rt, "MODIFIED", new, existing)
        if "deletionTimestamp" in new["metadata"] and not new["metadata"].get("finalizers"):
            # The last finalizer is gone from an object being deleted: it goes now
            # (Store.Update, shouldDeleteDuringUpdate).
            del self.bucket(rt)[(namespace, name)]
            self._commit(rt, "DELETED", new)
            self.removed.append((rt, new))
        return 200, self.present(rt, new)

    def _updated(
        self, rt: ResourceType, namespace: str, name: str, body: JSON, existing: JSON,
        managed_fields: list[JSON] | None,
    ) -> JSON:
        """The object an update of ``existing`` to ``body`` would store (not yet versioned)."""
        new = prepare(self, rt, body, namespace, existing)
        # rest.BeforeUpdate: an update never changes these, nor removes a deletion timestamp.
        for key in ("uid", "creationTimestamp", "resourceVersion", "generation",
                    "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in existing["metadata"]:
                new["metadata"][key] = existing["metadata"][key]
        if "deletionTimestamp" in existing["metadata"]:
            _check_no_new_finalizers(rt, name, new, existing)
        given = (body.get("metadata") or {}).get("managedFields")
        _set_managed(new, managed_fields if managed_fields is not None else record_update(
            rt, existing, new, given, self.manager, self._timestamp()
        ))
        if rt.custom and new.get("spec") != existing.get("spec"):
            # A changed spec is a new generation (it differs from existing all the same).
            new["metadata"]["generation"] = existing["metadata"].get("generation", 1) + 1
        return new

    def write_status(self, rt: ResourceType, namespace: str, name: str, status: JSON) -> None:
        """A controller's status write (``UpdateStatus``): a new resourceVersion, MODIFIED."""
        existing = self.bucket(rt)[(namespace, name)]
        new = copy.deepcopy(existing)
        new["status"] = status
        self.bucket(rt)[(namespace, name)] = new
        self._commit(rt, "MODIFIED", new, existing)

    def rewrite(self, rt: ResourceType, namespace: str, name: str, new: JSON) -> None:
        """A controller's metadata write (the garbage collector's): MODIFIED, no validation."""
        existing = self.bucket(rt)[(namespace, name)]
        if new == existing:
            return
        self.bucket(rt)[(namespace, name)] = new
        self._commit(rt, "MODIFIED", new, existing)

    def delete(self, rt: ResourceType, namespace: str, name: str, options: JSON) -> JSON:
        """DELETE with optional uid / resourceVersion preconditions; returns the deleted object."""
        existing = self.bucket(rt).get((namespace, name))
        if existing is None:
            raise ApiError.not_found(rt.plural, rt.group, name)
        self.check_preconditions(rt, name, existing, options)
        if self.dry_run:  # DryRunnableStorage.Delete: preconditions checked, nothing removed
            return self.present(rt, existing)
        del self.bucket(rt)[(namespace, name)]
        self._commit(rt, "DELETED", existing)
        self.removed.append((rt, existing))
        return self.present(rt, existing)

    @staticmethod
    def check_preconditions(rt: ResourceType, name: str, existing: JSON, options: JSON) -> None:
        """A DELETE's uid and resourceVersion preconditions (409 when they do not match)."""
        preconditions = options.get("preconditions") or {}
        meta = existing["metadata"]
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(key)
            if wanted is not None and wanted != meta[key]:
                # rest.BeforeDelete: a Conflict on the *kind* (``Lease.coordination.k8s.io``).
                raise ApiError.conflict(
                    rt.kind, rt.group, name,
                    f"the {label} in the precondition ({wanted}) does not match the {label} in "
                    f"record ({meta[key]}). The object might have been {_DELETE_WHY[key]}",
                )

    def mark_deleted(
        self, rt: ResourceType, namespace: str, name: str, add_finalizer: str = ""
    ) -> JSON:
        """A DELETE of an object with finalizers: ``deletionTimestamp`` and a grace period of
        0 are set (``BeforeDelete``, ``updateForGracefulDeletionAndFinalizers``), with
        ``add_finalizer`` (``foregroundDeletion``, ``orphan``) if given; the object stays until
        its finalizers are removed. An object already being deleted is left as it is."""
        existing = self.bucket(rt)[(namespace, name)]
        new = copy.deepcopy(existing)
        meta = new["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if add_finalizer and add_finalizer not in finalizers:
            finalizers.append(add_finalizer)
        meta["finalizers"] = finalizers
        meta.setdefault("deletionTimestamp", self._timestamp())
        meta.setdefault("deletionGracePeriodSeconds", 0)
        if new == existing or self.dry_run:
            return self.present(rt, new)
        self.bucket(rt)[(namespace, name)] = new
        self._commit(rt, "MODIFIED", new, existing)
        return self.present(rt, new)


_DELETE_WHY = {"uid": "deleted and then recreated", "resourceVersion": "modified"}


def _check_no_new_finalizers(rt: ResourceType, name: str, new: JSON, old: JSON) -> None:
    """``ValidateNoNewFinalizers``: none may be added once the object is being deleted."""
    extra = sorted(set(new["metadata"].get("finalizers") or [])
                   - set(old["metadata"].get("finalizers") or []))
    if extra:
        raise ApiError.invalid(rt.kind, rt.group, name, [FieldError(
            "metadata.finalizers", "Forbidden",
            "no new finalizers can be added if the object is being deleted, found new "
            "finalizers []string{" + ", ".join(json.dumps(f) for f in extra) + "}",
        )])


def _set_managed(obj: JSON, entries: list[JSON]) -> None:
    if entries:
        obj["metadata"]["managedFields"] = entries
    else:
        obj["metadata"].pop("managedFields", None)


def _check_uid(
    rt: ResourceType, namespace: str, name: str, uid: str, existing: JSON | None
) -> None:
    """An update's uid precondition: GuaranteedUpdate(ignoreNotFound=true) checks it against
    the stored object, or an empty one when there is none (custom resources too); the
    StorageError becomes a 409."""
    if uid and (existing is None or existing["metadata"]["uid"] != uid):
        actual = "" if existing is None else existing["metadata"]["uid"]
        raise ApiError.conflict(
            rt.plural, rt.group, name, storage_invalid_obj(
                rt.etcd_key(namespace, name),
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {actual}",
            ),
        )


def _check_resource_version(rt: ResourceType, name: str, rv: str, existing: JSON) -> None:
    """An update names the stored resourceVersion: 422 without one, 409 for another."""
    if not rv:
        raise ApiError.invalid(
            rt.plural, rt.group, name,
            [FieldError("metadata.resourceVersion", "Invalid", "must be specified for an update", GO_UINT64_ZERO)],  # noqa: E501
        )
    if rv != existing["metadata"]["resourceVersion"]:
        raise ApiError.conflict(rt.plural, rt.group, name, MODIFIED_MSG)
