"""Where the etcd gateway's answers become records: every successful reply is checked here.

The client (:mod:`._client`) reads a reply's bytes on either HTTP path (the lean client or
httpx) and hands them, with one of the readers below, to :func:`read_answer`; nothing else
looks inside a reply. A reader returns a checked value or raises :class:`Malformed`, which
becomes a :class:`~trio_lease.BackendProtocolError` naming the operation, the endpoint, the
lease and the field (never a value: a reply may carry anything). For a write that is an
unknown outcome, which the core resolves by reading again; a compare that failed is only ever
a txn answer whose ``succeeded`` is absent or ``false``.

The gateway speaks protobuf's JSON mapping: 64-bit integers arrive as strings (``"42"``),
``bytes`` as base64, and fields holding their default value are omitted (a failed txn has no
``succeeded``, an empty range no ``kvs``, a PUT event no ``type``). Every reader accepts
exactly that and nothing looser. A key-value pair of another key than the one asked for is a
lie, not a record: a protocol error. Our key holding something that is not a trio_lease record
is a record all the same (its version, the ``mod_revision``, is readable): it comes back with
:attr:`~trio_lease.LeaseRecord.unreadable` set (see :func:`._codec.decode_record`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ..._abc import LeaseRecord
from ..._exceptions import BackendProtocolError
from ..._wire import JsonObject, Malformed, describe, integer, load_json, obj, optional_obj
from ._codec import decode_record

__all__ = [
    "MAX_TOKEN_CHARS",
    "NamesPage",
    "PrefixBatch",
    "PrefixPage",
    "RangeState",
    "WatchBatch",
    "read_answer",
    "read_prefix_names",
    "read_prefix_range",
    "read_prefix_watch",
    "read_range",
    "read_token",
    "read_txn",
    "read_txns",
    "read_watch_result",
]

T = TypeVar("T")

#: Longest auth token accepted (etcd's simple tokens are 16 characters, JWTs a few hundred).
MAX_TOKEN_CHARS = 4096


def read_answer(content: bytes, where: str, reader: Callable[[JsonObject], T], *, write: bool) -> T:
    """Parse a 200 reply's bytes and read the object with ``reader``.

    ``where`` names the request (``"kv/txn for lease 'job' at http://..."``); ``write`` adds
    that the outcome is unknown. Raises :class:`BackendProtocolError` naming the field.
    """
    suffix = "; the outcome is unknown" if write else ""
    data = load_json(content, f"etcd's answer to {where}")
    try:
        return reader(obj(data, "the answer"))
    except Malformed as exc:
        message = f"etcd's answer to {where} is not valid: {exc}{suffix}"
        raise BackendProtocolError(message) from None


def _boolean(value: object, path: str) -> bool:
    """An optional boolean field: absent is ``False`` (protobuf omits defaults); null is not."""
    if not isinstance(value, bool):
        raise Malformed(path, f"expected a boolean, got {describe(value)}")
    return value


def _optional_list(answer: JsonObject, field: str, path: str = "") -> list[object]:
    """An optional repeated field: absent is empty (protobuf omits it); null is not a list."""
    if field not in answer:
        return []
    value = answer[field]
    if not isinstance(value, list):
        raise Malformed(path or field, f"expected a list, got {describe(value)}")
    return value


def _int64(value: object, path: str, *, low: int = 0, required: bool = False) -> int:
    """A protobuf int64 (a decimal string, or a JSON number); absent is 0 unless required."""
    return integer(value, path, low=low, default=None if required else 0, from_string=True)


def _bytes(value: object, path: str) -> bytes:
    """A required base64 ``bytes`` field."""
    if not isinstance(value, str):
        raise Malformed(path, f"expected a base64 string, got {describe(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed(path, "not valid base64") from None


def _key_value(
    value: object, path: str, *, key: bytes, name: str, deleted: bool = False
) -> LeaseRecord | None:
    """A ``KeyValue`` of ``key`` as a record, or None when it is a deletion's.

    Its identity (the key) and version (``mod_revision``, plus ``create_revision`` and
    ``version`` of a live key) must read; its value need not (an unreadable record).
    """
    kv = obj(value, path)
    if _bytes(kv.get("key"), f"{path}.key") != key:
        raise Malformed(f"{path}.key", "is not the key that was asked for")
    revision = _int64(kv.get("mod_revision"), f"{path}.mod_revision", low=1, required=True)
    for field in ("create_revision", "version"):
        _int64(kv.get(field), f"{path}.{field}", low=0 if deleted else 1, required=not deleted)
    if deleted:
        return None
    version = str(revision)
    stored = kv.get("value", "")  # an empty value is omitted
    if not isinstance(stored, str):
        problem = f"value: expected a base64 string, got {describe(stored)}"
        return LeaseRecord(name=name, fencing_token=-1, version=version, unreadable=problem)
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        problem = "value: not valid base64"
        return LeaseRecord(name=name, fencing_token=-1, version=version, unreadable=problem)
    return decode_record(name, raw, version)


def read_txn(answer: JsonObject, *, above: int = 0) -> int | None:
    """The revision of a txn that succeeded (the new version), or None if its compare failed.

    ``succeeded`` must be absent (false) or a boolean: anything else is not a failed compare
    but an unreadable answer, an unknown outcome. A txn that wrote creates a new revision, so
    a success must carry a revision above ``above`` (the ``mod_revision`` it compared against);
    one that does not was not applied as answered.
    """
    succeeded = _boolean(answer["succeeded"], "succeeded") if "succeeded" in answer else False
    header = obj(answer.get("header"), "header")
    revision = _int64(header.get("revision"), "header.revision")
    _optional_list(answer, "responses")
    if not succeeded:
        return None
    if revision <= 0:
        raise Malformed("header.revision", "missing or not positive in a txn that succeeded")
    if revision <= above:
        raise Malformed(
            "header.revision",
            f"{revision} in a txn that succeeded, not above the compared revision {above}",
        )
    return revision


def read_txns(answer: JsonObject, *, above: list[int]) -> list[int | Malformed | None]:
    """Per write of a batched txn (one nested txn each, in order): the revision it was written
    at, None if its own compare failed, or the :class:`Malformed` that makes its outcome unknown.

    The outer txn has no compare, so it must have succeeded, with one ``response_txn`` per
    write; an outer answer that is not so is unreadable as a whole (raises). Every write that
    succeeded was written at the txn's header revision, which must be above the revision that
    write compared against (``above``, 0 for a create) and, when the nested ``response_put``
    carries one, equal to it.
    """
    if "succeeded" not in answer or not _boolean(answer["succeeded"], "succeeded"):
        raise Malformed("succeeded", "the batch txn has no compare, so it must have succeeded")
    header = obj(answer.get("header"), "header")
    revision = _int64(header.get("revision"), "header.revision", low=1, required=True)
    responses = _optional_list(answer, "responses")
    if len(responses) != len(above):
        raise Malformed("responses", f"{len(responses)} answers to {len(above)} writes")
    results: list[int | Malformed | None] = []
    for index, (response, compared) in enumerate(zip(responses, above, strict=True)):
        path = f"responses[{index}].response_txn"
        try:
            nested = obj(obj(response, f"responses[{index}]").get("response_txn"), path)
            succeeded = nested.get("succeeded", False)
            if not _boolean(succeeded, f"{path}.succeeded"):
                results.append(None)
                continue
            puts = _optional_list(nested, "responses", f"{path}.responses")
            if len(puts) != 1:
                raise Malformed(f"{path}.responses", f"{len(puts)} answers to one put")
            put = obj(obj(puts[0], f"{path}.responses[0]").get("response_put"), f"{path}.put")
            put_header = obj(put.get("header", {}), f"{path}.put.header")
            own = _int64(put_header.get("revision"), f"{path}.put.header.revision")
            if own not in (0, revision):
                raise Malformed(f"{path}.put.header.revision", "is not the txn's revision")
            if revision <= compared:
                raise Malformed(
                    "header.revision",
                    f"{revision} in a write that succeeded, not above the compared revision "
                    f"{compared}",
                )
            results.append(revision)
        except Malformed as exc:
            results.append(exc)
    return results


@dataclass(frozen=True, slots=True)
class RangeState:
    """A checked range answer: the record (None: no such key) and the store's revision."""

    record: LeaseRecord | None
    revision: int


def read_range(answer: JsonObject, *, key: bytes, name: str) -> RangeState:
    """A single-key range: at most one ``kvs`` entry, of that key; ``count`` agreeing.

    The header's revision (the store's, a positive int64) is where a watch resumes.
    """
    header = obj(answer.get("header"), "header")
    revision = _int64(header.get("revision"), "header.revision", low=1, required=True)
    kvs = _optional_list(answer, "kvs")
    if len(kvs) > 1:
        raise Malformed("kvs", f"{len(kvs)} entries for a single key")
    if "count" in answer:
        count = _int64(answer["count"], "count")
        if count != len(kvs):  # a key said to exist but not sent must not read as missing
            raise Malformed("count", "does not match the number of entries in kvs")
    record = _key_value(kvs[0], "kvs[0]", key=key, name=name) if kvs else None
    return RangeState(record, revision)


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """A checked watch ``result``: the states its events carry, and whether the watch ended.

    ``states`` holds a record per PUT event and None per DELETE. ``ended`` is true when the
    server canceled the watch or compacted past it: the stream carries nothing more.
    """

    states: list[LeaseRecord | None]
    ended: bool


def read_watch_result(message: JsonObject, *, key: bytes, name: str) -> WatchBatch:
    """The ``result`` of one watch stream line on ``key`` (every event must be of that key)."""
    result = obj(message.get("result"), "result")
    header = optional_obj(result.get("header"), "result.header")
    _int64(header.get("revision"), "result.header.revision")
    for flag in ("canceled", "created"):
        if flag in result:
            _boolean(result[flag], f"result.{flag}")
    ended = result.get("canceled", False) is True
    if _int64(result.get("compact_revision"), "result.compact_revision") > 0:
        ended = True
    states: list[LeaseRecord | None] = []
    for path, kv, deleted in _events(result):
        states.append(_key_value(kv, f"{path}.kv", key=key, name=name, deleted=deleted))
    return WatchBatch(states, ended)


def _events(result: JsonObject) -> Iterator[tuple[str, object, bool]]:
    """Each event of a watch ``result``: its path in the reply, its ``kv`` (unchecked) and
    whether it is a deletion."""
    for i, item in enumerate(_optional_list(result, "events", "result.events")):
        path = f"result.events[{i}]"
        event = obj(item, path)
        kind = event.get("type", "PUT")  # PUT, the default, is omitted
        if kind not in ("PUT", "DELETE"):
            raise Malformed(f"{path}.type", "expected PUT or DELETE")
        yield path, event.get("kv"), kind == "DELETE"


NamedState = tuple[str, LeaseRecord | None]


def _prefixed(value: object, path: str, *, prefix: bytes, deleted: bool) -> NamedState | None:
    """A ``KeyValue`` under ``prefix`` as (lease name, state); None for a key no name maps to.

    A key outside the prefix is a lie (a protocol error); a key under it that is not UTF-8
    text is no lease this library writes (another program's key): skipped, never a state.
    """
    key = _bytes(obj(value, path).get("key"), f"{path}.key")
    if not key.startswith(prefix):
        raise Malformed(f"{path}.key", "is not under the prefix that was asked for")
    try:
        name = key[len(prefix) :].decode()
    except UnicodeDecodeError:
        return None
    return name, _key_value(value, path, key=key, name=name, deleted=deleted)


@dataclass(frozen=True, slots=True)
class PrefixPage:
    """A checked page of a range over a prefix: states by name, the store's revision, more."""

    states: list[NamedState]
    revision: int
    more: bool
    last_key: bytes


def read_prefix_range(answer: JsonObject, *, prefix: bytes, start: bytes) -> PrefixPage:
    """One page of a range over ``prefix`` asked from the key ``start`` (inclusive).

    Every entry's key must be under ``prefix``, at or after ``start``, and after the previous
    entry's: etcd sorts a range by key, and the next page is asked from ``last_key + b"\\0"``.
    So a page that says ``more`` always ends at or past ``start`` and the next request starts
    strictly later; a page that would send the reader back to a key it already asked from
    (a broken or hostile gateway repeating a page) is malformed, never requested again at once.
    """
    header = obj(answer.get("header"), "header")
    revision = _int64(header.get("revision"), "header.revision", low=1, required=True)
    more = _boolean(answer["more"], "more") if "more" in answer else False
    if "count" in answer:
        _int64(answer["count"], "count")
    states: list[NamedState] = []
    last_key = b""
    for i, item in enumerate(_optional_list(answer, "kvs")):
        path = f"kvs[{i}]"
        named = _prefixed(item, path, prefix=prefix, deleted=False)
        key = _bytes(obj(item, path).get("key"), f"{path}.key")
        if i == 0 and key < start:
            raise Malformed(f"{path}.key", "comes before the key the page was asked from")
        if i > 0 and key <= last_key:
            raise Malformed(f"{path}.key", f"does not come after kvs[{i - 1}].key (keys sort)")
        last_key = key
        if named is not None:
            states.append(named)
    if more and not last_key:
        raise Malformed("more", "is true on a page without entries")
    return PrefixPage(states, revision, more, last_key)


@dataclass(frozen=True, slots=True)
class NamesPage:
    """A checked page of a keys-only range over a prefix: the lease names, and whether more."""

    names: list[str]
    more: bool
    last_key: bytes


def read_prefix_names(answer: JsonObject, *, prefix: bytes, start: bytes) -> NamesPage:
    """One page of a keys-only range over ``prefix`` (``keys_only``: no values), checked as
    :func:`read_prefix_range` checks its pages; keys that are not UTF-8 text are skipped."""
    obj(answer.get("header"), "header")
    more = _boolean(answer["more"], "more") if "more" in answer else False
    names: list[str] = []
    last_key = b""
    for i, item in enumerate(_optional_list(answer, "kvs")):
        path = f"kvs[{i}]"
        key = _bytes(obj(item, path).get("key"), f"{path}.key")
        if not key.startswith(prefix):
            raise Malformed(f"{path}.key", "is not under the prefix that was asked for")
        if (i == 0 and key < start) or (i > 0 and key <= last_key):
            raise Malformed(f"{path}.key", "is out of order (keys sort)")
        last_key = key
        with contextlib.suppress(UnicodeDecodeError):
            names.append(key[len(prefix) :].decode())
    if more and not last_key:
        raise Malformed("more", "is true on a page without entries")
    return NamesPage(names, more, last_key)


@dataclass(frozen=True, slots=True)
class PrefixBatch:
    """A checked line of a prefix watch.

    ``states``: (name, record) per PUT event, (name, None) per DELETE. ``revision``: every
    change up to it has been delivered (the last event's, or a progress notification's
    header revision; 0 when the line tells nothing). ``compacted``: the start revision was
    compacted away; ``ended``: the server canceled the watch (the stream carries nothing more).
    """

    states: list[NamedState]
    revision: int
    compacted: bool
    ended: bool


def read_prefix_watch(message: JsonObject, *, prefix: bytes) -> PrefixBatch:
    """The ``result`` of one line of a watch on every key under ``prefix``."""
    result = obj(message.get("result"), "result")
    header = optional_obj(result.get("header"), "result.header")
    current = _int64(header.get("revision"), "result.header.revision")
    flags = {
        flag: _boolean(result[flag], f"result.{flag}") if flag in result else False
        for flag in ("canceled", "created", "fragment")
    }
    compacted = _int64(result.get("compact_revision"), "result.compact_revision") > 0
    states: list[NamedState] = []
    revision = 0
    for path, kv, deleted in _events(result):
        named = _prefixed(kv, f"{path}.kv", prefix=prefix, deleted=deleted)
        mod = _int64(obj(kv, f"{path}.kv").get("mod_revision"), f"{path}.kv.mod_revision")
        revision = max(revision, mod)
        if named is not None:
            states.append(named)
    if not states and revision == 0 and not any(flags.values()) and not compacted:
        revision = current  # a progress notification: everything up to it was delivered
    return PrefixBatch(states, revision, compacted, compacted or flags["canceled"])


def read_token(answer: JsonObject) -> str:
    """The token of an ``auth/authenticate`` answer: visible ASCII only, fit for a header."""
    token = answer.get("token")
    if not isinstance(token, str) or not token:
        raise Malformed("token", f"expected a non-empty string, got {describe(token)}")
    if len(token) > MAX_TOKEN_CHARS:
        raise Malformed("token", f"longer than {MAX_TOKEN_CHARS} characters")
    if not all("!" <= c <= "~" for c in token):
        raise Malformed("token", "has characters other than visible ASCII (not fit for a header)")
    return token
