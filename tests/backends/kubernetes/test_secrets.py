"""Secrets: no message, repr, log or traceback quotes a credential, and bad tokens are typed.

Every token source (the section's ``token``, a kubeconfig user's ``token`` and ``tokenFile``,
the section's ``token-file``, the in-cluster service account, an exec plugin) refuses a token
with characters a header cannot carry as a :class:`BackendAuthError` naming the source, before
any request is sent, and never as a transient :class:`BackendUnavailable`.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import anyio
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from trio_lease import BackendAuthError, BackendUnavailable, LeaseConfigError, LeaseRecord
from trio_lease.backends.kubernetes import (
    ClusterConfig,
    Credentials,
    ExecConfig,
    KubernetesBackend,
    in_cluster_config,
    load_kubeconfig,
    resolve_config,
)
from trio_lease.backends.kubernetes._auth import KubeAuth, ssl_context
from trio_lease.backends.kubernetes._exec import (
    MAX_EXEC_OUTPUT_BYTES,
    ExecTokenSource,
    read_exec_credential,
)
from trio_lease.backends.kubernetes._tokens import (
    MAX_TOKEN_FILE_BYTES,
    FileTokenSource,
    StaticTokenSource,
    token_problem,
)
from trio_lease.testing.kube import KubeEmulator

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-T0KEN-value"
#: Characters a bearer token cannot carry, each with what the message calls it.
BAD = [
    pytest.param("\r", "line break", id="CR"),
    pytest.param("\n", "line break", id="LF"),
    pytest.param("\0", "NUL", id="NUL"),
]
MORE_BAD = [
    *BAD,
    pytest.param("\x1b", "control character", id="ESC"),
    pytest.param("\t", "control character", id="TAB"),
    pytest.param("\x7f", "control character", id="DEL"),
    pytest.param(" ", "space", id="space"),
    pytest.param("\u00e9", "non-ASCII", id="non-ASCII"),
]
#: Real time for the tests that run a subprocess or listen on a socket.
real_time = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
V1 = "client.authentication.k8s.io/v1"
PLUGIN = "exec credential plugin '/usr/bin/get-token'"


def _assert_hidden(exc: BaseException, *secrets: str) -> None:
    """Neither the message nor the printed traceback (chained causes included) shows a secret."""
    printed = "".join(traceback.format_exception(exc))
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in printed


async def _refused(config: ClusterConfig, *secrets: str) -> BackendAuthError:
    """Run one request on the emulator: it must fail typed, with nothing sent."""
    emulator = KubeEmulator()
    async with KubernetesBackend(config, transport=emulator.transport()) as backend:
        with pytest.raises(BackendAuthError) as caught:
            await backend.get("job")
    assert not isinstance(caught.value, BackendUnavailable)
    assert emulator.requests == []  # refused before sending: nothing to retry, nothing leaked
    _assert_hidden(caught.value, *secrets)
    return caught.value


def _kubeconfig(path: Path, user: dict[str, object]) -> Path:
    document = {
        "current-context": "dev",
        "clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "alice", "user": user}],
        "contexts": [{"name": "dev", "context": {"cluster": "c1", "user": "alice"}}],
    }
    path.write_text(json.dumps(document))  # JSON is YAML, and keeps control characters escaped
    return path


# -- kubeconfig files that do not parse --------------------------------------------------------


def test_bad_yaml_on_a_token_line_is_reported_without_the_line(tmp_path: Path) -> None:
    """A YAML error on the token's line gives path, line, column and problem, not the line."""
    path = tmp_path / "config"
    path.write_text(
        "current-context: dev\n"
        "users:\n"
        "- name: alice\n"
        "  user:\n"
        f"    token: {SECRET}: oops\n"
    )
    with pytest.raises(LeaseConfigError) as caught:
        load_kubeconfig([path])
    message = str(caught.value)
    assert str(path) in message
    assert "line 5, column" in message
    assert "mapping values are not allowed here" in message
    _assert_hidden(caught.value, SECRET, "oops")


def test_yaml_problem_naming_file_text_is_elided(tmp_path: Path) -> None:
    """PyYAML problems that quote file text (an alias, a tag) do not reach the message."""
    path = tmp_path / "config"
    path.write_text(f"users:\n- name: alice\n  user:\n    token: *{SECRET}\n")
    with pytest.raises(LeaseConfigError, match="undefined alias") as caught:
        load_kubeconfig([path])
    _assert_hidden(caught.value, SECRET)


def test_kubeconfig_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """Bytes that are not text are a LeaseConfigError with an offset, not a UnicodeDecodeError."""
    path = tmp_path / "config"
    path.write_bytes(b"users:\n- name: alice\n  user:\n    token: " + SECRET.encode() + b"\xff\n")
    with pytest.raises(LeaseConfigError, match="offset") as caught:
        load_kubeconfig([path])
    _assert_hidden(caught.value, SECRET)


def test_kubeconfig_with_an_impossible_date_is_a_config_error(tmp_path: Path) -> None:
    """A value PyYAML cannot construct (2001-13-45) is a LeaseConfigError, not a ValueError."""
    path = tmp_path / "config"
    path.write_text("users:\n- name: alice\n  user:\n    token: 2001-13-45\n")
    with pytest.raises(LeaseConfigError, match="cannot construct"):
        load_kubeconfig([path])


def test_deeply_nested_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    """A document nested past Python's recursion limit is a LeaseConfigError."""
    path = tmp_path / "config"
    path.write_text("users: " + "[" * 20000)
    with pytest.raises(LeaseConfigError, match=str(path)):
        load_kubeconfig([path])


@pytest.mark.parametrize(
    ("user", "cluster", "field"),
    [
        pytest.param({"token": 987654321}, {}, "token", id="token-not-a-string"),
        pytest.param({"as-groups": "admins-9z"}, {}, "as-groups", id="as-groups-not-a-list"),
        pytest.param({"as": ["root-9z"]}, {}, "as", id="as-not-a-string"),
        pytest.param({"exec": {"command": "x", "apiVersion": V1, "args": "--secret 987654321"}}, {},
                     "exec.args", id="exec-args-not-a-list"),
        pytest.param({"exec": ["x"]}, {}, "exec", id="exec-not-a-mapping"),
        pytest.param({}, {"insecure-skip-tls-verify": "false"}, "insecure-skip-tls-verify",
                     id="insecure-skip-tls-verify-a-string"),
    ],
)
def test_kubeconfig_fields_of_the_wrong_type_are_named(
    tmp_path: Path, user: dict[str, object], cluster: dict[str, object], field: str
) -> None:
    """A field of the wrong type is a LeaseConfigError naming the field, never its value."""
    path = _kubeconfig(tmp_path / "config", user)
    document = json.loads(path.read_text())
    document["clusters"][0]["cluster"].update(cluster)
    path.write_text(json.dumps(document))
    with pytest.raises(LeaseConfigError) as caught:
        load_kubeconfig([path])
    assert f"{field} in kubeconfig" in str(caught.value)
    _assert_hidden(caught.value, "987654321", "admins-9z", "root-9z")


def test_kubeconfig_sections_that_are_not_lists_are_named(tmp_path: Path) -> None:
    """'clusters: 5' is a LeaseConfigError naming the section, not a TypeError."""
    path = tmp_path / "config"
    path.write_text("clusters: 5\n")
    with pytest.raises(LeaseConfigError, match=r"clusters in .* must be a list"):
        load_kubeconfig([path])


# -- bad tokens, one test per source -----------------------------------------------------------


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_explicit_token_with_bad_characters_is_an_auth_error(char: str, kind: str) -> None:
    """The section's token with CR, LF or NUL: BackendAuthError naming it, nothing sent."""
    token = f"{SECRET}{char}X-Injected: 1"
    config = resolve_config({"server": "https://127.0.0.1:6443", "token": token}, {})
    error = await _refused(config, SECRET)
    assert "the token of the explicit configuration" in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_kubeconfig_token_with_bad_characters_names_the_user(
    tmp_path: Path, char: str, kind: str
) -> None:
    """A kubeconfig user's token with CR, LF or NUL: BackendAuthError naming user and file."""
    path = _kubeconfig(tmp_path / "config", {"token": f"{SECRET}{char}more"})
    error = await _refused(load_kubeconfig([path]), SECRET)
    assert "kubeconfig user 'alice'" in str(error)
    assert str(path) in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_kubeconfig_token_file_with_bad_characters_names_file_and_user(
    tmp_path: Path, char: str, kind: str
) -> None:
    """A kubeconfig tokenFile holding CR, LF or NUL inside the token: names file and user."""
    (tmp_path / "tok").write_bytes(f"{SECRET}{char}more\n".encode())
    path = _kubeconfig(tmp_path / "config", {"tokenFile": "tok"})
    error = await _refused(load_kubeconfig([path]), SECRET)
    assert str(tmp_path / "tok") in str(error)
    assert "kubeconfig user 'alice'" in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_explicit_token_file_with_bad_characters_names_the_file(
    tmp_path: Path, char: str, kind: str
) -> None:
    """The section's token-file holding CR, LF or NUL inside the token: names the file."""
    token = tmp_path / "token"
    token.write_bytes(f"{SECRET}{char}more".encode())
    config = resolve_config({"server": "https://127.0.0.1:6443", "token-file": str(token)}, {})
    error = await _refused(config, SECRET)
    assert f"the token file {str(token)!r} (the explicit configuration)" in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_in_cluster_token_with_bad_characters_names_the_service_account(
    tmp_path: Path, char: str, kind: str
) -> None:
    """The service account's token file holding CR, LF or NUL: names the file and in-cluster."""
    root = tmp_path / "sa"
    root.mkdir()
    (root / "token").write_bytes(f"{SECRET}{char}more\n".encode())
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    error = await _refused(in_cluster_config(env, root), SECRET)
    assert str(root / "token") in str(error)
    assert "in-cluster service account" in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), MORE_BAD)
async def test_every_character_outside_visible_ascii_is_refused(char: str, kind: str) -> None:
    """Control characters, DEL, spaces and non-ASCII are each refused, and named by kind."""
    source = StaticTokenSource(f"{SECRET}{char}x", "the test")
    with pytest.raises(BackendAuthError, match=kind) as caught:
        await source.token()
    _assert_hidden(caught.value, SECRET)


def test_visible_ascii_tokens_are_accepted() -> None:
    """JWTs, bootstrap tokens and any visible ASCII (0x21-0x7E) pass; empty does not."""
    assert token_problem("eyJhbGciOi.eyJzdWIiOi-_.sig+/=") is None
    assert token_problem("abcdef.0123456789abcdef") is None
    assert token_problem("".join(map(chr, range(0x21, 0x7F)))) is None
    assert token_problem("") == "is empty"


async def test_static_token_with_a_trailing_newline_is_refused() -> None:
    """Surrounding whitespace is stripped from token files only: a static token must be exact."""
    with pytest.raises(BackendAuthError, match="line break"):
        await StaticTokenSource(SECRET + "\n").token()


# -- token files: what is stripped, what a re-read keeps ---------------------------------------


@pytest.mark.parametrize("content", [f"{SECRET}\n", f"{SECRET}\r\n", f"  {SECRET} \n\n"])
async def test_token_file_surrounding_whitespace_is_stripped(tmp_path: Path, content: str) -> None:
    """A trailing newline (or CRLF, or spaces around the token) in a token file is normal."""
    path = tmp_path / "token"
    path.write_bytes(content.encode())
    assert await FileTokenSource(path).token() == SECRET


async def test_token_file_rotated_to_a_bad_token_fails_and_drops_the_old_token(
    tmp_path: Path,
) -> None:
    """A re-read that finds a bad token raises at once, keeps raising, and recovers when fixed."""
    path = tmp_path / "token"
    path.write_text("old-token\n")
    source = FileTokenSource(path, refresh_interval=60)
    assert await source.token() == "old-token"
    path.write_text(f"{SECRET}\nsecond-line\n")
    assert await source.token() == "old-token"  # not re-read yet: cached for a minute
    await anyio.sleep(61)
    for _ in range(2):  # the old token is not used again, not even on the next call
        with pytest.raises(BackendAuthError, match="line break") as caught:
            await source.token()
        _assert_hidden(caught.value, SECRET, "old-token")
    path.write_text("new-token\n")
    assert await source.token() == "new-token"  # the next call reads again: fixed at once


async def test_token_file_read_failure_still_keeps_the_old_token(tmp_path: Path) -> None:
    """Missing or empty (a rotation in progress) keeps the old token; a bad token does not."""
    path = tmp_path / "token"
    path.write_text("old-token")
    source = FileTokenSource(path, refresh_interval=1)
    assert await source.token() == "old-token"
    path.unlink()
    assert await source.token(refresh=True) == "old-token"
    path.write_text("\n")
    assert await source.token(refresh=True) == "old-token"
    path.write_bytes(b"new\0token")
    with pytest.raises(BackendAuthError, match="NUL"):
        await source.token(refresh=True)


