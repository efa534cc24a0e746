"""The hostile Kubernetes API server: the real emulator for the truth, generated lies around it.

Truth: :class:`~trio_lease.testing.kube.KubeEmulator` (with ``lease.yml`` applied, so both
``coordination.k8s.io/v1`` and ``akka.io/v1`` leases are served) holds the one true object per
lease and does the real compare-and-swap on ``resourceVersion`` (uid preconditions, 409s, 422s,
watches). Each request is either passed to it (a truthful reply) or answered with a generated
hostile reply; a hostile answer to a write first decides whether the write reaches the
emulator (the store applies it) or not, and records which.

Hostile replies, by class (``label`` prefixes in the tally):

- ``json``: bodies that are not JSON; ``deep``: thousands of nesting levels; ``huge``: a valid
  Lease over 4 MiB;
- ``shape``: a Status, a LeaseList, ``{}``, ``[]``, ``null``, another kind or apiVersion,
  another object's name, a 404 (``absent``);
- ``field``: the true object with one field replaced by a value of the wrong type or range
  (list, object, bool, float, bare NaN/Infinity/1e999, 400-digit and 64-bit-overflowing
  integers, negative numbers, strings) or removed;
- ``lie`` (writes): a 200/201 that shows the old version, another holder, our holder with
  another token, a shorter lease duration, or nothing (``{}``, a Status);
- ``list`` / ``watch``: the watch's LIST with ``"items": 5`` and friends; streams that end after
  one BOOKMARK, send BOOKMARKs forever, send garbage lines or broken events;
- the classes of :meth:`FakeBase.not_an_answer` (HTML, 5xx, 429, 401/403, redirects, and on
  the socket truncated, closed, broken, trailing and slow-drip replies).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx

from trio_lease import BackendUnavailable, ConflictError
from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION, LeaseKind
from trio_lease.testing.kube import KubeEmulator
from trio_lease.testing.kube._http import Request as EmuRequest
from trio_lease.testing.kube._status import status_body
from trio_lease.testing.kube._watch import WatchCut

from ._checks import Expect, Tally, Truth
from ._fake import Exchange, FakeBase
from ._json import DELETE, Bare, deep_text, dumps, huge_string
from ._server import Reply, Request, StreamCut

__all__ = ["KINDS", "KubeFake", "kind_label"]

LEASE_YML = Path(__file__).parents[2] / "lease.yml"
KINDS: dict[str, LeaseKind] = {"coordination": COORDINATION, "akka": AKKA}
NAMESPACE = "default"
_PATH = re.compile(
    r"/apis/(?P<group>[^/]+)/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?"
)
MODIFIED = (
    "Operation cannot be fulfilled on leases: the object has been modified; please apply your "
    "changes to the latest version and try again"
)
_TOKEN_KEY = "trio-lease.io/fencing-token"
_DURATION_KEY = "trio-lease.io/lease-duration"

Category = Literal["identity", "content", "info"]


def kind_label(kind: LeaseKind) -> str:
    return "kubernetes/" + ("coordination" if kind is COORDINATION else "akka")


@dataclasses.dataclass(frozen=True)
class Field:
    """A field of a Lease object, what it decides, and its JSON type."""

    path: tuple[str, ...]
    category: Category
    type: Literal["str", "ident", "int", "obj", "decimal"]
    #: How an absent/null value reads (record attributes), or None: absent is not plausible.
    plausible: tuple[str, ...] | None = None
    #: Category of an absent/null value when that differs (kind and apiVersion may be omitted).
    when_missing: Category | None = None


_IDENTITY = (
    Field(("kind",), "identity", "ident", when_missing="info"),
    Field(("apiVersion",), "identity", "ident", when_missing="info"),
    Field(("metadata",), "identity", "obj"),
    Field(("metadata", "name"), "identity", "ident"),
    Field(("metadata", "namespace"), "identity", "ident", when_missing="info"),
    Field(("metadata", "resourceVersion"), "identity", "ident"),
    Field(("metadata", "uid"), "info", "str"),
)
COORD_FIELDS = (
    *_IDENTITY,
    Field(("metadata", "annotations"), "info", "obj"),
    Field(("spec",), "content", "obj", plausible=("holder", "duration", "token")),
    Field(("spec", "holderIdentity"), "content", "str", plausible=("holder",)),
    Field(("spec", "leaseDurationSeconds"), "content", "int", plausible=("duration",)),
    Field(("spec", "leaseTransitions"), "content", "int", plausible=("token",)),
    Field(("spec", "acquireTime"), "info", "str"),
    Field(("spec", "renewTime"), "info", "str"),
    Field(("spec", "preferredHolder"), "info", "str"),
    Field(("spec", "strategy"), "info", "str"),
)
AKKA_FIELDS = (
    *_IDENTITY,
    Field(("metadata", "generation"), "info", "int"),
    Field(("metadata", "annotations"), "content", "obj", plausible=("duration", "token")),
    Field(("metadata", "annotations", _TOKEN_KEY), "content", "decimal", plausible=("token",)),
    Field(("metadata", "annotations", _DURATION_KEY), "content", "decimal",
          plausible=("duration",)),
    Field(("metadata", "annotations", "trio-lease.io/acquire-time"), "info", "str"),
    Field(("spec",), "content", "obj", plausible=("holder",)),
    Field(("spec", "owner"), "content", "str", plausible=("holder",)),
    Field(("spec", "time"), "info", "int"),
)

_BAD: dict[str, dict[str, Any]] = {
    "str": {"list": ["x"], "dict": {"a": "b"}, "true": True, "float": 1.5, "1e999": Bare("1e999"),
            "NaN": Bare("NaN"), "int": 12345678901, "neg": -1},
    "ident": {"list": ["x"], "dict": {"a": "b"}, "true": True, "float": 1.5, "int": 98765432101,
              "NaN": Bare("NaN"), "other": "zz-other-object", "empty": ""},
    "int": {"list": [1], "dict": {}, "true": True, "float": 1.5, "NaN": Bare("NaN"),
            "Infinity": Bare("Infinity"), "-Infinity": Bare("-Infinity"), "1e999": Bare("1e999"),
            "digits400": Bare("9" * 400), "int32+1": 2**31, "int64+1": 2**63, "neg": -1,
            "neg-huge": -(10**30), "string": "5", "word": "abc"},
    "obj": {"list": [], "string": "x", "int": 5, "true": True, "NaN": Bare("NaN"),
            "deep": Bare(deep_text(3000))},
    "decimal": {"list": ["1"], "dict": {}, "int": 5, "true": True, "word": "abc", "neg": "-1",
                "1e999": "1e999", "NaN": "NaN", "digits30": "9" * 30, "empty": "",
                "float": 1.5},
}
_MISSING = {"null": None, "missing": DELETE}

_INVALID_JSON = (
    b'{"kind":"Lease","apiVersion":"coordination.k8s.io/v1",',
    b"not json at all",
    b"\xff\xfe\x00\x01garbage",
    b'{"a":1}{"b":2}',
    b"{'kind': 'Lease'}",
    b'{"kind":"Lease",}',
    b'{"metadata":{"name":"x"},"spec":{"holderIdentity":"a\\ud800"}}\x00',
)
_GARBAGE_LINES = (
    b"this is not json\n",
    b"[1, 2, 3]\n",
    b'{"type": 5, "object": {}}\n',
    b'{"type": "MODIFIED", "object": [1]}\n',
    b'{"type": "MODIFIED"}\n',
    b'{"object": {"kind": "Lease"}}\n',
    b'{"type": "ADDED", "object": "x"}\n',
    b'{"type": ["MODIFIED"], "object": {}}\n',
    b"null\n",
    b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": ["1"]}}}\n',
    b'{"type": "MODIFIED", "object": {"metadata": NaN}}\n',
)


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            child = obj[part] = {}
        obj = child
    if value is DELETE:
        obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value


def read_truth(kind: LeaseKind, obj: dict[str, Any] | None) -> Truth | None:
    """The record a stored object means (the store holds only well-formed objects)."""
    if obj is None:
        return None
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    version = str(metadata.get("resourceVersion", ""))
    if kind is COORDINATION:
        return Truth(
            holder=spec.get("holderIdentity") or "",
            token=int(spec.get("leaseTransitions") or 0),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            version=version,
        )
    annotations = metadata.get("annotations") or {}
    token = annotations.get(_TOKEN_KEY)
    return Truth(
        holder=spec.get("owner") or "",
        token=int(token) if token is not None else int(metadata.get("generation") or 0),
        duration=float(annotations.get(_DURATION_KEY) or 0),
        version=version,
    )


def _written(kind: LeaseKind, body: Any) -> tuple[str, str | None]:
    """(holder, resourceVersion) of a write's body, as far as it can be read."""
    if not isinstance(body, dict):
        return "", None
    spec = body.get("spec")
    holder = spec.get("holderIdentity" if kind is COORDINATION else "owner") or "" \
        if isinstance(spec, dict) else ""
    metadata = body.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return (holder if isinstance(holder, str) else ""), (
        version if isinstance(version, str) else None
    )


