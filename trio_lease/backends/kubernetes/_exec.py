"""Exec credential plugins (``client.authentication.k8s.io/v1``): run, read, cache.

The plugin runs with ``KUBERNETES_EXEC_INFO`` through :func:`anyio.run_process` (so it works on
trio); its token is cached until 30 s before ``status.expirationTimestamp`` (or until a 401
when there is none). It runs with a time limit of its own, 90% of the time its request has left
(at most 60 s: :func:`plugin_time_limit`): a plugin that hangs (waiting for a login, say) is
stopped and reported as a :class:`BackendAuthError` naming it, not as the API server timing out.

Its output is read as input from another program: at most 1 MiB, JSON, an object of kind
``ExecCredential`` with the configured apiVersion, ``status.token`` a valid token (see
:mod:`._tokens`) and ``status.expirationTimestamp`` absent or an RFC 3339 time. Anything else is
an error naming the plugin's command and the field: never its arguments or environment (they
may hold secrets, ``--client-secret=...``), never its output, never its stderr. Errors raised
while reading a credential are raised ``from None`` so a traceback carries no parser message
either.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime

import anyio

from ..._exceptions import BackendAuthError, LeaseConfigError
from ._cluster import ClusterConfig, ExecConfig
from ._times import parse_time
from ._tokens import TokenSource, bad_token, token_problem

__all__ = [
    "MAX_EXEC_OUTPUT_BYTES",
    "MAX_PLUGIN_SECONDS",
    "PLUGIN_TIME_SHARE",
    "ExecTokenSource",
    "plugin_time_limit",
    "read_exec_credential",
]

_EXEC_EXPIRY_MARGIN = 30.0
#: The longest an exec plugin may run, when its request has longer left (a backstop: requests
#: are bounded by seconds, see :func:`plugin_time_limit`).
MAX_PLUGIN_SECONDS = 60.0
#: The share of its request's time left an exec plugin may use (the rest is the margin that
#: lets the plugin's own time limit fire first).
PLUGIN_TIME_SHARE = 0.9
#: Largest exec plugin output read (an ExecCredential is well under 16 KiB).
MAX_EXEC_OUTPUT_BYTES = 1024 * 1024
#: Exec credential apiVersions that may be named in a message (anything else is not quoted).
_KNOWN_EXEC_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
    "client.authentication.k8s.io/v1alpha1",
)


def read_exec_credential(
    output: bytes, api_version: str, plugin: str
) -> tuple[str, datetime | None]:
    """The token and expiry in an exec plugin's ``output``, or an error naming the field.

    ``plugin`` names the plugin in messages (its command, never its arguments). Messages never
    quote the output. A plugin that returns a client certificate instead of a token is a
    :class:`LeaseConfigError` (not supported); every other problem a :class:`BackendAuthError`.
    """
    status = _status(_credential(output, api_version, plugin), plugin)
    return _token(status, plugin), _expiry(status, plugin)


def _credential(output: bytes, api_version: str, plugin: str) -> dict[str, object]:
    """The ExecCredential object in ``output``, of the configured apiVersion."""
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
    return credential


def _status(credential: dict[str, object], plugin: str) -> dict[str, object]:
    status = credential.get("status")
    if not isinstance(status, dict):
        raise BackendAuthError(f"{plugin} printed an ExecCredential without a status object")
    return status


def _token(status: dict[str, object], plugin: str) -> str:
    """``status.token``: a string that can be sent as a bearer token."""
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
        raise bad_token(f"the status.token returned by {plugin}", problem)
    return token


def _expiry(status: dict[str, object], plugin: str) -> datetime | None:
    """``status.expirationTimestamp``: absent (None) or an RFC 3339 time."""
    raw_expiry = status.get("expirationTimestamp")
    if raw_expiry is None:
        return None
    try:
        expiry = parse_time(raw_expiry) if isinstance(raw_expiry, str) else None
    except (ValueError, OverflowError):
        expiry = None
    if expiry is None:
        raise BackendAuthError(
            f"{plugin} returned a status.expirationTimestamp that is not an RFC 3339 time"
        )
    return expiry


def plugin_time_limit() -> float:
    """How long an exec plugin may run: :data:`PLUGIN_TIME_SHARE` of the time the enclosing
    request has left, at most :data:`MAX_PLUGIN_SECONDS`.

    The plugin runs inside its request's time bound (``request-timeout``, else the settings'
    ``lease_operation_timeout``). A bound of its own that ends a little *before* the request's
    makes a hanging plugin fail as the plugin's fault (a :class:`BackendAuthError` naming it);
    otherwise the request's own bound would fire first and blame the API server.
    """
    left = anyio.current_effective_deadline() - anyio.current_time()
    return max(0.0, min(MAX_PLUGIN_SECONDS, left * PLUGIN_TIME_SHARE))


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

    def token_now(self) -> str | None:
        if self._token is None or (self._lock is not None and self._lock.locked()):
            return None  # none yet, or a run in progress: token() waits for it
        if self._valid_until is not None and anyio.current_time() >= self._valid_until:
            return None
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
        limit = plugin_time_limit()
        try:
            with anyio.fail_after(limit):
                result = await anyio.run_process([cfg.command, *cfg.args], env=env, check=False)
        except TimeoutError:
            raise BackendAuthError(
                f"{where} did not answer within {limit:.3g} s (its time limit: "
                f"{PLUGIN_TIME_SHARE:.0%} of the request's time left, at most "
                f"{MAX_PLUGIN_SECONDS:g} s) and was stopped; run it by hand to see why it hangs "
                "(a login prompt, the network), or raise request-timeout"
            ) from None
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
