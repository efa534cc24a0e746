"""``trio_lease.testing`` loads the Kubernetes API emulator only when it is used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trio_lease.testing


def _run(code: str) -> object:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and parse its JSON output."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


def test_importing_testing_does_not_load_the_emulator() -> None:
    """After ``import trio_lease.testing`` no module of trio_lease.testing.kube is loaded;
    ``from trio_lease.testing import KubeEmulator`` then loads and returns the emulator."""
    code = (
        "import json, sys\n"
        "import trio_lease.testing\n"
        "before = sorted(m for m in sys.modules if m.startswith('trio_lease.testing.kube'))\n"
        "from trio_lease.testing import KubeEmulator\n"
        "from trio_lease.testing.kube import KubeEmulator as Direct\n"
        "print(json.dumps([before, 'trio_lease.testing.kube' in sys.modules,\n"
        "                  KubeEmulator is Direct, KubeEmulator.__name__]))\n"
    )
    assert _run(code) == [[], True, True, "KubeEmulator"]


def test_lazy_export_is_listed_and_star_importable() -> None:
    """``dir()`` lists every name of ``__all__``, and ``import *`` binds them all."""
    assert set(trio_lease.testing.__all__) <= set(dir(trio_lease.testing))
    code = (
        "import json\n"
        "from trio_lease.testing import *\n"
        "import trio_lease.testing as t\n"
        "print(json.dumps(sorted(n for n in t.__all__ if globals().get(n) is getattr(t, n))))\n"
    )
    assert _run(code) == sorted(trio_lease.testing.__all__)


def test_unknown_attribute_raises_attribute_error() -> None:
    """A name the package does not export raises AttributeError naming the module."""
    with pytest.raises(AttributeError, match=r"'trio_lease\.testing' has no attribute 'NoSuch'"):
        trio_lease.testing.NoSuch  # noqa: B018
