"""How requests authenticate: an :class:`httpx.Auth` flow, and the TLS context.

:class:`KubeAuth` adds the bearer token of the configured source (:mod:`._tokens`, or an exec
plugin, :mod:`._exec`) and the impersonation headers to every request. On a 401 the credential
is read again and the request retried once (:meth:`KubeAuth.headers_after`, the one 401 retry,
used by the unary requests in :mod:`._client` and by this flow for streams); a second 401
reaches the backend, which raises :class:`BackendAuthError`.

Impersonation (``as``, ``as-groups``) becomes ``Impersonate-User``/``Impersonate-Group``
headers, checked once: printable ASCII (spaces allowed inside, none around), no control
characters; else a :class:`BackendAuthError` naming the field, before any request is sent.

:func:`ssl_context` builds the TLS context: the cluster's CA (else the system's) and the client
certificate. Errors name the files or fields, never their content; an encrypted client key is
refused instead of prompting on a terminal.

Tokens never appear in a ``repr``, a log line or an exception message: every token this flow
sends is remembered (:func:`._tokens.remember_sent`), and server text quoted in a message has it
cut out by value.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import AsyncGenerator, Generator, Iterator, Sequence
from pathlib import Path

import httpx

from ..._client_cert import NUL_REASON, ClientCertError, EncryptedKeyError, load_client_cert
from ..._exceptions import BackendAuthError, LeaseConfigError
from ._cluster import ClusterConfig, Credentials
from ._exec import ExecTokenSource
from ._tokens import (
    FileTokenSource,
    StaticTokenSource,
    TokenSource,
    header_problem,
    remember_sent,
)

__all__ = ["KubeAuth", "ssl_context", "token_source_for"]


def token_source_for(config: ClusterConfig) -> TokenSource | None:
    """The token source ``config`` asks for (None: no token, a client certificate or none)."""
    creds = config.credentials
    origin = creds.origin or config.source
    if creds.token_file is not None:
        return FileTokenSource(creds.token_file, creds.token_refresh, origin)
    if creds.token is not None:
        return StaticTokenSource(creds.token, origin)
    if creds.exec is not None:
        return ExecTokenSource(creds.exec, config, origin)
    return None


class KubeAuth(httpx.Auth):
    """Bearer token and impersonation headers; on 401, refresh the token and retry once."""

    def __init__(self, source: TokenSource | None, credentials: Credentials) -> None:
        self.source = source
        #: The token last remembered for redaction (skips the lookup while it is unchanged).
        self._remembered: str | None = None
        #: :meth:`headers` for :attr:`_remembered`, as :meth:`headers_now` hands them out.
        self._sent: tuple[tuple[str, str], ...] = ()
        origin = credentials.origin or "the configured credentials"
        self._impersonation: list[tuple[str, str]] = []
        self._problem: str | None = None
        if credentials.impersonate_user:
            groups = credentials.impersonate_groups
            fields = [("Impersonate-User", "as", credentials.impersonate_user)]
            fields += [("Impersonate-Group", "as-groups", group) for group in groups]
            for header, field, value in fields:
                problem = header_problem(value)
                if problem is not None:
                    self._problem = (
                        f"the impersonation {field!r} of {origin} cannot be sent as the "
                        f"{header} header: it {problem}; use printable ASCII without control "
                        "characters"
                    )
                    break
                self._impersonation.append((header, value))

    def __repr__(self) -> str:
        return f"<KubeAuth {self.source!r}>"

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        raise RuntimeError("trio_lease's Kubernetes client is async only")

    async def async_auth_flow(  # noqa: ASYNC900  httpx.Auth's flow is a generator
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers = httpx.Headers([*request.headers.multi_items(), *await self.headers()])
        response = yield request
        retry = await self.headers_after(response.status_code, request.headers.multi_items())
        if retry is not None:
            request.headers = httpx.Headers(retry)
            yield request

    async def headers(self, *, refresh: bool = False) -> list[tuple[str, str]]:
        """Impersonation headers and the bearer token (fetched again if ``refresh``)."""
        if self._problem is not None:
            raise BackendAuthError(self._problem)
        items = list(self._impersonation)
        if self.source is not None:
            token = await self._token(self.source, refresh)
            if token:
                items.append(("Authorization", f"Bearer {token}"))
        return items

    def headers_now(self) -> tuple[tuple[str, str], ...] | None:
        """What :meth:`headers` gives, when the source has the token it sent last at hand
        (no reading, no waiting); None: await :meth:`headers`. The hot path of a request
        asks this first (no coroutine per request)."""
        if self._problem is not None:
            return None
        if self.source is None:
            return tuple(self._impersonation)
        token = self.source.token_now()
        if token is None or token is not self._remembered:
            return None  # not sent before: headers() remembers it for redaction first
        return self._sent

    async def refreshed_authorization(self) -> str | None:
        """The ``Authorization`` value after a 401: the token read again (None: no token)."""
        if self.source is None:
            return None
        token = await self._token(self.source, True)
        return f"Bearer {token}" if token else None

    async def _token(self, source: TokenSource, refresh: bool) -> str | None:
        """The source's token, remembered for redaction before it is ever sent."""
        token = await source.token(refresh=refresh)
        if token and token is not self._remembered:
            remember_sent(token)
            self._remembered = token
            self._sent = (*self._impersonation, ("Authorization", f"Bearer {token}"))
        return token

    async def headers_after(
        self, status: int, headers: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str]] | None:
        """The 401 retry, for every path (unary requests and streams): after a 401 with a token
        source, ``headers`` with the token read again, to send the request once more (the server
        refused it before running it, so even a write may be repeated); None: no retry."""
        if status != 401 or self.source is None:
            return None
        fresh = await self.refreshed_authorization()
        retry = [item for item in headers if item[0].lower() != "authorization"]
        if fresh is not None:
            retry.append(("Authorization", fresh))
        return retry


def ssl_context(config: ClusterConfig) -> ssl.SSLContext:
    """The TLS context: the configured CA (else the system's), client certificate, or none.

    Errors are :class:`LeaseConfigError` naming the files (or the kubeconfig's ``*-data``
    fields) and the kind of problem, never their content; an encrypted client key is refused
    instead of prompting on a terminal (:func:`~trio_lease._client_cert.load_client_cert`).
    """
    if config.insecure_skip_tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            if config.ca_data:
                context = ssl.create_default_context(cadata=config.ca_data.decode("ascii"))
            elif config.ca_file is not None:
                context = ssl.create_default_context(cafile=str(config.ca_file))
            else:
                context = ssl.create_default_context()
        except (ssl.SSLError, OSError, ValueError) as exc:  # ValueError: not ASCII, or a NUL
            where = "certificate-authority-data" if config.ca_data else repr(str(config.ca_file))
            problem = "not PEM certificates"
            if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError):
                problem = exc.strerror or type(exc).__name__
            elif not config.ca_data and "\0" in str(config.ca_file):
                problem = f"ClusterConfig.ca_file: {NUL_REASON}; fix the path"
            raise LeaseConfigError(
                f"cannot load the cluster CA certificate {where} ({config.source}): {problem}"
            ) from None
    _load_client_cert(context, config)
    return context


def _load_client_cert(context: ssl.SSLContext, config: ClusterConfig) -> None:
    """Load the client certificate and key, each from its ``*-data`` field, else its file.

    A kubeconfig may mix them (``client-certificate-data`` with a ``client-key`` file), as
    client-go allows.
    """
    creds = config.credentials
    cert = creds.client_cert_data if creds.client_cert_data is not None else creds.client_cert_file
    key = creds.client_key_data if creds.client_key_data is not None else creds.client_key_file
    if cert is None or key is None:
        return
    labels = {
        "certificate": "client-certificate-data" if isinstance(cert, bytes) else repr(str(cert)),
        "key": "client-key-data" if isinstance(key, bytes) else repr(str(key)),
    }
    try:
        with _as_files(cert, key) as (cert_file, key_file):
            load_client_cert(context, cert_file, key_file)
    except ClientCertError as exc:
        raise LeaseConfigError(
            f"cannot load the client certificate and key {labels['certificate']} and "
            f"{labels['key']} ({config.source}): {_reason(exc)}"
        ) from None
    except OSError as exc:  # writing the *-data fields to a temporary file
        raise LeaseConfigError(
            f"cannot write the client certificate and key to a temporary file "
            f"({config.source}): {exc.strerror or type(exc).__name__}"
        ) from None


def _reason(exc: ClientCertError) -> str:
    """Why loading failed, in the kubeconfig's words (never file content)."""
    if isinstance(exc, EncryptedKeyError):
        return (
            "the key is encrypted and trio_lease cannot ask for its passphrase: use an "
            "unencrypted key (kept with mode 0600)"
        )
    if exc.reason == NUL_REASON:
        field = "client_cert_file" if exc.part == "certificate" else "client_key_file"
        # Configuration files are checked when read (_paths.user_path): only a Credentials
        # built in code can get here.
        return f"Credentials.{field}: {NUL_REASON}; fix the path"
    if exc.part == "certificate and key":
        return exc.reason
    return f"the {exc.part}: {exc.reason}"


@contextlib.contextmanager
def _as_files(cert: Path | bytes, key: Path | bytes) -> Iterator[tuple[Path, Path]]:
    """The certificate and key as files: ``ssl`` loads client keys from files only, so the
    ``*-data`` fields are written to a private directory, deleted at once."""
    if isinstance(cert, Path) and isinstance(key, Path):
        yield cert, key
        return
    with tempfile.TemporaryDirectory(prefix="trio-lease-") as directory:
        paths: list[Path] = []
        for name, item in (("client.crt", cert), ("client.key", key)):
            if isinstance(item, bytes):
                path = Path(directory, name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with contextlib.closing(os.fdopen(fd, "wb")) as handle:
                    handle.write(item)
                item = path
            paths.append(item)
        yield paths[0], paths[1]
