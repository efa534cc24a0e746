"""Authentication as an :class:`httpx.Auth` flow, and the TLS context.

Token sources (client-go semantics):

- a static token (the section's ``token``, a kubeconfig user's ``token``);
- a token file (in-cluster service-account tokens rotate about hourly): re-read when the cached
  copy is older than ``token_refresh`` (≤ 60 s) and at once after a 401;
- an exec credential plugin (``client.authentication.k8s.io/v1``): run with
  ``KUBERNETES_EXEC_INFO`` through :func:`anyio.run_process` (so it works on trio), cached until
  30 s before ``status.expirationTimestamp`` (or until a 401 when there is none).

On a 401 the flow refreshes the credential and retries that request once; a second 401 reaches
the backend, which raises :class:`BackendAuthError`. File reads are tiny and synchronous, which
keeps the in-process path free of threads (virtual time).

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

Token file re-reads: a read that fails (missing, unreadable) or finds the file empty keeps the
old token (KUBERNETES-API.md §7: that is what a rotation looks like while the kubelet swaps the
file). A read that finds content which is not a valid token drops the old token and raises at
once, on that read and on every call until the file is fixed: the file says the credential
changed and what it holds cannot be sent, so a broken rotation shows within one refresh
interval instead of much later, when the old token expires, as a puzzling 401.

Impersonation (``as``, ``as-groups``) becomes ``Impersonate-User``/``Impersonate-Group``
headers, checked once: printable ASCII (spaces allowed inside, none around), no control
characters; else a :class:`BackendAuthError` naming the field, before any request is sent.

Exec plugin output is read as input from another program: at most 1 MiB, JSON, an object of
kind ``ExecCredential`` with the configured apiVersion, ``status.token`` a valid token and
``status.expirationTimestamp`` absent or an RFC 3339 time. Anything else is an error naming the
plugin's command and the field: never its arguments or environment (they may hold secrets,
``--client-secret=...``), never its output, never its stderr.

Tokens never appear in a ``repr``, a log line or an exception message; errors raised while
reading a credential are raised ``from None`` so a traceback carries no parser message either.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import ssl
import tempfile
from collections.abc import AsyncGenerator, Generator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx

from ..._exceptions import BackendAuthError, LeaseConfigError
from ._cluster import ClusterConfig, Credentials, ExecConfig
from ._models import parse_time

__all__ = [
    "ExecTokenSource",
    "FileTokenSource",
    "KubeAuth",
    "StaticTokenSource",
    "read_exec_credential",
    "ssl_context",
    "token_problem",
]

_EXEC_EXPIRY_MARGIN = 30.0
#: Largest token file read: a service-account JWT is 1-2 KiB; more is not a token file.
MAX_TOKEN_FILE_BYTES = 64 * 1024
#: Largest exec plugin output read (an ExecCredential is well under 16 KiB).
MAX_EXEC_OUTPUT_BYTES = 1024 * 1024
#: Exec credential apiVersions that may be named in a message (anything else is not quoted).
_KNOWN_EXEC_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
    "client.authentication.k8s.io/v1alpha1",
)
_TOKEN = re.compile(r"[\x21-\x7e]+")
_HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
_FILE_WHITESPACE = " \t\r\n\f\v"


def _characters(value: str) -> str:
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
    if _TOKEN.fullmatch(token):
        return None
    if not token:
        return "is empty"
    bad = _characters(token)
    if bad:
        return f"contains {bad}"
    return "contains a space"  # only visible ASCII and spaces are left


def _header_problem(value: str) -> str | None:
    """What makes ``value`` unusable as an impersonation header value (None: fine)."""
    if _HEADER_VALUE.fullmatch(value):
        return None
    if not value:
        return "is empty"
    bad = _characters(value)
    if bad:
        return f"contains {bad}"
    return "starts or ends with a space"


def _bad_token(what: str, problem: str) -> BackendAuthError:
    return BackendAuthError(
        f"{what} is not a usable bearer token: it {problem}; a token is visible ASCII only "
        "(no spaces, line breaks or control characters): fix the token at its source"
    )


class TokenSource:
    """Produces a bearer token; ``refresh=True`` asks for a fresh one (after a 401)."""

    async def token(self, *, refresh: bool = False) -> str | None:
        raise NotImplementedError

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
            raise _bad_token(*self._problem)
        return self._token


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

    def _read(self) -> str | None:
        """The file's token; None if it cannot be read now or is empty; raise if it is bad."""
        try:
            with self.path.open("rb") as handle:
                data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as exc:
            self._failure = exc.strerror or type(exc).__name__
            return None
        if len(data) > MAX_TOKEN_FILE_BYTES:
            self._token = None
            raise _bad_token(self._what, f"is over {MAX_TOKEN_FILE_BYTES:,} bytes long")
        text = data.decode("latin-1").strip(_FILE_WHITESPACE)  # latin-1: one char per byte
        if not text:
            self._failure = "it is empty"
            return None
        problem = token_problem(text)
        if problem is not None:
            self._token = None  # never fall back to the old token: see the module docstring
            raise _bad_token(self._what, problem)
        return text


