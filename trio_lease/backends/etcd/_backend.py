"""EtcdBackend: lease records as keys in etcd v3, compare-and-swap by transaction.

Each lease is one key, ``prefix + name``, holding the record as JSON (see :mod:`._codec`).
The record's version is the key's ``mod_revision``:

- ``create`` is a txn "if create_revision(key) == 0 then put else range";
- ``update`` is a txn "if mod_revision(key) == expected then put else range". A missing key has
  mod_revision 0, so the compare fails for it, and a version that is not a positive integer is
  rejected locally (comparing with 0 would *create* the key);
- the new version is the txn's header revision: etcd's revision of that very write;
- ``get`` is a linearizable range (a quorum read, never served stale by a follower);
- the shared watch (:mod:`._feed`) is one watch of the whole prefix for every lease;
- ``watch`` reads the key, then follows the gateway's streaming watch from the next revision,
  reconnecting (to the next endpoint) after any failure, after a jittered pause that grows
  while streams end without delivering anything.

Every answer is checked in :mod:`._replies` before it becomes a record or a version: a txn
answer that cannot be read is an unknown outcome (:class:`BackendProtocolError`), never a
failed compare, and our key holding anything but a trio_lease record reads as an unreadable
record (held by an unknown holder), never as a free lease or an exception.

Writes are sent once: a write whose answer is lost raises :class:`BackendUnavailable` and the
core re-reads to learn whether it landed. Cancelling a call (the core's deadline) abandons the
HTTP request, which is an unknown outcome in exactly the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from ..._abc import LeaseBackend, LeaseRecord
from ..._backoff import Backoff
from ..._endpoints import redact_url, url_problem
from ..._exceptions import (
    BackendAuthError,
    BackendError,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from ..._settings import SECTION_KEYS
from ..._slots import is_urgent
from ..._wire import INT64_MAX, Malformed
from ...abc import Changes, Emit
from ._batch import Batch, Write
from ._client import EtcdClient
from ._codec import b64, encode_record
from ._feed import OWN_WRITES_KEPT, PAGE, EtcdFeed, prefix_end
from ._replies import RangeState, read_prefix_names, read_range, read_watch_result
from ._tls import TLSFileError, make_ssl_context

__all__ = ["EtcdBackend"]

#: First pause before a watch reopens (seconds); it doubles, up to WATCH_BACKOFF_MAX, while
#: streams end without an event of the key, and is jittered (x 0.5 to 1).
WATCH_BACKOFF = 0.05
WATCH_BACKOFF_MAX = 2.0


def _read_password_file(path: str) -> str:
    """The password in the file at ``path`` (UTF-8, surrounding whitespace stripped).

    Raises :class:`LeaseConfigError` when the file cannot be read or is not UTF-8 text. The
    decoding error is neither quoted nor chained: its text names a byte of the password and its
    position, and the error object holds the file's bytes.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise LeaseConfigError(f"etcd `password-file` could not be read ({exc.strerror})") from None
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None  # raised below, outside this handler, so the error has no __context__
    if text is None:
        raise LeaseConfigError(
            "etcd `password-file` is not UTF-8 text; save the password in it as UTF-8"
        )
    return text.strip()


