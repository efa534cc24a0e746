"""The object cache: the last object seen per lease, and the records read from objects.

A steady-state renewal is one PUT of the last object we saw with the record written over it:
fields we do not model survive, and its ``metadata.uid`` makes the PUT fail on an object that
was deleted and re-created. :class:`ObjectCache` keeps that object per object name. Objects
enter through :meth:`ObjectCache.record` (a GET, POST or PUT answer, a LIST item, a watch event),
which also turns them into records (:meth:`ObjectCache.peek` reads one without keeping it: the
shared watch's events may lag behind our own writes); a DELETED event, a 404, a conflict or an
unknown outcome drops them, so the next write GETs first.

Lease keys map to object names here (:func:`lease_name_for`, or a check that the key is a valid
name). A mapped name stores its key in the :data:`KEY_ANNOTATION` annotation; an object whose
annotation names another key is refused with :class:`LeaseConfigError` (a name collision).
"""

from __future__ import annotations

from ..._abc import LeaseRecord
from ..._exceptions import LeaseConfigError
from ..._namespace import SEPARATOR
from ..._wire import JsonObject
from ._errors import clean_text
from ._models import LeaseKind
from ._names import KEY_ANNOTATION, lease_name_for, validate_lease_name
from ._reading import KubernetesLeaseRecord, resource_version

__all__ = ["OWN_WRITES_KEPT", "ObjectCache"]

#: How many of this process's own write versions are kept for the feed to recognise.
OWN_WRITES_KEPT = 4096
#: How many key → object name mappings are remembered (all are forgotten when it fills).
NAMES_KEPT = 65536


class ObjectCache:
    """The last object seen per object name, for one lease kind."""

    def __init__(self, kind: LeaseKind, *, map_names: bool) -> None:
        self.kind: LeaseKind = kind
        #: Map keys that are not valid object names (else they are refused).
        self.map_names: bool = map_names
        self._objects: dict[str, JsonObject] = {}
        #: Versions this process wrote and has not yet seen on the shared watch: resourceVersion
        #: → object name (the oldest dropped past OWN_WRITES_KEPT). The feed skips decoding
        #: their events: a holder does not need its own renewals back.
        self.own_writes: dict[str, str] = {}
        #: Updates sent whose replies are not read yet (the feed waits a pass for them).
        self.writing: int = 0
        self._names: dict[str, str] = {}

    def object_name(self, key: str) -> str:
        """The Kubernetes object name that stores the lease ``key``.

        Remembered per key: every renewal asks, and the shared watch asks for every watched
        key each time the watched set changes (a thousand holders starting up).
        """
        name = self._names.get(key)
        if name is None:
            # A feature's own record (a name with the reserved separator) is never a valid
            # object name: it is mapped whether or not map_names is on.
            mapped = self.map_names or SEPARATOR in key
            name = lease_name_for(key) if mapped else validate_lease_name(key)
            if len(self._names) >= NAMES_KEPT:
                self._names.clear()
            self._names[key] = name
        return name

    def check_key(self, key: str, obj: JsonObject) -> None:
        """Refuse ``obj`` when its key annotation names another lease than ``key``."""
        metadata = obj.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        # Not a string, or no object at all: the record reads as unreadable (see _reading).
        stored = annotations.get(KEY_ANNOTATION) if isinstance(annotations, dict) else None
        if SEPARATOR in key and isinstance(metadata, dict) and stored is None:
            # A feature's own record always carries its name: an object without it is a lease
            # whose own (valid) name happens to be the mapped name.
            raise LeaseConfigError(
                f"lease name collision: {key!r} maps to the object {self.object_name(key)!r}, "
                "which stores a lease of that very name; rename that lease"
            )
        if isinstance(stored, str) and stored != key:
            raise LeaseConfigError(
                f"lease name collision: {key!r} maps to the object "
                f"{self.object_name(key)!r}, which stores the lease {clean_text(stored, 100)!r}; "
                "rename one"
            )

    def record(self, key: str, obj: JsonObject) -> KubernetesLeaseRecord:
        """The record in ``obj`` (an accepted object of ours); keeps it for the next PUT."""
        self.check_key(key, obj)
        # List items of built-in kinds come without these; a PUT needs them.
        obj.setdefault("apiVersion", self.kind.api_version)
        obj.setdefault("kind", self.kind.kind)
        self._store(self.object_name(key), obj)
        return self.kind.to_record(key, obj)

    def peek(self, key: str, obj: JsonObject) -> LeaseRecord:
        """The record in ``obj`` without keeping it (the shared watch's: events may lag).

        An object whose key annotation names another lease reads as unreadable (the next
        read of the lease reports the collision).
        """
        try:
            self.check_key(key, obj)
        except LeaseConfigError:
            return LeaseRecord(
                key,
                version=resource_version(obj),
                unreadable="metadata.annotations: the object stores another lease's key",
            )
        return self.kind.to_record(key, obj)

    def wrote(self, object_name: str, version: str) -> None:
        """Remember that this process wrote ``object_name`` at ``version``."""
        own = self.own_writes
        own[version] = object_name
        if len(own) > OWN_WRITES_KEPT:
            del own[next(iter(own))]

    def get(self, object_name: str) -> JsonObject | None:
        """The last object seen under ``object_name`` (None: read it before writing)."""
        return self._objects.get(object_name)

    def keep(self, object_name: str, obj: JsonObject) -> None:
        """Keep ``obj`` (read to learn its uid and version) for the next PUT."""
        self._store(object_name, obj)

    def _store(self, object_name: str, obj: JsonObject) -> None:
        """Keep ``obj`` under ``object_name``: into the dicts kept before, if any.

        A held lease's object is kept from one renewal to the next, about R, and a collection
        of the garbage collector's middle generation comes every few seconds at 1,000 leases:
        the kept object's dicts that hold other containers (the object and its ``metadata``)
        were moved to the oldest generation about once per renewal, and what full collections
        cost is set by how many objects are moved there (tools/benchmarks/README.md, "Promoted
        per renewal"). So the dicts kept already take the new contents; the new ones, and a
        reply's other dicts (the spec, labels and annotations: strings and numbers, which the
        collector stops tracking), are freed or kept as they are. Nobody holds a kept object
        across an await (the writes build their bodies from copies before they send).
        """
        obj = _kept(obj)
        old = self._objects.get(object_name)
        if old is None or old is obj:
            self._objects[object_name] = obj
            return
        metadata, old_metadata = obj.get("metadata"), old.get("metadata")
        old.clear()
        old.update(obj)
        if (
            type(metadata) is dict
            and type(old_metadata) is dict
            and metadata is not old_metadata
        ):
            old_metadata.clear()
            old_metadata.update(metadata)
            old["metadata"] = old_metadata

    def forget(self, object_name: str) -> None:
        """Drop the object: it is gone, or what the server holds is unknown."""
        self._objects.pop(object_name, None)

    def clear(self) -> None:
        self._objects.clear()


def _kept(obj: JsonObject) -> JsonObject:
    """``obj`` without ``metadata.managedFields``, to keep: a PUT never sends them (the server
    keeps the live object's, see ``_backend._put_body``), and they are most of a Lease's dicts,
    which the garbage collector would walk for every lease held."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj
