"""Authentication as an :class:`httpx.Auth` flow, and the TLS context.

Token sources (client-go semantics):

- a static token;
- a token file (in-cluster service-account tokens rotate about hourly): re-read when the cached
  copy is older than ``token_refresh`` (≤ 60 s) and at once after a 401; a failed or empty read
  keeps the old token;
- an exec credential plugin (``client.authentication.k8s.io/v1``): run with
  ``KUBERNETES_EXEC_INFO`` through :func:`anyio.run_process` (so it works on trio), cached until
  30 s before ``status.expirationTimestamp`` (or until a 401 when there is none).

On a 401 the flow refreshes the credential and retries that request once; a second 401 reaches
the backend, which raises :class:`BackendAuthError`. File reads are tiny and synchronous, which
keeps the in-process path free of threads (virtual time). Tokens never appear in a ``repr``,
a log line or an exception message.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import tempfile
from collections.abc import AsyncGenerator, Generator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx

from ..._exceptions import BackendAuthError, LeaseConfigError
from ._config import ClusterConfig, Credentials, ExecConfig
from ._models import parse_time

__all__ = ["ExecTokenSource", "FileTokenSource", "KubeAuth", "StaticTokenSource", "ssl_context"]

_EXEC_EXPIRY_MARGIN = 30.0


class TokenSource:
    """Produces a bearer token; ``refresh=True`` asks for a fresh one (after a 401)."""

    async def token(self, *, refresh: bool = False) -> str | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class StaticTokenSource(TokenSource):
    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self, *, refresh: bool = False) -> str | None:
        return self._token


class FileTokenSource(TokenSource):
    """A token file, re-read every ``refresh_interval`` seconds and on demand."""

    def __init__(self, path: Path, refresh_interval: float = 60.0) -> None:
        self.path = path
        self.refresh_interval = refresh_interval
        self._token: str | None = None
        self._read_at: float | None = None

    def __repr__(self) -> str:
        return f"<FileTokenSource {str(self.path)!r}>"

    async def token(self, *, refresh: bool = False) -> str | None:
        now = anyio.current_time()
        stale = self._read_at is None or now - self._read_at >= self.refresh_interval
        if refresh or stale or self._token is None:
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text:  # keep the old token when the file is briefly missing or empty
                self._token = text
            self._read_at = now
        if self._token is None:
            raise BackendAuthError(
                f"cannot read the token file {str(self.path)!r} (missing or empty)"
            )
        return self._token


class ExecTokenSource(TokenSource):
    """An exec credential plugin, run through anyio and cached until its token expires."""

    def __init__(self, config: ExecConfig, cluster: ClusterConfig | None = None) -> None:
        self.config = config
        self._cluster = cluster
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
        if cfg.interactive_mode == "Always":
            raise LeaseConfigError(
                f"exec credential plugin {cfg.command!r} has interactiveMode Always, but "
                "trio_lease runs it without a terminal; use a non-interactive credential"
            )
        env = {**os.environ, **dict(cfg.env), "KUBERNETES_EXEC_INFO": self._exec_info()}
        where = f"exec credential plugin {cfg.command!r}"
        try:
            result = await anyio.run_process([cfg.command, *cfg.args], env=env, check=False)
        except FileNotFoundError:
            hint = f": {cfg.install_hint}" if cfg.install_hint else ""
            raise LeaseConfigError(f"{where} was not found{hint}") from None
        except OSError as exc:
            raise BackendAuthError(f"{where} could not be run: {exc.strerror}") from None
        if result.returncode != 0:
            raise BackendAuthError(f"{where} exited with status {result.returncode}")
        try:
            credential = json.loads(result.stdout)
            status = credential["status"]
        except (ValueError, KeyError, TypeError):
            raise BackendAuthError(f"{where} did not print an ExecCredential") from None
        if credential.get("apiVersion") != cfg.api_version:
            raise BackendAuthError(
                f"{where} answered with apiVersion {credential.get('apiVersion')!r}, "
                f"not {cfg.api_version!r}"
            )
        token = status.get("token") if isinstance(status, dict) else None
        if not isinstance(token, str) or not token:
            raise LeaseConfigError(
                f"{where} returned no token (client certificates from exec plugins are not "
                "supported by trio_lease)"
            )
        self._token = token
        expiry = parse_time(status.get("expirationTimestamp"))
        if expiry is None:
            self._valid_until = None
        else:
            # Wall clock only to learn how long the credential lives; kept as a monotonic time.
            left = (expiry - datetime.now(UTC)).total_seconds() - _EXEC_EXPIRY_MARGIN
            self._valid_until = anyio.current_time() + max(0.0, left)


def token_source_for(config: ClusterConfig) -> TokenSource | None:
    creds = config.credentials
    if creds.token_file is not None:
        return FileTokenSource(creds.token_file, creds.token_refresh)
    if creds.token is not None:
        return StaticTokenSource(creds.token)
    if creds.exec is not None:
        return ExecTokenSource(creds.exec, config)
    return None


class KubeAuth(httpx.Auth):
    """Bearer token and impersonation headers; on 401, refresh the token and retry once."""

    def __init__(self, source: TokenSource | None, credentials: Credentials) -> None:
        self.source = source
        self._impersonate = credentials.impersonate_user
        self._groups = credentials.impersonate_groups

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
        items: list[tuple[str, str]] = []
        if self._impersonate:
            items.append(("Impersonate-User", self._impersonate))
            items.extend(("Impersonate-Group", group) for group in self._groups)
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


def ssl_context(config: ClusterConfig) -> ssl.SSLContext:
    """The TLS context: the configured CA (else the system's), client certificate, or none."""
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
        except (ssl.SSLError, OSError, UnicodeDecodeError, ValueError):
            raise LeaseConfigError(
                f"cannot load the cluster CA certificate ({config.source})"
            ) from None
    creds = config.credentials
    try:
        if creds.client_cert_data is not None and creds.client_key_data is not None:
            _load_cert_data(context, creds.client_cert_data, creds.client_key_data)
        elif creds.client_cert_file is not None and creds.client_key_file is not None:
            context.load_cert_chain(str(creds.client_cert_file), str(creds.client_key_file))
    except (ssl.SSLError, OSError):
        raise LeaseConfigError(
            f"cannot load the client certificate and key ({config.source})"
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
        context.load_cert_chain(str(cert_path), str(key_path))
