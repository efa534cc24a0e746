"""Secrets sent, cut by value out of server text (trio_lease._secrets): forms, short secrets,
what is kept. Each test starts from an empty memory (the module's state is process-wide)."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from trio_lease import _secrets
from trio_lease._secrets import SENT_KEPT, redact_sent, remember_sent
from trio_lease.backends.kubernetes import _tokens

#: Non-ASCII, a quote, a slash and a space: every form differs from the secret as sent.
SECRET = 'Zq7-p\u00e4"ss/w\u00f6rd xK9'


@pytest.fixture(autouse=True)
def _empty_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret remembered before the test; the process's memory is back after it."""
    monkeypatch.setattr(_secrets, "_sent", {})
    monkeypatch.setattr(_secrets, "_newest", "")
    monkeypatch.setattr(_secrets, "_forms", ((), ()))


def _hidden(text: str) -> bool:
    """No form of SECRET shows: both its ends, in any case."""
    lowered = text.lower()
    return "zq7-p" not in lowered and "xk9" not in lowered


@pytest.mark.parametrize(
    "form",
    [
        json.dumps(SECRET)[1:-1],  # in a JSON body as we send it (\\u00e4, \\")
        urllib.parse.quote(SECRET, safe=""),  # percent-encoded
        urllib.parse.quote_plus(SECRET),  # a form-encoded body
        urllib.parse.quote(SECRET).lower(),  # lower-case escapes (%c3%a4)
        SECRET.upper(),  # an echo that shouts
    ],
    ids=["json", "percent", "plus", "percent-lower", "upper"],
)
def test_a_secret_is_cut_in_the_forms_a_server_quotes_it(form: str) -> None:
    """JSON escapes, percent-encoding and another letter case are cut as the secret is."""
    remember_sent(SECRET)
    text = redact_sent(f'echo of {{"password":"{form}"}} ends')
    assert _hidden(text)
    assert text == 'echo of {"password":"[redacted]"} ends'


def test_overlapping_secrets_are_cut_whole() -> None:
    """Two secrets whose occurrences overlap are both cut: no piece of either is left."""
    remember_sent("abcdefgh1234")
    remember_sent("gh12345678")
    assert redact_sent("x abcdefgh12345678 y") == "x [redacted] y"


def test_a_short_secret_is_cut_only_as_a_whole_token() -> None:
    """4 to 7 characters: cut where no letter, digit or underscore touches it, kept inside a
    word; under 4: never cut by value (a contraction's "t" stays)."""
    remember_sent("adm1n")
    remember_sent("t")
    assert redact_sent('{"password":"adm1n"} user ADM1N, x-adm1n') == (
        '{"password":"[redacted]"} user [redacted], x-[redacted]'
    )
    assert redact_sent("adm1ns sadm1n adm1n_x") == "adm1ns sadm1n adm1n_x"
    assert redact_sent("can't get t") == "can't get t"


def test_a_secret_in_use_stays_while_others_come_and_go() -> None:
    """Sending a secret again keeps it among the last SENT_KEPT; one not sent again goes."""
    remember_sent("in-use-secret-1")
    remember_sent("idle-secret-22")
    for i in range(SENT_KEPT - 2):  # now SENT_KEPT are kept, the two first the oldest
        remember_sent(f"rotated-secret-a{i}")
    remember_sent("in-use-secret-1")  # sent again: the newest
    for i in range(SENT_KEPT - 2):
        remember_sent(f"rotated-secret-b{i}")
    assert redact_sent("in-use-secret-1 idle-secret-22") == "[redacted] idle-secret-22"
    assert redact_sent("rotated-secret-a0") == "rotated-secret-a0"  # pushed out
    assert redact_sent(f"rotated-secret-b{SENT_KEPT - 3}") == "[redacted]"


def test_kubernetes_token_names_are_the_shared_ones() -> None:
    """kubernetes._tokens re-exports the shared functions: one memory for every backend."""
    assert _tokens.remember_sent is remember_sent
    assert _tokens.redact_sent is redact_sent
