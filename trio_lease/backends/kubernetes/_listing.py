"""Every lease object in the namespace, for ``trio-lease status`` without names.

One paged LIST of the lease kind without a label selector, so Leases other programs keep in
the namespace (a controller's leader election, say) are listed too, marked as foreign: objects
without the label :data:`~._names.MANAGED_BY_LABEL` that the backend puts on the objects it
creates. A lease whose name was mapped (:func:`~._names.lease_name_for`) is listed by its
original key, from the :data:`~._names.KEY_ANNOTATION` annotation.
"""

from __future__ import annotations

from ..._exceptions import BackendProtocolError
from ._api import KubeApi
from ._errors import error_from
from ._names import KEY_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, is_valid_name
from ._watch import read_list_page

__all__ = ["list_leases"]

#: Objects asked for per page, and the most pages read (a namespace of 50,000 leases).
PAGE_SIZE = 500
MAX_PAGES = 100


async def list_leases(api: KubeApi) -> list[tuple[str, bool]]:
    """Every lease in the namespace as (key, foreign), sorted by key."""
    ctx = api.ctx("list")
    found: dict[str, bool] = {}
    token = ""
    for _ in range(MAX_PAGES):
        params = {"limit": str(PAGE_SIZE)} | ({"continue": token} if token else {})
        response = await api.request("GET", api.collection_path(), ctx, params=params)
        if response.status_code != 200:
            raise error_from(response, ctx)
        items, _, token = read_list_page(api, response.content, ctx)
        for item in items:
            key, foreign = _key_of(item)
            if key:
                found[key] = foreign
        if not token:
            return sorted(found.items())
    raise BackendProtocolError(f"the list of {ctx.target} did not end after {MAX_PAGES} pages")


def _key_of(item: object) -> tuple[str, bool]:
    """The lease key of a listed object ("" if it has no valid name) and whether it is foreign."""
    metadata = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(metadata, dict):
        return "", False
    name = metadata.get("name")
    if not isinstance(name, str) or not is_valid_name(name):
        return "", False
    labels = metadata.get("labels")
    ours = isinstance(labels, dict) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
    annotations = metadata.get("annotations")
    key = annotations.get(KEY_ANNOTATION) if isinstance(annotations, dict) else None
    return (key if isinstance(key, str) and key else name), not ours
