"""tools/benchmarks/_instructions.py: its worker (run here without valgrind, which only counts
what it does) and the arithmetic of its result."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tools.benchmarks._instructions import (
    ALLOCATORS,
    LAYERS,
    callers_of,
    collected,
    per_write,
    per_write_calls,
)
from tools.benchmarks._procs import Emulator

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("loop", "layer"),
    [("asyncio", "update"), ("trio", "update"), ("bare", "update"),
     *((loop, layer) for layer in LAYERS[1:] for loop in ("asyncio", "trio"))],
)
def test_the_worker_renews_each_lease_the_times_asked_with_this_trees_library(
    loop: str, layer: str
) -> None:
    """On each loop, through each layer (``--layers``), and sent bare (``--bare``: the same
    writes as _floor sends them). A write that does not renew fails the worker."""
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tools.benchmarks._instructions", "worker", str(ROOT),
                 str(emulator.kubeconfig), loop, "3", "4", layer],
                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
            )
        finally:
            emulator.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["writes"] == 12
    assert Path(report["trio_lease"]).is_relative_to(ROOT / "trio_lease")


def test_the_count_is_read_from_callgrinds_summary() -> None:
    stderr = "==12== Events    : Ir\n==12== Collected : 3,988,152,393\n==12==\n"
    assert collected(stderr) == 3_988_152_393
    with pytest.raises(RuntimeError, match="no instruction count"):
        collected("==12== valgrind: command not found\n")


def test_one_write_costs_the_difference_over_the_writes_it_adds() -> None:
    # 20 tasks: 20 writes each, then 120 each: 2,000 more writes for 1,140,000,000 more.
    assert per_write(2_847_000_000, 3_987_000_000, (20, 120), 20) == 570_000


#: Two blocks of ``callgrind_annotate --tree=caller`` output, as valgrind 3.19 prints them.
_TREE = """\
 24,911,008 ( 0.69%)  < /src/Objects/tupleobject.c:PyTuple_New (171,305x) [/lib/libpython3.11.so]
 10,112,734 ( 0.28%)  *  /src/Objects/tupleobject.c:tuple_alloc [/lib/libpython3.11.so]

 37,078,628 ( 1.02%)  < /src/Objects/typeobject.c:PyType_GenericAlloc (133,429x) [/lib/x.so]
 27,037,659 ( 0.75%)  < /src/Modules/gcmodule.c:_PyObject_GC_New (297,276x) [/lib/x.so]
 10,104,246 ( 0.28%)  *  /src/Modules/gcmodule.c:_PyObject_GC_Link [/lib/x.so]
  1,000,000 ( 0.03%)  >   /src/Modules/gcmodule.c:gc_collect_main (3x) [/lib/x.so]

    485,800 ( 0.01%)  < /src/Objects/genobject.c:gen_dealloc (1,655x) [/lib/x.so]
      8,317 ( 0.00%)  *  /src/Objects/genobject.c:gen_close
"""


def test_the_callers_of_each_allocator_are_read_from_callgrinds_caller_tree() -> None:
    found = callers_of(_TREE, ("_PyObject_GC_Link", "gen_close", "make_gen"))
    assert found == {
        "_PyObject_GC_Link": {"PyType_GenericAlloc": 133_429, "_PyObject_GC_New": 297_276},
        "gen_close": {"gen_dealloc": 1_655},
        "make_gen": {},
    }
    assert set(ALLOCATORS) >= {"_PyObject_GC_New", "gen_close"}


def test_calls_per_write_are_the_difference_over_the_writes_it_adds() -> None:
    low = {"f": {"a": 100, "b": 50, "c": 10}}
    high = {"f": {"a": 2_100, "b": 50, "c": 90}}
    assert per_write_calls(low, high, 1_000) == {"f": {"a": 2.0, "c": 0.08}}
