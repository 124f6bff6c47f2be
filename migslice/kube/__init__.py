"""The only package that talks to the Kubernetes API: list+watch caches (informers), the
repartition controller's writes and Lease-based leader election.

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
from migslice.kube.lease import LeaderElector
from migslice.kube.repartition import KubeRepartitionApi
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject, Transport

__all__ = [
    "ApiError",
    "Backoff",
    "GoneError",
    "Informer",
    "InformerStats",
    "KubeRepartitionApi",
    "KubernetesTransport",
    "LeaderElector",
    "RawObject",
    "ResourceRef",
    "Sink",
    "Transport",
    "object_key",
]
