"""Label selectors, parsed and matched as ``apimachinery/pkg/labels/selector.go`` does.

The same lexer (special symbols ``= ! ( ) , > <``, the keywords ``in`` and ``notin``), the
same grammar (``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``,
``k>1``, ``k<1``) and the same error texts, which the list handler sends as a 400
``BadRequest`` Status (``unable to parse requirement: found '', expected: identifier``). Keys
are checked as ``IsQualifiedName`` and values as ``IsValidLabelValue`` do
(``apimachinery/pkg/util/validation``).
"""

from __future__ import annotations

import dataclasses

from ._metadata import LABEL_VALUE_MSG, LABEL_VALUE_RE, qualified_name_errors
from ._status import ApiError

__all__ = ["LabelRequirement", "parse_labels"]

_SPECIAL = "=!(),><"
_TOKENS = {")": ")", ",": ",", "!": "!", "==": "==", "=": "=", ">": ">", "in": "in", "<": "<",
           "!=": "!=", "notin": "notin", "(": "("}
_OPERATORS = "in, notin, =, ==, !=, gt, lt"
_ID, _END, _ERROR = "id", "end", "error"

class _SelectorError(Exception):
    pass


def _go_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _lex(text: str) -> list[tuple[str, str]]:
    """The scanned items of ``Parser.scan``: (token, literal), ending with the end token."""
    items: list[tuple[str, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            items.append((_END, ""))
            return items
        if text[pos] in _SPECIAL:
            buffer, last = "", ("", "")
            while pos < len(text) and text[pos] in _SPECIAL:
                buffer += text[pos]
                if buffer in _TOKENS:
                    last = (_TOKENS[buffer], buffer)
                    pos += 1
                elif last[0]:
                    break
                else:
                    pos += 1
            if not last[0]:
                items.append((_ERROR, f"error expected: keyword found '{buffer}'"))
            else:
                items.append(last)
            continue
        start = pos
        while pos < len(text) and text[pos] not in _SPECIAL and text[pos] not in " \t\r\n":
            pos += 1
        word = text[start:pos]
        items.append((_TOKENS.get(word, _ID) if word in ("in", "notin") else _ID, word))


@dataclasses.dataclass(frozen=True)
class LabelRequirement:
    """One requirement: ``key``, an operator (``=``, ``!=``, ``in``, ...) and its values."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator in ("in", "=", "=="):
            return present and value in self.values
        if self.operator in ("notin", "!="):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return present and (number > bound if self.operator == "gt" else number < bound)


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        return self._as(self.items[self.pos], values)

    def consume(self, values: bool = True) -> tuple[str, str]:
        self.pos += 1
        return self._as(self.items[self.pos - 1], values)

    @staticmethod
    def _as(item: tuple[str, str], values: bool) -> tuple[str, str]:
        tok, lit = item
        if values and tok in ("in", "notin"):
            return _ID, lit
        return tok, lit

    def parse(self) -> list[LabelRequirement]:
        requirements: list[LabelRequirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok == _END:
                return requirements
            if tok not in (_ID, "!"):
                raise _SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self.requirement())
            except _SelectorError as exc:
                raise _SelectorError(f"unable to parse requirement: {exc}") from None
            tok, lit = self.consume()
            if tok == _END:
                return requirements
            if tok != ",":
                raise _SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok2, lit2 = self.lookahead()
            if tok2 not in (_ID, "!"):
                raise _SelectorError(f"found '{lit2}', expected: identifier after ','")

    def requirement(self) -> LabelRequirement:
        operator = ""
        tok, key = self.consume()
        if tok == "!":
            operator = "!"
            tok, key = self.consume()
        if tok != _ID:
            raise _SelectorError(f"found '{key}', expected: identifier")
        _check_key(key)
        if self.lookahead()[0] in (_END, ","):
            return _requirement(key, operator or "exists", ())
        if operator == "!":  # "!a=b": the "=" is then not a ',' or the end (as in Go)
            return _requirement(key, "!", ())
        tok, lit = self.consume(values=False)
        ops = {"in": "in", "notin": "notin", "=": "=", "==": "==", "!=": "!=", ">": "gt",
               "<": "lt"}
        if tok not in ops:
            raise _SelectorError(f"found '{lit}', expected: {_OPERATORS}")
        operator = ops[tok]
        values = self.set_values() if operator in ("in", "notin") else self.exact_value()
        return _requirement(key, operator, tuple(sorted(values)))

    def set_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != "(":
            raise _SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok == ")":
            self.consume()
            return {""}
        if tok not in (_ID, ","):
            raise _SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        found: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _ID:
                found.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == ",":
                    continue
                if tok2 == ")":
                    break
                raise _SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == ",":
                if not found:
                    found.add("")
                tok2 = self.lookahead()[0]
                if tok2 == ")":
                    found.add("")
                    break
                if tok2 == ",":
                    found.add("")
                continue
            raise _SelectorError(f"found '{lit}', expected: ',', or identifier")
        if self.consume()[0] != ")":
            raise _SelectorError(f"found '{lit}', expected: ')'")
        return found

    def exact_value(self) -> set[str]:
        if self.lookahead()[0] in (_END, ","):
            return {""}
        tok, lit = self.consume()
        if tok == _ID:
            return {lit}
        raise _SelectorError(f"found '{lit}', expected: identifier")


def _check_key(key: str) -> None:
    errors = qualified_name_errors(key)
    if errors:
        raise _SelectorError(f"<nil>: Invalid value: {_go_quote(key)}: " + "; ".join(errors))


def _requirement(key: str, operator: str, values: tuple[str, ...]) -> LabelRequirement:
    """``NewRequirement``: the value checks, joined as an aggregate error."""
    errors: list[str] = []
    if operator in ("gt", "lt"):
        for i, value in enumerate(values):
            try:
                int(value)
            except ValueError:
                errors.append(
                    f"values[{i}]: Invalid value: {_go_quote(value)}: for 'Gt', 'Lt' operators, "
                    "the value must be an integer"
                )
    for i, value in enumerate(values):
        problems = []
        if len(value) > 63:
            problems.append("must be no more than 63 characters")
        if not LABEL_VALUE_RE.match(value):
            problems.append(LABEL_VALUE_MSG)
        if problems:
            errors.append(
                f"values[{i}][{key}]: Invalid value: {_go_quote(value)}: " + "; ".join(problems)
            )
    if errors:
        raise _SelectorError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return LabelRequirement(key, operator, values)


def parse_labels(text: str) -> tuple[LabelRequirement, ...]:
    """The requirements of a ``labelSelector`` (sorted by key); 400 BadRequest if malformed."""
    try:
        requirements = _LabelParser(text).parse()
    except _SelectorError as exc:
        raise ApiError.bad_request(str(exc)) from None
    return tuple(sorted(requirements, key=lambda r: r.key))
