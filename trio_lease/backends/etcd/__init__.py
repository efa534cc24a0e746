"""The etcd v3 backend: one key per lease, compare-and-swap by transaction, through the JSON
gateway (``POST /v3/...``) with httpx. Registered as ``etcd``. See docs/backends.md.
"""

from ... import _public
from ._backend import EtcdBackend as EtcdBackend

__all__ = ["EtcdBackend"]

_public.publish(globals())
