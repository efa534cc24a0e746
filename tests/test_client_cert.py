"""load_client_cert: the one place a client certificate is loaded, never asking for a passphrase.

Every failure is a :class:`ClientCertError` naming the part at fault and the kind of problem,
never the files' content. No event loop: loading is synchronous.
"""

from __future__ import annotations

import ssl
import traceback
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from trio_lease._client_cert import (
    NOT_PEM_REASON,
    NUL_REASON,
    ClientCertError,
    EncryptedKeyError,
    load_client_cert,
)

#: Written into the files below: no error may quote it.
KEY_MATERIAL = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
JUNK = f"-----BEGIN PRIVATE KEY-----\n{KEY_MATERIAL}\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A certificate, its key, the key encrypted, junk, a folder and a missing path."""
    cert = trustme.CA().issue_cert("client.example.test")
    key_pem = cert.private_key_pem.bytes()
    key = serialization.load_pem_private_key(key_pem, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_MATERIAL.encode()),
    )
    contents = {
        "cert": cert.cert_chain_pems[0].bytes(),
        "key": key_pem,
        "encrypted": encrypted,
        "both": cert.cert_chain_pems[0].bytes() + key_pem,
        "junk": JUNK.encode(),
    }
    paths = {name: tmp_path / f"{name}.pem" for name in contents}
    for name, content in contents.items():
        paths[name].write_bytes(content)
    paths["folder"] = tmp_path / "folder"
    paths["folder"].mkdir()
    paths["missing"] = tmp_path / "missing.pem"
    paths["nul"] = tmp_path / "nul\0.pem"
    return paths


def _context() -> ssl.SSLContext:
    return ssl.create_default_context()


@pytest.mark.parametrize(("cert", "key"), [("cert", "key"), ("both", None)])
def test_a_certificate_and_its_key_load(files: dict[str, Path], cert: str, key: str | None) -> None:
    """A PEM certificate with its key, in two files or one, loads without error."""
    load_client_cert(_context(), files[cert], None if key is None else files[key])


@pytest.mark.parametrize(
    ("cert", "key", "part", "reason"),
    [
        pytest.param("nul", "key", "certificate", NUL_REASON, id="nul-cert"),
        pytest.param("cert", "nul", "key", NUL_REASON, id="nul-key"),
        pytest.param("folder", "key", "certificate", "Is a directory", id="folder-cert"),
        pytest.param("cert", "folder", "key", "Is a directory", id="folder-key"),
        pytest.param("missing", "key", "certificate", "No such file or directory", id="no-cert"),
        pytest.param("cert", "missing", "key", "No such file or directory", id="no-key"),
        pytest.param("cert", "junk", "certificate and key", NOT_PEM_REASON, id="junk-key"),
        pytest.param("junk", "key", "certificate and key", NOT_PEM_REASON, id="junk-cert"),
        pytest.param("cert", None, "certificate and key", NOT_PEM_REASON, id="no-key-in-cert"),
    ],
)
def test_each_failure_names_the_part_and_the_kind_of_problem(
    files: dict[str, Path], cert: str, key: str | None, part: str, reason: str
) -> None:
    """NUL in a path, a folder, a missing file, content that is not PEM: one typed error naming
    the part at fault and why, quoting nothing of the content (not even in its chain)."""
    with pytest.raises(ClientCertError) as caught:
        load_client_cert(_context(), files[cert], None if key is None else files[key])
    assert (caught.value.part, caught.value.reason) == (part, reason)
    assert not isinstance(caught.value, EncryptedKeyError)
    assert KEY_MATERIAL not in "".join(traceback.format_exception(caught.value))


@pytest.mark.parametrize(("cert", "key"), [("cert", "encrypted"), ("cert", None)])
def test_an_encrypted_key_is_refused_without_asking_for_a_passphrase(
    files: dict[str, Path], cert: str, key: str | None, tmp_path: Path
) -> None:
    """An encrypted key (in its own file or after the certificate) is EncryptedKeyError at once:
    OpenSSL is never left to prompt on the terminal."""
    if key is None:
        cert_file = tmp_path / "cert-and-encrypted.pem"
        cert_file.write_bytes(files["cert"].read_bytes() + files["encrypted"].read_bytes())
    else:
        cert_file = files[cert]
    with pytest.raises(EncryptedKeyError) as caught:
        load_client_cert(_context(), cert_file, None if key is None else files[key])
    assert caught.value.part == "key"
    assert KEY_MATERIAL not in "".join(traceback.format_exception(caught.value))
