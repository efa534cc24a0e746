"""`import trio_lease` exposes the names of docs/design.md §3; the exception tree is as documented;
public names report public modules, are documented, and the version is the package's."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import types
import typing
from pathlib import Path

import pydantic
import pytest

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
    LeaseRecord,
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
    """Every public name of docs/design.md §3 is importable from trio_lease and in __all__."""
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


#: Every public module: the package, the SPI, the testing kit and each shipped backend.
PUBLIC_MODULES = [
    "trio_lease",
    "trio_lease.abc",
    "trio_lease.backends.memory",
    "trio_lease.backends.sqlite",
    "trio_lease.backends.etcd",
    "trio_lease.backends.kubernetes",
    "trio_lease.testing",
    "trio_lease.testing.kube",
    "trio_lease.tracing",
    "trio_lease.metrics",
    "trio_lease.health",
]
ROOT = Path(__file__).resolve().parents[1]


def _exported(module_name: str) -> dict[str, object]:
    module = importlib.import_module(module_name)
    return {name: getattr(module, name) for name in module.__all__}


def _has_own_module(value: object) -> bool:
    """Classes and functions carry the module they report; constants and aliases do not."""
    return isinstance(value, type | types.FunctionType)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exports_exist_and_report_a_public_module(module_name: str) -> None:
    """Each exported class and function reports a public module exporting it, not a private one."""
    for name, value in _exported(module_name).items():
        if not _has_own_module(value):
            continue
        reported = getattr(value, "__module__", None)
        exporters = [m for m in PUBLIC_MODULES if _exported(m).get(name) is value]
        assert reported in exporters, f"{module_name}.{name} reports {reported!r}"


def test_the_package_exports_report_trio_lease() -> None:
    """Every class and function in trio_lease.__all__ reports trio_lease (SPI names included)."""
    wrong = {
        name: getattr(value, "__module__", None)
        for name, value in _exported("trio_lease").items()
        if _has_own_module(value) and getattr(value, "__module__", None) != "trio_lease"
    }
    assert wrong == {}


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_type_hints_of_public_classes_still_resolve(module_name: str) -> None:
    """typing.get_type_hints works on every exported class, although it reports a new module."""
    for value in _exported(module_name).values():
        if isinstance(value, type):
            typing.get_type_hints(value)


def test_a_public_dataclass_validates_inside_a_pydantic_model() -> None:
    """pydantic resolves LeaseRecord's field types although it reports trio_lease."""
    record = pydantic.TypeAdapter(LeaseRecord).validate_python(
        {"name": "job", "acquired_at": "2024-01-01T00:00:00+00:00"}
    )
    assert record.acquired_at is not None and record.acquired_at.year == 2024


def test_every_package_export_is_documented() -> None:
    """Every name in trio_lease.__all__ appears in README.md or a page of docs/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    missing = [name for name in trio_lease.__all__ if not re.search(rf"\b{name}\b", text)]
    assert missing == []


def test_version_is_the_installed_distributions() -> None:
    """trio_lease.__version__ is what the package metadata says (one place: __init__.py)."""
    assert trio_lease.__version__ == importlib.metadata.version("trio_lease")
