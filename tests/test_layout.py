"""The package's layout (docs/architecture.md): no import circles, and the layers' rules.

Imports are read from the source with :mod:`ast`, so function-local and ``TYPE_CHECKING``-only
imports count too: a circle hidden inside a function is still a circle in the design. A module's
length is not checked here: about 400 lines is a review signal (docs/architecture.md), and a
module is cut by concept, not to fit a count.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trio_lease", "tools")
BACKENDS = "trio_lease.backends"
#: What a backend may import from the rest of the package: the SPI and the shared helpers
#: (wire, HTTP, TLS, secrets, exceptions, settings, paths, request slots, the observer API, the
#: words for a failed connection, the retry backoff, and the event-loop seam, through which a
#: request reads the loop's clock and its caller's deadline without anyio's lookups).
#: Never the lease algorithm, the heartbeat, the shared watch or the public Lease.
BACKEND_MAY_IMPORT = frozenset(
    f"trio_lease.{module}"
    for module in (
        "abc",
        "_abc",
        "_backoff",
        "_exceptions",
        "_namespace",
        "_settings",
        "_wire",
        "_http",
        "_http_errors",
        "_reply",
        "_lean_http",
        "_client_cert",
        "_connect",
        "_endpoints",
        "_secrets",
        "_paths",
        "_toml",
        "_slots",
        "_loops",
        "_observer",
        "_public",
        "_version",
    )
)
#: Imports that break a rule below, each with why it is still there. The test fails when one is
#: gone, so the list only shrinks.
KNOWN_BREAKS: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports (parent packages left out: importing a
    submodule always initialises its parents first, which is not a dependency of design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        for target in targets:
            if target in modules and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_circles() -> None:
    """No module imports one that imports it back, directly or through others."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_circle_check_finds_a_circle() -> None:
    """The check itself: a two-module and a three-module circle are found, a chain is not."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _backend_of(module: str) -> str:
    """``trio_lease.backends.kubernetes._api`` → ``trio_lease.backends.kubernetes``."""
    return ".".join(module.split(".")[:3])


def _rule_breaks(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports breaking the layers: the core (every module of ``trio_lease`` outside
    ``trio_lease.backends``) importing a backend, or a backend importing anything of the core
    but the SPI and the shared helpers (:data:`BACKEND_MAY_IMPORT`) or another backend."""
    breaks = set()
    for module, imported in graph.items():
        if not _in(module, "trio_lease"):
            continue
        for other in imported:
            if not _in(other, "trio_lease"):
                continue
            if not _in(module, BACKENDS):
                if _in(other, BACKENDS):
                    breaks.add((module, other))
            elif _in(other, BACKENDS):
                if other != BACKENDS and _backend_of(other) != _backend_of(module):
                    breaks.add((module, other))
            elif other not in BACKEND_MAY_IMPORT:
                breaks.add((module, other))
    return breaks


def test_core_imports_no_backend_and_backends_import_only_the_spi_and_helpers() -> None:
    """The core imports nothing from backends/; backends import only the SPI and the shared
    helpers from the core, and nothing of another backend (known breaks listed with reasons)."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _rule_breaks(graph) == set(KNOWN_BREAKS)


def test_the_rule_check_finds_each_kind_of_break() -> None:
    """The check itself: a core module importing a backend, a backend importing the algorithm
    or another backend are found; a backend importing the SPI, a helper or itself is not."""
    graph = {
        "trio_lease._provider": {"trio_lease.backends.memory", "trio_lease._abc"},
        "trio_lease.backends.etcd._backend": {
            "trio_lease._abc",
            "trio_lease._wire",
            "trio_lease._algorithm",
            "trio_lease.backends.etcd._client",
            "trio_lease.backends.sqlite._rows",
        },
        "trio_lease.backends.memory": {"trio_lease._exceptions", "trio_lease._heartbeat"},
        "tools.benchmarks._ours": {"trio_lease.backends.kubernetes"},
    }
    assert _rule_breaks(graph) == {
        ("trio_lease._provider", "trio_lease.backends.memory"),
        ("trio_lease.backends.etcd._backend", "trio_lease._algorithm"),
        ("trio_lease.backends.etcd._backend", "trio_lease.backends.sqlite._rows"),
        ("trio_lease.backends.memory", "trio_lease._heartbeat"),
    }


#: What differs per event loop: imported only by the seam (``trio_lease._loops``, one module
#: per loop) and the testing kit.
LOOP_SPECIFIC = ("asyncio", "sniffio", "trio.lowlevel", "uvloop")
MAY_IMPORT_LOOP_SPECIFIC = ("trio_lease._loops", "trio_lease.testing")


def _loop_specific_imports(source: str) -> set[str]:
    """The loop-specific modules ``source`` imports, or reaches as ``trio.lowlevel``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "lowlevel"
            and isinstance(node.value, ast.Name)
            and node.value.id == "trio"
        ):
            names = ["trio.lowlevel"]
        for name in names:
            found.update(m for m in LOOP_SPECIFIC if name == m or name.startswith(m + "."))
    return found


def test_only_the_loop_seam_imports_asyncio_sniffio_or_trios_low_level_api() -> None:
    """Outside ``trio_lease._loops`` (and the testing kit) no module of the package imports
    asyncio, sniffio, uvloop or trio's low-level API: what must differ per loop is in the seam."""
    offenders = {
        (name, imported)
        for name, path in _modules().items()
        if _in(name, "trio_lease")
        and not any(_in(name, allowed) for allowed in MAY_IMPORT_LOOP_SPECIFIC)
        for imported in _loop_specific_imports(path.read_text())
    }
    assert offenders == set()
    seam = {
        imported
        for name, path in _modules().items()
        if _in(name, "trio_lease._loops")
        for imported in _loop_specific_imports(path.read_text())
    }
    assert {"asyncio", "sniffio"} <= seam  # the check reads the seam's own imports


def test_the_loop_import_check_finds_each_form() -> None:
    """The check itself: plain, dotted, from- and function-local imports, and ``trio.lowlevel``
    reached through ``import trio``, are found; anyio and trio's public API are not."""
    source = """
import asyncio
from sniffio import current_async_library
import trio
import anyio.lowlevel

def f():
    import uvloop
    return trio.lowlevel.current_task(), trio.current_time()
"""
    assert _loop_specific_imports(source) == {"asyncio", "sniffio", "uvloop", "trio.lowlevel"}
    assert _loop_specific_imports("import trio\nimport anyio\ntrio.sleep(1)") == set()
