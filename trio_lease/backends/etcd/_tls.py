"""The etcd client's TLS context: the server verified against a CA, a client certificate.

OpenSSL is never left to ask for a passphrase (:class:`EncryptedKey`): it would prompt on the
terminal, and loading a configuration would hang a service there.
"""

from __future__ import annotations

import ssl

__all__ = ["EncryptedKey", "make_ssl_context"]


class EncryptedKey(ValueError):
    """The client key is encrypted: there is no passphrase to give it."""

    def __init__(self) -> None:
        super().__init__(
            "the key in `key-file` is encrypted and trio_lease cannot ask for its passphrase: "
            "give an unencrypted key (openssl pkey -in KEY -out KEY.plain)"
        )


def _no_passphrase() -> str:
    # Without a callback OpenSSL prompts on the terminal (/dev/tty): loading a configuration
    # would hang a service, or fail with "Invalid argument" without a terminal.
    raise EncryptedKey


def make_ssl_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    """Server verification against ``ca_file`` (else the system store) plus a client cert
    (:class:`EncryptedKey` for an encrypted key: no passphrase is ever asked for)."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    return context
