"""The Kubernetes backend: leases as ``coordination.k8s.io/v1`` Leases or ``akka.io/v1`` objects.

Talks to the API server directly (no Kubernetes SDK): its own lean HTTP/1.1 client, or httpx
behind a proxy or an injected transport; compare-and-swap on ``resourceVersion``. See
docs/kubernetes.md for RBAC, the CRD, configuration and tuning.
"""

from ... import _public
from ._backend import KubernetesBackend as KubernetesBackend
from ._backend import check as check
from ._check import CheckProblem as CheckProblem
from ._check import CheckReport as CheckReport
from ._cli import add_check_command as add_check_command
from ._cluster import ClusterConfig as ClusterConfig
from ._cluster import Credentials as Credentials
from ._cluster import ExecConfig as ExecConfig
from ._config import explicit_config as explicit_config
from ._config import in_cluster_config as in_cluster_config
from ._config import resolve_config as resolve_config
from ._events import KubernetesEvents as KubernetesEvents
from ._identity import default_owner as default_owner
from ._kubeconfig import load_kubeconfig as load_kubeconfig
from ._models import AKKA as AKKA
from ._models import COORDINATION as COORDINATION
from ._models import LeaseKind as LeaseKind
from ._names import KEY_ANNOTATION as KEY_ANNOTATION
from ._names import lease_name_for as lease_name_for
from ._names import validate_lease_name as validate_lease_name
from ._reading import KubernetesLeaseRecord as KubernetesLeaseRecord

__all__ = [
    "AKKA",
    "COORDINATION",
    "KEY_ANNOTATION",
    "CheckProblem",
    "CheckReport",
    "ClusterConfig",
    "Credentials",
    "ExecConfig",
    "KubernetesBackend",
    "KubernetesEvents",
    "KubernetesLeaseRecord",
    "LeaseKind",
    "add_check_command",
    "check",
    "default_owner",
    "explicit_config",
    "in_cluster_config",
    "lease_name_for",
    "load_kubeconfig",
    "resolve_config",
    "validate_lease_name",
]

_public.publish(globals())