def _undecodable(body: Any) -> str | None:
    """Why the apiserver's decoder refuses a write's body (the emulator does not check
    metadata types), or None. Keeps the true store well-formed whatever a client sends."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    for top in ("kind", "apiVersion"):
        if body.get(top) is not None and not isinstance(body.get(top), str):
            return f"json: cannot unmarshal {top}"
    metadata = body.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return "json: cannot unmarshal metadata into ObjectMeta"
    for field in ("name", "namespace", "resourceVersion", "uid", "generateName"):
        if metadata.get(field) is not None and not isinstance(metadata.get(field), str):
            return f"json: cannot unmarshal metadata.{field} into string"
    generation = metadata.get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        return "json: cannot unmarshal metadata.generation into int64"
    for field in ("labels", "annotations"):
        value = metadata.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            return f"json: cannot unmarshal metadata.{field} into map[string]string"
    return None


class KubeFake(FakeBase):
    """A hostile API server in front of a :class:`KubeEmulator` (see the module docstring)."""

    def __init__(self, rng: random.Random, tally: Tally, *, hostility: float, bound: float) -> None:
        super().__init__(rng, tally, hostility=hostility, bound=bound)
        self.emulator = KubeEmulator()
        self.emulator.apply(LEASE_YML.read_text())
        self.history: dict[tuple[str, str], list[Truth]] = {}
        self._fresh = 900_000_000

    # -- the truth -------------------------------------------------------------------------

    def truth(self, kind: LeaseKind, name: str) -> Truth | None:
        return read_truth(kind, self._object(kind, name))

    def _object(self, kind: LeaseKind, name: str) -> dict[str, Any] | None:
        return self.emulator.get(kind.api_version, "leases", name, NAMESPACE)

    def seed(self, kind: LeaseKind, name: str, holder: str, token: int, duration: int) -> Truth:
        """Write the true record directly (the test's own hand, no reply involved)."""
        key = (kind_label(kind), name)
        before = self.truth(kind, name)
        metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
        if kind is COORDINATION:
            spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": duration,
                                    "leaseTransitions": token}
        else:
            spec = {"owner": holder, "time": 1_700_000_000_000}
            metadata["annotations"] = {_TOKEN_KEY: str(token), _DURATION_KEY: str(duration)}
        self.emulator.apply(
            {"apiVersion": kind.api_version, "kind": "Lease", "metadata": metadata, "spec": spec}
        )
        after = self.truth(kind, name)
        assert after is not None
        self._changed(key, before, after)
        return after

    def _changed(self, key: tuple[str, str], before: Truth | None, after: Truth | None) -> None:
        if after != before:
            self.note_change(key, before, after)
            if after is not None:
                self.history.setdefault(key, []).append(after)

    def protect_lease(self, kind: LeaseKind, name: str, hold: float) -> Truth:
        """No contender may take this lease over before ``hold`` after first seeing it."""
        truth = self.truth(kind, name)
        assert truth is not None
        marker = f'"resourceVersion":"{truth.version}"'.encode()
        self.protect((kind_label(kind), name), truth, hold, (marker,))
        return truth

    def register_token(self, token: str) -> None:
        self.emulator.add_token(token, "hostile-suite", groups=("system:masters",))

    def backend(
        self,
        kind: LeaseKind,
        *,
        url: str | None,
        transport: httpx.AsyncBaseTransport | None,
        token: str,
        request_timeout: float | None = None,
        watch_poll_interval: float = 0.5,
    ) -> KubernetesBackend:
        """A backend on the socket server (``url``) or on the transport (the same replies)."""
        self.register_token(token)
        config = ClusterConfig(
            server=url or "http://kube.test",
            namespace=NAMESPACE,
            credentials=Credentials(token=token),
        )
        return KubernetesBackend(
            config,
            lease_kind=kind,
            transport=transport,
            request_timeout=request_timeout,
            watch_poll_interval=watch_poll_interval,
        )

    # -- answering -------------------------------------------------------------------------

    def _fresh_version(self) -> str:
        self._fresh += 1
        return str(self._fresh)

    async def _emulate(self, request: Request, key: tuple[str, str] | None = None) -> Reply:
        response = await self.emulator.handle(
            EmuRequest(request.method, request.path, dict(request.query), dict(request.headers),
                       request.body)
        )
        reply = Reply(response.status, response.body, list(response.headers))
        if response.stream is not None:
            reply.mode = "stream"
            reply.chunks = self._relay(response.stream, key)
        return reply

    async def _relay(self, stream: Any, key: tuple[str, str] | None) -> AsyncIterator[bytes]:
        try:
            async for chunk in stream:
                if key is not None:
                    self.note_sent(key, chunk, anyio.current_time())
                yield chunk
        except WatchCut:
            raise StreamCut from None
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def __call__(self, request: Request, *, socket: bool) -> Reply:
        match = _PATH.fullmatch(request.path)
        if match is None or match["group"] not in ("coordination.k8s.io", "akka.io"):
            return await self._emulate(request)  # discovery and the like: always the truth
        kind = COORDINATION if match["group"] == "coordination.k8s.io" else AKKA
        label = kind_label(kind)
        name = match["name"] or ""
        body = request.json() if request.method in ("POST", "PUT") else None
        if request.method == "GET" and not name:
            selector = request.query.get("fieldSelector", "")
            name = selector.removeprefix("metadata.name=")
            verb = "watch" if request.query.get("watch") in ("1", "true") else "list"
        elif request.method == "GET":
            verb = "get"
        elif request.method == "POST":
            verb = "create"
            meta = body.get("metadata") if isinstance(body, dict) else None
            name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
        elif request.method == "PUT":
            verb = "update"
        else:
            return await self._emulate(request)
        key = (label, name)
        self.begin(key)
        if verb == "watch":
            reply, tag, expect = await self._watch(request, socket, kind, name, key)
        elif verb in ("create", "update"):
            reply, tag, expect, applied = await self._write(request, socket, kind, name, key,
                                                            verb, body)
            exchange = Exchange(label, name, verb, request.arrived, tag, expect, applied)
            return self.log(exchange, reply, key)
        else:
            reply, tag, expect = await self._read(request, socket, kind, name, verb, key)
        return self.log(Exchange(label, name, verb, request.arrived, tag, expect), reply, key)

    # -- reads -----------------------------------------------------------------------------

    async def _read(
        self, request: Request, socket: bool, kind: LeaseKind, name: str, verb: str,
        key: tuple[str, str],
    ) -> tuple[Reply, str, Expect]:
        truthful = await self._emulate(request)
        self.begin(key)
        obj = self._object(kind, name)
        base = read_truth(kind, obj)
        if not self.hostile_now():
            return truthful, "truthful", Expect("truthful", "truthful", base)
        if verb == "list":
            return self._hostile_list(socket, kind, name, obj, truthful)
        return self._hostile_object(
            socket, kind, name, obj, truthful, status=200, truthful_base=base
        )

    def _hostile_object(
        self,
        socket: bool,
        kind: LeaseKind,
        name: str,
        obj: dict[str, Any] | None,
        truthful: Reply | None,
        *,
        status: int,
        truthful_base: Truth | None,
    ) -> tuple[Reply, str, Expect]:
        """A hostile answer where one Lease object belongs (GET, or a write's echo).

        ``obj`` is the true object the lies start from; ``truthful`` the true reply (None when
        the write never reached the store), ``truthful_base`` the record it shows.
        """
        rng = self.rng
        for _ in range(20):
            choice = rng.choices(
                ["json", "shape", "field", "huge", "deep", "other"], [1, 2.5, 6, 0.15, 0.5, 4]
            )[0]
            if choice in self.excluded:
                continue
            if choice == "other":
                other = self.not_a_record(socket, self._status, truthful, truthful_base)
                if other is None:
                    continue
                return other
            if choice == "json":
                body = rng.choice(_INVALID_JSON)
                return (self._json_reply(status, body), "json",
                        Expect("error", "json", errors=(BackendUnavailable,)))
            if choice == "deep":
                text = rng.choice([deep_text(5000), deep_text(5000, opener="[", closer="]"),
                                   deep_text(70)])
                return (self._json_reply(status, text.encode()), "deep",
                        Expect("error", "deep", errors=(BackendUnavailable,)))
            if choice == "shape":
                label, value, expect = self._shape(kind, name, obj)
                if expect.kind == "absent":
                    return self._json_reply(404, dumps(value)), label, expect
                return self._json_reply(status, dumps(value)), label, expect
            if obj is None:
                continue
            if choice == "huge":
                big = copy.deepcopy(obj)
                _set(big, ("metadata", "annotations", "example.com/padding"),
                     huge_string(4 * 1024 * 1024 + 4096))
                return (self._json_reply(status, dumps(big)), "huge",
                        Expect("error", "huge", errors=(BackendUnavailable,)))
            mutated = self._mutate(kind, obj)
            if mutated is None:
                continue
            value, label, expect = mutated
            return self._json_reply(status, dumps(value)), label, expect
        reply = Reply(503, b"")
        return reply, "5xx:503", Expect("error", "5xx", errors=(BackendUnavailable,))

    def _mutate(
        self, kind: LeaseKind, obj: dict[str, Any], *, plausible: bool = True
    ) -> tuple[dict[str, Any], str, Expect] | None:
        """``obj`` with one field replaced by a bad value, its label and oracle."""
        rng = self.rng
        plausible = plausible and self.plausible
        fields = COORD_FIELDS if kind is COORDINATION else AKKA_FIELDS
        field = rng.choice(fields)
        values = dict(_BAD[field.type])
        if field.path[-1] == "resourceVersion":
            del values["other"]  # any string is a well-formed (opaque) version: not a lie we see
        if plausible or field.plausible is None:
            values |= _MISSING
        value_label = rng.choice(sorted(values))
        value = values[value_label]
        mutated = copy.deepcopy(obj)
        _set(mutated, field.path, value)
        label = f"field:{'.'.join(field.path)}={value_label}"
        base = read_truth(kind, obj)
        if value is None or value is DELETE:
            if field.plausible is not None:
                assert base is not None
                generation = int(_get(obj, ("metadata", "generation")) or 0)
                defaults = {"holder": "", "duration": 0.0, "token": 0}
                if kind is AKKA:
                    defaults["token"] = generation
                wanted = {attr: defaults[attr] for attr in field.plausible}
                return mutated, label, Expect("plausible", label, base, default=wanted)
            return mutated, label, Expect(field.when_missing or field.category, label, base)
        return mutated, label, Expect(field.category, label, base)

    def _shape(
        self, kind: LeaseKind, name: str, obj: dict[str, Any] | None
    ) -> tuple[str, Any, Expect]:
        rng = self.rng
        version = (obj or {}).get("metadata", {}).get("resourceVersion") or self._fresh_version()
        holder_key = "holderIdentity" if kind is COORDINATION else "owner"
        template: dict[str, Any] = copy.deepcopy(obj) if obj is not None else {
            "apiVersion": kind.api_version, "kind": "Lease",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": "u-1",
                         "resourceVersion": version},
            "spec": {holder_key: ""},
        }
        shapes: dict[str, Any] = {
            "status-failure": status_body(500, "InternalError", "etcdserver: request timed out"),
            "status-success": status_body(200, "", "", {"name": name}, success=True),
            "leaselist": {"kind": "LeaseList", "apiVersion": kind.api_version,
                          "metadata": {"resourceVersion": version}, "items": [template]},
            "empty-object": {},
            "list": [],
            "null": None,
            "number": 5,
            "string": "Lease",
            "other-kind": {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": NAMESPACE, "uid": "u-2",
                                        "resourceVersion": version},
                           "data": {holder_key: ""}},
        }
        other_api = copy.deepcopy(template)
        other_api["apiVersion"] = rng.choice(
            ["coordination.k8s.io/v1beta1", "akka.io/v2",
             AKKA.api_version if kind is COORDINATION else COORDINATION.api_version]
        )
        shapes["other-api"] = other_api
        other_name: dict[str, Any] = copy.deepcopy(template)
        other_name["metadata"]["name"] = "zz-other-lease"
        other_name.setdefault("spec", {})[holder_key] = ""
        if rng.random() < 0.5:
            other_name["metadata"]["resourceVersion"] = self._fresh_version()
        shapes["other-name"] = other_name
        label = rng.choice(sorted([*shapes, "not-found"]))
        if label == "not-found":
            body = status_body(404, "NotFound", f'leases.{kind.group} "{name}" not found',
                               {"name": name, "group": kind.group, "kind": "leases"})
            return "shape:not-found", body, Expect("absent", "shape:not-found")
        return f"shape:{label}", shapes[label], Expect("identity", f"shape:{label}")

    def _hostile_list(
        self, socket: bool, kind: LeaseKind, name: str, obj: dict[str, Any] | None,
        truthful: Reply,
    ) -> tuple[Reply, str, Expect]:
        rng = self.rng
        version = self.emulator.resource_version
        listing: dict[str, Any] = {"kind": "LeaseList", "apiVersion": kind.api_version,
                                   "metadata": {"resourceVersion": version},
                                   "items": [obj] if obj is not None else []}
        choice = rng.choice(["items", "items", "item-field", "metadata", "object", "other"])
        if choice == "other":
            return self._hostile_object(
                socket, kind, name, obj, truthful, status=200, truthful_base=None
            )
        if choice == "object":
            label, value, expect = self._shape(kind, name, obj)
            return self._json_reply(200, dumps(value)), f"list:{label}", expect
        if choice == "metadata":
            value = rng.choice([[], 5, "x", Bare("NaN"), {"resourceVersion": ["1"]},
                                {"resourceVersion": 7}, {"continue": 5}])
            listing["metadata"] = value
            return self._json_reply(200, dumps(listing)), "list:metadata", Expect(
                "identity", "list:metadata")
        if choice == "item-field" and obj is not None:
            mutated = self._mutate(kind, obj)
            if mutated is not None:
                listing["items"] = [mutated[0]]
                return self._json_reply(200, dumps(listing)), f"list:{mutated[1]}", mutated[2]
        items_label, items = rng.choice([
            ("items=5", 5), ("items=[5]", [5]), ("items=[{}]", [{}]), ("items=string", "x"),
            ("items=null", None), ("items=missing", DELETE), ("items=deep", Bare(deep_text(3000))),
            ("items=two", [obj or {}, {**(obj or {}), "metadata": {"name": "zz-other"}}]),
        ])
        if items is DELETE:
            del listing["items"]
        else:
            listing["items"] = items
        expect_kind: Literal["absent", "identity"] = (
            "absent" if items is None or items is DELETE else "identity"
        )
        label = f"list:{items_label}"
        return self._json_reply(200, dumps(listing)), label, Expect(expect_kind, label)

    # -- writes ----------------------------------------------------------------------------

    async def _write(
        self, request: Request, socket: bool, kind: LeaseKind, name: str,
        key: tuple[str, str], verb: str, body: Any,
    ) -> tuple[Reply, str, Expect, bool]:
        before_obj = self._object(kind, name)
        before = read_truth(kind, before_obj)
        holder, against = _written(kind, body)
        if verb == "update" and self.takeover_too_early(key, against, holder, request.arrived):
            conflict = status_body(409, "Conflict", "refused: takeover before L",
                                   {"name": name, "group": kind.group, "kind": "leases"})
            return (self._json_reply(409, dumps(conflict)), "refused-takeover",
                    Expect("truthful", "refused-takeover"), False)
        if key in self.storm:
            conflict = status_body(409, "Conflict", MODIFIED,
                                   {"name": name, "group": kind.group, "kind": "leases"})
            return (self._json_reply(409, dumps(conflict)), "storm:409",
                    Expect("error", "storm:409", errors=(ConflictError, BackendUnavailable)),
                    False)
        refusal = _undecodable(body)
        hostile = self.hostile_now()
        truthful: Reply | None = None
        if not hostile or self.rng.random() < 0.5:
            if refusal is not None:
                truthful = self._json_reply(400, dumps(status_body(400, "BadRequest", refusal)))
            else:
                truthful = await self._emulate(request)
                self.begin(key)
        after_obj = self._object(kind, name)
        after = read_truth(kind, after_obj)
        applied = after != before
        self._changed(key, before, after)
        if not hostile:
            assert truthful is not None
            return truthful, "truthful", Expect("truthful", "truthful", after), applied
        status = 201 if verb == "create" else 200
        if self.rng.random() < 0.45 and "lie" not in self.excluded:
            lie = self._lie(kind, name, body, before_obj, after_obj if applied else None)
            if lie is not None:
                label, value, expect = lie
                return self._json_reply(status, dumps(value)), label, expect, applied
        reply, label, expect = self._hostile_object(
            socket, kind, name, after_obj if applied else before_obj, truthful, status=status,
            truthful_base=after if applied else None,
        )
        return reply, label, expect, applied

    def _lie(
        self, kind: LeaseKind, name: str, body: Any, before_obj: dict[str, Any] | None,
        after_obj: dict[str, Any] | None,
    ) -> tuple[str, Any, Expect] | None:
        """A well-formed echo that does not show the write (the store may have applied it)."""
        rng = self.rng
        written = after_obj
        if written is None and isinstance(body, dict):
            written = copy.deepcopy(body)
            metadata = written.setdefault("metadata", {})
            if isinstance(metadata, dict):
                metadata["resourceVersion"] = self._fresh_version()
                metadata.setdefault("uid", "u-lie")
                metadata["namespace"] = NAMESPACE
        if not isinstance(written, dict) or not isinstance(written.get("spec"), dict):
            return None
        choice = rng.choice(["old-version", "other-holder", "other-token", "shorter-duration",
                             "empty", "status-failure", "status-success"])
        if choice == "empty":
            return "lie:empty", {}, Expect("identity", "lie:empty")
        if choice == "status-failure":
            value = status_body(409, "Conflict", "the object has been modified")
            return "lie:status-failure", value, Expect("identity", "lie:status-failure")
        if choice == "status-success":
            value = status_body(200, "", "", {"name": name}, success=True)
            return "lie:status-success", value, Expect("identity", "lie:status-success")
        if choice == "old-version":
            if before_obj is None:
                return None
            return "lie:old-version", before_obj, Expect("lie", "lie:old-version")
        echo = copy.deepcopy(written)
        echo["metadata"]["resourceVersion"] = self._fresh_version()
        spec = echo["spec"]
        if choice == "other-holder":
            spec["holderIdentity" if kind is COORDINATION else "owner"] = "thief_0123456789ab"
        elif choice == "other-token":
            if kind is COORDINATION:
                token = int(spec.get("leaseTransitions") or 0)
                spec["leaseTransitions"] = token + 1 if token == 0 or rng.random() < 0.5 else \
                    token - 1
            else:
                annotations = echo["metadata"].setdefault("annotations", {})
                token = int(annotations.get(_TOKEN_KEY) or 0)
                annotations[_TOKEN_KEY] = str(token + 1)
        else:  # shorter-duration
            if kind is COORDINATION:
                duration = int(spec.get("leaseDurationSeconds") or 0)
                if duration <= 1:
                    return None
                spec["leaseDurationSeconds"] = duration - 1
            else:
                annotations = echo["metadata"].setdefault("annotations", {})
                seconds = float(annotations.get(_DURATION_KEY) or 0)
                if seconds <= 0.5:
                    return None
                annotations[_DURATION_KEY] = f"{seconds / 2:g}"
        return f"lie:{choice}", echo, Expect("lie", f"lie:{choice}")

    # -- watch -----------------------------------------------------------------------------

    async def _watch(
        self, request: Request, socket: bool, kind: LeaseKind, name: str, key: tuple[str, str]
    ) -> tuple[Reply, str, Expect]:
        rng = self.rng
        if key in self.watch_storm:
            reply = Reply(200, b"", [("Content-Type", "application/json")], mode="stream",
                          chunks=self._watch_lines(rng, "one-bookmark", kind, name))
            return reply, "storm:one-bookmark", Expect("error", "storm:one-bookmark")
        if not self.hostile_now():
            return await self._emulate(request, key), "truthful", Expect("truthful", "truthful")
        choice = rng.choice(["one-bookmark", "endless-bookmarks", "garbage", "bad-events",
                             "error-event", "immediate-end", "status", "other"]
                            + (["cut"] if socket else []))
        expect = Expect("error", f"watch:{choice}")
        if choice == "other":
            picked = self.not_an_answer(socket, self._status, None)
            if picked is not None:
                return picked[1], f"watch:{picked[0]}", expect
            choice = "immediate-end"
        if choice == "status":
            code = rng.choice([410, 403, 500, 200])
            body = dumps(status_body(code, "Expired", "too old resource version")) \
                if code != 200 else dumps({"kind": "Lease"})
            return self._json_reply(code, body), f"watch:status-{code}", expect
        lines = self._watch_lines(rng, choice, kind, name)
        reply = Reply(200, b"", [("Content-Type", "application/json")], mode="stream",
                      chunks=lines)
        return reply, f"watch:{choice}", expect

    def _bookmark(self, kind: LeaseKind) -> bytes:
        obj: dict[str, Any] = {"kind": "Lease", "apiVersion": kind.api_version,
                               "metadata": {"resourceVersion": self.emulator.resource_version}}
        return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"

    async def _watch_lines(self, rng: random.Random, choice: str, kind: LeaseKind, name: str
                           ) -> AsyncIterator[bytes]:
        if choice == "one-bookmark":
            yield self._bookmark(kind)
            return
        if choice == "endless-bookmarks":
            # No cancel scope around a yield (trio forbids it): a deadline checked instead.
            end = anyio.current_time() + 30
            while anyio.current_time() < end:
                yield self._bookmark(kind)
                await anyio.sleep(0.01)
            return
        if choice == "garbage":
            for _ in range(rng.randint(1, 4)):
                yield rng.choice(_GARBAGE_LINES)
            if rng.random() < 0.5:
                await anyio.sleep(30)
            return
        if choice == "bad-events":
            obj = self._object(kind, name)
            for _ in range(rng.randint(1, 3)):
                if obj is None:
                    yield rng.choice(_GARBAGE_LINES)
                    continue
                self.rng = rng
                mutated = self._mutate(kind, obj, plausible=False)
                if mutated is None:
                    continue
                event = {"type": rng.choice(["ADDED", "MODIFIED"]), "object": mutated[0]}
                yield dumps(event) + b"\n"
            await anyio.sleep(30)
            return
        if choice == "error-event":
            value: Any = rng.choice([5, [], status_body(500, "InternalError", "boom"),
                                status_body(410, "Expired", "too old resource version"), None])
            yield dumps({"type": "ERROR", "object": value}) + b"\n"
            return
        if choice == "cut":
            yield b'{"type":"MODIFIED","object":{"kind":"Le'
            raise StreamCut
        # immediate-end: nothing at all

    # -- bodies ----------------------------------------------------------------------------

    @staticmethod
    def _status(code: int) -> dict[str, Any]:
        return status_body(code, "InternalError" if code >= 500 else "Unknown", "hostile")

    @staticmethod
    def _json_reply(status: int, body: bytes) -> Reply:
        return Reply(status, body, [("Content-Type", "application/json")])
