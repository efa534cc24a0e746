"""Backends shipped with trio_lease: ``memory``, ``sqlite`` (and more as they land).

Each is a compare-and-swap store implementing :class:`trio_lease.abc.LeaseBackend`.
"""
