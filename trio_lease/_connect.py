"""What stopped a connection, in the user's words, for the backends' messages.

A refused connection or a host name that does not resolve never sent the request: the outcome
of a write is then known (it did not happen), and the message says so and names the host and
port (or the host name) the user configured, so a typo in a port or a name is seen at once.
"""

from __future__ import annotations

import errno
import socket
import ssl
from urllib.parse import urlsplit

__all__ = [
    "NO_REPLY",
    "TLS_REPLY",
    "HandshakeClosed",
    "certificate_problem",
    "connect_problem",
    "reply_problem",
]

_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH}
#: OpenSSL's reasons for a TLS handshake answered by something that is not TLS (a plain HTTP
#: server answers a ClientHello with "HTTP/1.1 400 ..."; OpenSSL reads "HTTP" as a record).
_NOT_TLS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "RECORD_LAYER_FAILURE",
        "PACKET_LENGTH_TOO_LONG",
        "UNKNOWN_PROTOCOL",
        "HTTP_REQUEST",
        "RECORD_TOO_LARGE",
    }
)
#: What the HTTP/1.1 reader says of a reply that is a TLS record (an http:// request to a TLS
#: server, which answers with a TLS alert): found in the error's text by :func:`reply_problem`.
TLS_REPLY = "the reply is a TLS record, not HTTP"
#: What the HTTP/1.1 reader says of a connection closed before any byte of a reply.
NO_REPLY = "the server closed the connection without a reply"


class HandshakeClosed(ConnectionResetError):
    """The server closed the connection during the TLS handshake (an EOF or a reset before the
    handshake finished), as a plain-HTTP server that drops a ClientHello does. The loops raise
    it from their own error (asyncio's bare ConnectionResetError, trio's BrokenResourceError
    from ``ssl.SSLEOFError``), so every loop gives one message."""


def connect_problem(exc: BaseException, url: str) -> str | None:
    """Why ``exc`` (an error connecting to ``url``) could not connect, when nothing was sent:
    "connection refused by 127.0.0.1:6443; nothing was sent", "cannot resolve the host name
    'kube.example'; nothing was sent"; None when the chain of causes says neither."""
    host, port = _host_port(url)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return f"connection refused by {host}:{port}; nothing was sent"
        if isinstance(current, socket.gaierror):
            return f"cannot resolve the host name {host!r}; nothing was sent"
        if isinstance(current, OSError) and current.errno in _UNREACHABLE:
            return f"{host}:{port} is unreachable ({current.strerror}); nothing was sent"
        if isinstance(current, ssl.SSLError) and getattr(current, "reason", None) in _NOT_TLS:
            return (
                f"the server at {host}:{port} answered the TLS handshake with something that "
                "is not TLS (plain HTTP, most likely): use http:// for it, or check the port; "
                "nothing was sent"
            )
        if isinstance(current, (HandshakeClosed, ssl.SSLEOFError)):
            return (
                f"the server at {host}:{port} closed the connection during the TLS handshake; "
                "a plain-HTTP server does this (so can a proxy or a firewall): if it speaks "
                "plain HTTP, use http:// for it, or check the port; nothing was sent"
            )
        current = current.__cause__ or current.__context__
    return None


def reply_problem(exc: BaseException, url: str) -> str | None:
    """What a reply that could not be read says about the server at ``url``, when it says
    something a person can act on: a TLS server answering a plain-HTTP request with a TLS
    alert ("use https://"), or a server that reset or closed an ``http://`` connection without
    a reply, as a TLS server does (OpenSSL's, to a plain-HTTP request). None otherwise."""
    host, port = _host_port(url)
    plain = url.startswith("http://")
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if TLS_REPLY in text:
            return (
                f"the server at {host}:{port} answered in TLS to a plain-HTTP request: it "
                "speaks TLS, so use https:// for it (with its CA), or check the port"
            )
        if plain and (NO_REPLY in text or isinstance(current, ConnectionResetError)):
            return (
                f"the server at {host}:{port} closed the connection without a reply to a "
                "plain-HTTP request, as a TLS server does: if it speaks TLS, use https:// for "
                "it (with its CA); else check the port"
            )
        current = current.__cause__ or current.__context__
    return None


def _host_port(url: str) -> tuple[str, str]:
    """The host and port of ``url`` (the scheme's default port when none is given); never the
    user info, which may hold a password."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "the server", "?"
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    return shown, str(port)


def certificate_problem(exc: BaseException) -> str:
    """What failed to verify in the server's certificate, from OpenSSL's reason ("self-signed
    certificate in certificate chain", "Hostname mismatch, certificate is not valid for
    'kube.example'."), found along the chain of causes; a generic phrase when none is there."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            reason = getattr(current, "verify_message", None)
            text = "".join(c for c in str(reason or "")[:160] if c.isprintable())
            if text:
                return text
        current = current.__cause__ or current.__context__
    return "certificate verify failed"
