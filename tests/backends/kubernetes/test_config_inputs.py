"""Bad configuration inputs are LeaseConfigErrors naming their source, and show no secret.

Paths with ``~nobody`` or a NUL, URLs with a bad port or a password, exec plugins that cannot
be started, hang, or sit next to a kubeconfig named by a relative path, and namespaces from a
kubeconfig context, ``POD_NAMESPACE`` or the service account's namespace file.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
import yaml

from trio_lease import BackendAuthError, LeaseConfigError
from trio_lease.backends.kubernetes._cluster import ClusterConfig, ExecConfig, redact_url
from trio_lease.backends.kubernetes._config import explicit_config, resolve_config
from trio_lease.backends.kubernetes._exec import ExecTokenSource
from trio_lease.backends.kubernetes._kubeconfig import load_kubeconfig
from trio_lease.backends.kubernetes._tokens import FileTokenSource

pytestmark = pytest.mark.anyio

NOBODY = "~no_such_user_trio_lease_test"
PASSWORD = "S3CRET-PASSWORD"
V1 = "client.authentication.k8s.io/v1"
real_time = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


def _kubeconfig(path: Path, cluster: Mapping[str, object] | None = None,
                user: Mapping[str, object] | None = None, namespace: str | None = None) -> Path:
    context: dict[str, object] = {"cluster": "c", "user": "u"}
    if namespace is not None:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "current-context": "x",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user or {"token": "t0k3n-value"}}],
        "contexts": [{"name": "x", "context": context}],
    }))
    return path


def _service_account(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("t0k3n-value\n")
    return tmp_path


IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


# -- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "env", "named"),
    [
        ({"server": "https://127.0.0.1:6443", "ca-file": f"{NOBODY}/ca.crt"}, {}, "'ca-file'"),
        ({"server": "https://127.0.0.1:6443", "token-file": f"{NOBODY}/t"}, {}, "'token-file'"),
        ({"kubeconfig": f"{NOBODY}/kc"}, {}, "'kubeconfig'"),
        ({"kubeconfig": [f"{NOBODY}/kc"]}, {}, "'kubeconfig'"),
        ({}, {"KUBECONFIG": f"{NOBODY}/kc"}, "KUBECONFIG"),
    ],
    ids=["ca-file", "token-file", "kubeconfig", "kubeconfig-list", "KUBECONFIG"],
)
def test_a_path_with_an_unknown_user_names_its_key(
    section: dict[str, object], env: dict[str, str], named: str
) -> None:
    """`~nobody/...` is a LeaseConfigError naming the key or variable, not a RuntimeError."""
    with pytest.raises(LeaseConfigError) as caught:
        resolve_config(section, env=env)
    assert named in str(caught.value) and "no_such_user_trio_lease_test" in str(caught.value)


def test_a_kubeconfig_path_field_with_an_unknown_user_names_the_field(tmp_path: Path) -> None:
    """`certificate-authority: ~nobody/ca` in a kubeconfig names the field and the cluster."""
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": f"{NOBODY}/ca"}
    with pytest.raises(LeaseConfigError, match="certificate-authority in kubeconfig cluster 'c'"):
        load_kubeconfig([_kubeconfig(tmp_path / "kc", cluster=cluster)])


def test_a_token_file_path_with_a_nul_is_a_config_error(tmp_path: Path) -> None:
    """A NUL in `token-file` is refused when the section is read, naming the key."""
    with pytest.raises(LeaseConfigError, match=r"'token-file'.*NUL"):
        explicit_config({"server": "https://127.0.0.1:6443", "token-file": "tok\0en"})


async def test_a_token_file_source_on_a_nul_path_is_a_config_error() -> None:
    """A FileTokenSource built by hand on a NUL path raises LeaseConfigError, not ValueError."""
    with pytest.raises(LeaseConfigError, match=r"token file.*NUL"):
        await FileTokenSource(Path("tok\0en")).token()


# -- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["https://127.0.0.1:abc", "https://127.0.0.1:99999",
                                    "https://127.0.0.1:0", "https://[::1", "https://:443"])
def test_a_malformed_server_url_is_refused_when_configured(tmp_path: Path, server: str) -> None:
    """A bad host or port is refused at once, naming the source (section or kubeconfig)."""
    with pytest.raises(LeaseConfigError, match=r"server URL .*\(explicit configuration\)"):
        explicit_config({"server": server, "token": "t0k3n-value"})
    kubeconfig = _kubeconfig(tmp_path / "kc", cluster={"server": server})
    with pytest.raises(LeaseConfigError, match=r"server URL .*kubeconfig cluster 'c'"):
        load_kubeconfig([kubeconfig])


def test_a_malformed_proxy_url_is_refused_when_configured() -> None:
    """`proxy-url` with a bad port is refused too, naming the key."""
    with pytest.raises(LeaseConfigError, match="proxy-url"):
        explicit_config({"server": "https://127.0.0.1:6443", "proxy-url": "http://h:70000"})


@pytest.mark.parametrize("port", ["abc", "0", "70000", "+1"])
def test_a_bad_in_cluster_service_port_names_the_variable(tmp_path: Path, port: str) -> None:
    """KUBERNETES_SERVICE_PORT that is not a port is refused naming the variable."""
    env = {**IN_CLUSTER, "KUBERNETES_SERVICE_PORT": port}
    with pytest.raises(LeaseConfigError, match="KUBERNETES_SERVICE_PORT"):
        resolve_config({}, env=env, service_account_dir=_service_account(tmp_path))


def test_url_passwords_are_never_shown() -> None:
    """User info in `server` or `proxy-url` is not in the repr, the errors or server_url."""
    config = explicit_config({"server": f"https://admin:{PASSWORD}@127.0.0.1:6443/",
                              "proxy-url": f"http://user:{PASSWORD}@127.0.0.1:3128"})
    assert PASSWORD not in repr(config)
    assert config.server_url == "https://127.0.0.1:6443"
    assert config.proxy_url == f"http://user:{PASSWORD}@127.0.0.1:3128"  # sent to the proxy
    for server in (f"admin:{PASSWORD}@127.0.0.1:6443", f"https://a:{PASSWORD}@127.0.0.1:x"):
        with pytest.raises(LeaseConfigError) as caught:
            explicit_config({"server": server})
        assert PASSWORD not in str(caught.value)
    with pytest.raises(LeaseConfigError) as caught:
        explicit_config({"server": "https://127.0.0.1", "proxy-url": f"ftp://u:{PASSWORD}@h"})
    assert PASSWORD not in str(caught.value)
    assert redact_url(f"http:/u:{PASSWORD}@h/p") == "***@h/p"


# -- exec plugins -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{"env": [{"name": "A=B", "value": "v"}]}, {"env": [{"name": "A", "value": "v\0"}]},
     {"args": ["ok", "bad\0arg"]}],
    ids=["env-name-with-equals", "env-value-with-nul", "arg-with-nul"],
)
def test_an_exec_plugin_that_cannot_be_started_names_the_field(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    """What no process can be given is a LeaseConfigError naming the field, never its value."""
    user = {"exec": {"apiVersion": V1, "command": "/bin/true", **fields}}
    with pytest.raises(LeaseConfigError, match=r"exec\.(env|args)\[\d\].*kubeconfig user 'u'"):
        load_kubeconfig([_kubeconfig(tmp_path / "kc", user=user)])
    with pytest.raises(LeaseConfigError, match=r"exec\.env\[0\]\.name"):
        ExecConfig(command="/bin/true", env=(("A=B", "v"),))


def test_a_relative_exec_command_runs_from_a_relative_kubeconfigs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`command: ./plugin` in `kc` (a relative path) is the plugin next to it, not a PATH name."""
    user = {"exec": {"apiVersion": V1, "command": "./plugin.sh"}}
    _kubeconfig(tmp_path / "kc", user=user)
    monkeypatch.chdir(tmp_path)
    config = load_kubeconfig([Path("kc")])
    assert config.credentials.exec is not None
    assert config.credentials.exec.command == str(tmp_path / "plugin.sh")
    bare = load_kubeconfig([_kubeconfig(tmp_path / "kc2", user={"exec": {
        "apiVersion": V1, "command": "plugin.sh"}})])
    assert bare.credentials.exec is not None and bare.credentials.exec.command == "plugin.sh"


