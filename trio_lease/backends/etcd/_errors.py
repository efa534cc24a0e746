"""Translate the etcd gateway's failures into trio_lease's exception tree, in one place.

The gateway maps each gRPC status to an HTTP status and a body
``{"error": msg, "message": msg, "code": <grpc code>}``; streams carry the same inside
``{"error": {...}}`` lines. Every gRPC code has an entry in :data:`GRPC_CODES` (a test fails if
one is missing), so the mapping is total:

- unavailable, deadline exceeded, aborted, internal, unknown (``etcdserver: request timed out``,
  ``leader changed``, ``no leader``) → :class:`BackendUnavailable`: for a write the outcome is
  unknown, and the core re-reads the record to learn it;
- unauthenticated, permission denied, and the "invalid user ID or password" invalid-argument
  → :class:`BackendAuthError`, with the fix in the message;
- anything else → :class:`BackendError` (a bug or an unusual server; not retried).

Messages carry the operation, endpoint and etcd's own message, never request bodies (a
request to ``/v3/auth/authenticate`` carries the password).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._exceptions import BackendAuthError, BackendError, BackendUnavailable

__all__ = ["GRPC_CODES", "error_from_status", "is_invalid_token"]

#: gRPC status code → (name, exception class). Complete: codes 0-16.
GRPC_CODES: dict[int, tuple[str, type[BackendError]]] = {
    0: ("OK", BackendError),  # an error body with code 0 is itself a malfunction
    1: ("CANCELLED", BackendUnavailable),
    2: ("UNKNOWN", BackendUnavailable),
    3: ("INVALID_ARGUMENT", BackendError),
    4: ("DEADLINE_EXCEEDED", BackendUnavailable),
    5: ("NOT_FOUND", BackendError),
    6: ("ALREADY_EXISTS", BackendError),
    7: ("PERMISSION_DENIED", BackendAuthError),
    8: ("RESOURCE_EXHAUSTED", BackendUnavailable),
    9: ("FAILED_PRECONDITION", BackendError),
    10: ("ABORTED", BackendUnavailable),
    11: ("OUT_OF_RANGE", BackendError),
    12: ("UNIMPLEMENTED", BackendError),
    13: ("INTERNAL", BackendUnavailable),
    14: ("UNAVAILABLE", BackendUnavailable),
    15: ("DATA_LOSS", BackendError),
    16: ("UNAUTHENTICATED", BackendAuthError),
}

# gRPC code from the HTTP status, for bodies that are not the gateway's JSON (a proxy's page).
_HTTP_TO_GRPC = {
    400: 3,
    401: 16,
    403: 7,
    404: 5,
    409: 10,
    412: 9,
    429: 8,
    500: 2,
    501: 12,
    502: 14,
    503: 14,
    504: 4,
}

_BAD_PASSWORD = "authentication failed, invalid user id or password"
_INVALID_TOKEN = ("invalid auth token", "auth: revision in header is old")
_NEEDS_AUTH = ("user name is empty", "user name not found")
_AUTH_DISABLED = "authentication is not enabled"


def _code_and_message(status: int, body: object) -> tuple[int, str]:
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):  # stream lines: {"error": {"grpc_code":..,"message":..}}
            body = error
        code = body.get("code", body.get("grpc_code"))
        message = body.get("message", body.get("error"))
        if isinstance(code, int) and isinstance(message, str):
            return code, message
    return _HTTP_TO_GRPC.get(status, 2 if status >= 500 else 3), f"HTTP {status}"


def is_invalid_token(status: int, body: object) -> bool:
    """True if etcd rejected our auth token as expired or stale (re-authenticate and retry).

    etcd checks the token before proposing the request to raft, so a write rejected this way
    was never applied, and sending it again with a fresh token is not a retried write.
    """
    code, message = _code_and_message(status, body)
    return code in (3, 16) and any(m in message.lower() for m in _INVALID_TOKEN)


def error_from_status(
    status: int, body: object, *, operation: str, endpoint: str, prefix: str
) -> BackendError:
    """The exception for an error answer ``body`` (parsed JSON, or None) with HTTP ``status``."""
    code, message = _code_and_message(status, body)
    name, kind = GRPC_CODES.get(code, ("UNKNOWN", BackendUnavailable))
    lowered = message.lower()
    where = f"etcd {operation} at {endpoint}"
    if _BAD_PASSWORD in lowered:
        return BackendAuthError(
            f"{where}: etcd rejected the username or password; check `username` and `password` "
            f"(or `password-file`) in the lease configuration"
        )
    if any(m in lowered for m in _NEEDS_AUTH):
        return BackendAuthError(
            f"{where}: etcd has authentication enabled and needs a user; set `username` and "
            f"`password` in the lease configuration ({message})"
        )
    if _AUTH_DISABLED in lowered:
        return BackendAuthError(
            f"{where}: a username is configured but etcd has authentication disabled; remove "
            f"`username`/`password` or run `etcdctl auth enable`"
        )
    if kind is BackendAuthError:
        return BackendAuthError(
            f"{where} was refused ({name}: {message}); grant the user a role with "
            f"readwrite permission on the key prefix {prefix!r}: `etcdctl role grant-permission "
            f"ROLE --prefix=true readwrite {prefix}`"
        )
    return kind(f"{where} failed ({name}: {message})")


def describe_body(body: object) -> str:
    """A short description of an unexpected successful answer, for error messages."""
    if isinstance(body, Mapping):
        keys: Any = sorted(str(k) for k in body)
        return f"a JSON object with keys {keys}"
    return f"a {type(body).__name__}"
