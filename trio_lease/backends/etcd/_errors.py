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

Error bodies are read as leniently as they are written by proxies: a ``code`` that is not a
gRPC code (a string, a boolean, a float, out of range) is ignored and the HTTP status decides;
a body that is not JSON (a proxy's HTML page) is never quoted. Messages carry the operation,
the endpoint and at most a short excerpt of etcd's own message, stripped of control
characters and with every secret the client sent (the password, the auth token: see
:mod:`trio_lease._secrets`) cut out by value, however it is quoted; never request bodies (a
request to ``/v3/auth/authenticate`` carries the password). The error is classified on etcd's
message as it came; only the excerpt is cut.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..._exceptions import BackendAuthError, BackendError, BackendProtocolError, BackendUnavailable
from ..._secrets import redact_sent
from ..._wire import load_json

__all__ = ["GRPC_CODES", "error_body", "error_from_status", "is_invalid_token"]

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


#: Longest excerpt of etcd's own message quoted in an error (etcd's are under 80 characters).
MAX_EXCERPT = 120
#: Largest error body read (etcd's are a few hundred bytes).
MAX_ERROR_BODY = 64 * 1024


def error_body(content: bytes) -> object:
    """An error answer's body as JSON, or None when it is not (a proxy's page, garbage)."""
    try:
        return load_json(content, "an error body", max_bytes=MAX_ERROR_BODY)
    except BackendProtocolError:
        return None


def _excerpt(message: str) -> str:
    """At most :data:`MAX_EXCERPT` characters of ``message``: every secret we sent cut out,
    control characters replaced by spaces.

    The secrets go first, on the whole message, so that no cut can leave a piece of one. A
    secret hidden by control or invisible characters inside it (``pass\\u200bword``) would
    read whole once they are gone, so such a message is not quoted at all.
    """
    head = redact_sent(message)[: MAX_EXCERPT * 2]
    joined = "".join(c for c in head if c.isprintable())
    if redact_sent(joined) != joined:
        return "[redacted]"
    text = " ".join("".join(c if c.isprintable() else " " for c in head).split())
    return text if len(text) <= MAX_EXCERPT else text[: MAX_EXCERPT - 1] + "…"


def _code_and_message(status: int, body: object) -> tuple[int, str]:
    """The gRPC code (from the body if it carries a valid one, else from the HTTP status) and
    etcd's message (empty when the body has none that is a string)."""
    code: object = None
    message: object = None
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):  # stream lines: {"error": {"grpc_code":..,"message":..}}
            body = error
        code = body.get("code", body.get("grpc_code"))
        message = body.get("message", body.get("error"))
    if type(code) is not int or code not in GRPC_CODES:
        code = _HTTP_TO_GRPC.get(status, 2 if status >= 500 else 3)
    return code, message if isinstance(message, str) else ""


def is_invalid_token(status: int, body: object) -> bool:
    """True if etcd rejected our auth token as expired or stale (re-authenticate and retry).

    etcd checks the token before proposing the request to raft, so a write rejected this way
    was never applied, and sending it again with a fresh token is not a retried write.
    """
    code, message = _code_and_message(status, body)
    return code in (3, 16) and any(m in message.lower() for m in _INVALID_TOKEN)


def error_from_status(
    status: int,
    body: object,
    *,
    operation: str,
    endpoint: str,
    prefix: str,
    content: bytes | None = None,
) -> BackendError:
    """The exception for an error answer ``body`` (from :func:`error_body`) with ``status``;
    ``content``, the raw answer, says more when ``body`` is None (the answer is not etcd's)."""
    code, message = _code_and_message(status, body)
    name, kind = GRPC_CODES[code]
    lowered = message.lower()
    where = f"etcd {operation} at {endpoint}"
    if body is None and content is not None and status != 200:
        foreign = _not_etcd(status, content)
        if foreign is not None:
            return kind(f"{where} failed ({name}, HTTP {status}): {foreign}")
    excerpt = _excerpt(message)
    said = f"{name}: {excerpt}" if excerpt else f"{name}, HTTP {status}"
    if _BAD_PASSWORD in lowered:
        return BackendAuthError(
            f"{where}: etcd rejected the username or password; check `username` and `password` "
            f"(or `password-file`) in the lease configuration"
        )
    if any(m in lowered for m in _NEEDS_AUTH):
        return BackendAuthError(
            f"{where}: etcd has authentication enabled and needs a user; set `username` and "
            f"`password` in the lease configuration ({excerpt})"
        )
    if _AUTH_DISABLED in lowered:
        return BackendAuthError(
            f"{where}: a username is configured but etcd has authentication disabled; remove "
            f"`username`/`password` or run `etcdctl auth enable`"
        )
    if kind is BackendAuthError:
        return BackendAuthError(
            f"{where} was refused ({said}); grant the user a role with "
            f"readwrite permission on the key prefix {prefix!r}: `etcdctl role grant-permission "
            f"ROLE --prefix=true readwrite {prefix}`"
        )
    return kind(f"{where} failed ({said})")


#: What Go's TLS server answers (in plain HTTP, status 400) to a plain-HTTP request.
_HTTP_TO_HTTPS = b"Client sent an HTTP request to an HTTPS server"


def _not_etcd(status: int, content: bytes) -> str | None:
    """What an answer that is not etcd's JSON says about the server: a TLS server answering an
    http:// request, or another HTTP server at the endpoint. None for a gateway's 502-504 page
    (a proxy in front of etcd: transient, said as before)."""
    if _HTTP_TO_HTTPS in content[:200]:
        return (
            "the server speaks TLS and was sent plain HTTP: use an https:// endpoint (with "
            "`ca-file` for its CA), or check the port"
        )
    if status in (502, 503, 504):
        return None
    return (
        "the answer is not etcd's (no JSON error body), so the server there is not etcd's gRPC "
        "gateway: check the endpoint's host and port (etcd's client URL, port 2379 by default)"
    )
