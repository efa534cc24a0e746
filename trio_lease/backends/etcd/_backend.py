"""EtcdBackend: lease records as keys in etcd v3, compare-and-swap by transaction.

Each lease is one key, ``prefix + name``, holding the record as JSON (see :mod:`._codec`).
The record's version is the key's ``mod_revision``:

- ``create`` is a txn "if create_revision(key) == 0 then put else range";
- ``update`` is a txn "if mod_revision(key) == expected then put else range". A missing key has
  mod_revision 0, so the compare fails for it, and a version that is not a positive integer is
  rejected locally (comparing with 0 would *create* the key);
- the new version is the txn's header revision: etcd's revision of that very write;
- ``get`` is a linearizable range (a quorum read, never served stale by a follower);
- ``watch`` reads the key, then follows the gateway's streaming watch from the next revision,
  reconnecting (to the next endpoint) after any failure.

Writes are sent once: a write whose answer is lost raises :class:`BackendUnavailable` and the
core re-reads to learn whether it landed. Cancelling a call (the core's deadline) abandons the
HTTP request, which is an unknown outcome in exactly the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx

from ..._abc import LeaseBackend, LeaseRecord
from ..._exceptions import BackendAuthError, BackendError, ConflictError, LeaseConfigError
from ._client import EtcdClient, make_ssl_context
from ._codec import b64, decode_record, encode_record, int64

__all__ = ["EtcdBackend"]

#: Keys of the lease configuration section that belong to the core, not to this backend.
_CORE_KEYS = frozenset(
    {
        "lease-class",
        "heartbeat-timeout",
        "heartbeat-interval",
        "lease-operation-timeout",
        "holder-deadline",
        "stop-timeout",
        "clock-rate-tolerance",
        "poll-interval",
    }
)


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

    supports_watch = True

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
            if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
                raise LeaseConfigError(
                    f"etcd `endpoints`: {endpoint!r} is not an http:// or https:// URL"
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
        except (OSError, ValueError) as exc:
            raise LeaseConfigError(
                f"etcd TLS files could not be loaded ({type(exc).__name__}: {exc}); check "
                f"`ca-file`, `cert-file` and `key-file`"
            ) from None
        self.endpoints = tuple(endpoints)
        self.prefix = prefix
        self.username = username
        self._client = EtcdClient(
            endpoints,
            prefix=prefix,
            username=username,
            password=password,
            ssl_context=ssl_context,
            connect_timeout=float(connect_timeout),
            request_timeout=float(request_timeout),
            transport=transport,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EtcdBackend:
        """Build from a configuration section's kebab-case keys.

        Keys: ``endpoints`` (list of URLs, or one comma-separated string), ``prefix``,
        ``username``, ``password`` or ``password-file``, ``ca-file``, ``cert-file``,
        ``key-file``, ``connect-timeout``, ``request-timeout``. The core's own keys
        (``lease-class``, ``heartbeat-timeout``, ...) are ignored; any other key is an error.
        """
        options: dict[str, Any] = {}
        strings = {"prefix", "username", "password", "ca-file", "cert-file", "key-file"}
        for key, value in config.items():
            if key in _CORE_KEYS:
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
                try:
                    value = Path(value).read_text().strip()
                except OSError as exc:
                    raise LeaseConfigError(
                        f"etcd `password-file` could not be read ({exc.strerror})"
                    ) from None
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
        return (self.prefix + name).encode()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def get(self, name: str) -> LeaseRecord | None:
        answer = await self._client.range(self._key(name))
        return self._first(name, answer.get("kvs"))

    def _first(self, name: str, kvs: object) -> LeaseRecord | None:
        if not kvs:  # omitted when empty
            return None
        if not isinstance(kvs, list) or not isinstance(kvs[0], dict):
            raise BackendError(f"etcd returned a malformed range answer for lease {name!r}")
        return decode_record(name, kvs[0])

    async def _swap(self, record: LeaseRecord, compare: dict[str, Any]) -> LeaseRecord | None:
        """Put ``record`` if ``compare`` holds; return it with its new version, else None."""
        key = b64(self._key(record.name))
        answer = await self._client.txn(
            compare=[{**compare, "key": key, "result": "EQUAL"}],
            success=[{"request_put": {"key": key, "value": b64(encode_record(record))}}],
            failure=[],
        )
        if answer.get("succeeded") is not True:  # omitted when false
            return None
        header = answer.get("header")
        revision = int64(header.get("revision") if isinstance(header, dict) else None)
        if revision <= 0:
            raise BackendError(f"etcd txn for lease {record.name!r} returned no revision")
        return dataclasses.replace(record, version=str(revision))

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        stored = await self._swap(record, {"target": "CREATE", "create_revision": "0"})
        if stored is None:
            raise ConflictError(f"lease {record.name!r} already exists in etcd")
        return stored

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        try:
            expected = int(expected_version)
        except ValueError:
            expected = 0
        if expected <= 0:  # comparing mod_revision with 0 would match a missing key
            raise ConflictError(
                f"lease {record.name!r}: {expected_version!r} is not an etcd mod_revision"
            )
        stored = await self._swap(record, {"target": "MOD", "mod_revision": str(expected)})
        if stored is None:
            raise ConflictError(
                f"lease {record.name!r} is missing or no longer at version {expected_version}"
            )
        return stored

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:
        """Yield the current record, then the record after every change.

        After a broken stream (member killed, no leader, compaction) it reads the key again and
        resumes from there, so the latest state is always delivered eventually. Only
        authentication errors end the iteration (retrying cannot fix them).
        """
        key = self._key(name)
        backoff = 0.05
        while True:
            try:
                answer = await self._client.range(key)
                header = answer.get("header")
                revision = int64(header.get("revision") if isinstance(header, dict) else None)
                yield self._first(name, answer.get("kvs"))
                async with contextlib.aclosing(self._client.watch(key, revision + 1)) as events:
                    async for result in events:
                        backoff = 0.05
                        if result.get("canceled") or result.get("compact_revision"):
                            break  # the server dropped the watch: read again and resume
                        for event in result.get("events") or ():
                            kv = event.get("kv") if isinstance(event, dict) else None
                            if not isinstance(kv, dict):
                                continue
                            if event.get("type") == "DELETE":  # PUT, the default, is omitted
                                yield None
                            else:
                                yield decode_record(name, kv)
            except BackendAuthError:
                raise
            except BackendError:
                pass  # a read: retrying it is safe
            # Back off so that a dead cluster or a flapping stream is not hammered.
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