def read_exec_credential(
    output: bytes, api_version: str, plugin: str
) -> tuple[str, datetime | None]:
    """The token and expiry in an exec plugin's ``output``, or an error naming the field.

    ``plugin`` names the plugin in messages (its command, never its arguments). Messages never
    quote the output. A plugin that returns a client certificate instead of a token is a
    :class:`LeaseConfigError` (not supported); every other problem a :class:`BackendAuthError`.
    """
    if len(output) > MAX_EXEC_OUTPUT_BYTES:
        raise BackendAuthError(
            f"{plugin} printed more than {MAX_EXEC_OUTPUT_BYTES:,} bytes; it must print one "
            "ExecCredential object"
        )
    try:
        credential = json.loads(output)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, deep nesting
        raise BackendAuthError(
            f"{plugin} did not print JSON; it must print an ExecCredential ({api_version}) "
            "on its standard output"
        ) from None
    if not isinstance(credential, dict):
        raise BackendAuthError(f"{plugin} printed JSON that is not an ExecCredential object")
    if credential.get("kind") != "ExecCredential":
        raise BackendAuthError(f"{plugin} printed an object whose kind is not ExecCredential")
    got = credential.get("apiVersion")
    if got != api_version:
        shown = repr(got) if got in _KNOWN_EXEC_VERSIONS else "another or no apiVersion"
        raise BackendAuthError(
            f"{plugin} answered with {shown}, not {api_version!r}: configure the apiVersion "
            "the plugin speaks"
        )
    status = credential.get("status")
    if not isinstance(status, dict):
        raise BackendAuthError(f"{plugin} printed an ExecCredential without a status object")
    token = status.get("token")
    if token is None or token == "":
        if status.get("clientCertificateData") or status.get("clientKeyData"):
            raise LeaseConfigError(
                f"{plugin} returned a client certificate, which trio_lease does not support "
                "from exec plugins: configure a plugin or user that returns a token"
            )
        raise BackendAuthError(f"{plugin} returned no status.token")
    if not isinstance(token, str):
        raise BackendAuthError(f"{plugin} returned a status.token that is not a string")
    problem = token_problem(token)
    if problem is not None:
        raise _bad_token(f"the status.token returned by {plugin}", problem)
    raw_expiry = status.get("expirationTimestamp")
    if raw_expiry is None:
        return token, None
    try:
        expiry = parse_time(raw_expiry) if isinstance(raw_expiry, str) else None
    except (ValueError, OverflowError):
        expiry = None
    if expiry is None:
        raise BackendAuthError(
            f"{plugin} returned a status.expirationTimestamp that is not an RFC 3339 time"
        )
    return token, expiry