async def test_token_file_that_is_not_ascii_is_an_auth_error(tmp_path: Path) -> None:
    """Bytes that are not ASCII (or not UTF-8 at all) are a BackendAuthError, not a decode error."""
    path = tmp_path / "token"
    for content in (b"t\xc3\xb8ken", b"t\xffken"):
        path.write_bytes(content)
        with pytest.raises(BackendAuthError, match="non-ASCII"):
            await FileTokenSource(path).token()


async def test_oversized_token_file_is_an_auth_error(tmp_path: Path) -> None:
    """A token file over the size limit is refused without being read whole."""
    path = tmp_path / "token"
    path.write_bytes(b"a" * (MAX_TOKEN_FILE_BYTES + 1))
    with pytest.raises(BackendAuthError, match="bytes long"):
        await FileTokenSource(path).token()


async def test_missing_token_file_names_the_reason(tmp_path: Path) -> None:
    """A token file that was never readable is a BackendAuthError with the OS's reason."""
    with pytest.raises(BackendAuthError, match="No such file"):
        await FileTokenSource(tmp_path / "absent", origin="the test").token()


# -- impersonation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_impersonated_user_with_bad_characters_is_an_auth_error(
    tmp_path: Path, char: str, kind: str
) -> None:
    """A kubeconfig 'as' with CR, LF or NUL: BackendAuthError naming the field and the user."""
    path = _kubeconfig(tmp_path / "config", {"token": "fine", "as": f"root{char}{SECRET}"})
    error = await _refused(load_kubeconfig([path]), SECRET)
    assert "impersonation 'as' of kubeconfig user 'alice'" in str(error)
    assert kind in str(error)


@pytest.mark.parametrize(("char", "kind"), BAD)
async def test_impersonated_group_with_bad_characters_is_an_auth_error(
    tmp_path: Path, char: str, kind: str
) -> None:
    """A kubeconfig 'as-groups' entry with CR, LF or NUL: BackendAuthError naming the field."""
    groups = ["ok", f"g{char}{SECRET}"]
    user: dict[str, object] = {"token": "fine", "as": "bob", "as-groups": groups}
    error = await _refused(load_kubeconfig([_kubeconfig(tmp_path / "config", user)]), SECRET)
    assert "'as-groups'" in str(error)
    assert kind in str(error)


async def test_impersonated_names_with_inner_spaces_are_sent() -> None:
    """Names with inner spaces are valid header values; surrounding spaces are not."""
    creds = Credentials(impersonate_user="Jane Doe", impersonate_groups=("team a",))
    assert await KubeAuth(None, creds).headers() == [
        ("Impersonate-User", "Jane Doe"), ("Impersonate-Group", "team a")
    ]
    with pytest.raises(BackendAuthError, match="starts or ends with a space"):
        await KubeAuth(None, Credentials(impersonate_user="Jane ")).headers()
    with pytest.raises(BackendAuthError, match="non-ASCII"):
        await KubeAuth(None, Credentials(impersonate_user="J\u00f6rg")).headers()


# -- exec plugin output ------------------------------------------------------------------------


def _credential(status: object, **fields: object) -> bytes:
    return json.dumps(
        {"apiVersion": V1, "kind": "ExecCredential", "status": status, **fields}
    ).encode()


