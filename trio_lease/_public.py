"""Public names report their public module: ``trio_lease.Lease.__module__ == "trio_lease"``.

Classes and functions live in private modules, one per concept, and public modules re-export
them. :func:`publish`, called at the end of a public module, sets the ``__module__`` of the
classes and functions it exports to that module, so reprs, tracebacks, pickles and
documentation tools name the import users write (trio and anyio do the same). A name exported
by several public modules keeps the first that publishes it (``trio_lease.LeaseRecord``, also
in ``trio_lease.abc``): the package's ``__init__`` runs before any of its submodules.

``typing.get_type_hints`` (and pydantic, for a dataclass inside a model) looks up a class's
string annotations in the module its ``__module__`` names, so they are resolved first, in the
module that defines the class.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping

__all__ = ["publish"]


def publish(namespace: Mapping[str, object]) -> None:
    """Make the classes and functions in ``namespace["__all__"]`` report that module."""
    module = namespace["__name__"]
    exported = namespace["__all__"]
    assert isinstance(module, str) and isinstance(exported, list | tuple)
    for name in exported:
        value = namespace.get(name)  # None for a name imported on first use (PEP 562)
        if not isinstance(value, type | types.FunctionType):
            continue  # a constant or a type alias has no module of its own
        if not _is_private(value.__module__):
            continue  # already published by a more public module
        if isinstance(value, type):
            _resolve_annotations(value)
        value.__module__ = module


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _resolve_annotations(cls: type) -> None:
    """Replace the class's own string annotations by what they name where it was defined."""
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(value, str) for value in own.values()):
        return
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except NameError:  # a name imported for type checking only: unresolvable before, too
        return
    cls.__annotations__ = {name: hints.get(name, value) for name, value in own.items()}
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            field.type = hints.get(field.name, field.type)
