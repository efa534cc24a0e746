"""Secrets this process sends, cut by their value out of any server text we quote.

A server, or a proxy on the way, may echo what we sent it (a header, the request body) in an
error message, in any form. Every backend that sends a secret remembers it here
(:func:`remember_sent`: a Kubernetes bearer token, an etcd password and auth token) just before
sending it, and every piece of server text a message or a log line quotes goes through
:func:`redact_sent`, which replaces each remembered secret by ``[redacted]``. Redaction runs on
error text only; remembering a secret already the newest is one comparison, so the request
path stays as fast as it was.

What is kept: the latest :data:`SENT_KEPT` distinct secrets sent, process-wide (every backend
shares them), only in memory, least recently sent dropped first; sending a secret again makes
it the newest, so a secret in use is not pushed out by others' rotations. Process-wide on
purpose, unlike the registries kept per event loop (:mod:`._per_loop`): the list holds strings,
not a loop's locks or tasks, a lock guards it across threads, and text quoted on one loop must
have every secret of the process cut, whichever loop sent it (redaction also runs outside any
event loop).

Forms: a secret is also cut as the request carried it or as a server would print it back: JSON
string escapes (``\\u00e4``, ``\\"``, as our request bodies encode it), percent-encoding
(``%2F``, ``+`` for a space), and in any letter case (an echo that upper-cases it). Where two
secrets' occurrences overlap, the union is cut, so no piece of either is left.

Short secrets: a long secret is cut wherever it appears, even inside a word (``x<token>y``). A
short one cannot be: the same few letters occur in ordinary words ("admin", "root", a
contraction's "t"), and cutting those would mangle every message. So:

- :data:`SENT_MIN_LENGTH` (8) characters or more: cut wherever it appears;
- :data:`SENT_MIN_WORD` (4) to 7 characters: cut where it stands as a whole token, not next to
  a letter, digit or underscore (``"password":"admin"``, ``token admin,``, but not inside
  ``administrator``). Where such a secret is also an ordinary word of the server's text, the
  mark shows which word it was; but a secret that is an ordinary word is guessed anyway, and
  quoting it where a server echoes it would be worse;
- 1 to 3 characters: not cut by value at all: that is a fragment of text everywhere (the
  emulator's documented token is ``t``), and a secret that short is found by trying. The
  Kubernetes backend's credential pattern (``Bearer <anything>``, JWTs) still applies to it.
"""

from __future__ import annotations

import json
import threading
import urllib.parse

__all__ = ["SENT_KEPT", "SENT_MIN_LENGTH", "SENT_MIN_WORD", "redact_sent", "remember_sent"]

#: How many of the latest secrets sent are cut by value (token rotations keep old ones valid a
#: while, and every backend of the process shares the list).
SENT_KEPT = 64
#: Secrets this long or longer are cut wherever they appear, even inside a word.
SENT_MIN_LENGTH = 8
#: Secrets this long (up to :data:`SENT_MIN_LENGTH` - 1) are cut only as whole tokens; shorter
#: ones are not cut by value (see the module docstring).
SENT_MIN_WORD = 4

#: The secrets sent lately, least recently sent first; changed only under the lock.
_sent: dict[str, None] = {}
_lock = threading.Lock()
#: The last secret remembered: remembering it again is a no-op (the common case).
_newest = ""
#: What :func:`redact_sent` searches for: (anywhere, whole tokens only), each a tuple of lower-
#: cased forms. Replaced whole, never changed in place, so a reader in another thread's event
#: loop always sees a complete pair.
_forms: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _variants(secret: str) -> set[str]:
    """``secret`` as sent and as a server may print it back, lower-cased."""
    forms = {
        secret,
        json.dumps(secret)[1:-1],  # our JSON bodies (ensure_ascii: non-ASCII as \\uXXXX)
        json.dumps(secret, ensure_ascii=False)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote(secret),
        urllib.parse.quote_plus(secret),
    }
    return {form.lower() for form in forms} | forms


def _build(secrets: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    anywhere: set[str] = set()
    words: set[str] = set()
    for secret in secrets:
        if len(secret) >= SENT_MIN_LENGTH:
            anywhere |= _variants(secret)
        elif len(secret) >= SENT_MIN_WORD:
            words |= _variants(secret)
    return tuple(sorted(anywhere)), tuple(sorted(words))


def remember_sent(secret: str) -> None:
    """Remember a secret this process sends (or is about to), for :func:`redact_sent`.

    Cheap when ``secret`` is already the newest; otherwise it becomes the newest, and the
    oldest beyond :data:`SENT_KEPT` is forgotten.
    """
    global _newest, _forms
    if secret == _newest or not secret:
        return
    with _lock:
        if secret in _sent:
            del _sent[secret]  # moved to the end: the set, and so the forms, are unchanged
            _sent[secret] = None
        else:
            _sent[secret] = None
            while len(_sent) > SENT_KEPT:
                del _sent[next(iter(_sent))]
            _forms = _build(list(_sent))
        _newest = secret


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _spans(haystack: str, forms: tuple[str, ...], *, whole: bool) -> list[tuple[int, int]]:
    """Where each of ``forms`` occurs in ``haystack`` (overlapping occurrences included)."""
    found: list[tuple[int, int]] = []
    end = len(haystack)
    for form in forms:
        start = haystack.find(form)
        while start >= 0:
            stop = start + len(form)
            if not whole or (
                (start == 0 or not _is_word(haystack[start - 1]))
                and (stop == end or not _is_word(haystack[stop]))
            ):
                found.append((start, stop))
            start = haystack.find(form, start + 1)
    return found


def redact_sent(text: str, replacement: str = "[redacted]") -> str:
    """``text`` with every secret :func:`remember_sent` knows replaced by ``replacement``.

    Returns ``text`` itself when it holds none (callers may compare).
    """
    anywhere, words = _forms
    if not (anywhere or words) or not text:
        return text
    lowered = text.lower()
    # Lower-casing keeps positions unless a character changes length (a rare Unicode one): then
    # the search is case-sensitive, still with the lower-cased forms and the secrets as sent.
    haystack = lowered if len(lowered) == len(text) else text
    spans = _spans(haystack, anywhere, whole=False) + _spans(haystack, words, whole=True)
    if not spans:
        return text
    spans.sort()
    pieces: list[str] = []
    done = 0
    for start, stop in spans:
        if stop <= done:
            continue
        if start >= done:
            pieces += [text[done:start], replacement]
        done = stop
    pieces.append(text[done:])
    return "".join(pieces)
