"""``trio-lease manifests``: print the Kubernetes objects the Kubernetes backend needs.

Without options it prints ``lease.yml`` as shipped: the ``akka.io/v1`` Lease
CustomResourceDefinition and a Role and RoleBinding for ``leases`` in both API groups, with
placeholders (namespace and service account ``default``). It ships inside the package
(``trio_lease/manifests/``; the repository's root ``lease.yml`` is a link to it), so an installed
user can apply it without a checkout: ``trio-lease manifests | kubectl apply -f -``.

With ``--namespace``, ``--service-account``, ``--lease-kind`` or ``--events`` it prints exactly
what that setup needs: the Role's rule for the chosen lease kind only (default: the built-in
``coordination.k8s.io/v1`` Lease), the CRD only for ``akka.io/v1``, and the rule for Events only
with ``--events`` (for ``KubernetesEvents``), in the namespace and for the service account given.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from typing import Any

__all__ = ["add_manifests_command", "lease_yml", "manifests_for"]

#: The lease kinds ``--lease-kind`` takes, with their API group.
LEASE_KINDS = {"coordination.k8s.io/v1": "coordination.k8s.io", "akka.io/v1": "akka.io"}
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _namespace(value: str) -> str:
    """An argparse type: a namespace name (a DNS-1123 label)."""
    if not _LABEL.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a valid namespace: lowercase letters, digits and '-', starting "
            "and ending with a letter or digit, at most 63 characters"
        )
    return value


def _service_account(value: str) -> str:
    """An argparse type: a service account name (a DNS-1123 subdomain)."""
    if len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a valid service account name: lowercase letters, digits, '-' "
            "and '.', starting and ending with a letter or digit, at most 253 characters"
        )
    return value


def _lease_kind(value: str) -> str:
    """An argparse type: one of :data:`LEASE_KINDS`."""
    if value not in LEASE_KINDS:
        raise argparse.ArgumentTypeError(f"use {' or '.join(LEASE_KINDS)}, got {value!r}")
    return value


def add_manifests_command(commands: Any) -> None:
    """Register ``manifests`` on the ``trio-lease`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "manifests",
        help="print the Kubernetes objects the Kubernetes backend needs (RBAC, the akka.io CRD)",
        description=(
            "Print the Kubernetes objects the Kubernetes backend needs, e.g. trio-lease "
            "manifests --namespace jobs --service-account worker | kubectl apply -f -. Without "
            "options: lease.yml as shipped (both lease kinds, namespace and service account "
            "'default' as placeholders)."
        ),
    )
    parser.add_argument(
        "--namespace", type=_namespace, help="namespace of the leases and the service account"
    )
    parser.add_argument(
        "--service-account", type=_service_account, help="service account the pods run as"
    )
    parser.add_argument(
        "--lease-kind",
        type=_lease_kind,
        help="coordination.k8s.io/v1 (the built-in Lease, default) or akka.io/v1 (adds the CRD)",
    )
    parser.add_argument(
        "--events", action="store_true", help="also allow creating Events (KubernetesEvents)"
    )
    parser.set_defaults(func=print_manifests)


def lease_yml() -> bytes:
    """The bytes of the ``lease.yml`` shipped in the package."""
    return (resources.files("trio_lease") / "manifests" / "lease.yml").read_bytes()


def _crd() -> str:
    """The ``akka.io/v1`` Lease CRD, the first object of ``lease.yml``, without its comments."""
    first = lease_yml().decode().split("\n---\n")[0]
    return first[first.index("apiVersion:") :].rstrip("\n") + "\n"


def manifests_for(
    namespace: str = "default",
    service_account: str = "default",
    lease_kind: str = "coordination.k8s.io/v1",
    *,
    events: bool = False,
) -> str:
    """The objects one setup needs: the CRD for ``akka.io/v1``, a Role with the rule for
    ``lease_kind`` (and Events with ``events``), and its RoleBinding to the service account."""
    group = LEASE_KINDS[lease_kind]
    documents = [_crd()] if lease_kind == "akka.io/v1" else []
    rules = (
        f'  - apiGroups: ["{group}"]\n'
        '    resources: ["leases"]\n'
        '    verbs: ["get", "create", "update", "watch", "list"]\n'
    )
    if events:
        rules += (
            '  - apiGroups: ["events.k8s.io"]\n    resources: ["events"]\n    verbs: ["create"]\n'
        )
    documents.append(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n"
        f"  name: trio-lease\n  namespace: {namespace}\nrules:\n{rules}"
    )
    documents.append(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n"
        f"  name: trio-lease\n  namespace: {namespace}\nsubjects:\n"
        f"  - kind: ServiceAccount\n    name: {service_account}\n    namespace: {namespace}\n"
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: trio-lease\n"
    )
    header = (
        f"# trio_lease: what the Kubernetes backend needs for {lease_kind} leases in namespace "
        f"{namespace}\n# (printed by trio-lease manifests)\n"
    )
    return header + "---\n".join(documents)


def print_manifests(args: argparse.Namespace) -> int:
    """Write the manifests to stdout (``lease.yml`` byte for byte without options); 0."""
    chosen = (args.namespace, args.service_account, args.lease_kind)
    if all(value is None for value in chosen) and not args.events:
        sys.stdout.flush()
        sys.stdout.buffer.write(lease_yml())
        sys.stdout.buffer.flush()
        return 0
    print(
        manifests_for(
            args.namespace or "default",
            args.service_account or "default",
            args.lease_kind or "coordination.k8s.io/v1",
            events=args.events,
        ),
        end="",
    )
    return 0
