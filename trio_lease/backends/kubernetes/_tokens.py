"""Bearer tokens: what can be sent in a header, and the static and token-file sources.

What a token may be: visible ASCII, ``0x21``-``0x7E``, at least one character. That is RFC
6750's ``b64token`` loosened to every visible character (static tokens of kube-apiserver's
``--token-auth-file`` are not restricted to base64), and it is exactly what can follow
``Bearer`` in a header without changing its meaning: no spaces (the server splits on them), no
CR/LF (header injection), NUL, other control characters or DEL, no non-ASCII. Every source is
checked where the token is read, on every read, and a bad token is a
:class:`BackendAuthError` naming its source (the token file's path, the kubeconfig user, the
exec plugin's command, the in-cluster service account) and the kind of character, never the
token: not a transient error, never retried, and never sent (before this check, h11 refused
the header and the backend reported it as a :class:`BackendUnavailable`, retried forever).
Surrounding whitespace is stripped from token *files* only (as client-go's ``TrimSpace``: the
trailing newline of ``echo token > file`` is normal); a static token or a plugin's token with
surrounding whitespace is refused, as kubectl refuses it.

Token sources (client-go semantics): a static token (the section's ``token``, a kubeconfig
user's ``token``); a token file (in-cluster service-account tokens rotate about hourly),
re-read when the cached copy is older than ``token_refresh`` (≤ 60 s) and at once after a 401;
an exec credential plugin (:mod:`._exec`). File reads are tiny and synchronous, which keeps the
in-process path free of threads (virtual time).

Token file re-reads: a read that fails (missing, unreadable) or finds the file empty keeps the
old token (docs/design.md §8.7: that is what a rotation looks like while the kubelet swaps the
file). A read that finds content which is not a valid token drops the old token and raises at
once, on that read and on every call until the file is fixed: the file says the credential
changed and what it holds cannot be sent, so a broken rotation shows within one refresh
interval instead of much later, when the old token expires, as a puzzling 401.

Tokens never appear in a ``repr``, a log line or an exception message. Every token sent is
remembered (:func:`remember_sent`) so that :func:`redact_sent` can cut it, by value, out of any
server text quoted in a message (``clean_text`` in :mod:`._errors`): an API server or a proxy
may echo it in any form. Both live in :mod:`trio_lease._secrets`, shared with the etcd backend
(which sends a password and an auth token), and are re-exported here; that module says what is
kept and how short tokens are treated.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio

from ..._exceptions import BackendAuthError, LeaseConfigError
from ..._secrets import redact_sent as redact_sent
from ..._secrets import remember_sent as remember_sent

__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "FileTokenSource",
    "StaticTokenSource",
    "TokenSource",
    "bad_token",
    "header_problem",
    "redact_sent",
    "remember_sent",
    "token_problem",
]

#: Largest token file read: a service-account JWT is 1-2 KiB; more is not a token file.
MAX_TOKEN_FILE_BYTES = 64 * 1024
_TOKEN = re.compile(r"[\x21-\x7e]+")
_HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
_FILE_WHITESPACE = " \t\r\n\f\v"


def _unsendable(value: str) -> str:
    """The kinds of characters in ``value`` that a header cannot carry, never the characters."""
    kinds: list[str] = []
    for kind, present in (
        ("a line break (CR or LF)", "\r" in value or "\n" in value),
        ("a NUL character", "\0" in value),
        (
            "a control character",
            any((c < " " and c not in "\r\n\0") or c == "\x7f" for c in value),
        ),
        ("a non-ASCII character", not value.isascii()),
    ):
        if present:
            kinds.append(kind)
    return " and ".join(kinds)


def token_problem(token: str) -> str | None:
    """What makes ``token`` unusable as a bearer token (None: it is fine); never quotes it."""
    # Only visible ASCII and spaces are left after the checks before it.
    return _sendable_problem(token, _TOKEN, "contains a space")


def header_problem(value: str) -> str | None:
    """What makes ``value`` unusable as an impersonation header value (None: fine)."""
    return _sendable_problem(value, _HEADER_VALUE, "starts or ends with a space")


def _sendable_problem(value: str, pattern: re.Pattern[str], otherwise: str) -> str | None:
    """What keeps ``value`` from matching ``pattern``: empty, characters no header can carry,
    else ``otherwise`` (the one rule left); None when it matches. Never quotes the value."""
    if pattern.fullmatch(value):
        return None
    if not value:
        return "is empty"
    bad = _unsendable(value)
    if bad:
        return f"contains {bad}"
    return otherwise


def bad_token(what: str, problem: str) -> BackendAuthError:
    """The error for a token that cannot be sent: names ``what`` and the ``problem`` only."""
    return BackendAuthError(
        f"{what} is not a usable bearer token: it {problem}; a token is visible ASCII only "
        "(no spaces, line breaks or control characters): fix the token at its source"
    )


class TokenSource:
    """Produces a bearer token; ``refresh=True`` asks for a fresh one (after a 401)."""

    async def token(self, *, refresh: bool = False) -> str | None:
        raise NotImplementedError

    def token_now(self) -> str | None:
        """The token :meth:`token` would give now if that takes no reading and no waiting;
        None: await :meth:`token` (which also raises what is wrong). A request's hot path asks
        this first, so a cached token costs it no coroutine."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class StaticTokenSource(TokenSource):
    """A token given in the configuration, checked once (``origin`` names it in messages)."""

    def __init__(self, token: str, origin: str = "the configuration") -> None:
        self._token = token
        self.origin = origin
        problem = token_problem(token)
        self._problem = None if problem is None else (f"the token of {origin}", problem)

    async def token(self, *, refresh: bool = False) -> str | None:
        if self._problem is not None:
            raise bad_token(*self._problem)
        return self._token

    def token_now(self) -> str | None:
        return self._token if self._problem is None else None


