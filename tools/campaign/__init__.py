"""Jepsen-style safety campaign for trio_lease.

Worker processes contend for one lease through the public API while a seeded nemesis injects
faults (process kills and pauses, a TCP fault proxy, API-emulator faults, clock-rate skew). Every
worker logs its belief intervals on the system-wide monotonic clock and writes, with its fencing
token, to a fencing store (a separate process that rejects stale tokens). A checker then looks for
overlapping beliefs that no injected fault explains, accepted stale writes and non-increasing
grant tokens, and fails runs whose faults did not bite. Two more modes put the many-holder layer
under the same faults: ``--mode partitioned`` (members of ``run_partitioned`` over K keys) and
``--mode semaphore`` (workers looping ``Semaphore(limit=k).held()``), each with its own checker.

Run ``python -m tools.campaign --help``; docs/reliability.md has the published figures.
"""