class EtcdBackend(LeaseBackend):
    """Stores lease records in etcd v3 through its JSON gateway (etcd 3.4 or later).

    Args:
        endpoints: client URLs of the cluster's members (``http://`` or ``https://``), tried in
            order; a member that cannot be reached is skipped.
        prefix: prepended to every lease name to form its key.
        username, password: etcd user, when the cluster has authentication enabled. The user
            needs readwrite permission on ``prefix``. The password never appears in messages.
        ca_file: CA bundle to verify the members' TLS certificates (default: system store).
        cert_file, key_file: client certificate and key, for ``--client-cert-auth`` clusters.
        connect_timeout: seconds to wait for a connection before trying the next endpoint.
        request_timeout: upper bound for one request; the core's own (shorter) deadline wins.
        transport: an httpx transport, for tests (e.g. ``httpx.MockTransport``).
    """

    supports_watch: bool = True

    def __init__(
        self,
        endpoints: Sequence[str] = ("http://127.0.0.1:2379",),
        *,
        prefix: str = "trio_lease/",
        username: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        connect_timeout: float = 2.0,
        request_timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",")]
        endpoints = list(endpoints)
        if not endpoints:
            raise LeaseConfigError("etcd `endpoints` is empty: give at least one client URL")
        for endpoint in endpoints:
            if not isinstance(endpoint, str):
                raise LeaseConfigError(
                    f"etcd `endpoints`: each is a URL string such as 'http://127.0.0.1:2379', "
                    f"got {type(endpoint).__name__}"
                )
            problem = url_problem(endpoint, ("http", "https"))
            if problem is not None:
                raise LeaseConfigError(
                    f"etcd `endpoints`: {redact_url(endpoint)!r} {problem}; give each endpoint "
                    "as http://HOST:PORT or https://HOST:PORT (such as http://127.0.0.1:2379)"
                )
        if not isinstance(prefix, str) or not prefix:
            raise LeaseConfigError("etcd `prefix` must be a non-empty string such as 'leases/'")
        if (username is None) != (password is None):
            raise LeaseConfigError("etcd `username` and `password` must be given together")
        if key_file is not None and cert_file is None:
            raise LeaseConfigError("etcd `key-file` needs `cert-file` (the client certificate)")
        timeouts = (("connect-timeout", connect_timeout), ("request-timeout", request_timeout))
        for key, value in timeouts:
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise LeaseConfigError(f"etcd `{key}` must be a positive number of seconds")
        tls = ca_file is not None or cert_file is not None
        try:
            ssl_context = make_ssl_context(ca_file, cert_file, key_file) if tls else None
        except TLSFileError as exc:  # an encrypted key included: the message names the key
            raise LeaseConfigError(f"etcd TLS: {exc}") from None
        #: The members' client URLs, in the order they are tried.
        self.endpoints: tuple[str, ...] = tuple(endpoints)
        #: Prepended to every lease name to form its key.
        self.prefix: str = prefix
        #: The etcd user, if the cluster has authentication enabled.
        self.username: str | None = username
        self._client: EtcdClient = EtcdClient(
            endpoints,
            prefix=prefix,
            username=username,
            password=password,
            ssl_context=ssl_context,
            connect_timeout=float(connect_timeout),
            request_timeout=float(request_timeout),
            transport=transport,
        )
        #: Revisions of held states this object wrote → lease name (see :class:`EtcdFeed`).
        self._own_writes: dict[int, str] = {}
        #: The batch the writes joining now go into, urgent (True) or not (:mod:`._batch`).
        self._pending: dict[bool, Batch] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build from a configuration section's kebab-case keys.

        Keys: ``endpoints`` (list of URLs, or one comma-separated string), ``prefix``,
        ``username``, ``password`` or ``password-file``, ``ca-file``, ``cert-file``,
        ``key-file``, ``connect-timeout``, ``request-timeout``. The core's own keys
        (``lease-class``, ``heartbeat-timeout``, ...) are ignored; any other key is an error.
        """
        options: dict[str, Any] = {}
        strings = {"prefix", "username", "password", "ca-file", "cert-file", "key-file"}
        for key, value in config.items():
            if key in SECTION_KEYS:
                continue
            if key == "endpoints":
                if isinstance(value, str):
                    value = [e.strip() for e in value.split(",") if e.strip()]
                if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
                    raise LeaseConfigError("etcd `endpoints` must be a list of URL strings")
            elif key in strings:
                if not isinstance(value, str):
                    raise LeaseConfigError(f"etcd `{key}` must be a string")
            elif key == "password-file":
                if not isinstance(value, str):
                    raise LeaseConfigError("etcd `password-file` must be a path string")
                if "password" in config:
                    raise LeaseConfigError("etcd: give `password` or `password-file`, not both")
                value = _read_password_file(value)
                key = "password"
            elif key in ("connect-timeout", "request-timeout"):
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise LeaseConfigError(f"etcd `{key}` must be a number of seconds")
            else:
                raise LeaseConfigError(
                    f"unknown etcd backend key `{key}`; known keys: endpoints, prefix, "
                    f"username, password, password-file, ca-file, cert-file, key-file, "
                    f"connect-timeout, request-timeout"
                )
            options[key.replace("-", "_")] = value
        return cls(**options)

    def __repr__(self) -> str:
        user = f", username={self.username!r}" if self.username is not None else ""
        return f"EtcdBackend(endpoints={list(self.endpoints)!r}, prefix={self.prefix!r}{user})"

    @property
    def store_key(self) -> Hashable:
        return ("etcd", frozenset(self.endpoints), self.prefix)

    def _key(self, name: str) -> bytes:
        try:
            return (self.prefix + name).encode()
        except UnicodeEncodeError:  # a lone surrogate: no etcd key can name it
            raise LeaseConfigError(
                f"lease name {name!r} (or the etcd `prefix`) is not valid Unicode text"
            ) from None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def get(self, name: str) -> LeaseRecord | None:
        return (await self._range(name)).record

    async def _range(self, name: str) -> RangeState:
        key = self._key(name)
        return await self._client.call(
            "kv/range",
            {"key": b64(key)},
            write=False,
            read=functools.partial(read_range, key=key, name=name),
            subject=f" for lease {name!r}",
        )

    async def _swap(
        self, record: LeaseRecord, compare: dict[str, Any], *, above: int = 0
    ) -> LeaseRecord | None:
        """Put ``record`` if ``compare`` holds; return it with its new version, else None.

        ``above``: the revision compared against; a success must be newer than it. The write
        joins the batch of the writes waiting with it (:mod:`._batch`): one txn, each write
        compared on its own.
        """
        key = b64(self._key(record.name))
        write = Write(
            record.name,
            {**compare, "key": key, "result": "EQUAL"},
            {"request_put": {"key": key, "value": b64(encode_record(record))}},
            above,
            held=bool(record.holder and not record.handover_to),
        )
        urgent = is_urgent()
        batch = self._pending.get(urgent)
        if batch is None or not batch.takes(record.name):
            batch = self._pending[urgent] = Batch(urgent)
        index = batch.add(write)
        try:
            await batch.wait(self._send_batch, _subject)
        except BaseException:
            batch.withdraw(index)  # only before the send: this write is then not sent
            raise
        outcome = batch.outcome(index)
        if isinstance(outcome, LeaseError):
            raise outcome
        if outcome is None:
            return None
        return dataclasses.replace(record, version=str(outcome))

    async def _send_batch(self, batch: Batch) -> list[int | Malformed | None]:
        """Send ``batch`` as one txn (closed when the request takes its slot); its answers."""

        def body() -> dict[str, Any]:
            if self._pending.get(batch.urgent) is batch:
                del self._pending[batch.urgent]
            return batch.body()

        answers = await self._client.call(
            "kv/txn", body, write=True, read=batch.read, subject=lambda: _subject(batch)
        )
        assert batch.sent is not None
        # Only a held state's event may be skipped undecoded (._feed): a release or a
        # handover request is news to the waiters and holders of this process. A txn has
        # one revision, so it is remembered only when every write it made is a held state.
        written = [
            write
            for write, answer in zip(batch.sent, answers, strict=True)
            if isinstance(answer, int)
        ]
        revisions = {answer for answer in answers if isinstance(answer, int)}
        if written and len(revisions) == 1 and all(w.held for w in written):
            own = self._own_writes
            own[revisions.pop()] = written[0].name
            if len(own) > OWN_WRITES_KEPT:
                del own[next(iter(own))]
        return answers

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        stored = await self._swap(record, {"target": "CREATE", "create_revision": "0"})
        if stored is None:
            raise ConflictError(f"lease {record.name!r} already exists in etcd")
        return stored

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        try:
            expected = int(expected_version)
        except (TypeError, ValueError):
            expected = 0
        if not 0 < expected <= INT64_MAX:  # comparing mod_revision with 0 matches a missing key
            raise ConflictError(
                f"lease {record.name!r}: {expected_version!r} is not an etcd mod_revision"
            )
        stored = await self._swap(
            record, {"target": "MOD", "mod_revision": str(expected)}, above=expected
        )
        if stored is None:
            raise ConflictError(
                f"lease {record.name!r} is missing or no longer at version {expected_version}"
            )
        return stored

    async def names(self) -> list[str]:
        """Every lease under ``prefix`` (keys that are not UTF-8 text are no lease of ours)."""
        key = self.prefix.encode()
        body: dict[str, Any] = {"key": b64(key), "range_end": b64(prefix_end(key))}
        body |= {"limit": str(PAGE), "keys_only": True}
        names: list[str] = []
        start = key
        while True:
            read = functools.partial(read_prefix_names, prefix=key, start=start)
            page = await self._client.call("kv/range", body, write=False, read=read)
            names.extend(page.names)
            if not page.more:
                return names
            start = page.last_key + b"\0"
            body["key"] = b64(start)

    def watch_feed(self) -> EtcdFeed:
        """One prefix watch for every lease this backend object's process follows."""
        return EtcdFeed(self._client, self.prefix, self._own_writes)

    def watch(self, name: str) -> Changes[LeaseRecord | None]:
        """The current record, then the record after every change.

        After a broken stream (member killed, no leader, compaction, an unreadable line) it
        reads the key again and resumes from there, so the latest state is always delivered
        eventually. Each reopening waits a jittered pause that doubles up to
        :data:`WATCH_BACKOFF_MAX` and falls back to :data:`WATCH_BACKOFF` only after an event
        of the key arrived: a server whose streams end without delivering anything is not
        hammered. Only authentication and configuration errors end the iteration (retrying
        cannot fix them).
        """
        follow = functools.partial(self._follow, name)
        return Changes(follow, what=f"EtcdBackend.watch({name!r})")

    async def _follow(self, name: str, emit: Emit[LeaseRecord | None]) -> None:
        key = self._key(name)
        subject = f" for lease {name!r}"
        read = functools.partial(read_watch_result, key=key, name=name)
        backoff = Backoff(WATCH_BACKOFF, WATCH_BACKOFF_MAX, jitter=(0.5, 1.0))
        while True:
            try:
                state = await self._range(name)
                await emit(state.record)
                async with contextlib.aclosing(
                    self._client.watch(key, state.revision + 1, read=read, subject=subject)
                ) as batches:
                    async for batch in batches:
                        for record in batch.states:
                            backoff.reset()  # the stream delivers: it is healthy
                            await emit(record)
                        if batch.ended:
                            break  # the server dropped the watch: read again and resume
            except BackendAuthError:
                raise
            except BackendError:
                pass  # a read: retrying it is safe
            await backoff.sleep()


def _subject(batch: Batch) -> str:
    """What a batch's messages name: its lease, or how many and the first few."""
    names = [write.name for write in (batch.sent or []) if write is not None]
    if not names:
        names = [write.name for write in batch.writes if write is not None]
    if len(names) == 1:
        return f" for lease {names[0]!r}"
    shown = ", ".join(repr(name) for name in names[:3])
    more = ", ..." if len(names) > 3 else ""
    return f" for {len(names)} leases ({shown}{more})"
