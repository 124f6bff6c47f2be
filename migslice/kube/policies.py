"""Watch caches for the admission webhook: TenantPolicies, Namespaces, Nodes and Pods, and,
where the API server serves ``resource.k8s.io/v1``, ResourceClaims, DeviceClasses,
ResourceClaimTemplates and ResourceSlices (docs/dra.md, "Admission").

The generic list+watch loop is :class:`migslice.kube.informer.Informer`; this module only
wires them to a :class:`ClusterFeed` (the webhook's ``ClusterState``), which keeps the few
facts decisions need and drops the raw objects at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from migslice.kube.informer import SLICE_PAGE_SIZE, Informer, ResourceRef
from migslice.kube.transport import RawObject, Transport
from migslice.names import DRA_API, GROUP, VERSION
from migslice.names import POLICY_PLURAL as PLURAL
from migslice.objects.claim_templates import slim_template
from migslice.objects.dra_products import slim_slice
from migslice.objects.nodes import slim_node
from migslice.objects.pods import slim_pod
from migslice.objects.resource_claims import slim_claim

log = logging.getLogger(__name__)

POLICIES = "tenantpolicies"
NAMESPACES = "namespaces"
NODES = "nodes"
PODS = "pods"
CLAIMS = "resourceclaims"
CLASSES = "deviceclasses"
TEMPLATES = "resourceclaimtemplates"
SLICES = "resourceslices"
SOURCES = (POLICIES, NAMESPACES, NODES, PODS)
DRA_SOURCES = (CLAIMS, CLASSES, TEMPLATES, SLICES)


class ClusterFeed(Protocol):
    """What the informers feed: one upsert and one delete per kind, and readiness."""

    def upsert_policy(self, raw_policy: Mapping[str, object]) -> None: ...
    def delete_policy(self, name: str) -> None: ...
    def upsert_namespace(self, raw_namespace: Mapping[str, object]) -> None: ...
    def delete_namespace(self, name: str) -> None: ...
    def upsert_node(self, raw_node: Mapping[str, object]) -> None: ...
    def delete_node(self, name: str) -> None: ...
    def upsert_pod(self, raw_pod: Mapping[str, object]) -> None: ...
    def delete_pod(self, namespace: str, name: str) -> None: ...
    def upsert_claim(self, raw_claim: Mapping[str, object]) -> None: ...
    def delete_claim(self, key: str) -> None: ...
    def upsert_device_class(self, raw_class: Mapping[str, object]) -> None: ...
    def delete_device_class(self, name: str) -> None: ...
    def upsert_template(self, raw_template: Mapping[str, object]) -> None: ...
    def delete_template(self, key: str) -> None: ...
    def upsert_slice(self, slim_slice: Mapping[str, object]) -> None: ...
    def delete_slice(self, name: str) -> None: ...
    def expect(self, *sources: str) -> None: ...
    def mark_synced(self, source: str) -> None: ...


class _FeedSink:
    """An informer sink that forwards to one kind of the feed and marks it synced."""

    def __init__(
        self,
        source: str,
        feed: ClusterFeed,
        upsert: Callable[[Mapping[str, object]], None],
        delete: Callable[[str], None],
    ) -> None:
        self.source = source
        self.feed = feed
        self._upsert = upsert
        self._delete = delete
        self._keys: set[str] = set()

    def listed(self, keys: frozenset[str]) -> None:
        """A complete list was upserted page by page: forget what it no longer has."""
        for key in self._keys - keys:
            self._delete(key)
        self._keys = set(keys)
        self.feed.mark_synced(self.source)

    def upsert(self, key: str, item: RawObject) -> None:
        self._keys.add(key)
        self._upsert(item)

    def delete(self, key: str) -> None:
        self._keys.discard(key)
        self._delete(key)


def _delete_pod(feed: ClusterFeed) -> Callable[[str], None]:
    def delete(key: str) -> None:
        namespace, _, name = key.partition("/")
        feed.delete_pod(namespace, name)

    return delete


Upsert = Callable[[Mapping[str, object]], None]
Project = Callable[[RawObject], RawObject | None]


def _keep(raw: RawObject) -> RawObject | None:
    return raw


ADMISSION_WATCH_TIMEOUT_S = 20
"""The webhook's watches last this long (``timeoutSeconds``): a watch that stalls with its
connection open (a dead API server behind a load balancer) counts as blind this long plus
``WATCH_GRACE_S`` after its last answer, and quota charges stay in the ledger until every
replica would have noticed (``webhook.quota``): a shorter watch keeps the ledger short. A
watch every 20 s per cache costs kube-apiserver a request, served from its watch cache."""


def admission_informers(
    feed: ClusterFeed, transport: Transport, *, dra: bool = False
) -> tuple[Informer[RawObject], ...]:
    """The informers (not started) that keep ``feed`` up to date; call ``start()`` on each;
    with ``dra``, also those of ResourceClaims, DeviceClasses, templates and slices.

    Lists reach the feed page by page (the sink is a ``PageSink``), and Nodes and Pods are
    slimmed as each page arrives (``slim_node``, ``slim_pod``): neither the raw list of 40,000
    pods nor its slim copies ever sit whole in memory; the feed keeps its own compact charges."""
    feed.expect(*SOURCES, *(DRA_SOURCES if dra else ()))
    wiring: tuple[tuple[str, str, Upsert, Callable[[str], None], Project], ...] = (
        (
            POLICIES,
            f"/apis/{GROUP}/{VERSION}/{PLURAL}",
            feed.upsert_policy,
            feed.delete_policy,
            _keep,
        ),
        (NAMESPACES, "/api/v1/namespaces", feed.upsert_namespace, feed.delete_namespace, _keep),
        (NODES, "/api/v1/nodes", feed.upsert_node, feed.delete_node, slim_node),
        (PODS, "/api/v1/pods", feed.upsert_pod, _delete_pod(feed), slim_pod),
    )
    if dra:
        wiring += (
            (CLAIMS, f"{DRA_API}/resourceclaims", feed.upsert_claim, feed.delete_claim, slim_claim),
            (
                CLASSES,
                f"{DRA_API}/deviceclasses",
                feed.upsert_device_class,
                feed.delete_device_class,
                _keep,
            ),
            (
                TEMPLATES,
                f"{DRA_API}/resourceclaimtemplates",
                feed.upsert_template,
                feed.delete_template,
                slim_template,
            ),
            (
                SLICES,
                f"{DRA_API}/resourceslices",
                feed.upsert_slice,
                feed.delete_slice,
                slim_slice,
            ),
        )
    return tuple(
        Informer(
            name=f"webhook-{source}",
            transport=transport,
            resource=ResourceRef(path),
            project=project,
            sink=_FeedSink(source, feed, upsert, delete),
            page_size=SLICE_PAGE_SIZE if source == SLICES else 500,
            watch_timeout_s=ADMISSION_WATCH_TIMEOUT_S,
        )
        for source, path, upsert, delete, project in wiring
    )
