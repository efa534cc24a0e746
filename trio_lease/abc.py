"""The public SPI for backend authors: subclass :class:`LeaseBackend`, store :class:`LeaseRecord`.

Prove a backend with :func:`trio_lease.testing.check_backend`.
"""

from . import _public
from ._abc import LeaseBackend as LeaseBackend
from ._abc import LeaseRecord as LeaseRecord

__all__ = ["LeaseBackend", "LeaseRecord"]

_public.publish(globals())  # both are trio_lease's already: it is imported first
