"""Lease names: local validation and a mapping from arbitrary keys to valid names.

Kubernetes object names are DNS-1123 subdomains (lowercase alphanumerics, ``-`` and ``.``,
starting and ending alphanumeric, at most 253 characters); namespaces are DNS-1123 labels (at
most 63, no dots). Both are checked here before any request, so a bad name is a
:class:`LeaseConfigError` with the rule, not a 422 from the server.

:func:`lease_name_for` maps any key to a valid name. A key that is already a valid name maps to
itself. Anything else is lowercased, every run of invalid characters becomes ``-``, and a hash of
the *original* key is appended, so two keys that sanitise to the same text (``A.b``, ``a_b``)
still get different names. Long keys are cut and hashed too, never merely truncated (Akka's
truncation made distinct names collide). The backend stores the original key in the
:data:`KEY_ANNOTATION` annotation and refuses to use an object whose annotation names a
different key.

Objects the backend creates carry the label :data:`MANAGED_BY_LABEL` = :data:`MANAGED_BY`, so
one watch by label follows all of them (:mod:`._feed`). Updates never add it to an object
someone else created: its labels are that owner's.
"""

from __future__ import annotations

import base64
import hashlib
import re

from ..._exceptions import LeaseConfigError

__all__ = [
    "KEY_ANNOTATION",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_SELECTOR",
    "MAX_NAME_LENGTH",
    "is_valid_name",
    "lease_name_for",
    "validate_lease_name",
    "validate_namespace",
]

#: The annotation holding the original key of a lease whose name was mapped.
KEY_ANNOTATION = "trio-lease.io/key"
#: The label put on every object the backend creates; the shared watch selects by it.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "trio-lease"
#: The ``labelSelector`` of the shared watch (:mod:`._feed`).
MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
MAX_NAME_LENGTH = 253
_MAX_NAMESPACE_LENGTH = 63
_HASH_LENGTH = 10
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
_INVALID_RUN = re.compile(r"[^a-z0-9.]+")
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', starting and "
    f"ending with a letter or digit, at most {MAX_NAME_LENGTH} characters"
)


def is_valid_name(name: str) -> bool:
    """True when ``name`` is a valid Kubernetes object name (DNS-1123 subdomain)."""
    return len(name) <= MAX_NAME_LENGTH and _SUBDOMAIN.fullmatch(name) is not None


def validate_lease_name(name: str) -> str:
    """Return ``name`` if it is a valid object name, else raise :class:`LeaseConfigError`."""
    if not is_valid_name(name):
        raise LeaseConfigError(
            f"{name!r} is not a valid Kubernetes lease name: it must be {_SUBDOMAIN_RULE}; "
            "use trio_lease.backends.kubernetes.lease_name_for(key) to map any key to one"
        )
    return name


def validate_namespace(namespace: str) -> str:
    """Return ``namespace`` if it is a DNS-1123 label, else raise :class:`LeaseConfigError`."""
    if len(namespace) > _MAX_NAMESPACE_LENGTH or _DNS_LABEL.fullmatch(namespace) is None:
        raise LeaseConfigError(
            f"{namespace!r} is not a valid Kubernetes namespace: it must be a lowercase RFC "
            "1123 label (lowercase letters, digits and '-', starting and ending with a letter "
            f"or digit, at most {_MAX_NAMESPACE_LENGTH} characters)"
        )
    return namespace


def _digest(key: str) -> str:
    raw = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return base64.b32encode(raw).decode("ascii").lower()[:_HASH_LENGTH]


def lease_name_for(key: str) -> str:
    """Map any ``key`` to a valid lease name; a key that is already valid maps to itself.

    Otherwise: lowercase, replace each run of invalid characters with ``-``, trim, cut to leave
    room, and append ``-`` plus a 10-character hash of the original key (50 bits of SHA-256),
    so distinct keys get distinct names.
    """
    if is_valid_name(key):
        return key
    text = _INVALID_RUN.sub("-", key.lower())
    # Each dot-separated part must be a label: drop empty parts, trim '-' at their edges.
    parts = [part.strip("-") for part in text.split(".")]
    text = ".".join(part for part in parts if part)
    suffix = _digest(key)
    text = text[: MAX_NAME_LENGTH - len(suffix) - 1].rstrip("-.")
    return f"{text}-{suffix}" if text else suffix
