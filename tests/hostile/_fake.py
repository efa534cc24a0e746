"""What both fakes share: the exchange log, the true-store invariants, and replies that are not
answers at all (HTML pages, 5xx, 429s with odd Retry-After, 401/403, redirects, broken sockets).

A fake answers each request either truthfully (from its true store) or with a generated hostile
reply, and logs every exchange with the reply's class and its oracle (:class:`~._checks.Expect`).
Two invariants are checked on the true store itself, whatever the replies said:

- **no takeover before L**: a record :meth:`FakeBase.protect`-ed as held by another owner may
  be overwritten by a contender only once L has passed since the first reply that could have
  shown the contender its version (a write aimed at that version, or at no version, sooner is a
  violation, and is refused);
- **fencing**: every write that makes a new grant (a new holder, or a new token) stores a token
  greater than every token stored before for that lease.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from trio_lease import BackendAuthError, BackendError, BackendUnavailable, LeaseConfigError

from ._checks import Expect, Tally, Truth
from ._server import Reply, Request

__all__ = ["Exchange", "FakeBase", "Protected"]

HTML = (
    b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><center><h1>"
    b"502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n"
)
RETRY_AFTERS = (
    "-1", "NaN", "1e999", "-1e999", "inf", "Wed, 21 Oct 2015 07:28:00 GMT", "garbage", "",
    "99999999999999999999", "0", "0.0001", "1.5e-300", "\u00bd",
)


@dataclasses.dataclass
class Exchange:
    """One request and the reply the fake chose for it."""

    backend: str
    name: str
    verb: str
    arrived: float
    label: str
    expect: Expect
    applied: bool = False
    finished: float | None = None
    excerpt: str = ""

    @property
    def hostile(self) -> bool:
        return self.label != "truthful"


@dataclasses.dataclass
class Protected:
    """A record held by ``holder`` at ``version``, which no contender may take before ``hold``."""

    version: str
    holder: str
    hold: float
    markers: tuple[bytes, ...]
    first_sent: float | None = None


class FakeBase:
    """Exchange log, true-store invariants and the shared hostile replies of a fake server."""

    def __init__(self, rng: random.Random, tally: Tally, *, hostility: float, bound: float) -> None:
        self.rng = rng
        self.tally = tally
        #: Probability that a reply is hostile (0: a truthful server).
        self.hostility = hostility
        #: Generate plausible lies (absent optional fields)? Off where the store's truth is
        #: checked: such a reply is indistinguishable from a true one.
        self.plausible = True
        #: The client's request bound (s): slow drips last a quarter of it, or six times it.
        self.bound = bound
        self.exchanges: list[Exchange] = []
        self.by_key: dict[tuple[str, str], list[Exchange]] = {}
        self.violations: list[str] = []
        self.protected: dict[tuple[str, str], Protected] = {}
        self.max_token: dict[tuple[str, str], int] = {}
        #: Check fencing on the true store (off where the test itself writes arbitrary tokens).
        self.check_fencing = False
        #: Reply classes never generated (for scenarios that need a narrower mix).
        self.excluded: set[str] = set()
        #: Leases whose every write is answered "conflict" (not applied) while reads are true:
        #: a store that cannot be written, which a client must not hammer.
        self.storm: set[tuple[str, str]] = set()
        #: Leases whose every watch stream ends after one bookmark (Kubernetes) or progress
        #: notification (etcd), reads truthful: a watch a client must not reopen in a loop.
        self.watch_storm: set[tuple[str, str]] = set()
        self._seed = rng.random()
        self._rngs: dict[tuple[str, str], random.Random] = {}
        self._key: tuple[str, str] = ("", "")

    def begin(self, key: tuple[str, str]) -> random.Random:
        """Draw this request's reply from the lease's own random stream (and return it).

        Each lease name has its own stream, so the replies one call gets depend on the random seed
        and on that call's requests only, not on how concurrent calls interleave: a failure
        replays with the same seed. Called again after every ``await`` in a handler.
        """
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = random.Random(f"{self._seed}/{key[0]}/{key[1]}")
        self.rng = rng
        self._key = key
        return rng

    async def __call__(self, request: Request, *, socket: bool) -> Reply:
        """Answer one request (the fakes override this)."""
        raise NotImplementedError

    # -- logging ---------------------------------------------------------------------------

    def log(self, exchange: Exchange, reply: Reply, key: tuple[str, str] | None) -> Reply:
        """Record ``exchange``; note when the reply was sent (and whether it showed a version)."""
        if not exchange.excerpt:
            body = reply.body if reply.mode != "stream" else b"(stream)"
            exchange.excerpt = f"{reply.status} {reply.mode} {body[:150]!r}"
        self.exchanges.append(exchange)
        self.by_key.setdefault((exchange.backend, exchange.name), []).append(exchange)
        self.tally.replies[(exchange.backend, exchange.label)] += 1

        def sent(when: float) -> None:
            exchange.finished = when
            if key is not None:
                self.note_sent(key, reply.body, when)

        reply.sent = sent
        return reply

    def note_sent(self, key: tuple[str, str], body: bytes, when: float) -> None:
        guard = self.protected.get(key)
        if guard is not None and guard.first_sent is None and any(
            marker in body for marker in guard.markers
        ):
            guard.first_sent = when

    def hostile_now(self) -> bool:
        if self._key in self.storm or self._key in self.watch_storm:
            return False  # a storm lease reads truthfully: only its writes (watches) misbehave
        return self.rng.random() < self.hostility

    # -- invariants on the true store ------------------------------------------------------

    def protect(self, key: tuple[str, str], truth: Truth, hold: float, markers: tuple[bytes, ...]
                ) -> None:
        self.protected[key] = Protected(truth.version, truth.holder, hold, markers)

    def takeover_too_early(
        self, key: tuple[str, str], against: str | None, holder: str, when: float
    ) -> bool:
        """Record a violation if this write would take a protected record over before L."""
        guard = self.protected.get(key)
        if guard is None or holder == guard.holder:
            return False
        if against not in (guard.version, None, ""):
            return False  # aimed at another version: the compare-and-swap refuses it
        if guard.first_sent is not None and when >= guard.first_sent + guard.hold - 1e-3:
            return False
        seen = (
            "before any reply showed its version"
            if guard.first_sent is None
            else f"{when - guard.first_sent:.3f} s after its version was first sent"
        )
        self.violations.append(
            f"{key[0]} {key[1]!r}: a write taking over {guard.holder!r}'s live record "
            f"(version {guard.version}) arrived {seen}; L is {guard.hold:g} s"
        )
        return True

    def note_change(self, key: tuple[str, str], before: Truth | None, after: Truth | None) -> None:
        """Check fencing on a change of the true store (writes by clients and by the test)."""
        if after is None:
            return
        floor = self.max_token.get(key, 0)
        new_grant = after.holder != "" and (
            before is None or after.holder != before.holder or after.token != before.token
        )
        if self.check_fencing and new_grant and after.token <= floor:
            self.violations.append(
                f"{key[0]} {key[1]!r}: a new grant to {after.holder!r} stored fencing token "
                f"{after.token}, not above the earlier {floor}"
            )
        self.max_token[key] = max(floor, after.token)

    # -- replies that are not answers ------------------------------------------------------

    def not_a_record(
        self, socket: bool, status_body: Any, truthful: Reply | None, base: Truth | None
    ) -> tuple[Reply, str, Expect] | None:
        """:meth:`not_an_answer` where a record belongs, as (reply, label, expect); a reply that
        passes the true one on expects ``base``, the record that one shows."""
        picked = self.not_an_answer(socket, status_body, truthful)
        if picked is None:
            return None
        label, reply, expect = picked
        if expect.kind == "truthful":
            expect = dataclasses.replace(expect, base=base)
        return reply, label, expect

    def not_an_answer(
        self, socket: bool, status_body: Any, truthful: Reply | None
    ) -> tuple[str, Reply, Expect] | None:
        """A hostile reply that carries no record, or None when the draw picks none of them.

        ``status_body(code)`` builds the server's error body for ``code``; ``truthful`` (the
        true reply, if there is one) is what a slow or trailing-garbage reply carries.
        """
        rng = self.rng
        unavailable = (BackendUnavailable,)
        choices: list[tuple[str, float]] = [
            ("html", 1.0), ("5xx", 1.0), ("429", 1.2), ("auth", 0.6), ("redirect", 0.5),
            ("empty", 0.5),
        ]
        if socket:
            choices += [("truncate", 0.6), ("close", 0.5), ("broken", 0.4), ("drip", 0.5),
                        ("informational", 0.2)]
            if truthful is not None:
                choices += [("trailing", 0.3)]
        choices = [c for c in choices if c[0] not in self.excluded]
        if not choices:
            return None
        total = sum(w for _, w in choices)
        point = rng.random() * total
        kind = choices[-1][0]
        for name, weight in choices:
            point -= weight
            if point <= 0:
                kind = name
                break
        if kind == "html":
            status = rng.choice([200, 500, 502, 503, 504])
            reply = Reply(status, HTML, [("Content-Type", "text/html")])
            if status == 200:
                return "html:200", reply, Expect("error", "html:200", errors=unavailable)
            return f"html:{status}", reply, Expect("error", f"html:{status}", errors=unavailable)
        if kind == "5xx":
            status = rng.choice([500, 502, 503, 504])
            body = rng.choice([b"", b"upstream connect error", self_dump(status_body(status))])
            return f"5xx:{status}", Reply(status, body), Expect("error", "5xx", errors=unavailable)
        if kind == "429":
            retry = rng.choice(RETRY_AFTERS)
            body = rng.choice([b"Too many requests, please try again later.\n",
                               self_dump(status_body(429))])
            reply = Reply(429, body, [("Retry-After", retry)])
            return f"429:{retry}", reply, Expect("error", "429", errors=unavailable)
        if kind == "auth":
            status = rng.choice([401, 403])
            body = rng.choice([HTML, b"{}", b"[]", b"not json", b'{"message": ["x"]}',
                               self_dump(status_body(status))])
            reply = Reply(status, body, [("Content-Type", "application/json")])
            return f"auth:{status}", reply, Expect("error", "auth", errors=(BackendAuthError,))
        if kind == "redirect":
            status = rng.choice([301, 302, 303, 307, 308])
            location = rng.choice(
                ["http://127.0.0.1:9/elsewhere", "/elsewhere", "::::", "https://example.invalid/"]
            )
            reply = Reply(status, b"", [("Location", location)])
            return (f"redirect:{status}", reply,
                    Expect("error", "redirect", errors=(BackendError, LeaseConfigError)))
        if kind == "empty":
            status = rng.choice([200, 201, 204])
            return (f"empty:{status}", Reply(status, b""),
                    Expect("error", "empty", errors=(*unavailable, BackendError)))
        if kind == "informational":
            # A 1xx where the final answer belongs, then the connection closes.
            reply = Reply(body=b"HTTP/1.1 100 Continue\r\n\r\n", mode="broken")
            return "informational", reply, Expect("error", "informational", errors=unavailable)
        if kind == "truncate":
            body = truthful.body if truthful is not None and truthful.body else b'{"kind":"Lease"}'
            reply = Reply(200, body, [("Content-Type", "application/json")], mode="truncate")
            return "truncate", reply, Expect("error", "truncate", errors=unavailable)
        if kind == "close":
            return "close", Reply(mode="close"), Expect("error", "close", errors=unavailable)
        if kind == "broken":
            body = rng.choice([b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n",
                               b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
            return "broken", Reply(body=body, mode="broken"), Expect(
                "error", "broken", errors=unavailable)
        if kind == "trailing":
            assert truthful is not None
            reply = dataclasses.replace(truthful, mode="trailing")
            return "trailing", reply, Expect("truthful", "trailing")
        # drip: within the bound (a correct, slow answer) or far beyond it (must time out)
        if truthful is not None and rng.random() < 0.5:
            reply = dataclasses.replace(truthful, mode="drip", drip_seconds=self.bound / 4)
            return "drip:within", reply, Expect("truthful", "drip:within")
        body = truthful.body if truthful is not None and truthful.body else b'{"kind":"Lease"}'
        reply = Reply(200, body, [("Content-Type", "application/json")], mode="drip",
                      drip_seconds=self.bound * 6)
        return "drip:beyond", reply, Expect("error", "drip:beyond", errors=unavailable)


def self_dump(value: Any) -> bytes:
    from ._json import dumps

    return dumps(value)
