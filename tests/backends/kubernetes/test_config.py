"""Configuration: explicit, in-cluster, kubeconfig, the precedence between them, and the section."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import pytest
import yaml

from trio_lease import Lease, LeaseConfigError, LeaseProvider
from trio_lease._identity import incarnation
from trio_lease.backends.kubernetes import (
    KubernetesBackend,
    in_cluster_config,
    load_kubeconfig,
    resolve_config,
)
from trio_lease.backends.kubernetes._identity import default_owner

SECRET = "s3cr3t-token-value"


def _service_account(tmp_path: Path, namespace: str | None = "jobs") -> Path:
    root = tmp_path / "sa"
    root.mkdir()
    (root / "token").write_text(SECRET + "\n")
    (root / "ca.crt").write_text("not used here")
    if namespace is not None:
        (root / "namespace").write_text(namespace + "\n")
    return root


def test_in_cluster_reads_env_and_files(tmp_path: Path) -> None:
    """In cluster: host/port from env, token file, CA and the namespace file."""
    root = _service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = in_cluster_config(env, root)
    assert config.server == "https://10.0.0.1:443"
    assert config.namespace == "jobs"
    assert config.credentials.token_file == root / "token"
    assert config.ca_file == root / "ca.crt"


def test_in_cluster_brackets_ipv6_hosts(tmp_path: Path) -> None:
    """An IPv6 KUBERNETES_SERVICE_HOST is bracketed in the URL."""
    root = _service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert in_cluster_config(env, root).server == "https://[fd00::1]:6443"


def test_in_cluster_namespace_precedence(tmp_path: Path) -> None:
    """Namespace: POD_NAMESPACE, then the namespace file, then "default"."""
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}
    root = _service_account(tmp_path)
    assert in_cluster_config({**env, "POD_NAMESPACE": "pods"}, root).namespace == "pods"
    assert in_cluster_config(env, root).namespace == "jobs"
    (root / "namespace").unlink()
    assert in_cluster_config(env, root).namespace == "default"


def test_not_in_cluster_says_what_to_configure(tmp_path: Path) -> None:
    """Without the service env vars, in-cluster configuration explains the alternatives."""
    with pytest.raises(LeaseConfigError, match="server"):
        in_cluster_config({}, tmp_path)


def _kubeconfig(path: Path, **overrides: object) -> Path:
    data: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "dev",
        "clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:6443",
                      "certificate-authority": "ca.pem", "tls-server-name": "kube.local",
                      "proxy-url": "http://127.0.0.1:3128"}}],
        "users": [{"name": "u1", "user": {"token": SECRET, "tokenFile": "tok"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c1", "user": "u1",
                      "namespace": "team"}}],
    }
    data.update(overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_kubeconfig_resolves_relative_paths_and_token_file_wins(tmp_path: Path) -> None:
    """Relative paths resolve against the file; tokenFile wins over token; cluster options read."""
    path = _kubeconfig(tmp_path / "cfg" / "config")
    config = load_kubeconfig([path])
    assert config.server == "https://127.0.0.1:6443"
    assert config.namespace == "team"
    assert config.ca_file == tmp_path / "cfg" / "ca.pem"
    assert config.credentials.token_file == tmp_path / "cfg" / "tok"
    assert config.credentials.token is None
    assert config.tls_server_name == "kube.local"
    assert config.proxy_url == "http://127.0.0.1:3128"


def test_kubeconfig_merge_first_definition_wins(tmp_path: Path) -> None:
    """KUBECONFIG merge: first file to define a name or current-context wins; missing skipped."""
    first = _kubeconfig(tmp_path / "a", clusters=[{"name": "c1", "cluster": {
        "server": "https://127.0.0.2:1"}}], contexts=[], users=[])
    second = _kubeconfig(tmp_path / "b", **{"current-context": "other"})
    config = load_kubeconfig([tmp_path / "missing", first, second])
    assert config.server == "https://127.0.0.2:1"  # c1 from the first file
    assert config.namespace == "team"  # context dev from the second file


def test_kubeconfig_data_fields_win_and_context_selects(tmp_path: Path) -> None:
    """*-data fields win over paths; 'context' picks a non-current context."""
    ca = base64.b64encode(b"PEM").decode()
    path = _kubeconfig(
        tmp_path / "config",
        clusters=[{"name": "c2", "cluster": {"server": "https://127.0.0.1:1",
                   "certificate-authority-data": ca, "certificate-authority": "x.pem"}}],
        users=[{"name": "u2", "user": {"client-certificate-data": ca, "client-key-data": ca}}],
        contexts=[{"name": "ops", "context": {"cluster": "c2", "user": "u2"}}],
    )
    config = load_kubeconfig([path], context="ops")
    assert config.ca_data == b"PEM"
    assert config.ca_file is None
    assert config.credentials.client_cert_data == b"PEM"
    assert config.namespace == "default"


def test_kubeconfig_exec_plugin_is_read(tmp_path: Path) -> None:
    """An exec user is read with its command, args, env and apiVersion."""
    path = _kubeconfig(tmp_path / "config", users=[{"name": "u1", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin",
        "args": ["get-token"], "env": [{"name": "A", "value": "1"}],
        "interactiveMode": "Never"}}}])
    config = load_kubeconfig([path])
    assert config.credentials.exec is not None
    assert config.credentials.exec.command == str(tmp_path / "plugin")
    assert config.credentials.exec.args == ("get-token",)
    assert config.credentials.exec.env == (("A", "1"),)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"current-context": "nope"}, "not defined"),
        ({"clusters": [{"name": "c1", "cluster": {"server": "https://h:1",
          "insecure-skip-tls-verify": True, "certificate-authority": "ca"}}]}, "insecure"),
        ({"users": [{"name": "u1", "user": {"exec": {"command": "x",
          "apiVersion": "client.authentication.k8s.io/v1alpha1"}}}]}, "apiVersion"),
        ({"users": [{"name": "u1", "user": {"username": "a", "password": "b"}}]}, "1.19"),
    ],
)
def test_kubeconfig_errors_name_the_fix(tmp_path: Path, overrides: dict[str, object],
                                        match: str) -> None:
    """Broken kubeconfigs are LeaseConfigErrors that say what is wrong."""
    with pytest.raises(LeaseConfigError, match=match):
        load_kubeconfig([_kubeconfig(tmp_path / "config", **overrides)])


def test_precedence_explicit_then_kubeconfig_then_in_cluster(tmp_path: Path) -> None:
    """explicit server > section kubeconfig > KUBECONFIG > in-cluster > ~/.kube/config."""
    root = _service_account(tmp_path)
    kube = _kubeconfig(tmp_path / "k" / "config")
    cluster_env = {"KUBERNETES_SERVICE_HOST": "10.9.9.9", "KUBERNETES_SERVICE_PORT": "443"}
    home = tmp_path / "home"

    def resolve(section: dict[str, object], env: dict[str, str]) -> str:
        return resolve_config(section, env, service_account_dir=root, home=home).source

    assert resolve({"server": "https://127.0.0.1:1"}, {**cluster_env, "KUBECONFIG": str(kube)}) \
        == "explicit configuration"
    assert resolve({"kubeconfig": str(kube)}, cluster_env).startswith("kubeconfig")
    assert resolve({}, {**cluster_env, "KUBECONFIG": str(kube)}).startswith("kubeconfig")
    assert resolve({}, cluster_env) == "in-cluster"
    assert resolve({"in-cluster": False, "kubeconfig": str(kube)}, cluster_env).startswith("kube")
    with pytest.raises(LeaseConfigError, match="no Kubernetes configuration"):
        resolve({}, {})
    _kubeconfig(home / ".kube" / "config")
    assert resolve({}, {}).startswith("kubeconfig")


def test_section_namespace_overrides_the_source(tmp_path: Path) -> None:
    """The section's namespace wins over the context's."""
    kube = _kubeconfig(tmp_path / "config")
    config = resolve_config({"kubeconfig": str(kube), "namespace": "ops"}, {})
    assert config.namespace == "ops"


def test_from_config_takes_kebab_keys_and_names_bad_ones(tmp_path: Path) -> None:
    """from_config reads the TOML section and rejects an unknown or bad key by name."""
    token = tmp_path / "token"
    token.write_text(SECRET)
    section = {"lease-class": "kubernetes", "server": "https://127.0.0.1:6443",
               "token-file": str(token), "namespace": "jobs", "lease-kind": "akka.io/v1",
               "request-timeout": "2s", "heartbeat-timeout": "120s", "watch": False}
    backend = KubernetesBackend.from_config(section)
    assert backend.namespace == "jobs"
    assert backend.kind.name == "akka.io/v1"
    assert backend.watch_enabled is False
    with pytest.raises(LeaseConfigError, match="'serverr'"):
        KubernetesBackend.from_config({**section, "serverr": "x"})
    with pytest.raises(LeaseConfigError, match="'lease-kind'"):
        KubernetesBackend.from_config({**section, "lease-kind": "v9"})
    with pytest.raises(LeaseConfigError, match="'request-timeout'"):
        KubernetesBackend.from_config({**section, "request-timeout": "soon"})
    with pytest.raises(LeaseConfigError, match="'watch'"):
        KubernetesBackend.from_config({**section, "watch": "yes"})
    with pytest.raises(LeaseConfigError, match="namespace"):
        KubernetesBackend.from_config({**section, "namespace": "Bad_NS"})


def test_secrets_never_appear_in_reprs(tmp_path: Path) -> None:
    """Tokens and keys do not show in the repr of configs or backends."""
    config = resolve_config({"server": "https://127.0.0.1:1", "token": SECRET}, {})
    backend = KubernetesBackend(config)
    assert SECRET not in repr(config)
    assert SECRET not in repr(backend)
    assert SECRET not in repr(config.credentials)


def test_kubeconfig_secrets_never_appear_in_reprs(tmp_path: Path) -> None:
    """A kubeconfig's token, key data and exec plugin arguments and env stay out of reprs."""
    key = base64.b64encode(SECRET.encode()).decode()
    path = _kubeconfig(tmp_path / "config", users=[{"name": "u1", "user": {
        "token": SECRET, "client-certificate-data": key, "client-key-data": key,
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token",
                 "args": [f"--client-secret={SECRET}"], "env": [{"name": "S", "value": SECRET}]},
    }}])
    config = load_kubeconfig([path])
    assert config.credentials.exec is not None
    assert config.credentials.exec.args == (f"--client-secret={SECRET}",)
    for shown in (config, config.credentials, config.credentials.exec, KubernetesBackend(config)):
        assert SECRET not in repr(shown)


