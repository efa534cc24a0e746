"""docs/design.md §3 lists every public signature as the code has it.

The ``python`` block of §3 is a stub: a ``def`` for each function of ``trio_lease.__all__`` and a
``class`` for each class, with ``__init__`` (the constructor as ``inspect.signature(cls)`` gives
it; left out where that takes nothing or cannot be read, as for most exceptions) and each public
method the class itself defines. Parameters are compared by name, kind, default and annotation
(annotations that the code keeps as text, which ``from __future__ import annotations`` makes of
every annotation written in this package), and so is the return annotation and whether the call
is ``async``. A failure names each difference and the line to write in design.md.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import trio_lease

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"

#: Defaults whose repr is not Python: how design.md writes them.
SPELLED = {id(anyio.TASK_STATUS_IGNORED): "anyio.TASK_STATUS_IGNORED"}
#: An annotation the code does not keep as text: not compared.
ANY = "<not compared>"


def _expr(text: str) -> str:
    return ast.unparse(ast.parse(text, mode="eval"))


def _annotation(value: Any) -> str | None:
    if value is inspect.Parameter.empty:
        return None
    if value is None:
        return "None"
    if isinstance(value, str):
        return _expr(value)
    return ANY


def _default(value: Any) -> str | None:
    if value is inspect.Parameter.empty:
        return None
    if id(value) in SPELLED:
        return SPELLED[id(value)]
    return _expr(repr(value))


#: One signature: (async, parameters as (kind, name, annotation, default), return annotation).
Shape = tuple[bool, tuple[tuple[str, str, str | None, str | None], ...], str | None]


def _is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def code_shape(function: Callable[..., Any], signature: inspect.Signature) -> Shape:
    """The shape of a callable of the package."""
    parameters = tuple(
        (p.kind.name, p.name, _annotation(p.annotation), _default(p.default))
        for p in signature.parameters.values()
    )
    return _is_async(function), parameters, _annotation(signature.return_annotation)


def doc_shape(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> Shape:
    """The shape of a stub in design.md (``self`` or ``cls`` of a method left out)."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    rows: list[tuple[str, str, ast.expr | None, ast.expr | None]] = []
    for index, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if index < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        rows.append((kind, arg.arg, arg.annotation, defaults[index]))
    if args.vararg:
        rows.append(("VAR_POSITIONAL", args.vararg.arg, args.vararg.annotation, None))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        rows.append(("KEYWORD_ONLY", arg.arg, arg.annotation, default))
    if args.kwarg:
        rows.append(("VAR_KEYWORD", args.kwarg.arg, args.kwarg.annotation, None))
    if method:
        rows = rows[1:]
    parameters = tuple(
        (
            kind,
            name,
            None if annotation is None else ast.unparse(annotation),
            None if default is None else ast.unparse(default),
        )
        for kind, name, annotation, default in rows
    )
    returns = None if node.returns is None else ast.unparse(node.returns)
    return isinstance(node, ast.AsyncFunctionDef), parameters, returns


def same(code: Shape, doc: Shape) -> bool:
    """Whether the doc's stub says what the code has (annotations the code lacks as text aside)."""
    if code[0] != doc[0] or len(code[1]) != len(doc[1]):
        return False
    for mine, written in zip(code[1], doc[1], strict=True):
        if mine[:2] != written[:2] or mine[3] != written[3]:
            return False
        if mine[2] != ANY and mine[2] != written[2]:
            return False
    return code[2] == ANY or code[2] == doc[2]


def stub(name: str, shape: Shape, *, method: bool) -> str:
    """The line to write in design.md for ``shape``."""
    parts: list[str] = ["self"] if method else []
    keyword_only = False
    for kind, pname, annotation, default in shape[1]:
        if kind == "KEYWORD_ONLY" and not keyword_only:
            parts.append("*")
            keyword_only = True
        text = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(kind, "") + pname
        keyword_only = keyword_only or kind == "VAR_POSITIONAL"
        if annotation not in (None, ANY):
            text += f": {annotation}"
        if default is not None:
            text += f" = {default}" if annotation not in (None, ANY) else f"={default}"
        parts.append(text)
    returns = f" -> {shape[2]}" if shape[2] not in (None, ANY) else ""
    return f"{'async def' if shape[0] else 'def'} {name}({', '.join(parts)}){returns}: ..."


def _constructor(cls: type) -> Shape | None:
    """The constructor's shape, or None where it takes nothing or cannot be read."""
    try:
        signature = inspect.signature(cls)
    except ValueError:  # a builtin's __init__ (an exception that adds nothing)
        return None
    if not signature.parameters:
        return None
    return code_shape(cls, signature.replace(return_annotation=None))


