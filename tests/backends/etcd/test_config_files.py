"""Files the etcd configuration names: errors about them are typed and quote none of their content.

No server and no event loop: ``from_config`` and the provider's ``build_backend`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import pytest

from trio_lease import LeaseConfigError
from trio_lease._provider import build_backend
from trio_lease.backends.etcd import EtcdBackend

#: A Latin-1 password: byte 1 (0xe4) is not UTF-8.
SECRET = "zäqxjvk".encode("latin-1")
#: What a UnicodeDecodeError's text would give away of SECRET (a byte, its position, the text).
GIVEAWAYS = ("0xe4", "\\xe4", "position", "ä", "qxjvk")


def leaks(error: BaseException) -> list[str]:
    """The giveaways in ``error``'s text and in every error chained to it."""
    found: list[str] = []
    current: BaseException | None = error
    while current is not None:
        found += [giveaway for giveaway in GIVEAWAYS if giveaway in str(current)]
        current = current.__cause__ or current.__context__
    return found


@pytest.fixture
def latin1_password_file(tmp_path: Path) -> dict[str, Any]:
    """An etcd section whose ``password-file`` holds a password that is not UTF-8."""
    secret = tmp_path / "etcd-password"
    secret.write_bytes(SECRET)
    return {"endpoints": ["http://127.0.0.1:2379"], "username": "u", "password-file": str(secret)}


def test_a_password_file_that_is_not_utf8_is_a_config_error_quoting_nothing(
    latin1_password_file: dict[str, Any],
) -> None:
    """A password-file that is not UTF-8: LeaseConfigError naming the key, no byte, no chain."""
    with pytest.raises(LeaseConfigError, match=r"`password-file` is not UTF-8 text") as caught:
        EtcdBackend.from_config(latin1_password_file)
    assert leaks(caught.value) == []
    assert caught.value.__context__ is None  # the decoding error holds the file's bytes


def test_the_provider_names_the_etcd_password_file_without_quoting_it(
    latin1_password_file: dict[str, Any],
) -> None:
    """Through the provider, the error names the section and the key, and quotes no byte."""
    with pytest.raises(LeaseConfigError) as caught:
        build_backend(EtcdBackend, latin1_password_file, "leases.x")
    assert str(caught.value).startswith("leases.x: etcd `password-file` is not UTF-8 text")
    assert leaks(caught.value) == []


class _Undecodable(EtcdBackend):
    """A backend whose from_config lets a decoding error of a secret file escape."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        raise UnicodeDecodeError("utf-8", SECRET, 1, 2, "invalid continuation byte")


def test_the_provider_never_quotes_a_unicode_error_of_a_backend() -> None:
    """Any backend's UnicodeError is named by kind only: its text quotes a byte of the file."""
    with pytest.raises(LeaseConfigError, match=r"^w: cannot build _Undecodable: .*not valid text"):
        build_backend(_Undecodable, {}, "w")
    with pytest.raises(LeaseConfigError) as caught:
        build_backend(_Undecodable, {}, "w")
    assert "UnicodeDecodeError" in str(caught.value)
    assert leaks(caught.value) == []


def _cert_and_encrypted_key() -> tuple[Any, bytes]:
    """A client certificate (trustme) and its key encrypted with a passphrase (PKCS#8 PEM)."""
    import trustme
    from cryptography.hazmat.primitives import serialization

    cert = trustme.CA().issue_cert("leaser@example.test")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cr3t-words"),
    )
    return cert, encrypted


def test_an_encrypted_key_file_is_a_config_error_without_prompting(tmp_path: Path) -> None:
    """An encrypted `key-file` is a LeaseConfigError at once: OpenSSL is never left to ask for
    a passphrase on the terminal (it blocked loading the configuration there, and failed with
    "Invalid argument" without one)."""
    cert, encrypted = _cert_and_encrypted_key()
    cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
    cert_file.write_bytes(cert.cert_chain_pems[0].bytes())
    key_file.write_bytes(encrypted)
    config = {
        "endpoints": ["https://127.0.0.1:2379"],
        "cert-file": str(cert_file),
        "key-file": str(key_file),
    }
    with pytest.raises(LeaseConfigError, match=r"encrypted .* passphrase") as info:
        EtcdBackend.from_config(config)
    assert "s3cr3t" not in str(info.value)


