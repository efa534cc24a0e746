"""A client certificate and its key loaded into an :class:`ssl.SSLContext`, never prompting.

Both backends that authenticate with a client certificate (Kubernetes, etcd) load it here, with
:func:`load_client_cert`. :meth:`ssl.SSLContext.load_cert_chain` without a ``password``
callback leaves an encrypted key to OpenSSL, which asks for its passphrase on the terminal
(``/dev/tty``): loading a configuration would hang a service there, or fail with "Invalid
argument" where there is no terminal. The callback given here refuses instead
(:class:`EncryptedKeyError`): no passphrase is ever asked for.

Every failure is a :class:`ClientCertError` saying which part is at fault (``part``) and the
kind of problem (``reason``), taken from the error's type and code only, never from the files'
content, which is key material. Each backend turns it into its own typed error, worded with its
own configuration keys.
"""

from __future__ import annotations

import errno
import os
import ssl
import stat
from typing import Literal, NoReturn

__all__ = ["ClientCertError", "EncryptedKeyError", "load_client_cert"]

#: Which file is at fault: the certificate's, the key's, or one of the two (OpenSSL does not
#: say which of them is not PEM, or that they do not match).
Part = Literal["certificate", "key", "certificate and key"]

#: The reason for a path that no file can have (``ssl`` raises a bare ValueError for it).
NUL_REASON = "the path contains a NUL character, which no file name can hold"
#: The reason when OpenSSL cannot read the files as PEM (or the key does not match).
NOT_PEM_REASON = "not a PEM certificate and its matching private key"


class ClientCertError(Exception):
    """The client certificate or its key cannot be loaded.

    ``part`` is the file at fault (:data:`Part`); ``reason`` says why ("No such file or
    directory", :data:`NUL_REASON`, :data:`NOT_PEM_REASON`), never quoting the content.
    """

    def __init__(self, part: Part, reason: str) -> None:
        super().__init__(f"the client {part}: {reason}")
        self.part: Part = part
        self.reason = reason


class EncryptedKeyError(ClientCertError):
    """The key is encrypted: no passphrase is ever asked for, so it cannot be used."""

    def __init__(self) -> None:
        super().__init__("key", "encrypted, and no passphrase is ever asked for")


def _no_passphrase() -> NoReturn:
    # Without a callback OpenSSL prompts on the terminal (/dev/tty) and a service would hang.
    raise EncryptedKeyError


def load_client_cert(
    context: ssl.SSLContext,
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str] | None = None,
) -> None:
    """Load the certificate in ``cert_file`` and its key (in ``key_file``, else ``cert_file``).

    Raises :class:`EncryptedKeyError` for an encrypted key (OpenSSL never prompts), and a
    :class:`ClientCertError` naming the part at fault for a path with a NUL character, a file
    that cannot be opened (missing, a directory, no permission) or content that is not a PEM
    certificate and its matching key.
    """
    files: list[tuple[Part, str]] = [("certificate", os.fspath(cert_file))]
    if key_file is not None:
        files.append(("key", os.fspath(key_file)))
    for part, path in files:
        if "\0" in path:
            raise ClientCertError(part, NUL_REASON)
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    except ssl.SSLError:
        raise ClientCertError("certificate and key", NOT_PEM_REASON) from None
    except OSError as exc:
        # OpenSSL's error names no file: open each to find which one cannot be read.
        for part, path in files:
            problem = _unreadable(path)
            if problem is not None:
                raise ClientCertError(part, problem) from None
        raise ClientCertError("certificate and key", exc.strerror or type(exc).__name__) from None


def _unreadable(path: str) -> str | None:
    """Why the file at ``path`` cannot be opened for reading (None: it can)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return os.strerror(errno.EISDIR)
    finally:
        os.close(fd)
    return None
