"""LeaseProvider: leases by (name, config section, owner) from TOML."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self, cast

import pytest

from trio_lease import LeaseConfigError, LeaseProvider
from trio_lease._provider import build_backend, load_backend_class
from trio_lease.abc import LeaseBackend
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.backends.sqlite import SqliteBackend

pytestmark = pytest.mark.anyio

CONFIG = """
[app.leases.fast]
lease-class = "memory"
heartbeat-timeout = "15s"
heartbeat-interval = "1.5s"
lease-operation-timeout = "500ms"

[app.leases.disk]
lease-class = "sqlite"
path = "{path}"
busy-timeout = "2s"

[app.leases.custom]
lease-class = "trio_lease.backends.memory:MemoryBackend"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "leases.toml"
    path.write_text(CONFIG.format(path=tmp_path / "db.sqlite3"))
    return path


def test_same_triple_returns_same_instance(config_file: Path) -> None:
    """The same (name, config_path, owner) gives the same Lease; others differ (seed)."""
    provider = LeaseProvider(config_file)
    first = provider.get_lease("report", "app.leases.fast", "w1")
    assert provider.get_lease("report", "app.leases.fast", "w1") is first
    assert provider.get_lease("report", "app.leases.fast", "w2") is not first
    assert provider.get_lease("other", "app.leases.fast", "w1") is not first
    assert provider.get_lease("other", "app.leases.fast", "w1").backend is first.backend


def test_section_settings_and_backend_keys(config_file: Path) -> None:
    """Kebab-case settings go to LeaseSettings, other keys to the backend."""
    provider = LeaseProvider(config_file)
    fast = provider.get_lease("r", "app.leases.fast", "w")
    assert isinstance(fast.backend, MemoryBackend)
    assert fast.settings.heartbeat_timeout == 15 and fast.settings.lease_operation_timeout == 0.5
    disk = provider.get_lease("r", "app.leases.disk", "w")
    assert isinstance(disk.backend, SqliteBackend)
    assert disk.backend.path == config_file.parent / "db.sqlite3"
    assert disk.backend.busy_timeout == 2
    assert disk.settings.heartbeat_timeout == 120  # Akka's default
    custom = provider.get_lease("r", "app.leases.custom", "w")
    assert isinstance(custom.backend, MemoryBackend)


def test_backends_come_from_the_entry_point_group() -> None:
    """Registered names resolve through the trio_lease.backends entry points."""
    assert load_backend_class("sqlite") is SqliteBackend
    assert load_backend_class("memory") is MemoryBackend


@pytest.mark.parametrize(
    ("text", "section", "message"),
    [
        ("[a]\nlease-class = 'memory'\n", "a.b", r"no section \[a.b\]"),
        ("[a]\nheartbeat-timeout = '15s'\n", "a", "lease-class must be set"),
        (
            "[a]\nlease-class = 'nosuch'\n",
            "a",
            "unknown lease-class 'nosuch'; registered backends:",
        ),
        ("[a]\nlease-class = 'nosuch.module:X'\n", "a", "cannot import 'nosuch.module'"),
        ("[a]\nlease-class = 'builtins:dict'\n", "a", "not a trio_lease.abc.LeaseBackend"),
        (
            "[a]\nlease-class = 'memory'\nheartbeat-interval = '70s'\n",
            "a",
            "heartbeat_interval must be <",
        ),
        ("[a]\nlease-class = 'memory'\nheartbeat_timeout = '70s'\n", "a", "use kebab-case keys"),
        ("[a]\nlease-class = 'sqlite'\ncolour = 'blue'\n", "a", "unknown sqlite backend key"),
        ("[a]\nlease-class = 'memory'\ncolour = 'blue'\n", "a", "unknown key.*colour"),
        ("[a\nbroken", "a", "is not valid TOML"),
    ],
)
def test_bad_configuration_names_file_and_key(
    tmp_path: Path, text: str, section: str, message: str
) -> None:
    """Every configuration mistake is a LeaseConfigError naming the file, section and fix."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(LeaseConfigError, match=message) as info:
        LeaseProvider(path).get_lease("n", section, "o")
    assert str(path) in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing configuration file is reported with its path."""
    with pytest.raises(LeaseConfigError, match="does not exist"):
        LeaseProvider(tmp_path / "nope.toml")