def code_signatures() -> dict[str, tuple[Shape, bool]]:
    """Every public signature of the package: ``Class.method`` or ``function`` → (shape, is a
    method)."""
    found: dict[str, tuple[Shape, bool]] = {}
    for name in trio_lease.__all__:
        obj = getattr(trio_lease, name)
        if inspect.isclass(obj):
            made = _constructor(obj)
            if made is not None:
                found[f"{name}.__init__"] = (made, True)
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                function = (
                    value.__func__ if isinstance(value, classmethod | staticmethod) else value
                )
                if not inspect.isfunction(function):
                    continue
                signature = inspect.signature(function)
                if not isinstance(value, staticmethod):
                    first = next(iter(signature.parameters))
                    signature = signature.replace(
                        parameters=list(signature.parameters.values())[1:]
                    )
                    assert first in ("self", "cls"), (name, attr)
                found[f"{name}.{attr}"] = (code_shape(function, signature), True)
        elif inspect.isfunction(obj):
            found[name] = (code_shape(obj, inspect.signature(obj)), False)
    return found


def section_three() -> str:
    text = DESIGN.read_text()
    start = text.index('<a id="s3"></a>')
    return text[start : text.index('<a id="s4"></a>', start)]


def doc_signatures() -> dict[str, tuple[Shape, bool]]:
    """What design.md §3's code blocks declare, in the same form as :func:`code_signatures`."""
    found: dict[str, tuple[Shape, bool]] = {}
    for block in re.findall(r"```python\n(.*?)```", section_three(), flags=re.S):
        for node in ast.parse(block).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[node.name] = (doc_shape(node, method=False), False)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        static = any(
                            isinstance(d, ast.Name) and d.id == "staticmethod"
                            for d in item.decorator_list
                        )
                        shape = doc_shape(item, method=not static)
                        found[f"{node.name}.{item.name}"] = (shape, True)
    return found


def differences(
    code: dict[str, tuple[Shape, bool]], doc: dict[str, tuple[Shape, bool]]
) -> list[str]:
    """What design.md §3 must change to match the code, one instruction per difference."""
    problems: list[str] = []
    for name, (shape, method) in sorted(code.items()):
        short = name.rpartition(".")[2]
        line = stub(short, shape, method=method)
        owner = name.rpartition(".")[0]
        where = f"under `class {owner}:`" if method else "at the top level"
        if name not in doc:
            problems.append(f"{name} is public but missing: add `{line}` {where}")
        elif not same(shape, doc[name][0]):
            written = stub(short, doc[name][0], method=method)
            problems.append(f"{name} differs: replace `{written}` by `{line}` {where}")
    for name in sorted(doc.keys() - code.keys()):
        problems.append(f"{name} is in design.md §3 but not a public callable: remove it")
    return problems


def test_design_lists_every_public_signature_as_the_code_has_it() -> None:
    """design.md §3's stub block equals inspect.signature of every public callable."""
    problems = differences(code_signatures(), doc_signatures())
    assert not problems, "docs/design.md §3 is out of date:\n" + "\n".join(problems)


def test_the_comparison_catches_each_kind_of_difference() -> None:
    """A changed default, a new keyword, a dropped async, a missing or an extra callable each
    make a difference, with the line to write."""
    code = code_signatures()
    doc = doc_signatures()
    name = "run_singleton"
    is_async, parameters, returns = code[name][0]
    changed_default = tuple(
        (k, n, a, "7.0" if n == "retry_interval" else d) for k, n, a, d in parameters
    )
    new_keyword = (*parameters, ("KEYWORD_ONLY", "extra", "bool", "False"))
    cases = {
        "default": (is_async, changed_default, returns),
        "keyword": (is_async, new_keyword, returns),
        "async": (not is_async, parameters, returns),
    }
    for label, shape in cases.items():
        problems = differences({name: (shape, False)}, {name: doc[name]})
        assert len(problems) == 1, label
        assert problems[0].startswith(f"{name} differs: replace `"), label
        assert stub(name, shape, method=False) in problems[0], label
    before = set(differences(code, doc))
    missing = set(differences({**code, "Lease.extra": ((False, (), "X"), True)}, doc)) - before
    assert missing == {
        "Lease.extra is public but missing: add `def extra(self) -> X: ...` under `class Lease:`"
    }
    extra = set(differences(code, {**doc, "Lease.gone": ((False, (), None), True)})) - before
    assert extra == {"Lease.gone is in design.md §3 but not a public callable: remove it"}
