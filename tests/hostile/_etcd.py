"""The hostile etcd v3 JSON gateway: a true key-value store with real revisions, and lies.

Truth: one key per lease with etcd's bookkeeping (``create_revision``, ``mod_revision``,
``version``, one global ``revision``), transactions evaluated as etcd does (compares on
CREATE/MOD/VERSION, then the success or failure ops), watches fed from the store's own event
log, and ``/v3/auth/authenticate`` issuing tokens. The answers follow protobuf's JSON mapping:
64-bit integers as strings, bytes as base64, default values omitted.

Hostile replies, by class: ``json``, ``deep``, ``huge`` (as for Kubernetes); ``shape`` (``[]``,
``null``, ``{"kvs": {}}``, ``{"kvs": [5]}``, another key's kv, an ``error`` in a 200, ...);
``field`` (a field of the answer or of the kv replaced by a value of the wrong type or range);
``record`` (a field of the stored record inside the base64 value); ``lie`` (a txn answered
``succeeded`` with the old revision, a lower one, none, or ``succeeded`` of the wrong type);
``watch`` (a stream ending after one progress notification, endless progress notifications,
garbage lines, broken events, cancellations); ``auth`` (tokens of the wrong type); and the
classes of :meth:`FakeBase.not_an_answer`.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectSendStream

from trio_lease import BackendUnavailable, ConflictError, LeaseRecord
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._codec import encode_record

from ._checks import Expect, ExpectKind, Tally, Truth
from ._fake import Exchange, FakeBase
from ._json import DELETE, Bare, deep_text, dumps, huge_string
from ._server import Reply, Request, StreamCut

__all__ = ["LABEL", "EtcdFake"]

LABEL = "etcd"
PREFIX = "hostile/"
USER_PASSWORD = "pw-not-a-secret"

_ANSWER_BAD: dict[str, Any] = {
    "list": [1], "dict": {"a": 1}, "true": True, "float": 1.5, "NaN": Bare("NaN"),
    "1e999": Bare("1e999"), "digits400": Bare("9" * 400), "int64+1": str(2**63), "neg": "-3",
    "word": "abc", "empty": "", "int": 7,
}
_RECORD_BAD: dict[str, dict[str, Any]] = {
    "holder": {"list": ["x"], "dict": {}, "true": True, "int": 5, "float": 1.5, "null": None,
               "missing": DELETE},
    "fencing_token": {"list": [1], "string": "5", "float": 1.5, "true": True, "neg": -1,
                      "int64+1": 2**63, "digits400": Bare("9" * 400), "NaN": Bare("NaN"),
                      "null": None, "missing": DELETE},
    "lease_duration": {"list": [1], "string": "2", "true": True, "neg": -1.0,
                       "NaN": Bare("NaN"), "Infinity": Bare("Infinity"), "1e999": Bare("1e999"),
                       "huge": 1e300, "null": None, "missing": DELETE},
    "format": {"two": 2, "string": "1", "float": 1.0, "true": True, "null": None,
               "missing": DELETE},
    "name": {"other": "some-other-lease", "list": ["x"], "null": None, "missing": DELETE},
    "acquired_at": {"list": [1], "word": "yesterday", "int": 5, "year0": "0000-01-01T00:00:00"},
    "renewed_at": {"dict": {}, "word": "now", "huge": "9" * 100},
}
_RECORD_INFO = frozenset({"acquired_at", "renewed_at"})
_INVALID_JSON = (
    b'{"header":{"revision":"5"},"kvs":[',
    b"not json",
    b"\xff\xfe\x00garbage",
    b'{"a":1}{"b":2}',
    b"{'header': {}}",
    b'{"header":{},}',
)
_GARBAGE_LINES = (
    b"not json\n",
    b"[1, 2]\n",
    b'{"result": 5}\n',
    b'{"result": {"events": 5}}\n',
    b'{"result": {"events": [5]}}\n',
    b'{"result": {"events": [{"kv": 5}]}}\n',
    b'{"result": {"events": [{"type": 7, "kv": {}}]}}\n',
    b'{"error": "x"}\n',
    b'{"error": {"grpc_code": "x", "message": 5}}\n',
    b'{"result": {"header": {"revision": NaN}}}\n',
    b"null\n",
)


@dataclasses.dataclass
class _KV:
    value: bytes
    create_revision: int
    mod_revision: int
    version: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        return b""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return b""


def read_truth(kv: _KV | None) -> Truth | None:
    """The record a stored value means (the store holds only values clients or tests wrote)."""
    if kv is None:
        return None
    try:
        data = json.loads(kv.value)
        return Truth(
            holder=str(data["holder"]),
            token=int(data["fencing_token"]),
            duration=float(data["lease_duration"]),
            version=str(kv.mod_revision),
        )
    except (ValueError, KeyError, TypeError):
        return Truth("(not a record)", -1, 0.0, str(kv.mod_revision))


class EtcdFake(FakeBase):
    """A hostile etcd gateway over a true store (see the module docstring)."""

    def __init__(self, rng: random.Random, tally: Tally, *, hostility: float, bound: float) -> None:
        super().__init__(rng, tally, hostility=hostility, bound=bound)
        self.kv: dict[bytes, _KV] = {}
        self.revision = 1000
        self.events: dict[bytes, list[tuple[int, dict[str, Any]]]] = {}
        self.history: dict[tuple[str, str], list[Truth]] = {}
        self._watchers: list[tuple[bytes, MemoryObjectSendStream[tuple[int, dict[str, Any]]]]] = []
        self._tokens: set[str] = set()
        self._issued = 0
        #: Which lease a user's authentication belongs to (set by the driver per call).
        self.auth_names: dict[str, str] = {}

    # -- the truth -------------------------------------------------------------------------

    @staticmethod
    def key(name: str) -> bytes:
        return (PREFIX + name).encode()

    def truth(self, name: str) -> Truth | None:
        return read_truth(self.kv.get(self.key(name)))

    def _header(self) -> dict[str, str]:
        return {"cluster_id": "14841639068965178418", "member_id": "10276657743932975437",
                "revision": str(self.revision), "raft_term": "2"}

    def _kv_json(self, key: bytes, kv: _KV) -> dict[str, Any]:
        return {"key": _b64(key), "create_revision": str(kv.create_revision),
                "mod_revision": str(kv.mod_revision), "version": str(kv.version),
                "value": _b64(kv.value)}

    def _put(self, key: bytes, value: bytes) -> None:
        name = key.decode(errors="replace").removeprefix(PREFIX)
        before = read_truth(self.kv.get(key))
        self.revision += 1
        old = self.kv.get(key)
        kv = _KV(value, old.create_revision if old else self.revision, self.revision,
                 (old.version if old else 0) + 1)
        self.kv[key] = kv
        after = read_truth(kv)
        self.note_change((LABEL, name), before, after)
        assert after is not None
        self.history.setdefault((LABEL, name), []).append(after)
        event = (self.revision, {"kv": self._kv_json(key, kv)})
        self.events.setdefault(key, []).append(event)
        for watched, send in list(self._watchers):
            if watched == key:
                try:
                    send.send_nowait(event)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    self._watchers.remove((watched, send))

    def seed(self, name: str, holder: str, token: int, duration: float) -> Truth:
        """Write the true record directly (the test's own hand, no reply involved)."""
        record = LeaseRecord(name, holder, duration, token)
        self._put(self.key(name), encode_record(record))
        truth = self.truth(name)
        assert truth is not None
        return truth

    def protect_lease(self, name: str, hold: float) -> Truth:
        truth = self.truth(name)
        assert truth is not None
        markers = (f'"mod_revision":"{truth.version}"'.encode(),
                   f'"mod_revision":{truth.version}'.encode())
        self.protect((LABEL, name), truth, hold, markers)
        return truth

    def backend(
        self,
        *,
        url: str | None,
        transport: httpx.AsyncBaseTransport | None,
        username: str | None = None,
        request_timeout: float = 10.0,
        connect_timeout: float = 2.0,
    ) -> EtcdBackend:
        return EtcdBackend(
            [url or "http://etcd.test:2379"],
            prefix=PREFIX,
            username=username,
            password=USER_PASSWORD if username is not None else None,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            transport=transport,
        )

    # -- answering -------------------------------------------------------------------------

    def _name_of(self, key: object) -> str:
        raw = _unb64(key)
        return raw.decode(errors="replace").removeprefix(PREFIX)

    async def __call__(self, request: Request, *, socket: bool) -> Reply:
        path = request.path.removeprefix("/v3/")
        body = request.json()
        body = body if isinstance(body, dict) else {}
        if path == "auth/authenticate":
            user = str(body.get("name", ""))
            name = self.auth_names.get(user, "")
            self.begin((LABEL, f"{name}/auth:{user}"))
            reply, label, expect = self._authenticate(socket, body)
            exchange = Exchange(LABEL, name, "authenticate", request.arrived, label, expect)
            return self.log(exchange, reply, None)
        token = request.headers.get("authorization")
        if token is not None and token not in self._tokens:
            error = {"error": "etcdserver: invalid auth token", "code": 16,
                     "message": "etcdserver: invalid auth token"}
            return Reply(401, dumps(error), [("Content-Type", "application/json")])
        if path == "kv/range":
            name = self._name_of(body.get("key"))
            self.begin((LABEL, name))
            reply, label, expect = self._range(socket, body)
            verb = "get"
            applied = False
        elif path == "kv/txn":
            compare = body.get("compare") or [{}]
            first = compare[0] if isinstance(compare, list) and compare else {}
            name = self._name_of(first.get("key") if isinstance(first, dict) else None)
            self.begin((LABEL, name))
            reply, label, expect, applied = self._txn(request, socket, body, name)
            verb = "txn"
        elif path == "watch":
            create = body.get("create_request") or {}
            name = self._name_of(create.get("key") if isinstance(create, dict) else None)
            self.begin((LABEL, name))
            reply, label, expect = self._watch(socket, create if isinstance(create, dict) else {})
            verb = "watch"
            applied = False
        else:
            return Reply(404, b"Not Found", [("Content-Type", "text/plain")])
        exchange = Exchange(LABEL, name, verb, request.arrived, label, expect, applied)
        return self.log(exchange, reply, (LABEL, name))

    def _authenticate(self, socket: bool, body: dict[str, Any]) -> tuple[Reply, str, Expect]:
        if body.get("password") != USER_PASSWORD:
            error = {"error": "etcdserver: authentication failed, invalid user ID or password",
                     "code": 3, "message": "etcdserver: authentication failed, invalid user ID "
                     "or password"}
            return self._json(400, error), "truthful", Expect("truthful", "truthful")
        if self.hostile_now():
            rng = self.rng
            if rng.random() < 0.5:
                picked = self.not_an_answer(socket, self._error_body, None)
                if picked is not None:
                    return picked[1], f"auth:{picked[0]}", dataclasses.replace(
                        picked[2], label=f"auth:{picked[0]}")
            label, value = rng.choice([
                ("missing", DELETE), ("list", ["t"]), ("int", 5), ("null", None),
                ("empty", ""), ("dict", {}), ("NaN", Bare("NaN")),
            ])
            answer: dict[str, Any] = {"header": self._header()}
            if value is not DELETE:
                answer["token"] = value
            kind: ExpectKind = "identity"
            return self._json(200, answer), f"auth:token={label}", Expect(
                kind, f"auth:token={label}")
        self._issued += 1
        token = f"tok.{self._issued}"
        self._tokens.add(token)
        return self._json(200, {"header": self._header(), "token": token}), "truthful", Expect(
            "truthful", "truthful")

    # -- range -----------------------------------------------------------------------------

    def _range_answer(self, key: bytes) -> dict[str, Any]:
        answer: dict[str, Any] = {"header": self._header()}
        kv = self.kv.get(key)
        if kv is not None:
            answer["kvs"] = [self._kv_json(key, kv)]
            answer["count"] = "1"
        return answer

    def _range(self, socket: bool, body: dict[str, Any]) -> tuple[Reply, str, Expect]:
        key = _unb64(body.get("key"))
        answer = self._range_answer(key)
        base = read_truth(self.kv.get(key))
        truthful = self._json(200, answer)
        if not self.hostile_now():
            return truthful, "truthful", Expect("truthful", "truthful", base)
        rng = self.rng
        for _ in range(20):
            choice = rng.choices(["json", "shape", "field", "record", "huge", "deep", "other"],
                                 [1, 2, 3, 4, 0.15, 0.5, 4])[0]
            if choice in self.excluded:
                continue
            if choice == "other":
                other = self.not_a_record(socket, self._error_body, truthful, base)
                if other is None:
                    continue
                return other
            if choice == "json":
                return self._raw(200, rng.choice(_INVALID_JSON)), "json", Expect(
                    "error", "json", errors=(BackendUnavailable,))
            if choice == "deep":
                text = rng.choice([deep_text(5000), deep_text(5000, opener="[", closer="]"),
                                   deep_text(70)])
                return self._raw(200, text.encode()), "deep", Expect(
                    "error", "deep", errors=(BackendUnavailable,))
            if choice == "shape":
                label, value, expect = self._shape(answer, key)
                return self._json(200, value), label, expect
            kvs = answer.get("kvs")
            if choice == "huge":
                big = copy.deepcopy(answer)
                big["padding"] = huge_string(4 * 1024 * 1024 + 4096)
                return self._json(200, big), "huge", Expect(
                    "error", "huge", errors=(BackendUnavailable,))
            if choice == "field":
                return self._field(answer, base)
            if choice == "record" and kvs:
                return self._record(answer, base)
        return truthful, "truthful", Expect("truthful", "truthful", base)

    def _shape(self, answer: dict[str, Any], key: bytes) -> tuple[str, Any, Expect]:
        rng = self.rng
        kvs = answer.get("kvs") or []
        kv = copy.deepcopy(kvs[0]) if kvs else {
            "key": _b64(key), "create_revision": "5", "mod_revision": "5", "version": "1",
            "value": _b64(encode_record(LeaseRecord(key.decode().removeprefix(PREFIX))))}
        other = copy.deepcopy(kv)
        other["key"] = _b64(self.key("some-other-lease"))
        shapes: dict[str, tuple[Any, ExpectKind]] = {
            "list": ([], "identity"),
            "null": (None, "identity"),
            "number": (5, "identity"),
            "string": ("x", "identity"),
            "kvs=object": ({**answer, "kvs": {}}, "identity"),
            "kvs=string": ({**answer, "kvs": "x"}, "identity"),
            "kvs=[5]": ({**answer, "kvs": [5]}, "identity"),
            "kvs=[{}]": ({**answer, "kvs": [{}]}, "identity"),
            "kvs=other-key": ({**answer, "kvs": [other]}, "identity"),
            "kvs=two": ({**answer, "kvs": [kv, other]}, "identity"),
            "error-in-200": ({"error": "etcdserver: request timed out", "code": 14,
                              "message": "etcdserver: request timed out"}, "identity"),
            "kvs=missing": ({"header": answer["header"]}, "absent"),
            "empty-object": ({}, "absent"),
        }
        label = rng.choice(sorted(shapes))
        value, kind = shapes[label]
        return f"shape:{label}", value, Expect(kind, f"shape:{label}")

    def _field(self, answer: dict[str, Any], base: Truth | None) -> tuple[Reply, str, Expect]:
        """A field of the range answer or of its kv replaced by a bad value."""
        rng = self.rng
        mutated = copy.deepcopy(answer)
        paths: list[tuple[tuple[str, ...], ExpectKind]] = [
            (("header",), "info"), (("header", "revision"), "info"), (("count",), "info"),
            (("more",), "info"),
        ]
        if mutated.get("kvs"):
            paths += [(("kvs", "key"), "identity"), (("kvs", "mod_revision"), "identity"),
                      (("kvs", "create_revision"), "info"), (("kvs", "version"), "info"),
                      (("kvs", "lease"), "info"), (("kvs", "value"), "content")]
        path, kind = rng.choice(paths)
        values = dict(_ANSWER_BAD)
        if path[-1] == "value":
            values |= {"not-base64": "%%%not base64%%%", "garbage": _b64(b"\x00\xffgarbage"),
                       "json-list": _b64(b"[1,2]"), "deep": _b64(deep_text(5000).encode()),
                       "nan": _b64(b'{"format":1,"holder":NaN}')}
        if path[-1] in ("mod_revision", "key"):
            values |= {"missing": DELETE, "null": None}
            if path[-1] == "mod_revision":
                del values["int"]  # protobuf JSON may send int64 as a number: plausible
        value_label = rng.choice(sorted(values))
        value = values[value_label]
        target: Any = mutated["kvs"][0] if path[0] == "kvs" else mutated
        if path[0] == "header" and len(path) == 2:
            target = mutated["header"]
        field = path[-1]
        if value is DELETE:
            target.pop(field, None)
        else:
            target[field] = value
        label = f"field:{'.'.join(path)}={value_label}"
        return self._json(200, mutated), label, Expect(kind, label, base)

    def _record(self, answer: dict[str, Any], base: Truth | None) -> tuple[Reply, str, Expect]:
        """A field of the stored record (inside the base64 value) replaced by a bad value."""
        rng = self.rng
        mutated = copy.deepcopy(answer)
        kv = mutated["kvs"][0]
        data = json.loads(base64.b64decode(kv["value"]))
        field = rng.choice(sorted(_RECORD_BAD))
        value_label = rng.choice(sorted(_RECORD_BAD[field]))
        value = _RECORD_BAD[field][value_label]
        if value is DELETE:
            data.pop(field, None)
        else:
            data[field] = value
        kv["value"] = _b64(dumps(data))
        label = f"record:{field}={value_label}"
        kind: ExpectKind = "info" if field in _RECORD_INFO else "content"
        return self._json(200, mutated), label, Expect(kind, label, base)

    # -- txn -------------------------------------------------------------------------------

    def _compare_holds(self, compare: Any) -> bool:
        if not isinstance(compare, dict):
            return False
        kv = self.kv.get(_unb64(compare.get("key")))
        target = compare.get("target", "VERSION")
        field = {"CREATE": "create_revision", "MOD": "mod_revision",
                 "VERSION": "version"}.get(str(target))
        if field is None:
            return False
        actual = getattr(kv, field) if kv is not None else 0
        try:
            wanted = int(compare.get(field) or 0)
        except (TypeError, ValueError):
            return False
        result = compare.get("result", "EQUAL")
        return {"EQUAL": actual == wanted, "NOT_EQUAL": actual != wanted,
                "GREATER": actual > wanted, "LESS": actual < wanted}.get(str(result), False)

    def _apply_txn(self, body: dict[str, Any]) -> dict[str, Any]:
        compares = body.get("compare") or []
        succeeded = all(self._compare_holds(c) for c in compares)
        ops = body.get("success" if succeeded else "failure") or []
        responses: list[dict[str, Any]] = []
        for op in ops:
            if not isinstance(op, dict):
                continue
            if "request_put" in op:
                put = op["request_put"]
                self._put(_unb64(put.get("key")), _unb64(put.get("value")))
                responses.append({"response_put": {"header": self._header()}})
            elif "request_range" in op:
                ranged = self._range_answer(_unb64(op["request_range"].get("key")))
                responses.append({"response_range": ranged})
        answer: dict[str, Any] = {"header": self._header()}
        if succeeded:
            answer["succeeded"] = True
        if responses:
            answer["responses"] = responses
        return answer

    def _txn(
        self, request: Request, socket: bool, body: dict[str, Any], name: str
    ) -> tuple[Reply, str, Expect, bool]:
        key = self.key(name)
        before = read_truth(self.kv.get(key))
        compares = [c for c in body.get("compare") or [] if isinstance(c, dict)]
        mod = [c for c in compares if c.get("target") == "MOD"]
        against = str(mod[0].get("mod_revision")) if mod else (None if not compares else "create")
        holder = ""
        for op in body.get("success") or []:
            put = op.get("request_put") if isinstance(op, dict) else None
            if isinstance(put, dict):
                try:
                    holder = str(json.loads(_unb64(put.get("value"))).get("holder", ""))
                except (ValueError, AttributeError):
                    holder = ""
        if against != "create" and self.takeover_too_early(
            (LABEL, name), against, holder, request.arrived
        ):
            return (self._json(200, {"header": self._header()}), "refused-takeover",
                    Expect("truthful", "refused-takeover"), False)
        if (LABEL, name) in self.storm:
            return (self._json(200, {"header": self._header()}), "storm:conflict",
                    Expect("error", "storm:conflict", errors=(ConflictError, BackendUnavailable)),
                    False)
        hostile = self.hostile_now()
        answer: dict[str, Any] | None = None
        if not hostile or self.rng.random() < 0.5:
            answer = self._apply_txn(body)
        after = read_truth(self.kv.get(key))
        applied = after != before
        if not hostile:
            assert answer is not None
            return self._json(200, answer), "truthful", Expect("truthful", "truthful", after), \
                applied
        rng = self.rng
        truthful = self._json(200, answer) if answer is not None else None
        expected = int(mod[0].get("mod_revision") or 0) if mod else 0
        for _ in range(20):
            choice = rng.choices(["lie", "json", "deep", "huge", "field", "other"],
                                 [5, 1, 0.5, 0.1, 2, 4])[0]
            if choice in self.excluded:
                continue
            if choice == "other":
                other = self.not_a_record(
                    socket, self._error_body, truthful, after if applied else None
                )
                if other is None:
                    continue
                return (*other, applied)
            if choice == "json":
                return self._raw(200, rng.choice(_INVALID_JSON)), "json", Expect(
                    "error", "json", errors=(BackendUnavailable,)), applied
            if choice == "deep":
                return self._raw(200, deep_text(5000).encode()), "deep", Expect(
                    "error", "deep", errors=(BackendUnavailable,)), applied
            if choice == "huge":
                big = {"header": self._header(), "succeeded": True,
                       "padding": huge_string(4 * 1024 * 1024 + 4096)}
                return self._json(200, big), "huge", Expect(
                    "error", "huge", errors=(BackendUnavailable,)), applied
            if choice == "field":
                # A revision sent as a JSON number is valid protobuf JSON: not a bad value here.
                value_label = rng.choice(sorted(set(_ANSWER_BAD) - {"int"}))
                header = {**self._header(), "revision": _ANSWER_BAD[value_label]}
                label = f"field:header.revision={value_label}"
                return self._json(200, {"header": header, "succeeded": True}), label, Expect(
                    "identity", label), applied
            lies: dict[str, tuple[Any, ExpectKind]] = {
                "zero-revision": ({"header": {**self._header(), "revision": "0"},
                                   "succeeded": True}, "identity"),
                "no-header": ({"succeeded": True}, "identity"),
                "empty": ({}, "absent"),
                "succeeded=null": ({"header": self._header(), "succeeded": None}, "absent"),
            }
            for label, value in (("string", "true"), ("int", 1), ("word", "yes"),
                                 ("list", [True]), ("dict", {})):
                lies[f"succeeded={label}"] = (
                    {"header": self._header(), "succeeded": value}, "identity")
            if expected > 0:
                lies["old-revision"] = ({"header": {**self._header(), "revision": str(expected)},
                                         "succeeded": True}, "lie")
                if expected > 1:
                    lies["lower-revision"] = (
                        {"header": {**self._header(), "revision": str(expected - 1)},
                         "succeeded": True}, "lie")
            label = rng.choice(sorted(lies))
            value, kind = lies[label]
            return self._json(200, value), f"lie:{label}", Expect(kind, f"lie:{label}"), applied
        return self._json(503, {}), "5xx:503", Expect("error", "5xx"), applied

    # -- watch -----------------------------------------------------------------------------

    def _watch(self, socket: bool, create: dict[str, Any]) -> tuple[Reply, str, Expect]:
        key = _unb64(create.get("key"))
        try:
            start = int(create.get("start_revision") or 0)
        except (TypeError, ValueError):
            start = 0
        expect = Expect("error", "watch")
        if self._key in self.watch_storm:
            stream = self._hostile_watch(self.rng, "progress-once", key)
            return self._stream(stream), "storm:progress-once", expect
        if not self.hostile_now():
            return self._stream(self._true_watch(key, start)), "truthful", Expect(
                "truthful", "truthful")
        rng = self.rng
        choice = rng.choice(["progress-once", "endless-progress", "garbage", "bad-events",
                             "canceled", "immediate-end", "other"] + (["cut"] if socket else []))
        if choice == "other":
            picked = self.not_an_answer(socket, self._error_body, None)
            if picked is not None:
                return picked[1], f"watch:{picked[0]}", expect
            choice = "immediate-end"
        return self._stream(self._hostile_watch(rng, choice, key)), f"watch:{choice}", expect

    def _stream(self, chunks: AsyncIterator[bytes]) -> Reply:
        return Reply(200, b"", [("Content-Type", "application/json")], mode="stream",
                     chunks=chunks)

    def _line(self, result: dict[str, Any]) -> bytes:
        return dumps({"result": result}) + b"\n"

    async def _true_watch(self, key: bytes, start: int) -> AsyncIterator[bytes]:
        name = key.decode(errors="replace").removeprefix(PREFIX)
        send, receive = anyio.create_memory_object_stream[tuple[int, dict[str, Any]]](1000)
        self._watchers.append((key, send))
        try:
            with send, receive:
                yield self._line({"header": self._header(), "created": True})
                for revision, event in list(self.events.get(key, [])):
                    if revision >= start:
                        yield self._line({"header": self._header(), "events": [event]})
                        start = revision + 1
                async for revision, event in receive:
                    if revision >= start:
                        line = self._line({"header": self._header(), "events": [event]})
                        self.note_sent((LABEL, name), line, anyio.current_time())
                        yield line
        finally:
            self._watchers = [w for w in self._watchers if w[1] is not send]

    async def _hostile_watch(self, rng: random.Random, choice: str, key: bytes
                             ) -> AsyncIterator[bytes]:
        if choice == "progress-once":
            yield self._line({"header": self._header()})
            return
        if choice == "endless-progress":
            # No cancel scope around a yield (trio forbids it): a deadline checked instead.
            end = anyio.current_time() + 30
            while anyio.current_time() < end:
                yield self._line({"header": self._header()})
                await anyio.sleep(0.01)
            return
        if choice == "garbage":
            yield self._line({"header": self._header(), "created": True})
            for _ in range(rng.randint(1, 4)):
                yield rng.choice(_GARBAGE_LINES)
            if rng.random() < 0.5:
                await anyio.sleep(30)
            return
        if choice == "bad-events":
            yield self._line({"header": self._header(), "created": True})
            answer = self._range_answer(key)
            if answer.get("kvs"):
                for _ in range(rng.randint(1, 3)):
                    self.rng = rng
                    reply, _, _ = self._record(answer, None)
                    kv = json.loads(reply.body)["kvs"][0] if reply.body.startswith(b"{") else {}
                    yield self._line({"header": self._header(), "events": [{"kv": kv}]})
            await anyio.sleep(30)
            return
        if choice == "canceled":
            yield self._line({"header": self._header(), "created": True})
            yield self._line(rng.choice([{"header": self._header(), "canceled": True},
                                         {"header": self._header(), "compact_revision": "x"},
                                         {"header": self._header(), "canceled": "yes"}]))
            return
        if choice == "cut":
            yield b'{"result":{"header":{"rev'
            raise StreamCut
        # immediate-end: nothing

    # -- bodies ----------------------------------------------------------------------------

    @staticmethod
    def _error_body(status: int) -> dict[str, Any]:
        """The gateway's error body for HTTP ``status``, with the gRPC code it maps from."""
        code = {401: 16, 403: 7, 429: 8}.get(status, 14 if status >= 500 else 2)
        return {"error": "etcdserver: hostile", "code": code, "message": "etcdserver: hostile"}

    @staticmethod
    def _json(status: int, value: Any) -> Reply:
        return Reply(status, dumps(value), [("Content-Type", "application/json")])

    @staticmethod
    def _raw(status: int, body: bytes) -> Reply:
        return Reply(status, body, [("Content-Type", "application/json")])
