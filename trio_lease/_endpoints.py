"""Endpoint URLs from configuration, checked where they enter: scheme, host, port.

One function for every URL a person gives (an etcd endpoint, a Kubernetes ``server`` or
``proxy-url``, in a constructor, a TOML key, a kubeconfig or a command-line option):
:func:`url_problem` says what is wrong (a scheme other than the ones allowed, no host, a port
that is not a number from 1 to 65535), :func:`checked_url` raises it as a
:class:`~trio_lease.LeaseConfigError` naming where the URL came from. Without the check a typo
failed only at the first connection (``port must be 0-65535``, "no valid host"), or retried
forever. Messages never show a URL's user info (:func:`redact_url`).
"""

from __future__ import annotations

import urllib.parse

import httpx

from ._exceptions import LeaseConfigError

__all__ = ["SERVER_SCHEMES", "checked_url", "redact_url", "url_problem"]

#: The schemes of a server an HTTP client talks to (the first is the one suggested).
SERVER_SCHEMES = ("https", "http")


def redact_url(url: str) -> str:
    """``url`` for messages and reprs: any user info (``user:password@``) becomes ``***@``.

    Conservative on purpose: everything between the scheme and the *last* ``@`` goes, so a
    malformed URL (no ``//``, a ``/`` inside the password) shows no secret either.
    """
    if "@" not in url:
        return url
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    return f"{scheme}{separator}***@{rest.rpartition('@')[2]}"


def url_problem(url: str, schemes: tuple[str, ...] = SERVER_SCHEMES) -> str | None:
    """What is wrong with ``url`` as a server or proxy URL (None: nothing), never quoting it.

    It must be ``scheme://host[:port][/path]`` with a scheme of ``schemes``, a host without
    spaces or control characters, and, if given, a port from 1 to 65535.
    """
    wanted = " or ".join(f"{scheme}://" for scheme in schemes)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket
        return f"is not a URL; write it as {schemes[0]}://HOST:PORT"
    if not url.startswith(tuple(f"{scheme}://" for scheme in schemes)) or not parts.netloc:
        return f"must be an {wanted} URL (with a host)"
    problem = _host_problem(parts.hostname or "") or _port_problem(parts.netloc)
    if problem is not None:
        return problem
    try:
        httpx.URL(url)
    except httpx.InvalidURL:
        return "is not a URL the HTTP client can use"
    return None


def _host_problem(host: str) -> str | None:
    """A URL's host is there, without spaces or control characters."""
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        return "names no usable host"
    return None


def _port_problem(netloc: str) -> str | None:
    """A URL's port, if given, is a number from 1 to 65535."""
    port = netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"has port {port!r}, which is not a number from 1 to 65535"
    return None


def checked_url(url: str, key: str, where: str, schemes: tuple[str, ...] = SERVER_SCHEMES) -> str:
    """``url`` if :func:`url_problem` finds nothing, else a :class:`LeaseConfigError` naming the
    ``key`` and ``where`` it was configured, showing the URL without its user info."""
    problem = url_problem(url, schemes)
    if problem is not None:
        raise LeaseConfigError(f"the {key} URL {redact_url(url)!r} {problem} ({where}); fix {key}")
    return url
