"""The public SPI for backend authors: subclass :class:`LeaseBackend`, store :class:`LeaseRecord`.

Prove a backend with :func:`trio_lease.testing.check_backend`.
"""

from . import _public
from ._abc import LeaseBackend as LeaseBackend
from ._abc import LeaseRecord as LeaseRecord
from ._abc import Publish as Publish
from ._abc import Watched as Watched
from ._abc import WatchFeed as WatchFeed
from ._feed import PerNameFeed as PerNameFeed

__all__ = ["LeaseBackend", "LeaseRecord", "PerNameFeed", "Publish", "WatchFeed", "Watched"]

_public.publish(globals())  # LeaseBackend, LeaseRecord are trio_lease's already (imported first)