@pytest.mark.parametrize(
    ("output", "match"),
    [
        pytest.param(f"token={SECRET}".encode(), "did not print JSON", id="not-json"),
        pytest.param(b"\xff\xfe" + SECRET.encode(), "did not print JSON", id="not-utf8"),
        pytest.param(b"[" * 100000, "did not print JSON", id="deep-nesting"),
        pytest.param(json.dumps([SECRET]).encode(), "not an ExecCredential", id="a-list"),
        pytest.param(_credential({"token": SECRET}, kind=SECRET), "kind is not ExecCredential",
                     id="wrong-kind"),
        pytest.param(_credential({"token": SECRET}, apiVersion=SECRET),
                     "another or no apiVersion", id="unknown-api-version"),
        pytest.param(_credential(SECRET), "without a status object", id="status-not-an-object"),
        pytest.param(_credential(None), "without a status object", id="status-missing"),
        pytest.param(_credential({}), "no status.token", id="token-missing"),
        pytest.param(_credential({"token": ""}), "no status.token", id="token-empty"),
        pytest.param(_credential({"token": [SECRET]}), "status.token that is not a string",
                     id="token-not-a-string"),
        pytest.param(_credential({"token": f"{SECRET}\r\n"}), "line break", id="token-CRLF"),
        pytest.param(_credential({"token": f"{SECRET}\n"}), "line break", id="token-LF"),
        pytest.param(_credential({"token": f"{SECRET}\0"}), "NUL", id="token-NUL"),
        pytest.param(_credential({"token": "ok", "expirationTimestamp": SECRET}),
                     "expirationTimestamp that is not an RFC 3339 time",
                     id="expiry-unparseable"),
        pytest.param(_credential({"token": "ok", "expirationTimestamp": 1700000000}),
                     "expirationTimestamp that is not an RFC 3339 time", id="expiry-a-number"),
        pytest.param(_credential({"token": "ok",
                                  "expirationTimestamp": "0001-01-01T00:00:00+01:00"}),
                     "expirationTimestamp that is not an RFC 3339 time", id="expiry-out-of-range"),
        pytest.param(b" " * (MAX_EXEC_OUTPUT_BYTES + 1), "more than", id="too-big"),
    ],
)
def test_malformed_exec_credential_is_an_auth_error_naming_the_plugin(
    output: bytes, match: str
) -> None:
    """Each malformed ExecCredential is a BackendAuthError naming plugin and field, not output."""
    with pytest.raises(BackendAuthError, match=match) as caught:
        read_exec_credential(output, V1, PLUGIN)
    assert not isinstance(caught.value, BackendUnavailable)
    assert PLUGIN in str(caught.value)
    _assert_hidden(caught.value, SECRET)


def test_exec_credential_with_a_known_other_api_version_names_it() -> None:
    """An apiVersion from the known list is named, so the fix is clear; others are not quoted."""
    output = _credential({"token": "ok"}, apiVersion="client.authentication.k8s.io/v1beta1")
    with pytest.raises(BackendAuthError, match="v1beta1"):
        read_exec_credential(output, V1, PLUGIN)


def test_exec_credential_with_a_client_certificate_is_a_config_error() -> None:
    """A plugin answering with a client certificate is unsupported: LeaseConfigError, no data."""
    output = _credential({"clientCertificateData": SECRET, "clientKeyData": SECRET})
    with pytest.raises(LeaseConfigError, match="client certificate") as caught:
        read_exec_credential(output, V1, PLUGIN)
    _assert_hidden(caught.value, SECRET)


def test_well_formed_exec_credential_is_read() -> None:
    """The token and the expiry (absent, or an RFC 3339 time) are read."""
    assert read_exec_credential(_credential({"token": SECRET}), V1, PLUGIN) == (SECRET, None)
    token, expiry = read_exec_credential(
        _credential({"token": SECRET, "expirationTimestamp": "2099-01-01T00:00:00Z"}), V1, PLUGIN
    )
    assert token == SECRET and expiry is not None and expiry.year == 2099


