"""The two lease kinds: where a Lease object lives, whether a reply is one, how it maps.

``coordination.k8s.io/v1`` (the default, :data:`COORDINATION`)::

    holder          spec.holderIdentity      ("" / absent / null = free)
    lease_duration  spec.leaseDurationSeconds (integer seconds; absent reads as 0)
    fencing_token   spec.leaseTransitions    (the core bumps it on every new grant)
    acquired_at     spec.acquireTime         (MicroTime)
    renewed_at      spec.renewTime           (MicroTime)
    version         metadata.resourceVersion (opaque; equality only)
    handover_to     the annotation ``trio-lease.io/handover-to`` (absent = no request; on
                    ``akka.io/v1`` too)

``akka.io/v1`` (:data:`AKKA`, the CRD in ``lease.yml``, for interop with Akka clusters) has only
``spec.owner`` and ``spec.time`` (epoch milliseconds of the writer's wall clock). The rest of the
record lives in ``trio-lease.io/*`` annotations. An Akka node's PUT drops them, so a record last
written by Akka reads with ``lease_duration`` 0 (contenders then wait their own heartbeat
timeout) and ``fencing_token`` = ``metadata.generation``: the object's spec-change counter, which
is at least every token written before, so the next grant's token stays strictly greater.

Reading is strict and total, in two steps (the backend turns :class:`~trio_lease._wire.Malformed`
into :class:`~trio_lease.BackendProtocolError`):

:meth:`LeaseKind.check_object` (identity: is this our object?)
    an object; ``kind`` ``Lease`` and ``apiVersion`` this kind's (items of a LIST and objects of
    a watch event may omit both, as the server does for built-in kinds in lists; a wrong value is
    refused everywhere); ``metadata`` an object whose ``name`` is the one asked for, whose
    ``namespace`` (when present) is ours, with a non-empty ``uid`` and ``resourceVersion``.
    Anything else (a ``Status``, a ``LeaseList``, ``{}``, another object) raises ``Malformed``:
    without a version no compare-and-swap is possible, and another object's record is not ours.
:meth:`LeaseKind.to_record` (content: what does it say?)
    the rules per field are in :mod:`._reading`. Writing a record onto an object is
    :mod:`._writing`; times are :mod:`._times`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Final

from ... import _wire
from ..._abc import LeaseRecord
from ..._wire import JsonObject, Malformed, describe
from ._reading import KubernetesLeaseRecord, identifier, read_record
from ._writing import apply_record

__all__ = ["AKKA", "COORDINATION", "COORDINATION_GROUP", "LeaseKind", "kind_named"]

COORDINATION_GROUP: Final = "coordination.k8s.io"


def _named(value: object, known: tuple[str, ...]) -> str:
    """For messages: a known kind name as is, any other value by its type only."""
    if isinstance(value, str) and value in known:
        return f"a {value}"
    return "another string" if isinstance(value, str) else describe(value)


@dataclasses.dataclass(frozen=True)
class LeaseKind:
    """One Kubernetes resource that can hold a lease: its URL and its spec mapping."""

    name: str
    group: str
    version: str
    plural: str
    kind: str
    #: RBAC verbs the backend needs, in the order ``check()`` reports them.
    verbs: tuple[str, ...] = ("get", "create", "update", "watch", "list")
    #: Whether a PUT to a missing object creates it (the built-in Lease does; CRs give 404).
    create_on_update: bool = False

    @functools.cached_property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @functools.cached_property
    def resource(self) -> str:
        """``leases.coordination.k8s.io``: the resource as error messages and kubectl name it."""
        return f"{self.plural}.{self.group}"

    @functools.cached_property
    def _identity_fields(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """What :meth:`check_object` compares: each field, its value, and the other values
        a message names (checked on every reply and watch event)."""
        return (
            ("kind", self.kind, ("Status", f"{self.kind}List")),
            ("apiVersion", self.api_version, ()),
        )

    def collection_path(self, namespace: str) -> str:
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"

    def item_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    # -- object → record ---------------------------------------------------------------------

    def check_object(
        self, body: object, object_name: str, namespace: str, *, listed: bool = False
    ) -> JsonObject:
        """``body`` if it is this kind's object ``object_name`` in ``namespace``, else Malformed.

        ``listed``: an item of a LIST or the object of a watch event, which may omit
        ``apiVersion`` and ``kind`` (the server leaves them out of built-in kinds' list items).
        See the module docstring for the rules; the content is read by :meth:`to_record`.
        """
        obj = _wire.obj(body, "")
        for field, expected, known in self._identity_fields:
            value = obj.get(field)
            if value == expected or (value is None and listed):
                continue
            raise Malformed(field, f"expected {expected!r}, got {_named(value, known)}")
        metadata = _wire.obj(obj.get("metadata"), "metadata")
        name = _wire.string(metadata.get("name"), "metadata.name", default=None)
        if name != object_name:
            raise Malformed("metadata.name", f"expected {object_name!r}, got another name")
        stored_namespace = metadata.get("namespace")
        if stored_namespace is not None and stored_namespace != namespace:
            raise Malformed(
                "metadata.namespace",
                f"expected {namespace!r}, got {_named(stored_namespace, ())}",
            )
        identifier(metadata, "uid")
        identifier(metadata, "resourceVersion")
        return obj

    def to_record(self, key: str, obj: JsonObject) -> KubernetesLeaseRecord:
        """Read the record named ``key`` from an object (identity checked by check_object).

        Raises Malformed only when ``metadata`` or its ``resourceVersion`` cannot be read; a
        field that cannot be read makes the record unreadable instead (see :mod:`._reading`),
        so that it is held by an unknown holder: never free, never ours.
        """
        return read_record(key, obj, coordination=self.group == COORDINATION_GROUP)

    # -- record → object ---------------------------------------------------------------------

    def new_object(
        self,
        name: str,
        record: LeaseRecord,
        annotations: dict[str, str],
        labels: dict[str, str] | None = None,
    ) -> JsonObject:
        """A fresh object for a POST."""
        metadata: JsonObject = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        if annotations:
            metadata["annotations"] = dict(annotations)
        obj: JsonObject = {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}
        return self.apply(obj, record)

    def apply(self, base: JsonObject, record: LeaseRecord) -> JsonObject:
        """``base`` (the last object read) with the record's fields written over it.

        ``base`` is not changed (see :func:`._writing.apply_record`).
        """
        return apply_record(base, record, coordination=self.group == COORDINATION_GROUP)


#: The built-in Lease (``coordination.k8s.io/v1``): the default kind.
COORDINATION: Final = LeaseKind(
    name="coordination.k8s.io/v1",
    group=COORDINATION_GROUP,
    version="v1",
    plural="leases",
    kind="Lease",
    create_on_update=True,
)
#: Akka's Lease custom resource (``akka.io/v1``, defined in ``lease.yml``).
AKKA: Final = LeaseKind(
    name="akka.io/v1", group="akka.io", version="v1", plural="leases", kind="Lease"
)

_KINDS = {k.name: k for k in (COORDINATION, AKKA)} | {"coordination": COORDINATION, "akka": AKKA}


def kind_named(name: str) -> LeaseKind | None:
    """The kind called ``name`` ("coordination.k8s.io/v1"/"coordination", "akka.io/v1"/"akka")."""
    return _KINDS.get(name)
