"""`import trio_lease` exposes the names of DESIGN §3; the exception tree is as documented."""

from __future__ import annotations

import trio_lease
from trio_lease import (
    AcquireTimeout,
    BackendAuthError,
    BackendError,
    BackendUnavailable,
    ConflictError,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseLost,
)

DESIGN_NAMES = {
    "Lease",
    "Grant",
    "LeaseSettings",
    "LeaseProvider",
    "run_singleton",
    "LeaseError",
    "LeaseLost",
    "LeaseBusy",
    "AcquireTimeout",
    "LeaseConfigError",
    "BackendError",
    "ConflictError",
    "BackendUnavailable",
    "BackendAuthError",
}


def test_design_names_are_exported() -> None:
    """Every public name of DESIGN §3 is importable from trio_lease and listed in __all__."""
    missing = {name for name in DESIGN_NAMES if not hasattr(trio_lease, name)}
    assert missing == set()
    assert set(trio_lease.__all__) >= DESIGN_NAMES


def test_exception_tree() -> None:
    """One tree rooted at LeaseError, with the documented extra bases."""
    for exc in (LeaseLost, LeaseBusy, AcquireTimeout, LeaseConfigError, BackendError):
        assert issubclass(exc, LeaseError)
    for exc in (ConflictError, BackendUnavailable, BackendAuthError):
        assert issubclass(exc, BackendError)
    assert issubclass(AcquireTimeout, TimeoutError)
    assert issubclass(LeaseConfigError, ValueError)


def test_spi_is_public() -> None:
    """Backend authors import LeaseBackend and LeaseRecord from trio_lease.abc."""
    from trio_lease.abc import LeaseBackend, LeaseRecord

    assert LeaseBackend is trio_lease.LeaseBackend
    assert LeaseRecord is trio_lease.LeaseRecord
