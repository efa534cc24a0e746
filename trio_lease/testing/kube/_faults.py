"""Fault injection: what a flaky network or an overloaded apiserver does to a client.

Every fault can target one client (``token=``: the bearer token it sends; ``None`` targets
everyone), a set of Kubernetes verbs (``verbs={"update"}``; the verbs are get, list, watch,
create, update, patch, delete), one object name (``name=``: the name in the URL, so create
requests, which have none, never match it), and can be limited to the next ``times`` matching
requests. For each request, in this order:

1. *partition* (``partition()``): the request hangs until :meth:`Faults.heal` (like TCP
   retransmitting once the route is back); meanwhile the client's own timeout fires, which is
   the point. The server never saw the request, so its deadline does not apply.
2. authentication (401).
3. Inside the server's request deadline (``?timeout=``, default 60 s, then 504): *pause*
   (``pause()``, until :meth:`Faults.resume`), *errors* that do not commit (``fail(status)``),
   authorization (403), *delay* before commit, the operation itself, *delay* after commit,
   *errors* with ``after_commit=True`` (the write happened, the client sees 500/504: the
   "unknown outcome" case) and *drop_reply* (the write happened, the connection is closed
   without a response).

A watch start goes through partition, authentication, errors (``fail(410)`` forces an expired
watch) and authorization, but not pause, delays or drops. Open watch streams are cut or
expired with :meth:`KubeEmulator.cut_watches` and :meth:`KubeEmulator.expire_watches`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import anyio

__all__ = ["Fault", "Faults"]


@dataclasses.dataclass
class Fault:
    """One injected fault; keep it to :meth:`Faults.remove` it later."""

    kind: str  # "error", "delay" or "drop"
    token: str | None = None
    verbs: frozenset[str] | None = None
    name: str | None = None
    times: int | None = None
    status: int = 0
    seconds: float = 0.0
    after_commit: bool = False
    retry_after: int = 1
    status_shaped: bool = False
    html: bool = False

    def __repr__(self) -> str:  # the token is a secret: never show it
        target = "one client" if self.token is not None else "all clients"
        return (
            f"Fault(kind={self.kind!r}, status={self.status}, seconds={self.seconds}, "
            f"after_commit={self.after_commit}, target={target}, times={self.times})"
        )

    def matches(self, token: str | None, verb: str, name: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.token is not None and self.token != token:
            return False
        if self.verbs is not None and verb not in self.verbs:
            return False
        return self.name is None or self.name == name


_STATUSES = (409, 410, 429, 500, 502, 503, 504)


class Faults:
    """The fault plan of one emulator (``KubeEmulator.faults``)."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._paused = False
        self._partitioned: set[str | None] = set()
        self._waiters: list[anyio.Event] = []

    def _add(self, fault: Fault, verbs: Iterable[str] | None) -> Fault:
        fault.verbs = None if verbs is None else frozenset(verbs)
        self._faults.append(fault)
        return fault

    def fail(
        self,
        status: int,
        *,
        token: str | None = None,
        verbs: Iterable[str] | None = None,
        name: str | None = None,
        times: int | None = None,
        after_commit: bool = False,
        retry_after: int = 1,
        status_shaped: bool = False,
        html: bool = False,
    ) -> Fault:
        """Answer ``status`` (409, 410, 429, 500, 502, 503 or 504) with the server's body for it.

        ``html=True`` answers with an HTML page instead, as a proxy or load balancer in front
        of the apiserver does (502 is only sensible with it).
        410 forces "too old resource version": a watch gets it as an in-stream ERROR event
        (or HTTP 410 with ``watch_expired_status``), other verbs as an HTTP 410 Status.
        429 is plain text with ``Retry-After`` (the priority-and-fairness rejection) unless
        ``status_shaped`` asks for the Status-shaped 429. With ``after_commit`` the operation
        is performed first, so the client cannot know whether its write happened.
        """
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {_STATUSES}, not {status}")
        fault = Fault(
            "error", token, None, name, times, status=status, after_commit=after_commit,
            retry_after=retry_after, status_shaped=status_shaped, html=html,
        )
        return self._add(fault, verbs)

    def delay(
        self,
        seconds: float,
        *,
        after_commit: bool = False,
        token: str | None = None,
        verbs: Iterable[str] | None = None,
        name: str | None = None,
        times: int | None = None,
    ) -> Fault:
        """Add ``seconds`` of latency before the operation commits (or after it)."""
        fault = Fault("delay", token, None, name, times, seconds=seconds, after_commit=after_commit)
        return self._add(fault, verbs)

    def drop_reply(
        self,
        *,
        token: str | None = None,
        verbs: Iterable[str] | None = None,
        name: str | None = None,
        times: int | None = None,
    ) -> Fault:
        """Perform the operation, then close the connection without answering."""
        return self._add(Fault("drop", token, None, name, times, after_commit=True), verbs)

    def remove(self, fault: Fault) -> None:
        """Stop injecting ``fault``."""
        self._faults.remove(fault)

    def clear(self) -> None:
        """Remove every fault, resume, and heal every partition."""
        self._faults.clear()
        self.resume()
        self.heal()

    def pause(self) -> None:
        """Make every request hang until :meth:`resume` (an apiserver stuck on etcd)."""
        self._paused = True

    def resume(self) -> None:
        """Let paused requests continue."""
        self._paused = False
        self._wake()

    def partition(self, token: str | None = None) -> None:
        """Cut one client (or, with no token, every client) off from the server."""
        self._partitioned.add(token)

    def heal(self, token: str | None = None) -> None:
        """End the partition of ``token``; with no token, end every partition."""
        if token is None:
            self._partitioned.clear()
        else:
            self._partitioned.discard(token)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()

    def is_partitioned(self, token: str | None) -> bool:
        return None in self._partitioned or token in self._partitioned

    async def wait_partition(self, token: str | None) -> None:
        """Hang while ``token``'s client is partitioned."""
        while self.is_partitioned(token):
            await self._wait()

    async def wait_pause(self) -> None:
        """Hang while the server is paused."""
        while self._paused:
            await self._wait()

    async def _wait(self) -> None:
        event = anyio.Event()
        self._waiters.append(event)
        await event.wait()

    def take(self, kind: str, after_commit: bool, token: str | None, verb: str, name: str) -> list[Fault]:  # noqa: E501
        """The faults of ``kind`` to apply now, counting each one used.

        Every matching delay applies (they add up); of errors and drops only the first
        matching one applies, since a request ends with one answer.
        """
        chosen = []
        for fault in self._faults:
            if fault.kind == kind and fault.after_commit == after_commit and fault.matches(
                token, verb, name
            ):
                if fault.times is not None:
                    fault.times -= 1
                chosen.append(fault)
                if kind != "delay":
                    break
        return chosen
