"""What a failed exchange with an etcd member means: not sent, unknown outcome, or untrusted.

A request whose connection could not be *established* (:data:`CONNECT_FAILURES`) was never
sent, so another endpoint may take it, even a write. Any other failure (:data:`SEND_FAILURES`)
came after sending: for a write the outcome is unknown (:func:`after_sending`). A server
certificate that fails verification (:func:`untrusted_certificate`) is neither: retrying cannot
fix it, so once no endpoint answered it is a :class:`LeaseConfigError` (:func:`untrusted_error`).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import httpx

from ..._connect import reply_problem
from ..._exceptions import BackendProtocolError, BackendUnavailable, LeaseConfigError
from ..._http_errors import HTTPFailure, NotSent, UndecodableBody

__all__ = [
    "CONNECT_FAILURES",
    "SEND_FAILURES",
    "after_sending",
    "untrusted_certificate",
    "untrusted_error",
]

#: The connection could not be made: nothing was sent.
CONNECT_FAILURES = (httpx.ConnectError, httpx.ConnectTimeout, NotSent)
#: After sending: httpx's errors (a DecodingError too: a body that a Content-Encoding garbled),
#: plus what httpcore lets through unmapped (ssl.SSLError when the server rejects our client
#: certificate after a TLS 1.3 handshake, other socket errors, TimeoutError).
SEND_FAILURES = (httpx.HTTPError, HTTPFailure, OSError)


def untrusted_certificate(exc: BaseException) -> str | None:
    """Why the server's certificate failed verification, if that is what ``exc`` comes from.

    The seams wrap the handshake's :class:`ssl.SSLCertVerificationError` (the lean client in
    ``ConnectFailed``, httpx in two layers), so the chain of causes is searched.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            # Set by the ssl module's handshake (OpenSSL's reason), absent on hand-made ones.
            reason = getattr(current, "verify_message", None)
            text = "".join(c for c in str(reason or "")[:100] if c.isprintable())
            return text or "certificate verify failed"
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def untrusted_error(endpoints: Sequence[str], reason: str) -> LeaseConfigError:
    """The error once no endpoint was trusted: a configuration to fix, not a retry."""
    return LeaseConfigError(
        f"etcd at {', '.join(endpoints)}: the server's TLS certificate could not be verified "
        f"({reason}); check `ca-file` (the CA bundle that signed the members' certificates) and "
        f"that each endpoint's host name is in its member's certificate"
    )


def after_sending(exc: Exception, where: str, *, write: bool) -> BackendUnavailable:
    """The error for a request that failed once sent: for a write, an unknown outcome."""
    outcome = "; the outcome is unknown" if write else ""
    if isinstance(exc, httpx.DecodingError | UndecodableBody):
        return BackendProtocolError(
            f"etcd's answer to {where} could not be decoded (its Content-Encoding){outcome}"
        )
    endpoint = where.rpartition(" at ")[2]
    problem = reply_problem(exc, endpoint)
    if problem is not None:
        return BackendUnavailable(
            f"etcd {where} failed after the request was sent ({type(exc).__name__}): "
            f"{problem}{outcome}"
        )
    return BackendUnavailable(
        f"etcd {where} failed after the request was sent ({type(exc).__name__}){outcome}"
    )
