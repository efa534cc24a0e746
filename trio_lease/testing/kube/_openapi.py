"""A minimal OpenAPI v3 index, enough for kubectl to trust server-side field validation.

``kubectl apply`` validates manifests before sending them. Since 1.27 it first asks the server
(``/openapi/v3``, then the group-version document) whether the PATCH operation of the object's
kind accepts the ``fieldValidation`` query parameter; if so it skips client-side schema
validation and sends ``fieldValidation=Strict`` instead (kubectl's ``QueryParamVerifierV3``).
Without any OpenAPI document kubectl refuses to apply ("failed to download openapi") unless
``--validate=false`` is given. We publish one path per served type whose PATCH operation names
its group-version-kind and the ``fieldValidation`` parameter, and the schemas of the Lease
kinds (:mod:`._schemas`), so ``kubectl explain lease`` works; the emulator validates on the
server (400 for unknown fields when ``fieldValidation=Strict``). ``/openapi/v2`` is the same
schemas as one Swagger 2.0 document, in JSON only (the real server also speaks protobuf).
"""

from __future__ import annotations

from ._cluster import Cluster
from ._schemas import schemas_for
from ._status import JSON

__all__ = ["openapi_v2", "openapi_v3"]


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3(emulator: Cluster, parts: list[str]) -> JSON | None:
    """The OpenAPI v3 root (``/openapi/v3``) or one group-version document, or None."""
    versions = sorted({(g, v) for g, v, _ in emulator.types})
    if parts == ["openapi", "v3"]:
        return {
            "paths": {
                _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}"}
                for g, v in versions
            }
        }
    wanted = "/".join(parts[2:])
    for group, version in versions:
        if _gv_path(group, version) != wanted:
            continue
        paths: JSON = {}
        for (g, v, plural), rt in emulator.types.items():
            if (g, v) != (group, version):
                continue
            prefix = f"/{wanted}/namespaces/{{namespace}}" if rt.namespaced else f"/{wanted}"
            gvk = {"group": g, "version": v, "kind": rt.kind}
            paths[f"{prefix}/{plural}/{{name}}"] = {
                "patch": {
                    "operationId": f"patch{rt.kind}",
                    "parameters": [
                        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk,
                }
            }
        served = [rt for (g, v, _), rt in emulator.types.items() if (g, v) == (group, version)]
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": schemas_for(served, "#/components/schemas/")},
        }
    return None


def openapi_v2(emulator: Cluster) -> JSON:
    """``/openapi/v2``: one Swagger 2.0 document for every served type (JSON only)."""
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": {},
        "definitions": schemas_for(list(emulator.types.values()), "#/definitions/"),
    }
