"""``/healthz``, ``/livez`` and ``/readyz``, as ``apiserver/pkg/server/healthz/healthz.go``
answers them.

Each answers ``ok`` (``text/plain``, no newline); with ``?verbose`` one ``[+]<check> ok`` line
per check, then ``<name> check passed``; ``?exclude=<check>`` (repeatable, comma-free) shows it
as ``[+]<check> excluded: ok`` and names exclusions that match no check in a ``warn:`` line.
``/<name>/<check>`` runs one check; an unknown one is Go's ``404 page not found``. The checks
are the ones a kube-apiserver with etcd, CRDs and RBAC lists (fewer post-start hooks); all of
them pass while the emulator runs. The public-info-viewer role lets anyone read these paths,
so an anonymous request is answered even when the emulator requires a token (a bad token is
still 401).
"""

from __future__ import annotations

from ._http import Request, Response
from ._status import ApiError

__all__ = ["HEALTH_PATHS", "health"]

_HOOKS = (
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/rbac/bootstrap-roles",
)
_CHECKS = {
    "healthz": ("ping", "log", "etcd", *_HOOKS),
    "livez": ("ping", "log", "etcd", *_HOOKS),
    "readyz": ("ping", "log", "etcd", "etcd-readiness", "informer-sync", *_HOOKS, "shutdown"),
}
HEALTH_PATHS = tuple(_CHECKS)
_HEADERS = [("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff")]


def health(parts: list[str], request: Request) -> Response:
    """The answer for ``/<name>[/<check>]`` (``parts``: the path split on ``/``)."""
    name, checks = parts[0], _CHECKS[parts[0]]
    if len(parts) > 1:
        if "/".join(parts[1:]) not in checks:
            raise ApiError.page_not_found()
        return Response(200, list(_HEADERS), b"ok")
    if "verbose" not in request.query:
        return Response(200, list(_HEADERS), b"ok")
    excluded = {value for key, value in request.query_items() if key == "exclude"}
    lines = [
        f"[+]{check} excluded: ok" if check in excluded else f"[+]{check} ok" for check in checks
    ]
    unmatched = sorted(excluded - set(checks))
    if unmatched:
        quoted = ",".join(f'"{c}"' for c in unmatched)
        lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}")
    lines.append(f"{name} check passed")
    return Response(200, list(_HEADERS), ("\n".join(lines) + "\n").encode())
