"""How many functions of the package are tangled: radon's cyclomatic grades, per 1,000 functions.

Run from the repository root::

    pip install radon        # a measuring tool only, not a dependency of the project
    python -m tools.complexity

It prints, for the Kubernetes API emulator (``trio_lease/testing/kube``) and for the rest of
``trio_lease``, how many functions and methods there are and how many of them per 1,000 grade C
or worse (cyclomatic complexity above 10) and D or worse (above 20), then lists those functions.
The two parts are counted apart because the emulator answers a large foreign API branch for
branch, while the rest is the library itself; each has its own bound (at most 40 C-or-worse per
1,000 in the emulator, at most 25 and no D-or-worse outside it).

Classes are not counted (radon grades a class by its methods, which are counted); nested
functions count within the function that holds them, as ``radon cc`` shows them by default.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trio_lease"
EMULATOR = PACKAGE / "testing" / "kube"


@dataclass
class Tally:
    """The functions of one part of the package and the tangled ones among them."""

    name: str
    functions: int = 0
    tangled: list[tuple[str, str, int]] = field(default_factory=list)

    def per_thousand(self, worst: str) -> float:
        """How many functions per 1,000 grade ``worst`` or worse."""
        count = sum(1 for _, grade, _ in self.tangled if grade >= worst)
        return 1000 * count / self.functions if self.functions else 0.0


def measure() -> tuple[Tally, Tally]:
    """Grade every function of the package with radon: (inside the emulator, outside it)."""
    # Imported by name so that the project's type check, which runs without radon, passes.
    complexity = importlib.import_module("radon.complexity")
    class_block = importlib.import_module("radon.visitors").Class

    inside, outside = Tally("trio_lease/testing/kube"), Tally("trio_lease outside testing/kube")
    for path in sorted(PACKAGE.rglob("*.py")):
        tally = inside if path.is_relative_to(EMULATOR) else outside
        for block in complexity.cc_visit(path.read_text(encoding="utf-8")):
            if isinstance(block, class_block):
                continue
            tally.functions += 1
            grade = complexity.cc_rank(block.complexity)
            if grade >= "C":
                where = f"{path.relative_to(PACKAGE.parent)}:{block.lineno} {block.fullname}"
                tally.tangled.append((where, grade, block.complexity))
    return inside, outside


def main() -> int:
    """Print both parts' figures and their tangled functions; 2 without radon."""
    if importlib.util.find_spec("radon") is None:
        print("radon is not installed: pip install radon", file=sys.stderr)
        return 2
    for tally in measure():
        print(
            f"{tally.name}: {tally.functions} functions; per 1,000: "
            f"{tally.per_thousand('C'):.1f} C or worse, {tally.per_thousand('D'):.1f} D or worse"
        )
        for where, grade, complexity in sorted(tally.tangled, key=lambda row: -row[2]):
            print(f"    {grade} ({complexity}) {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
