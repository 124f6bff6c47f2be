"""The only package that talks to the Kubernetes API: list+watch caches (informers).

See :mod:`migslice.kube.informer` for the cache and :mod:`migslice.kube.transport` for how it
reaches the API server.
"""

from migslice.kube.informer import (
    Backoff,
    GoneError,
    Informer,
    InformerStats,
    ResourceRef,
    Sink,
    object_key,
)
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject, Transport

__all__ = [
    "ApiError",
    "Backoff",
    "GoneError",
    "Informer",
    "InformerStats",
    "KubernetesTransport",
    "RawObject",
    "ResourceRef",
    "Sink",
    "Transport",
    "object_key",
]
