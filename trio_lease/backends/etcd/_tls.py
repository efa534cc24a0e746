"""The etcd client's TLS context: the server verified against a CA, a client certificate.

Every file problem is a :class:`TLSFileError` naming the configuration key at fault
(``ca-file``, ``cert-file``, ``key-file``) and the kind of problem, never the file's content: a
path with a NUL character, a file that cannot be read (missing, a directory, no permission), or
content that is not PEM. The client certificate is loaded by
:func:`~trio_lease._client_cert.load_client_cert`, so OpenSSL is never left to ask for a
passphrase (:class:`EncryptedKey`): it would prompt on the terminal, and loading a
configuration would hang a service there.
"""

from __future__ import annotations

import ssl

from ..._client_cert import (
    NOT_PEM_REASON,
    NUL_REASON,
    ClientCertError,
    EncryptedKeyError,
    load_client_cert,
)

__all__ = ["EncryptedKey", "TLSFileError", "make_ssl_context"]


class TLSFileError(ValueError):
    """A TLS file of the configuration cannot be used; the message names its key."""


class EncryptedKey(TLSFileError):
    """The client key is encrypted: there is no passphrase to give it.

    ``key`` is the configuration key holding it: ``key-file``, else ``cert-file`` (one PEM with
    both).
    """

    def __init__(self, key: str = "key-file") -> None:
        super().__init__(
            f"the key in `{key}` is encrypted and trio_lease cannot ask for its passphrase: "
            "give an unencrypted key (openssl pkey -in KEY -out KEY.plain)"
        )


def make_ssl_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    """Server verification against ``ca_file`` (else the system store) plus a client cert.

    Raises :class:`TLSFileError` naming the key at fault, :class:`EncryptedKey` for an
    encrypted key (no passphrase is ever asked for).
    """
    context = _verifying(ca_file)
    if cert_file is None:
        return context
    # Without `key-file` the key is read from `cert-file` (one PEM with both).
    cert = "`cert-file`"
    key = "`key-file`" if key_file is not None else cert
    keys = {"certificate": cert, "key": key, "certificate and key": f"{cert} and {key}"}
    if key == cert:
        keys["certificate and key"] = cert
    try:
        load_client_cert(context, cert_file, key_file)
    except EncryptedKeyError:
        raise EncryptedKey(keys["key"].strip("`")) from None
    except ClientCertError as exc:
        at_fault = keys[exc.part]
        if exc.reason == NUL_REASON:
            message = (
                f"{at_fault} contains a NUL character, which no file name can hold; fix the path"
            )
        elif exc.reason == NOT_PEM_REASON:
            message = f"{at_fault}: {NOT_PEM_REASON}; give PEM files"
        else:
            message = (
                f"{at_fault} could not be read ({exc.reason}); fix the path or its permissions"
            )
        raise TLSFileError(message) from None
    return context


def _verifying(ca_file: str | None) -> ssl.SSLContext:
    """A client context verifying servers against ``ca_file``, else the system store."""
    if ca_file is not None and "\0" in ca_file:
        raise TLSFileError(
            "`ca-file` contains a NUL character, which no file name can hold; fix the path"
        )
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError:
        raise TLSFileError("`ca-file` holds no PEM certificate; give the CA bundle") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TLSFileError(
            f"`ca-file` could not be read ({reason}); fix the path or its permissions"
        ) from None
