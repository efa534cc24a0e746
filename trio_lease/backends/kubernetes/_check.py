"""``await backend.check()`` / ``trio-lease check``: is this configuration going to work?

One call that finds, each with its fix: an unreachable server (or a TLS problem), rejected
credentials (401), missing RBAC verbs (each verb the backend uses, ``get``, ``create``,
``update``, ``watch`` and ``list`` on its lease kind in its namespace, asked with a
SelfSubjectAccessReview; when those are not allowed, by probing ``get``, ``list`` and ``watch``),
reported with the Role rule that grants the missing ones as a YAML snippet, and a missing CRD
for ``akka.io/v1`` (apply ``lease.yml``, which ``trio-lease manifests`` prints), and a namespace
that does not exist (:func:`missing_namespace`, which ``trio-lease status`` asks too).
``create`` on ``events`` in ``events.k8s.io`` is optional (only :class:`KubernetesEvents` needs
it): when it is missing, the report lists it under ``optional`` with its Role rule and stays
``ok``. It writes nothing (the namespace probe's create is a dry run).

Its replies go through the same checks as the backend's: failure answers through
:func:`._errors.parse_status`, a review's answer through :func:`trio_lease._wire.load_json` and
the field checkers (a ``SelfSubjectAccessReview`` whose ``status.allowed`` is a boolean). A
review answer that cannot be read counts as "reviews not available": the check then probes by
reading, and says so in a note.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime

from ... import _wire
from ..._abc import LeaseRecord
from ..._exceptions import BackendAuthError, BackendProtocolError, LeaseConfigError, LeaseError
from ._api import KubeApi
from ._errors import ApiStatus, RequestContext, parse_status
from ._events import EVENTS
from ._models import LeaseKind

__all__ = ["CheckProblem", "CheckReport", "missing_namespace", "role_rule", "run_check"]

_SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclasses.dataclass(frozen=True)
class CheckProblem:
    """One thing that will not work, and how to fix it (``rule``: a Role rule, as YAML)."""

    what: str
    fix: str
    rule: str = ""

    def __str__(self) -> str:
        text = f"{self.what}\n    fix: {self.fix}"
        if self.rule:
            rule = "\n".join(f"      {line}" for line in self.rule.splitlines())
            text += f"\n    the Role rule that grants them:\n{rule}"
        return text


@dataclasses.dataclass
class CheckReport:
    """The outcome of a check (:func:`run_check`); ``ok`` when no problem was found."""

    server: str
    namespace: str
    lease_kind: str
    source: str
    problems: list[CheckProblem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: Missing permissions only some features need (Events): they do not make ``ok`` false.
    optional: list[CheckProblem] = dataclasses.field(default_factory=list)

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
        lines += [f"  OPTIONAL: {problem}" for problem in self.optional]
        return "\n".join(lines)


def role_rule(group: str, plural: str, verbs: list[str]) -> str:
    """The Role rule granting ``verbs`` on ``plural`` in ``group``, as a YAML snippet."""
    quoted = ", ".join(f'"{verb}"' for verb in verbs)
    return (
        "rules:\n"
        f'- apiGroups: ["{group}"]\n'
        f'  resources: ["{plural}"]\n'
        f"  verbs: [{quoted}]\n"
    )


def _rbac_fix(api: KubeApi, verbs: list[str]) -> str:
    kind = api.kind
    return (
        f"grant verbs {', '.join(verbs)} on resource {kind.plural!r} in API group "
        f"{kind.group!r} in namespace {api.namespace!r}: apply the Role and RoleBinding "
        f"that `trio-lease manifests --namespace {api.namespace}` prints, or kubectl create "
        f"role trio-lease -n {api.namespace} "
        f"--verb={','.join(kind.verbs)} --resource={kind.resource} and bind it to the service "
        "account (resourceNames can restrict get/update/watch but never create)"
    )


async def run_check(api: KubeApi) -> CheckReport:
    """Check reachability, credentials, RBAC and the resource; see the module docstring."""
    report = CheckReport(
        server=api.config.server_url,
        namespace=api.namespace,
        lease_kind=api.kind.name,
        source=api.config.source,
    )
    try:
        missing = await _review_verbs(api)
        probe = await _probe_get(api)
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
    try:
        namespace_problem = await missing_namespace(api)
    except LeaseError:
        namespace_problem = None  # reachability and permissions are judged above
    if namespace_problem is not None:
        report.problems.append(
            CheckProblem(
                namespace_problem,
                f"create it (kubectl create namespace {api.namespace}) or give another "
                "namespace (--namespace, the 'namespace' key)",
            )
        )
        return report
    if missing is None:  # SelfSubjectAccessReviews unavailable: probe by reading
        missing = await _probe_reads(api)
        report.notes.append(
            "SelfSubjectAccessReviews are not available: probed get, list and watch by "
            "reading; create and update could not be checked without writing (nor create on "
            "events, which only KubernetesEvents needs)"
        )
    else:
        await _check_events(api, report)
    if probe.code == 401:
        report.problems.append(_credentials_problem(api))
        return report
    if probe.code == 403 and "get" not in missing:
        missing.insert(0, "get")
    if missing:
        report.problems.append(
            CheckProblem(
                f"missing permissions: {', '.join(missing)} on {api.kind.resource} in "
                f"namespace {api.namespace!r}",
                _rbac_fix(api, missing),
                role_rule(api.kind.group, api.kind.plural, missing),
            )
        )
    if probe.missing_resource:
        report.problems.append(_missing_resource_problem(api))
    elif probe.code >= 500:
        report.problems.append(
            CheckProblem(
                f"the API server answered {probe.code} {probe.reason}",
                "the server is unhealthy or overloaded; try again later",
            )
        )
    return report


async def _review_verbs(api: KubeApi, kind: LeaseKind | None = None) -> list[str] | None:
    """The verbs of ``kind`` (default: the lease kind) SelfSubjectAccessReviews deny; None
    when reviews are not available."""
    kind = kind or api.kind
    ctx = RequestContext(
        "create",
        kind,
        api.namespace,
        described=(
            "a SelfSubjectAccessReview (asking which verbs this identity may use on "
            f"{kind.resource} in namespace {api.namespace!r})"
        ),
        server=api.config.server_url,
    )
    missing = []
    for verb in kind.verbs:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": api.namespace,
                    "verb": verb,
                    "group": kind.group,
                    "resource": kind.plural,
                }
            },
        }
        response = await api.request("POST", _SSAR_PATH, ctx, body=body)
        if response.status_code not in (200, 201):
            return None
        try:
            allowed = _allowed(response.content)
        except (BackendProtocolError, _wire.Malformed):
            return None
        if not allowed:
            missing.append(verb)
    return missing


async def _check_events(api: KubeApi, report: CheckReport) -> None:
    """Report a missing ``create`` on Events as optional (only KubernetesEvents needs it)."""
    try:
        missing = await _review_verbs(api, EVENTS)
    except LeaseError:
        missing = None
    if missing is None:
        report.notes.append("create on events (events.k8s.io) could not be checked")
    elif missing:
        report.optional.append(
            CheckProblem(
                f"missing permission: create on {EVENTS.resource} in namespace "
                f"{api.namespace!r}; needed only to write Events (KubernetesEvents), "
                "leases work without it",
                "to write Events, apply the Role that `trio-lease manifests --events` prints, "
                "or kubectl "
                f"create role trio-lease-events -n {api.namespace} --verb=create "
                f"--resource={EVENTS.resource} and bind it to the service account",
                role_rule(EVENTS.group, EVENTS.plural, list(EVENTS.verbs)),
            )
        )


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


async def missing_namespace(api: KubeApi) -> str | None:
    """What is wrong if the namespace does not exist, None if it exists or cannot be told.

    A list or get in a missing namespace answers as in an empty one, so this asks for the
    namespace itself (``get`` on namespaces), else, where that is forbidden, sends a create
    of a probe lease with ``dryRun=All``: it writes nothing, and the server refuses it with
    "namespace not found" exactly when a real create would be.
    """
    ctx = RequestContext(
        "get",
        api.kind,
        api.namespace,
        described=f"namespace {api.namespace!r}",
        server=api.config.server_url,
    )
    response = await api.request("GET", f"/api/v1/namespaces/{api.namespace}", ctx)
    if response.status_code == 200:
        return None
    if response.status_code == 404 and not parse_status(response).missing_resource:
        return f"namespace {api.namespace!r} does not exist"
    name = f"trio-lease-check-{secrets.token_hex(4)}"
    now = datetime.now(UTC)
    record = LeaseRecord(name=name, lease_duration=15.0, acquired_at=now, renewed_at=now)
    body = api.kind.new_object(name, record, {})
    probe = api.ctx("create", name)
    response = await api.request(
        "POST", api.collection_path(), probe, body=body, params={"dryRun": "All"}
    )
    if response.status_code == 404 and parse_status(response).missing_namespace:
        return f"namespace {api.namespace!r} does not exist"
    return None


async def _probe_get(api: KubeApi) -> ApiStatus:
    """GET a lease that does not exist: 404 NotFound proves get and the resource work."""
    name = f"trio-lease-check-{secrets.token_hex(4)}"
    ctx = api.ctx("get", name)
    response = await api.request("GET", api.item_path(name), ctx)
    if response.status_code < 400:
        return ApiStatus(response.status_code, "OK")
    return parse_status(response)


async def _probe_reads(api: KubeApi) -> list[str]:
    """Probe list and watch by reading; a 403 means the verb is missing."""
    missing = []
    path = api.collection_path()
    selector = f"metadata.name=trio-lease-check-{secrets.token_hex(4)}"
    probes = (
        ("list", {"limit": "1", "fieldSelector": selector}),
        ("watch", {"watch": "1", "fieldSelector": selector, "timeoutSeconds": "1"}),
    )
    for verb, params in probes:
        try:
            async with api.stream(path, params, api.ctx(verb)) as response:
                status = response.status_code
        except LeaseError:
            continue  # reachability is judged by the other requests
        if status == 403:
            missing.append(verb)
    return missing


def _credentials_problem(api: KubeApi) -> CheckProblem:
    return CheckProblem(
        f"the API server rejected our credentials (401, {api.config.credentials.kind} "
        f"from {api.config.source})",
        "renew the token (is the token file current? has the service account token "
        "expired?), fix the kubeconfig user, or check the exec plugin's output",
    )


def _missing_resource_problem(api: KubeApi) -> CheckProblem:
    if api.kind.group == "coordination.k8s.io":
        return CheckProblem(
            f"the server does not serve {api.kind.resource}",
            "use Kubernetes 1.14 or newer, or check that 'server' is an API server",
        )
    return CheckProblem(
        f"the custom resource definition for {api.kind.resource} "
        f"({api.kind.api_version}) is missing",
        "trio-lease manifests --lease-kind akka.io/v1 | kubectl apply -f - (needs "
        "cluster-admin once; the manifests ship in the package)",
    )
