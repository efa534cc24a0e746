"""Tools for testing backends and lease-guarded code.

- :func:`check_backend`: the conformance suite for any :class:`~trio_lease.abc.LeaseBackend`.
- :class:`FaultyBackend`: wraps any backend to inject latency, errors, lost replies and pauses.
- :class:`VirtualTimeEventLoop` and :func:`virtual_time_backends`: virtual time on asyncio and
  trio, so timeout-heavy tests run instantly and deterministically.
- :class:`KubeEmulator`: a Kubernetes API server emulator (in-process transport or a real HTTPS
  server) for testing code that uses the Kubernetes backend; see docs/testing-kube-emulator.md.
  It is imported on first use, so ``import trio_lease.testing`` does not load the emulator.
"""

from typing import TYPE_CHECKING, Any

from .. import _public
from ._conformance import BackendConformanceError as BackendConformanceError
from ._conformance import check_backend as check_backend
from ._faulty import FaultyBackend as FaultyBackend
from ._virtual_time import VirtualTimeEventLoop as VirtualTimeEventLoop
from ._virtual_time import virtual_time_backends as virtual_time_backends

if TYPE_CHECKING:
    from .kube import KubeEmulator as KubeEmulator

__all__ = [
    "BackendConformanceError",
    "FaultyBackend",
    "KubeEmulator",
    "VirtualTimeEventLoop",
    "check_backend",
    "virtual_time_backends",
]

_public.publish(globals())  # KubeEmulator is published by trio_lease.testing.kube


def __getattr__(name: str) -> Any:
    """Import the emulator when ``KubeEmulator`` is first used (PEP 562), and keep it."""
    if name != "KubeEmulator":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .kube import KubeEmulator

    globals()[name] = KubeEmulator
    return KubeEmulator


def __dir__() -> list[str]:
    """The module's names, lazy exports included (as if they had been imported eagerly)."""
    return sorted({*globals(), *__all__})