def test_default_owner_is_pod_name_and_identity_adds_incarnation() -> None:
    """The default owner is POD_NAME (else the host name); the identity adds the incarnation."""
    assert default_owner({"POD_NAME": "web-7"}) == "web-7"
    assert default_owner({}) == socket.gethostname()
    backend = KubernetesBackend(resolve_config({"server": "https://127.0.0.1:1"}, {}))
    lease = Lease("job", default_owner({"POD_NAME": "web-7"}), backend)
    assert lease.identity == f"web-7_{incarnation()}"



def _provider_section(**extra: object) -> dict[str, object]:
    return {"leases": {"k8s": {"lease-class": "kubernetes", "server": "https://127.0.0.1:6443",
                               "token": SECRET, "heartbeat-timeout": "30s",
                               "heartbeat-interval": "3s", "lease-operation-timeout": "1s",
                               **extra}}}


def test_provider_builds_the_kubernetes_backend_by_name() -> None:
    """lease-class = "kubernetes" in a provider section builds a KubernetesBackend."""
    provider = LeaseProvider(_provider_section(namespace="jobs"))
    lease = provider.get_lease("nightly", "leases.k8s", "me")
    backend = lease.backend
    assert isinstance(backend, KubernetesBackend)
    assert backend.namespace == "jobs"
    assert backend._api.request_timeout == 1.0  # T learnt from the settings


def test_provider_rejects_fractional_durations_and_bad_keys() -> None:
    """A fractional heartbeat-timeout and an unknown backend key are errors naming them."""
    with pytest.raises(LeaseConfigError, match="whole number"):
        LeaseProvider(_provider_section(**{"heartbeat-timeout": "30.5s"})).get_lease(
            "nightly", "leases.k8s", "me")
    with pytest.raises(LeaseConfigError, match="'namepsace'"):
        LeaseProvider(_provider_section(namepsace="jobs")).get_lease("n", "leases.k8s", "me")