@real_time
async def test_exec_plugin_token_with_a_line_break_names_the_command_not_its_args(
    tmp_path: Path,
) -> None:
    """A plugin printing a token with CR LF: BackendAuthError naming the command, not the args."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, sys\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': sys.argv[1] + '\\r\\nX-Injected: 1'}}))\n"
    )
    exec_config = ExecConfig(command=sys.executable, args=(str(script), SECRET),
                             env=(("PLUGIN_SECRET", "env-" + SECRET),))
    config = ClusterConfig(server="https://127.0.0.1:6443",
                           credentials=Credentials(exec=exec_config, origin="the test user"))
    error = await _refused(config, SECRET, str(script))
    assert f"exec credential plugin {sys.executable!r} (the test user)" in str(error)
    assert "line break" in str(error)


@real_time
async def test_exec_plugin_bad_answer_after_a_good_one_is_not_covered_by_the_old_token(
    tmp_path: Path,
) -> None:
    """An expired token is re-fetched; a bad new answer raises instead of reusing the old one."""
    script = tmp_path / "plugin.py"
    count = tmp_path / "count"
    script.write_text(
        "import json, os, sys\n"
        "n = int(open(sys.argv[1]).read()) + 1 if os.path.exists(sys.argv[1]) else 1\n"
        "open(sys.argv[1], 'w').write(str(n))\n"
        "status = {'token': 'good', 'expirationTimestamp': '2000-01-01T00:00:00Z'}\n"
        "print('not json' if n > 1 else json.dumps({'apiVersion': "
        "'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', 'status': status}))\n"
    )
    source = ExecTokenSource(ExecConfig(command=sys.executable, args=(str(script), str(count))))
    assert await source.token() == "good"
    with pytest.raises(BackendAuthError, match="did not print JSON"):
        await source.token()  # expired: runs again, and the old token is not handed out
    with pytest.raises(BackendAuthError, match="did not print JSON"):
        await source.token(refresh=True)


# -- the typed error comes before the HTTP layer -----------------------------------------------


@real_time
async def test_bad_token_on_the_lean_http_path_is_an_auth_error_not_unavailable() -> None:
    """On real sockets (the lean HTTP/1.1 path) a CRLF token is BackendAuthError, nothing sent.

    Before tokens were checked at their source, h11 refused the header and the backend
    reported a BackendUnavailable, which the core retries forever.
    """
    emulator = KubeEmulator()
    async with emulator.serve(tls=False) as server:
        config = ClusterConfig(server=server.url, credentials=Credentials(
            token=f"{SECRET}\r\nX-Injected: 1"))
        async with KubernetesBackend(config) as backend:
            with pytest.raises(BackendAuthError) as caught:
                await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
            assert backend._api.client_lease is not None
            lean = backend._api.client_lease._entry.lean
            assert lean is not None  # the request really went the lean way
            assert lean.connections_opened == 0  # refused before connecting
    assert not isinstance(caught.value, BackendUnavailable)
    assert emulator.requests == []
    _assert_hidden(caught.value, SECRET)


# -- client certificates and keys --------------------------------------------------------------


def _client_files(tmp_path: Path, *, password: bytes | None = None) -> tuple[Path, Path]:
    cert = trustme.CA().issue_cert("client")
    key_pem = cert.private_key_pem.bytes()
    if password is not None:
        key = serialization.load_pem_private_key(key_pem, None)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
    cert_file.write_bytes(cert.cert_chain_pems[0].bytes())
    key_file.write_bytes(key_pem)
    return cert_file, key_file


def _with_client_files(cert_file: Path, key_file: Path) -> ClusterConfig:
    return ClusterConfig(server="https://127.0.0.1:6443", credentials=Credentials(
        client_cert_file=cert_file, client_key_file=key_file))


def test_encrypted_client_key_is_refused_without_prompting(tmp_path: Path) -> None:
    """An encrypted key is a LeaseConfigError at once: OpenSSL is never left to ask a terminal."""
    cert_file, key_file = _client_files(tmp_path, password=b"pass-" + SECRET.encode())
    with pytest.raises(LeaseConfigError, match="passphrase") as caught:
        ssl_context(_with_client_files(cert_file, key_file))
    assert str(key_file) in str(caught.value)


def test_client_key_that_is_not_pem_names_the_file_not_its_content(tmp_path: Path) -> None:
    """A junk key file is named by path; its content never appears."""
    cert_file, key_file = _client_files(tmp_path)
    key_file.write_text(f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n")
    with pytest.raises(LeaseConfigError, match="not a PEM certificate") as caught:
        ssl_context(_with_client_files(cert_file, key_file))
    assert str(key_file) in str(caught.value)
    _assert_hidden(caught.value, SECRET)


def test_missing_client_key_gives_the_os_reason(tmp_path: Path) -> None:
    """A missing key file is named with the OS's reason."""
    cert_file, key_file = _client_files(tmp_path)
    key_file.unlink()
    with pytest.raises(LeaseConfigError, match="No such file"):
        ssl_context(_with_client_files(cert_file, key_file))


def test_ca_file_that_is_not_pem_names_the_file_not_its_content(tmp_path: Path) -> None:
    """A junk CA file is named by path; its content never appears."""
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(f"-----BEGIN CERTIFICATE-----\n{SECRET}\n-----END CERTIFICATE-----\n")
    with pytest.raises(LeaseConfigError, match="not PEM") as caught:
        ssl_context(ClusterConfig(server="https://127.0.0.1:6443", ca_file=ca_file))
    assert str(ca_file) in str(caught.value)
    _assert_hidden(caught.value, SECRET)