class ExecTokenSource(TokenSource):
    """An exec credential plugin, run through anyio and cached until its token expires."""

    def __init__(
        self, config: ExecConfig, cluster: ClusterConfig | None = None, origin: str = ""
    ) -> None:
        self.config = config
        self._cluster = cluster
        self.origin = origin
        self._token: str | None = None
        self._valid_until: float | None = None
        self._lock: anyio.Lock | None = None

    def __repr__(self) -> str:
        return f"<ExecTokenSource {self.config.command!r}>"

    def _exec_info(self) -> str:
        spec: dict[str, object] = {"interactive": False}
        if self.config.provide_cluster_info and self._cluster is not None:
            cluster: dict[str, object] = {
                "server": self._cluster.server,
                "tls-server-name": self._cluster.tls_server_name or "",
                "insecure-skip-tls-verify": self._cluster.insecure_skip_tls_verify,
                "proxy-url": self._cluster.proxy_url or "",
            }
            if self._cluster.ca_data:
                cluster["certificate-authority-data"] = base64.b64encode(
                    self._cluster.ca_data
                ).decode("ascii")
            spec["cluster"] = cluster
        return json.dumps(
            {"apiVersion": self.config.api_version, "kind": "ExecCredential", "spec": spec}
        )

    async def token(self, *, refresh: bool = False) -> str | None:
        if self._lock is None:
            self._lock = anyio.Lock()
        seen = self._token
        async with self._lock:
            if refresh and self._token is not seen:
                return self._token  # another request already refreshed it
            fresh = self._valid_until is None or anyio.current_time() < self._valid_until
            if self._token is not None and fresh and not refresh:
                return self._token
            await self._run()
            return self._token

    async def _run(self) -> None:
        cfg = self.config
        named_by = f" ({self.origin})" if self.origin else ""
        where = f"exec credential plugin {cfg.command!r}{named_by}"
        if cfg.interactive_mode == "Always":
            raise LeaseConfigError(
                f"{where} has interactiveMode Always, but trio_lease runs it without a "
                "terminal; use a non-interactive credential"
            )
        env = {**os.environ, **dict(cfg.env), "KUBERNETES_EXEC_INFO": self._exec_info()}
        try:
            result = await anyio.run_process([cfg.command, *cfg.args], env=env, check=False)
        except FileNotFoundError:
            hint = f": {cfg.install_hint}" if cfg.install_hint else ""
            raise LeaseConfigError(f"{where} was not found{hint}") from None
        except OSError as exc:
            raise BackendAuthError(f"{where} could not be run: {exc.strerror}") from None
        if result.returncode != 0:
            raise BackendAuthError(f"{where} exited with status {result.returncode}")
        self._token = None  # a bad answer must not leave the previous token in use
        token, expiry = read_exec_credential(result.stdout, cfg.api_version, where)
        self._token = token
        if expiry is None:
            self._valid_until = None
        else:
            # Wall clock only to learn how long the credential lives; kept as a monotonic time.
            left = (expiry - datetime.now(UTC)).total_seconds() - _EXEC_EXPIRY_MARGIN
            self._valid_until = anyio.current_time() + max(0.0, left)


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
        origin = credentials.origin or "the configured credentials"
        self._impersonation: list[tuple[str, str]] = []
        self._problem: str | None = None
        if credentials.impersonate_user:
            groups = credentials.impersonate_groups
            fields = [("Impersonate-User", "as", credentials.impersonate_user)]
            fields += [("Impersonate-Group", "as-groups", group) for group in groups]
            for header, field, value in fields:
                problem = _header_problem(value)
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

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers = httpx.Headers([*request.headers.multi_items(), *await self.headers()])
        response = yield request
        if response.status_code == 401 and self.source is not None:
            fresh = await self.refreshed_authorization()
            if fresh is not None:
                request.headers["Authorization"] = fresh
            yield request

    async def headers(self, *, refresh: bool = False) -> list[tuple[str, str]]:
        """Impersonation headers and the bearer token (fetched again if ``refresh``)."""
        if self._problem is not None:
            raise BackendAuthError(self._problem)
        items = list(self._impersonation)
        if self.source is not None:
            token = await self.source.token(refresh=refresh)
            if token:
                items.append(("Authorization", f"Bearer {token}"))
        return items

    async def refreshed_authorization(self) -> str | None:
        """The ``Authorization`` value after a 401: the token read again (None: no token)."""
        if self.source is None:
            return None
        token = await self.source.token(refresh=True)
        return f"Bearer {token}" if token else None


class _EncryptedKey(Exception):
    """Raised from OpenSSL's passphrase callback: there is nobody to ask."""


def _no_passphrase() -> str:
    # Without a callback OpenSSL prompts on the terminal (/dev/tty) and a service would hang.
    raise _EncryptedKey


def _reason(exc: BaseException) -> str:
    """Why loading failed, from the error's type and code only (never file content)."""
    if isinstance(exc, _EncryptedKey):
        return "the key is encrypted and trio_lease cannot ask for its passphrase: use an " \
            "unencrypted key (kept with mode 0600)"
    if isinstance(exc, ssl.SSLError):
        return "not a PEM certificate and its matching private key"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return "not PEM data"


def ssl_context(config: ClusterConfig) -> ssl.SSLContext:
    """The TLS context: the configured CA (else the system's), client certificate, or none.

    Errors name the files (or the kubeconfig's ``*-data`` fields) and the kind of problem, never
    their content; an encrypted client key is refused instead of prompting on a terminal.
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
        except (ssl.SSLError, OSError, ValueError) as exc:  # ValueError: not ASCII
            where = "certificate-authority-data" if config.ca_data else repr(str(config.ca_file))
            problem = "not PEM certificates"
            if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError):
                problem = exc.strerror or type(exc).__name__
            raise LeaseConfigError(
                f"cannot load the cluster CA certificate {where} ({config.source}): {problem}"
            ) from None
    creds = config.credentials
    where = ""
    try:
        if creds.client_cert_data is not None and creds.client_key_data is not None:
            where = "client-certificate-data and client-key-data"
            _load_cert_data(context, creds.client_cert_data, creds.client_key_data)
        elif creds.client_cert_file is not None and creds.client_key_file is not None:
            where = f"{str(creds.client_cert_file)!r} and {str(creds.client_key_file)!r}"
            context.load_cert_chain(
                str(creds.client_cert_file), str(creds.client_key_file), password=_no_passphrase
            )
    except (ssl.SSLError, OSError, _EncryptedKey) as exc:
        raise LeaseConfigError(
            f"cannot load the client certificate and key {where} ({config.source}): "
            f"{_reason(exc)}"
        ) from None
    return context


def _load_cert_data(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``ssl`` loads client keys from files only: use a private directory, delete at once."""
    with tempfile.TemporaryDirectory(prefix="trio-lease-") as directory:
        cert_path, key_path = Path(directory, "client.crt"), Path(directory, "client.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with contextlib.closing(os.fdopen(fd, "wb")) as handle:
                handle.write(data)
        context.load_cert_chain(str(cert_path), str(key_path), password=_no_passphrase)
