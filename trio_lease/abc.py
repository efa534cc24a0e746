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
from ._streams import Changes as Changes
from ._streams import Emit as Emit

__all__ = [
    "Changes",
    "Emit",
    "LeaseBackend",
    "LeaseRecord",
    "PerNameFeed",
    "Publish",
    "WatchFeed",
    "Watched",
]

_public.publish(globals())  # LeaseBackend, LeaseRecord are trio_lease's already (imported first)
