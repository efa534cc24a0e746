"""The request and response shapes shared by the handler, the transport and the server."""

from __future__ import annotations

import dataclasses

from ._watch import WatchStream

__all__ = ["MAX_REQUEST_BODY", "DropReply", "RecordedRequest", "Request", "Response"]

#: The apiserver's request body limit (``--max-request-bytes``' default for the handlers, 3 MiB).
MAX_REQUEST_BODY = 3 * 1024 * 1024


class DropReply(Exception):
    """The operation ran; the connection must now be closed without a response."""


@dataclasses.dataclass
class Request:
    """One HTTP request: ``path`` without the query; ``headers`` with lower-case names."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""
    #: Every header as sent, in order, names lower-case (a repeated header is several items).
    header_list: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Every query parameter as sent, in order (``query`` keeps the last of a repeated one).
    query_list: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def query_items(self) -> list[tuple[str, str]]:
        """All query parameters, repeated ones included."""
        return self.query_list or list(self.query.items())

    def header_values(self, name: str) -> list[str]:
        """All values of header ``name`` (lower-case), as Go's ``req.Header[name]`` has them."""
        if not self.header_list:
            return [self.headers[name]] if name in self.headers else []
        return [value for key, value in self.header_list if key == name]

    @property
    def token(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth[7:].strip() if auth[:7].lower() == "bearer " else None


@dataclasses.dataclass
class Response:
    """Status, headers and either a body or a watch stream."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    stream: WatchStream | None = None


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One request as :attr:`KubeEmulator.requests` keeps it (without its credentials).

    ``status`` is the answer's code, or 0 when no answer was sent (dropped reply, timeout,
    cancelled).
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    status: int