#: Key material written into the junk files below: it must never be quoted.
KEY_MATERIAL = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


def _tls_files(tmp_path: Path) -> dict[str, Path]:
    """A client certificate and key, a folder, a missing path and a file that is not PEM."""
    import trustme

    cert = trustme.CA().issue_cert("leaser@example.test")
    files = {"cert": tmp_path / "client.crt", "key": tmp_path / "client.key"}
    files["cert"].write_bytes(cert.cert_chain_pems[0].bytes())
    files["key"].write_bytes(cert.private_key_pem.bytes())
    files["junk"] = tmp_path / "junk.pem"
    files["junk"].write_text(
        f"-----BEGIN PRIVATE KEY-----\n{KEY_MATERIAL}\n-----END PRIVATE KEY-----\n"
    )
    files["folder"] = tmp_path / "folder"
    files["folder"].mkdir()
    files["missing"] = tmp_path / "missing.pem"
    files["nul"] = tmp_path / "nul\0.pem"
    return files


#: TLS keys (file names of _tls_files) and what the error must say.
TLS_CASES = [
    ({"ca-file": "nul"}, r"`ca-file` contains a NUL character"),
    ({"ca-file": "folder"}, r"`ca-file` could not be read \(Is a directory\)"),
    ({"ca-file": "missing"}, r"`ca-file` could not be read \(No such file or directory\)"),
    ({"ca-file": "junk"}, r"`ca-file` holds no PEM certificate"),
    ({"cert-file": "nul", "key-file": "key"}, r"`cert-file` contains a NUL character"),
    ({"cert-file": "cert", "key-file": "nul"}, r"`key-file` contains a NUL character"),
    ({"cert-file": "folder", "key-file": "key"}, r"`cert-file` could not be read \(Is a dir"),
    ({"cert-file": "cert", "key-file": "folder"}, r"`key-file` could not be read \(Is a dir"),
    ({"cert-file": "cert", "key-file": "missing"}, r"`key-file` could not be read \(No such"),
    ({"cert-file": "missing", "key-file": "key"}, r"`cert-file` could not be read \(No such"),
    ({"cert-file": "cert", "key-file": "junk"}, r"`cert-file` and `key-file`: not a PEM"),
    ({"cert-file": "cert"}, r"`cert-file`: not a PEM certificate and its matching private key"),
]


@pytest.mark.parametrize(
    ("tls", "match"),
    [
        pytest.param(tls, match, id=",".join(f"{k}={v}" for k, v in tls.items()))
        for tls, match in TLS_CASES
    ],
)
def test_unusable_tls_files_are_config_errors_naming_the_key(
    tmp_path: Path, tls: dict[str, str], match: str
) -> None:
    """A TLS file with a NUL in its path, a folder, a missing file or one that is not PEM: a
    LeaseConfigError naming the key at fault (not every TLS key at once), quoting no content."""
    files = _tls_files(tmp_path)
    config: dict[str, Any] = {"endpoints": ["https://127.0.0.1:2379"]}
    config |= {key: str(files[name]) for key, name in tls.items()}
    with pytest.raises(LeaseConfigError, match=match) as caught:
        EtcdBackend.from_config(config)
    current: BaseException | None = caught.value
    while current is not None:
        assert KEY_MATERIAL not in str(current)
        current = current.__cause__ or current.__context__


def test_an_encrypted_key_in_the_cert_file_names_the_cert_file(tmp_path: Path) -> None:
    """One PEM with the certificate and an encrypted key, without `key-file`: the message names
    `cert-file`, where the key is."""
    cert, encrypted = _cert_and_encrypted_key()
    both = tmp_path / "client.pem"
    both.write_bytes(cert.cert_chain_pems[0].bytes() + encrypted)
    config = {"endpoints": ["https://127.0.0.1:2379"], "cert-file": str(both)}
    with pytest.raises(LeaseConfigError, match=r"the key in `cert-file` is encrypted") as info:
        EtcdBackend.from_config(config)
    assert "s3cr3t" not in str(info.value)