@real_time
async def test_a_hanging_exec_plugin_is_stopped_and_named(tmp_path: Path) -> None:
    """A plugin that never answers fails on its own time limit, before the request's, as a
    BackendAuthError naming the plugin (not a timeout blamed on the API server)."""
    plugin = tmp_path / "hang.sh"
    plugin.write_text("#!/bin/sh\nexec sleep 30\n")
    plugin.chmod(0o755)
    # The request's time: ten times what starting and stopping a process took in this run
    # (at least 0.5 s), so the plugin's limit (90 % of it) has room to stop the plugin on a
    # loaded machine too.
    began = anyio.current_time()
    await anyio.run_process(["/bin/sh", "-c", "true"])
    budget = max(0.5, 10 * (anyio.current_time() - began))
    source = ExecTokenSource(ExecConfig(command=str(plugin)), origin="the test user")
    with anyio.fail_after(budget), pytest.raises(BackendAuthError) as caught:
        await source.token()
    assert f"exec credential plugin {str(plugin)!r} (the test user)" in str(caught.value)
    assert "did not answer" in str(caught.value)


@real_time
async def test_an_exec_plugin_that_answers_in_time_is_not_limited() -> None:
    """A plugin answering within its request's time gives its token as before."""
    answer = json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": {"token": "t0k3n"}})
    source = ExecTokenSource(ExecConfig(command=sys.executable,
                                        args=("-c", f"print({answer!r})")))
    with anyio.fail_after(20):
        assert await source.token() == "t0k3n"


