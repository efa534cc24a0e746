"""``trio_lease._wire.load_json``: strings that are not Unicode text never enter the process.

JSON may escape a lone UTF-16 surrogate (``"\\ud800"``) and Python's decoder accepts it, but no
such string can be encoded again as UTF-8: kept as the base of a PUT, it made the write raise an
untyped ``UnicodeEncodeError``. ``load_json`` refuses it, in a key or a value at any depth, as it
refuses any other malformed reply: a :class:`BackendProtocolError`.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_lease import BackendProtocolError
from trio_lease._wire import load_json

REFUSED = [
    (b'{"a": "\\ud800"}', "a lone high surrogate"),
    (b'{"a": "x\\udc00y"}', "a lone low surrogate"),
    (b'{"a": "\\uD800"}', "upper-case hex"),
    (b'{"a": [{"b": {"\\udfff": 1}}]}', "in a key, deep down"),
    (b'{"a": "\\udc00\\ud800"}', "a pair in the wrong order"),
    (b'{"a": "\\ud800\\u0041"}', "a high surrogate followed by another escape"),
    (b'{"a": "\\ud800\\ud800\\udc00"}', "a high surrogate before a pair"),
    (b'{"a": "\\\\\\ud800"}', "an escaped backslash, then a real escape"),
    (b'{"a": "\\ud800\\\\udc00"}', "a high surrogate, then the text \\udc00"),
    (b'{"a": "\xed\xa0\x80"}', "a surrogate encoded as UTF-8 bytes"),
    ('{"a": "\ud800"}', "a str holding a lone surrogate"),
]

ACCEPTED = [
    (b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a pair is one character
    (b'{"a": "\\uD83D\\uDE00"}', {"a": "\U0001f600"}),
    (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, then text
    (b'{"a": "\\u00e9\\n\\"\\\\"}', {"a": 'é\n"\\'}),
    ('{"a": "é"}'.encode(), {"a": "é"}),
]


@pytest.mark.parametrize(("body", "why"), REFUSED, ids=[why for _, why in REFUSED])
def test_lone_surrogates_are_a_protocol_error(body: bytes | str, why: str) -> None:
    """A lone surrogate anywhere (escaped, encoded, or in a str) is a BackendProtocolError."""
    with pytest.raises(BackendProtocolError, match="the reply") as info:
        load_json(body, "the reply")
    assert "outcome is unknown" in str(info.value)


@pytest.mark.parametrize(("body", "value"), ACCEPTED)
def test_valid_text_with_escapes_is_read(body: bytes, value: object) -> None:
    """Surrogate pairs, escaped backslashes and other escapes still read as before."""
    assert load_json(body, "the reply") == value


def _lone(value: object) -> bool:
    """The truth, by walking the decoded value: a surrogate left in any key or string."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_lone(k) or _lone(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone(item) for item in value)
    return False


_PIECES = st.sampled_from(
    ["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud83d", "\\ude00", "\\\\", "\\u0041",
     "\\n", "\\\"", "u", "d800", "a", "é", "\\uD834", "\\uDD1E"]
)


@given(st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=3))
def test_the_escape_scan_agrees_with_the_decoded_value(strings: list[str]) -> None:
    """Whatever the escapes, load_json refuses exactly the texts whose decoded value holds a
    lone surrogate (the scan of escapes is checked against a walk of the value)."""
    body = "{" + ", ".join(f'"k{i}": ["{s}", {{"{s}": 1}}]' for i, s in enumerate(strings)) + "}"
    truth = _lone(json.loads(body))
    try:
        load_json(body.encode(), "the reply")
    except BackendProtocolError:
        assert truth, body
    else:
        assert not truth, body


@pytest.mark.parametrize(
    "encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32",
                 "utf-32-le", "utf-32-be"],
)
@pytest.mark.parametrize("text", ['{"a": "é"}', "{}", '["x", {"b": 1}]', "7"])
def test_every_encoding_json_allows_reads_as_json_loads_reads_it(text: str, encoding: str) -> None:
    """The encodings JSON allows (RFC 8259 §8.1; ``json.detect_encoding``) read as the standard
    library reads them; an object's bytes, read as UTF-8 without that detection, among them."""
    data = text.encode(encoding)
    assert load_json(data, "the reply") == json.loads(data)


def test_an_objects_bytes_that_are_not_utf8_are_refused() -> None:
    """The bytes of an object are read as strict UTF-8: invalid ones are refused, named so."""
    with pytest.raises(BackendProtocolError, match="is not valid UTF-8"):
        load_json(b'{"a": "\xff"}', "the reply")
