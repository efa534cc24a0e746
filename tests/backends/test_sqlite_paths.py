"""Where the SQLite backend's file is: paths from a person, checked when the backend is made.

``~nobody/…`` (no such user) or a default path with no home directory to put it under raised a
bare ``RuntimeError``; each is now a LeaseConfigError naming the source, as a NUL character in
the path already was. No event loop: making a backend opens nothing.
"""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from trio_lease import LeaseConfigError
from trio_lease.backends.sqlite import SqliteBackend, default_path


def _no_such_user() -> str:
    name = "trio-lease-nobody"
    while True:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return name
        name += "x"


def test_a_path_under_an_unknown_user_is_a_config_error() -> None:
    user = _no_such_user()
    with pytest.raises(LeaseConfigError, match=f"cannot expand '~{user}'") as info:
        SqliteBackend(f"~{user}/leases.sqlite3")
    assert "the SQLite backend's path" in str(info.value)


def test_a_path_with_a_nul_character_is_a_config_error() -> None:
    with pytest.raises(LeaseConfigError, match="NUL character"):
        SqliteBackend("leases\0.sqlite3")


def test_the_environment_variable_is_named_when_its_path_is_bad(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIO_LEASE_SQLITE_PATH", f"~{_no_such_user()}/leases.sqlite3")
    with pytest.raises(LeaseConfigError, match="TRIO_LEASE_SQLITE_PATH"):
        SqliteBackend()


def test_no_home_directory_for_the_default_path_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No HOME, no password entry, no XDG_STATE_HOME: say which variable to set."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("TRIO_LEASE_SQLITE_PATH", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with pytest.raises(LeaseConfigError, match="set TRIO_LEASE_SQLITE_PATH"):
        default_path()


def test_a_tilde_path_of_this_user_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/tmp")
    assert SqliteBackend("~/leases.sqlite3").path == Path("/tmp/leases.sqlite3")