# -- namespaces -------------------------------------------------------------------------------


def test_a_bad_context_namespace_names_the_context(tmp_path: Path) -> None:
    """An invalid namespace from a kubeconfig context names that context and file."""
    kubeconfig = _kubeconfig(tmp_path / "kc", namespace="Team_A")
    with pytest.raises(LeaseConfigError) as caught:
        load_kubeconfig([kubeconfig])
    assert f"context.namespace in kubeconfig context 'x' ({kubeconfig})" in str(caught.value)


@pytest.mark.parametrize(
    ("env", "file", "named"),
    [({"POD_NAMESPACE": "Team_A"}, None, "POD_NAMESPACE"),
     ({}, b"Team_A\n", "the service account's namespace file")],
    ids=["POD_NAMESPACE", "namespace-file"],
)
def test_a_bad_in_cluster_namespace_names_its_source(
    tmp_path: Path, env: dict[str, str], file: bytes | None, named: str
) -> None:
    """An invalid namespace in cluster names POD_NAMESPACE or the namespace file."""
    root = _service_account(tmp_path)
    if file is not None:
        (root / "namespace").write_bytes(file)
    with pytest.raises(LeaseConfigError, match=named):
        resolve_config({}, env={**IN_CLUSTER, **env}, service_account_dir=root)


def test_a_bad_section_namespace_names_the_section() -> None:
    """The section's `namespace` replacing the source's is named as the section's."""
    with pytest.raises(LeaseConfigError, match="'namespace' in the kubernetes section"):
        resolve_config({"server": "https://127.0.0.1:6443", "namespace": "Team_A"}, env={})


def test_a_namespace_file_that_is_not_utf8_is_an_error_not_default(tmp_path: Path) -> None:
    """A namespace file that cannot be decoded is an error naming it, never `default`."""
    root = _service_account(tmp_path)
    (root / "namespace").write_bytes(b"team-\xe9\n")
    with pytest.raises(LeaseConfigError, match=f"namespace file {root / 'namespace'}"):
        resolve_config({}, env=IN_CLUSTER, service_account_dir=root)


def test_namespace_source_does_not_change_equality() -> None:
    """Where the namespace came from is for messages only: equal configurations stay equal."""
    config = ClusterConfig(server="https://127.0.0.1:6443", namespace="jobs")
    assert dataclasses.replace(config, namespace_source="POD_NAMESPACE") == config