@pytest.mark.parametrize("field", ["client_cert_file", "client_key_file"])
def test_client_path_with_a_nul_character_is_a_config_error_naming_the_field(
    tmp_path: Path, field: str
) -> None:
    """A NUL in a hand-built Credentials path: LeaseConfigError naming the field, not ValueError."""
    cert_file, key_file = _client_files(tmp_path)
    if field == "client_cert_file":
        cert_file = tmp_path / "client\0file"
    else:
        key_file = tmp_path / "client\0file"
    with pytest.raises(LeaseConfigError, match=rf"Credentials\.{field}: the path contains a NUL"):
        ssl_context(_with_client_files(cert_file, key_file))


def test_ca_file_with_a_nul_character_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    """A NUL in a hand-built ClusterConfig.ca_file is named as such, not as a PEM problem."""
    config = ClusterConfig(server="https://127.0.0.1:6443", ca_file=tmp_path / "ca\0.crt")
    with pytest.raises(LeaseConfigError, match=r"ClusterConfig\.ca_file: the path contains a NUL"):
        ssl_context(config)


@pytest.mark.parametrize("part", ["certificate", "key"])
def test_client_file_that_is_a_directory_names_which_one(tmp_path: Path, part: str) -> None:
    """A directory given as the certificate or the key: the message says which of the two."""
    cert_file, key_file = _client_files(tmp_path)
    directory = tmp_path / "folder"
    directory.mkdir()
    if part == "certificate":
        cert_file = directory
    else:
        key_file = directory
    with pytest.raises(LeaseConfigError, match=rf"the {part}: Is a directory") as caught:
        ssl_context(_with_client_files(cert_file, key_file))
    assert str(directory) in str(caught.value)


@pytest.mark.parametrize("data", ["certificate", "key"])
def test_client_certificate_data_with_a_key_file_is_loaded(tmp_path: Path, data: str) -> None:
    """client-certificate-data with a client-key file (or the reverse) is loaded, as client-go
    does: here an encrypted key is refused, where nothing at all was loaded before."""
    cert_file, key_file = _client_files(tmp_path, password=b"pass-" + SECRET.encode())
    if data == "certificate":
        creds = Credentials(client_cert_data=cert_file.read_bytes(), client_key_file=key_file)
        label = f"client-certificate-data and '{key_file}'"
    else:
        creds = Credentials(client_cert_file=cert_file, client_key_data=key_file.read_bytes())
        label = f"'{cert_file}' and client-key-data"
    config = ClusterConfig(server="https://127.0.0.1:6443", credentials=creds)
    with pytest.raises(LeaseConfigError, match="passphrase") as caught:
        ssl_context(config)
    assert label in str(caught.value)
    _assert_hidden(caught.value, SECRET)


# -- reprs and logs ----------------------------------------------------------------------------


def test_reprs_show_no_token_key_or_exec_argument(tmp_path: Path) -> None:
    """Configs, credentials, token sources and the auth flow never show a secret in a repr."""
    exec_config = ExecConfig(command="get-token", args=("--client-secret", SECRET),
                             env=(("SECRET", SECRET),))
    creds = Credentials(token=SECRET, client_cert_data=SECRET.encode(),
                        client_key_data=SECRET.encode(), exec=exec_config)
    config = ClusterConfig(server="https://127.0.0.1:6443", credentials=creds,
                           ca_data=SECRET.encode())
    path = tmp_path / "token"
    path.write_text(SECRET)
    shown = [config, creds, exec_config, StaticTokenSource(SECRET), FileTokenSource(path),
             ExecTokenSource(exec_config), KubeAuth(StaticTokenSource(SECRET), creds),
             KubernetesBackend(config)]
    for item in shown:
        assert SECRET not in repr(item), type(item).__name__
    assert "get-token" in repr(exec_config)


async def test_logs_of_a_working_backend_show_no_token(caplog: pytest.LogCaptureFixture) -> None:
    """At DEBUG, every logger (httpx and httpcore included) stays silent about the token."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token(SECRET, "alice", groups=("system:masters",))
    config = ClusterConfig(server="https://127.0.0.1:6443", credentials=Credentials(token=SECRET))
    with caplog.at_level(logging.DEBUG):
        async with KubernetesBackend(config, transport=emulator.transport()) as backend:
            made = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
            got = await backend.get("job")
            assert got is not None and got.version == made.version
    assert SECRET not in caplog.text
    assert len(emulator.requests) == 2  # the token worked

