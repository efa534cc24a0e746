"""The ``trio-lease`` command.

``trio-lease run NAME -- CMD...`` runs CMD only while this process holds the lease NAME
(:mod:`._run`, supervising the child in :mod:`._child` and saying what it waits for in
:mod:`._waiting`); ``status`` and ``release --force`` inspect and break leases
(:mod:`._admin`); ``manifests`` prints the Kubernetes objects in ``lease.yml``
(:mod:`._manifests`); ``check`` and ``emulate`` come with the optional parts, registered in
the ``trio_lease.commands`` entry point group (:data:`._main.COMMANDS_GROUP`) by public
functions of ``trio_lease.backends.kubernetes`` and ``trio_lease.testing.kube``. Options and
where they come from (command line, ``TRIO_LEASE_*`` environment, ``--config`` section, CLI
defaults) are in :mod:`._options` (the Kubernetes and etcd ones in :mod:`._backend_flags`); the
entry point and the exit codes in :mod:`._main`.
"""

from __future__ import annotations

from ._main import main as main

__all__ = ["main"]
