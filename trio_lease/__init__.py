"""trio_lease: distributed leases for structured-concurrency Python (trio and asyncio)."""

from . import _public
from ._abc import LeaseBackend as LeaseBackend
from ._abc import LeaseRecord as LeaseRecord
from ._exceptions import AcquireTimeout as AcquireTimeout
from ._exceptions import BackendAuthError as BackendAuthError
from ._exceptions import BackendError as BackendError
from ._exceptions import BackendProtocolError as BackendProtocolError
from ._exceptions import BackendUnavailable as BackendUnavailable
from ._exceptions import ConflictError as ConflictError
from ._exceptions import LeaseBusy as LeaseBusy
from ._exceptions import LeaseConfigError as LeaseConfigError
from ._exceptions import LeaseError as LeaseError
from ._exceptions import LeaseLost as LeaseLost
from ._grant import Grant as Grant
from ._group import Group as Group
from ._group import Membership as Membership
from ._lease import Lease as Lease
from ._observer import LeaseInfo as LeaseInfo
from ._observer import LeaseObserver as LeaseObserver
from ._observer import add_observer as add_observer
from ._observer import remove_observer as remove_observer
from ._partitioned import run_partitioned as run_partitioned
from ._provider import LeaseProvider as LeaseProvider
from ._semaphore import Semaphore as Semaphore
from ._semaphore import SemaphoreGrant as SemaphoreGrant
from ._settings import LeaseSettings as LeaseSettings
from ._singleton import Following as Following
from ._singleton import Leading as Leading
from ._singleton import Singleton as Singleton
from ._singleton import SingletonContext as SingletonContext
from ._singleton import SingletonState as SingletonState
from ._singleton import Stopped as Stopped
from ._singleton import Stopping as Stopping
from ._singleton import run_singleton as run_singleton
from ._version import __version__ as __version__

__all__ = [
    "AcquireTimeout",
    "BackendAuthError",
    "BackendError",
    "BackendProtocolError",
    "BackendUnavailable",
    "ConflictError",
    "Following",
    "Grant",
    "Group",
    "Leading",
    "Lease",
    "LeaseBackend",
    "LeaseBusy",
    "LeaseConfigError",
    "LeaseError",
    "LeaseInfo",
    "LeaseLost",
    "LeaseObserver",
    "LeaseProvider",
    "LeaseRecord",
    "LeaseSettings",
    "Membership",
    "Semaphore",
    "SemaphoreGrant",
    "Singleton",
    "SingletonContext",
    "SingletonState",
    "Stopped",
    "Stopping",
    "add_observer",
    "remove_observer",
    "run_partitioned",
    "run_singleton",
]

_public.publish(globals())