def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    """A directory given as the configuration file is a LeaseConfigError naming it (it raised
    IsADirectoryError)."""
    with pytest.raises(LeaseConfigError, match="cannot read the lease configuration file") as info:
        LeaseProvider(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_a_file_not_utf8_is_a_config_error_quoting_none_of_it(tmp_path: Path) -> None:
    """A configuration file that is not UTF-8 is a LeaseConfigError giving the line, quoting
    none of its bytes (it raised UnicodeDecodeError, whose text quotes the byte)."""
    path = tmp_path / "leases.toml"
    path.write_bytes(b'[a]\nlease-class = "etcd"\npassword = "p\xe4ss"\n')
    with pytest.raises(LeaseConfigError, match=r"is not UTF-8 text \(line 3\)") as info:
        LeaseProvider(path)
    assert "xe4" not in str(info.value) and "p" + "\u00e4" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


async def test_provider_hosts_acquire_heartbeats() -> None:
    """`async with provider:` hosts acquire(); leaving it releases and closes backends."""
    provider = LeaseProvider(
        {
            "l": {
                "lease-class": "memory",
                "heartbeat-timeout": 15,
                "heartbeat-interval": 1.5,
                "lease-operation-timeout": 0.5,
            }
        }
    )
    lease = provider.get_lease("job", "l", "w1")
    other = provider.get_lease("job", "l", "w2")
    async with provider:
        assert await lease.acquire()
        assert not await other.acquire()
        assert lease.check_lease()
    assert not lease.check_lease()
    record = await lease.backend.get("job")
    assert record is not None and record.holder == ""


class _Tuned(MemoryBackend):
    """A backend whose constructor needs a keyword the section spells in kebab-case."""

    def __init__(self, store: MemoryStore | None = None, *, retry_limit: int) -> None:
        super().__init__(store)
        self.retry_limit = retry_limit


class _Lenient(MemoryBackend):
    """A backend whose constructor takes any keyword."""

    def __init__(self, **options: object) -> None:
        super().__init__()
        self.options = options


class _Broken(MemoryBackend):
    """A backend whose from_config returns something that is not a backend."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        return cast(Self, dict(config))


def test_default_from_config_passes_kebab_keys_as_keyword_arguments() -> None:
    """LeaseBackend.from_config gives the section's keys to the constructor in snake_case."""
    backend = _Tuned.from_config({"retry-limit": 3})
    assert isinstance(backend, _Tuned) and backend.retry_limit == 3
    assert _Lenient.from_config({"any-key": 1}).options == {"any_key": 1}


def test_default_from_config_names_the_keys_the_constructor_does_not_take() -> None:
    """Keys the constructor does not take are named (kebab-case), through the provider too."""
    with pytest.raises(LeaseConfigError, match=r"^unknown key\(s\) for _Tuned: colour, retry$"):
        _Tuned.from_config({"retry": 3, "colour": "blue"})
    with pytest.raises(LeaseConfigError, match=r"^s \[x\]: unknown key\(s\) for _Tuned: colour$"):
        build_backend(_Tuned, {"retry-limit": 1, "colour": "blue"}, "s [x]")


def test_build_backend_names_a_from_config_that_fails_or_returns_no_backend() -> None:
    """A constructor's TypeError and a from_config returning no backend are config errors."""
    with pytest.raises(LeaseConfigError, match=r"^w: cannot build _Tuned: .*retry_limit"):
        build_backend(_Tuned, {}, "w")
    with pytest.raises(LeaseConfigError, match=r"^w: _Broken.from_config did not return a "):
        build_backend(_Broken, {}, "w")


async def test_names_is_optional_and_raises_not_implemented_by_default() -> None:
    """A backend that cannot list its leases says so with NotImplementedError."""

    class Unlisted(MemoryBackend):
        names = LeaseBackend.names

    with pytest.raises(NotImplementedError, match="Unlisted cannot list its leases"):
        await Unlisted().names()
