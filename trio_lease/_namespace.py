"""The names of the records a feature makes for itself, out of reach of every user name.

A :class:`~trio_lease.Semaphore`, a :class:`~trio_lease.Group` and
:func:`~trio_lease.run_partitioned` keep their state in ordinary lease records. Those records
are named ``<name>~<role>~<part>``: the feature's name, what the record is for, and which one
(a slot number, a key). The separator :data:`SEPARATOR` is reserved: no lease name, semaphore,
group or partitioned name and no key may contain it (``trio_lease._checks.check_name`` refuses them
with :class:`LeaseConfigError`), so

- no user lease name equals a feature's record name (a user name has no separator, a record
  name has two);
- two feature records are the same only when name, role and part are the same: the name and the
  part hold no separator and the role is one of :data:`ROLES`, so ``<name>~<role>~<part>`` is
  read back one way only.

Before, records were ``<name>.<i>`` and ``<name>.<key>``: the key ``members.0`` of
``run_partitioned(name="p")`` was the group's own slot ``p.members.0``, and ``Lease("p.0")`` was
slot 0 of ``Semaphore("p")``.

Each backend stores the names within its own rules: SQLite and etcd keep them as they are;
Kubernetes maps every name with a separator (``~`` is not allowed in an object name) to a valid
object name with a hash of the whole name, and stores the name itself in an annotation that it
checks on every read (``trio_lease.backends.kubernetes.lease_name_for``), whether or not
``map_names`` is on.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["ROLES", "SEPARATOR", "RecordName", "Role", "record_name"]

#: Joins a record name's parts; never part of a user's name or key.
SEPARATOR: Final = "~"

#: What a feature's record is for: a semaphore's slot, a group's member slot, the member slot of
#: a run_partitioned group, a run_partitioned key.
Role = Literal["slot", "member", "partition-member", "key"]
ROLES: Final[frozenset[str]] = frozenset({"slot", "member", "partition-member", "key"})


class RecordName(str):
    """A record name made by :func:`record_name`: the one kind of lease name that may hold
    :data:`SEPARATOR` (a :class:`~trio_lease.Lease` refuses it in any other name)."""

    __slots__ = ()


def record_name(name: str, role: Role, part: str | int) -> RecordName:
    """The name of the record ``part`` (a slot number or a key) of ``role`` in the feature
    ``name``: ``<name>~<role>~<part>``. ``name`` and ``part`` must have passed
    :func:`check_name`."""
    text = str(part)
    if SEPARATOR in name or SEPARATOR in text or role not in ROLES:
        raise AssertionError(f"not a record of a checked name: {name!r}, {role!r}, {text!r}")
    return RecordName(f"{name}{SEPARATOR}{role}{SEPARATOR}{text}")
