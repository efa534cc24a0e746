"""The Kubernetes and etcd options of the commands that read or write a lease.

kubectl's and etcdctl's names for the same things, each setting one key of the backend's
configuration section (as a LeaseProvider TOML section would); naming one selects its backend
(see :func:`._options.chosen_backend`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["BACKEND_FLAGS", "PASSWORD_VARIABLE", "BackendFlag"]


@dataclasses.dataclass(frozen=True)
class BackendFlag:
    """An option of one backend: its flag, the backend and the section key it sets."""

    backend: str
    dest: str
    key: str
    metavar: str
    help: str

    @property
    def flag(self) -> str:
        return f"--{self.dest.replace('_', '-')}"


#: The Kubernetes and etcd options (kubectl's and etcdctl's names) and the keys they set.
BACKEND_FLAGS: tuple[BackendFlag, ...] = (
    BackendFlag(
        "kubernetes", "kubeconfig", "kubeconfig", "PATH",
        "kubeconfig file (default: KUBECONFIG, in a pod its service account, ~/.kube/config)",
    ),
    BackendFlag(
        "kubernetes", "context", "context", "NAME", "kubeconfig context (default: its current one)"
    ),
    BackendFlag(
        "kubernetes", "namespace", "namespace", "NAMESPACE",
        "namespace of the leases (default: the context's, in a pod its own, else default)",
    ),
    BackendFlag(
        "kubernetes", "lease_kind", "lease-kind", "KIND",
        "coordination.k8s.io/v1 (the built-in Lease, default) or akka.io/v1",
    ),
    BackendFlag(
        "etcd", "endpoints", "endpoints", "URLS",
        "etcd client URLs, comma-separated (e.g. http://127.0.0.1:2379)",
    ),
    BackendFlag(
        "etcd", "prefix", "prefix", "PREFIX", "etcd key prefix of the leases (default: trio_lease/)"
    ),
    BackendFlag(
        "etcd", "user", "username", "NAME",
        "etcd user; its password comes from --password-file or TRIO_LEASE_PASSWORD",
    ),
    BackendFlag(
        "etcd", "password_file", "password-file", "FILE", "file holding the etcd user's password"
    ),
    BackendFlag(
        "etcd", "cacert", "ca-file", "FILE", "CA bundle that signs the etcd members' certificates"
    ),
    BackendFlag("etcd", "cert", "cert-file", "FILE", "client certificate (etcd's TLS client auth)"),
    BackendFlag("etcd", "key", "key-file", "FILE", "the client certificate's private key"),
)

#: The etcd password's variable: never a flag (a command line is visible to every local user).
PASSWORD_VARIABLE = "TRIO_LEASE_PASSWORD"
