"""Lease names: validation and the key → name mapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_lease import LeaseConfigError
from trio_lease.backends.kubernetes import lease_name_for, validate_lease_name
from trio_lease.backends.kubernetes._names import is_valid_name, validate_namespace


@pytest.mark.parametrize("name", ["a", "nightly-report", "a.b-c.d9", "x" * 253])
def test_valid_names_pass(name: str) -> None:
    """Valid DNS-1123 subdomains are accepted unchanged."""
    assert validate_lease_name(name) == name


@pytest.mark.parametrize("name", ["", "My_Lock", "-a", "a-", "a..b", "a/b", "x" * 254, ".", ".."])
def test_invalid_names_are_config_errors_with_the_rule(name: str) -> None:
    """An invalid name is a LeaseConfigError that states the rule and names lease_name_for."""
    with pytest.raises(LeaseConfigError, match="RFC 1123 subdomain") as info:
        validate_lease_name(name)
    assert "lease_name_for" in str(info.value)


@pytest.mark.parametrize("namespace", ["", "A", "a.b", "x" * 64])
def test_invalid_namespaces_are_rejected(namespace: str) -> None:
    """Namespaces must be DNS-1123 labels (no dots, at most 63)."""
    with pytest.raises(LeaseConfigError, match="namespace"):
        validate_namespace(namespace)


def test_valid_key_maps_to_itself() -> None:
    """A key that already is a valid name is used as is (no hash)."""
    assert lease_name_for("nightly-report") == "nightly-report"


def test_sanitised_keys_get_distinct_hash_suffixes() -> None:
    """Keys that sanitise to the same text still get different names (Akka's collision bug)."""
    names = {lease_name_for(k) for k in ["A.b", "a_b", "a-b ", "a/b", "A_B"]}
    assert len(names) == 5
    assert lease_name_for("My_Lock").startswith("my-lock-")


def test_long_keys_are_hashed_not_truncated() -> None:
    """Two long keys sharing a 253-character prefix map to different valid names."""
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    assert lease_name_for(a) != lease_name_for(b)
    assert all(len(lease_name_for(k)) <= 253 for k in (a, b))


@given(st.text(max_size=400))
def test_every_key_maps_to_a_valid_stable_name(key: str) -> None:
    """lease_name_for always returns a valid name, the same one for the same key."""
    name = lease_name_for(key)
    assert is_valid_name(name)
    assert lease_name_for(key) == name
    if name != key:
        assert len(name) >= 10  # a hash suffix was added


def test_the_object_cache_remembers_names_and_still_refuses_invalid_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ObjectCache.object_name maps each key once (then from memory), forgets everything when
    its memory is full, and refuses an invalid key (map_names off) on every call."""
    from trio_lease.backends.kubernetes import _cache
    from trio_lease.backends.kubernetes._models import COORDINATION

    calls: list[str] = []

    def counted(key: str) -> str:
        calls.append(key)
        return lease_name_for(key)

    monkeypatch.setattr(_cache, "lease_name_for", counted)
    monkeypatch.setattr(_cache, "NAMES_KEPT", 3)
    mapped = _cache.ObjectCache(COORDINATION, map_names=True)
    assert [mapped.object_name(k) for k in ("My_Lock", "My_Lock", "a", "b")] == [
        lease_name_for("My_Lock"), lease_name_for("My_Lock"), "a", "b",
    ]
    assert calls == ["My_Lock", "a", "b"]
    mapped.object_name("c")  # the memory was full: forgotten, then "c" kept
    mapped.object_name("My_Lock")
    assert calls == ["My_Lock", "a", "b", "c", "My_Lock"]
    strict = _cache.ObjectCache(COORDINATION, map_names=False)
    for _ in range(2):
        with pytest.raises(LeaseConfigError, match="RFC 1123 subdomain"):
            strict.object_name("My_Lock")


def test_a_features_record_is_always_mapped_and_must_carry_its_name() -> None:
    """A record name with the reserved separator (a semaphore's slot) maps to a valid object name
    also with map_names off, and an object without its name in the key annotation (a lease whose
    own valid name is that object name) is refused as a collision, never taken for the record."""
    from trio_lease.backends.kubernetes import KEY_ANNOTATION, _cache
    from trio_lease.backends.kubernetes._models import COORDINATION

    record = "jobs~slot~0"
    for map_names in (True, False):
        cache = _cache.ObjectCache(COORDINATION, map_names=map_names)
        name = cache.object_name(record)
        assert name == lease_name_for(record)
        assert is_valid_name(name)
        annotated = {"metadata": {"name": name, "annotations": {KEY_ANNOTATION: record}}}
        cache.check_key(record, annotated)
        with pytest.raises(LeaseConfigError, match="collision"):
            cache.check_key(record, {"metadata": {"name": name}})
        with pytest.raises(LeaseConfigError, match="collision"):
            cache.check_key(name, annotated)  # a user's lease of that name meets the record
