"""``trio-lease manifests``: print ``lease.yml``, the Kubernetes objects both lease kinds need.

``lease.yml`` holds the ``akka.io/v1`` Lease CustomResourceDefinition and a Role and RoleBinding
for ``leases`` in both API groups. It ships inside the package (``trio_lease/manifests/``; the
repository's root ``lease.yml`` is a link to it), so an installed user can apply it without a
checkout: ``trio-lease manifests | kubectl apply -f -``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import Any

__all__ = ["add_manifests_command", "lease_yml"]


def add_manifests_command(commands: Any) -> None:
    """Register ``manifests`` on the ``trio-lease`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "manifests",
        help="print lease.yml (the akka.io/v1 Lease CRD and the RBAC Role and RoleBinding)",
        description="Print lease.yml, e.g. trio-lease manifests | kubectl apply -f -",
    )
    parser.set_defaults(func=print_manifests)


def lease_yml() -> bytes:
    """The bytes of the ``lease.yml`` shipped in the package."""
    return (resources.files("trio_lease") / "manifests" / "lease.yml").read_bytes()


def print_manifests(args: argparse.Namespace) -> int:
    """Write ``lease.yml`` to stdout byte for byte; 0."""
    sys.stdout.flush()
    sys.stdout.buffer.write(lease_yml())
    sys.stdout.buffer.flush()
    return 0
