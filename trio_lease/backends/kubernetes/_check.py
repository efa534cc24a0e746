"""``await backend.check()`` / ``trio-lease check``: is this configuration going to work?

One call that finds, each with its fix: an unreachable server (or a TLS problem), rejected
credentials (401), missing RBAC verbs (asked with SelfSubjectAccessReviews; when those are not
allowed, by probing ``get``), and a missing CRD for ``akka.io/v1`` (apply ``lease.yml``). It
writes nothing.

Its replies go through the same checks as the backend's: failure answers through
:func:`._errors.parse_status`, a review's answer through :func:`trio_lease._wire.load_json` and
the field checkers (a ``SelfSubjectAccessReview`` whose ``status.allowed`` is a boolean). A
review answer that cannot be read counts as "reviews not available": the check then probes by
reading, and says so in a note.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import TYPE_CHECKING

import anyio
import httpx

from ... import _wire
from ..._exceptions import BackendAuthError, BackendProtocolError, LeaseConfigError, LeaseError
from ._errors import ApiStatus, RequestContext, parse_status

if TYPE_CHECKING:
    from ._backend import KubernetesBackend

__all__ = ["CheckProblem", "CheckReport", "check"]

_SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclasses.dataclass(frozen=True)
class CheckProblem:
    """One thing that will not work, and how to fix it."""

    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}\n    fix: {self.fix}"


@dataclasses.dataclass
class CheckReport:
    """The outcome of :func:`check`; ``ok`` when no problem was found."""

    server: str
    namespace: str
    lease_kind: str
    source: str
    problems: list[CheckProblem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (
            f"Kubernetes lease check: {self.lease_kind} leases in namespace "
            f"{self.namespace!r} on {self.server} ({self.source})"
        )
        lines = [head]
        lines += [f"  note: {note}" for note in self.notes]
        if self.ok:
            lines.append("  OK: reachable, credentials accepted, permissions and resources present")
        lines += [f"  PROBLEM: {problem}" for problem in self.problems]
        return "\n".join(lines)


def _rbac_fix(backend: KubernetesBackend, verbs: list[str]) -> str:
    kind = backend.kind
    return (
        f"grant verbs {', '.join(verbs)} on resource {kind.plural!r} in API group "
        f"{kind.group!r} in namespace {backend.namespace!r}: apply the Role and RoleBinding "
        f"from lease.yml, or kubectl create role trio-lease -n {backend.namespace} "
        f"--verb={','.join(kind.verbs)} --resource={kind.resource} and bind it to the service "
        "account (resourceNames can restrict get/update/watch but never create)"
    )


async def check(backend: KubernetesBackend) -> CheckReport:
    """Check reachability, credentials, RBAC and the resource; see the module docstring."""
    report = CheckReport(
        server=backend.config.server_url,
        namespace=backend.namespace,
        lease_kind=backend.kind.name,
        source=backend.config.source,
    )
    try:
        missing = await _review_verbs(backend)
        probe = await _probe_get(backend)
    except (BackendAuthError, LeaseConfigError) as exc:
        report.problems.append(
            CheckProblem(f"the configuration cannot be used: {exc}", "fix what the message names")
        )
        return report
    except LeaseError as exc:
        report.problems.append(
            CheckProblem(
                f"cannot reach the API server at {report.server}: {exc}",
                "check the server URL, the network path, the CA certificate and "
                "tls-server-name",
            )
        )
        return report
    if missing is None:  # SelfSubjectAccessReviews unavailable: probe by reading
        missing = await _probe_reads(backend)
        report.notes.append(
            "SelfSubjectAccessReviews are not available: probed get, list and watch by "
            "reading; create and update could not be checked without writing"
        )
    if probe.code == 401:
        report.problems.append(_credentials_problem(backend))
        return report
    if probe.code == 403 and "get" not in missing:
        missing.insert(0, "get")
    if missing:
        report.problems.append(
            CheckProblem(
                f"missing permissions: {', '.join(missing)} on {backend.kind.resource} in "
                f"namespace {backend.namespace!r}",
                _rbac_fix(backend, missing),
            )
        )
    if probe.missing_resource:
        report.problems.append(_missing_resource_problem(backend))
    elif probe.code >= 500:
        report.problems.append(
            CheckProblem(
                f"the API server answered {probe.code} {probe.reason}",
                "the server is unhealthy or overloaded; try again later",
            )
        )
    return report


async def _review_verbs(backend: KubernetesBackend) -> list[str] | None:
    """The verbs SelfSubjectAccessReviews deny; None when reviews are not available."""
    ctx = RequestContext("create", backend.kind, backend.namespace, "selfsubjectaccessreview")
    missing = []
    for verb in backend.kind.verbs:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": backend.namespace,
                    "verb": verb,
                    "group": backend.kind.group,
                    "resource": backend.kind.plural,
                }
            },
        }
        response = await backend.request("POST", _SSAR_PATH, ctx, body=body)
        if response.status_code not in (200, 201):
            return None
        try:
            allowed = _allowed(response.content)
        except (BackendProtocolError, _wire.Malformed):
            return None
        if not allowed:
            missing.append(verb)
    return missing


def _allowed(content: bytes) -> bool:
    """``status.allowed`` of a SelfSubjectAccessReview answer; Malformed if it is not one."""
    review = _wire.obj(_wire.load_json(content, "a SelfSubjectAccessReview answer"), "")
    if review.get("kind") != "SelfSubjectAccessReview":
        raise _wire.Malformed("kind", "expected 'SelfSubjectAccessReview'")
    allowed = _wire.obj(review.get("status"), "status").get("allowed")
    if not isinstance(allowed, bool):
        problem = f"expected a boolean, got {_wire.describe(allowed)}"
        raise _wire.Malformed("status.allowed", problem)
    return allowed


async def _probe_get(backend: KubernetesBackend) -> ApiStatus:
    """GET a lease that does not exist: 404 NotFound proves get and the resource work."""
    name = f"trio-lease-check-{secrets.token_hex(4)}"
    ctx = RequestContext("get", backend.kind, backend.namespace, name)
    response = await backend.request("GET", backend.kind.item_path(backend.namespace, name), ctx)
    if response.status_code < 400:
        return ApiStatus(response.status_code, "OK")
    return parse_status(response)


async def _probe_reads(backend: KubernetesBackend) -> list[str]:
    """Probe list and watch by reading; a 403 means the verb is missing."""
    missing = []
    path = backend.kind.collection_path(backend.namespace)
    selector = f"metadata.name=trio-lease-check-{secrets.token_hex(4)}"
    probes = (
        ("list", {"limit": "1", "fieldSelector": selector}),
        ("watch", {"watch": "1", "fieldSelector": selector, "timeoutSeconds": "1"}),
    )
    client = backend._client()
    for verb, params in probes:
        try:
            with anyio.fail_after(backend._request_timeout or 5.0):
                request = client.build_request("GET", path, params=params)
                response = await client.send(request, stream=True)
                await response.aclose()
        except (httpx.HTTPError, TimeoutError, OSError):
            continue  # reachability is judged by the other requests
        if response.status_code == 403:
            missing.append(verb)
    return missing


def _credentials_problem(backend: KubernetesBackend) -> CheckProblem:
    return CheckProblem(
        f"the API server rejected our credentials (401, {backend.config.credentials.kind} "
        f"from {backend.config.source})",
        "renew the token (is the token file current? has the service account token "
        "expired?), fix the kubeconfig user, or check the exec plugin's output",
    )


def _missing_resource_problem(backend: KubernetesBackend) -> CheckProblem:
    if backend.kind.group == "coordination.k8s.io":
        return CheckProblem(
            f"the server does not serve {backend.kind.resource}",
            "use Kubernetes 1.14 or newer, or check that 'server' is an API server",
        )
    return CheckProblem(
        f"the custom resource definition for {backend.kind.resource} "
        f"({backend.kind.api_version}) is missing",
        "kubectl apply -f lease.yml (needs cluster-admin once)",
    )