class FileTokenSource(TokenSource):
    """A token file, re-read every ``refresh_interval`` seconds and on demand.

    ``origin`` says who named the file ("the in-cluster service account", "kubeconfig user
    'dev' (...)") for messages. See the module docstring for what a re-read keeps and drops.
    """

    def __init__(self, path: Path, refresh_interval: float = 60.0, origin: str = "") -> None:
        self.path = path
        self.refresh_interval = refresh_interval
        self.origin = origin
        self._token: str | None = None
        self._read_at: float | None = None
        self._failure = "it is missing or empty"

    def __repr__(self) -> str:
        return f"<FileTokenSource {str(self.path)!r}>"

    @property
    def _what(self) -> str:
        named_by = f" ({self.origin})" if self.origin else ""
        return f"the token file {str(self.path)!r}{named_by}"

    async def token(self, *, refresh: bool = False) -> str | None:
        now = anyio.current_time()
        stale = self._read_at is None or now - self._read_at >= self.refresh_interval
        if refresh or stale or self._token is None:
            self._read_at = now
            text = self._read()
            if text is not None:  # keep the old token when the file is briefly missing or empty
                self._token = text
        if self._token is None:
            raise BackendAuthError(f"cannot read {self._what}: {self._failure}")
        return self._token

    def token_now(self) -> str | None:
        read_at = self._read_at
        if read_at is None or anyio.current_time() - read_at >= self.refresh_interval:
            return None  # due for a re-read
        return self._token

    def _read(self) -> str | None:
        """The file's token; None if it cannot be read now or is empty; raise if it is bad."""
        try:
            with self.path.open("rb") as handle:
                data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as exc:
            self._failure = exc.strerror or type(exc).__name__
            return None
        except ValueError:  # "embedded null byte": no file can have this name
            raise LeaseConfigError(
                f"{self._what}: the path contains a NUL character, which no file name can "
                "hold; fix the token-file path"
            ) from None
        if len(data) > MAX_TOKEN_FILE_BYTES:
            self._token = None
            raise bad_token(self._what, f"is over {MAX_TOKEN_FILE_BYTES:,} bytes long")
        text = data.decode("latin-1").strip(_FILE_WHITESPACE)  # latin-1: one char per byte
        if not text:
            self._failure = "it is empty"
            return None
        problem = token_problem(text)
        if problem is not None:
            self._token = None  # never fall back to the old token: see the module docstring
            raise bad_token(self._what, problem)
        return text
