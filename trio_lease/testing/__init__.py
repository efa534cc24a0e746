"""Tools for testing backends and lease-guarded code.

- :func:`check_backend`: the conformance suite for any :class:`~trio_lease.abc.LeaseBackend`.
- :class:`FaultyBackend`: wraps any backend to inject latency, errors, lost replies and pauses.
- :class:`VirtualTimeEventLoop` and :func:`virtual_time_backends`: virtual time on asyncio and
  trio, so timeout-heavy tests run instantly and deterministically.
- :class:`KubeEmulator`: a Kubernetes API server emulator (in-process transport or a real HTTPS
  server) for testing code that uses the Kubernetes backend; see docs/testing-kube-emulator.md.
"""

from ._conformance import BackendConformanceError as BackendConformanceError
from ._conformance import check_backend as check_backend
from ._faulty import FaultyBackend as FaultyBackend
from ._virtual_time import VirtualTimeEventLoop as VirtualTimeEventLoop
from ._virtual_time import virtual_time_backends as virtual_time_backends
from .kube import KubeEmulator as KubeEmulator

__all__ = [
    "BackendConformanceError",
    "FaultyBackend",
    "KubeEmulator",
    "VirtualTimeEventLoop",
    "check_backend",
    "virtual_time_backends",
]
