"""A pod that is not among the live pods: what the webhook would answer for it now (pure).

A GPU pod the webhook refuses never exists: ``kubectl create`` is answered 403 and leaves
nothing; a controller's pod leaves only its controller's ``FailedCreate`` Event. So ``why``
takes the pod template it came from (``-f FILE``: the manifest, a Pod or a workload; else the
namespace's workload whose name the pod's is, or starts with followed by ``-``: a Job,
CronJob, ReplicaSet, StatefulSet, DaemonSet or Deployment, the longest such name) and runs the
webhook's own decision (:func:`migslice.admission.decide`) on it against the same cluster: the
TenantPolicies and namespaces that select it, the GPU products of the nodes (a DRA node's from
its ResourceSlices, as the webhook reads them), and each tenant's usage from its pods and
ResourceClaims, as the webhook counts it. The ``FailedCreate`` Events of that workload
say what the webhook did answer when the controller tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice import names
from migslice.admission import AdmissionSettings, PodAdmission, decide
from migslice.admission.patch import PatchOp, pointer
from migslice.admission.status import QuotaDimension, quota_dimensions
from migslice.admission.usage import SliceUsage
from migslice.admission.view import TemplateFacts
from migslice.mig import CATALOG
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.json import JsonObject, mapping
from migslice.objects.pods import metadata_of
from migslice.policy import Offer, TenantPolicy
from migslice.status.cluster import Cluster

WORKLOAD_KINDS = ("Job", "CronJob", "ReplicaSet", "StatefulSet", "DaemonSet", "Deployment")
FAILED_CREATE = "FailedCreate"


@dataclass(frozen=True, slots=True)
class CreateEvent:
    """An Event (``FailedCreate`` of a workload, ``FailedScheduling`` of a pod): how often,
    last when, and its message."""

    count: int
    last: str
    message: str


@dataclass(frozen=True, slots=True)
class AbsentPod:
    """The webhook's answer for a pod that is not there. ``source``: where its spec came from
    (``Job team-a/train``, ``file pod.yaml``); ``allowed``/``reason``/``message``: the
    decision (``reason`` is the webhook's: ``quota``, ``no-policy``, ``admitted``, ...);
    ``profile``: the MIG profile it would resolve to, when admitted; ``dimensions``: the
    tenant's quota, used (by its live pods and claims) against limit."""

    source: str
    allowed: bool
    reason: str
    message: str
    tenant: str | None
    profile: str | None
    dimensions: tuple[QuotaDimension, ...]
    events: tuple[CreateEvent, ...]
    warnings: tuple[str, ...] = ()


class _ClusterView:
    """The webhook's view (:class:`migslice.admission.ClusterView`) of a status cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        products = sorted(set(cluster.products.values()))
        self._offers = tuple(
            Offer(product, model)
            for product in products
            if (model := CATALOG.by_product(product)) is not None
        )

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        return self._cluster.tenancy.selecting(namespace)

    def invalid_selecting(self, namespace: str) -> Sequence[tuple[str, str]]:
        labels = self._cluster.tenancy.labels_of(namespace)
        return tuple(
            (name, invalid.problems)
            for name, invalid in self._cluster.invalid_policies.items()
            if invalid.partial is not None and invalid.partial.selects(namespace, labels)
        )

    def offers(self) -> Sequence[Offer]:
        return self._offers

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        return self._cluster.usage_of(tenant)

    # A pod that never existed is judged on its GPU requests and sizes; what it would say of
    # ResourceClaims it names (their classes, templates, who else uses them) is not read here,
    # so such claims are taken as unseen, as the webhook takes one it has not cached yet.

    def device_classes(self) -> Mapping[str, DeviceClassFacts]:
        return {}

    def dra_product_names(self) -> frozenset[str]:
        return frozenset()

    def covering_pod(
        self, namespace: str, pod: str, pod_uid: str, claim: str
    ) -> Mapping[str, int] | None:
        return None

    def claim_users(self, namespace: str, claim: str) -> tuple[str, ...]:
        return ()

    def claim_asks_gpu(self, namespace: str, claim: str) -> bool | None:
        return None

    def claim_instances(self, namespace: str, claim: str) -> int:
        return 0

    def extended_claim(self, namespace: str, claim: str) -> bool:
        return False

    def template(self, namespace: str, name: str) -> TemplateFacts | None:
        return None


def template_pod(raw: JsonObject, namespace: str, *, name: str | None = None) -> JsonObject | None:
    """The pod ``raw`` (a Pod, or a workload's pod template) would create in ``namespace``;
    None when ``raw`` has none. Named ``name`` when given; else a Pod keeps its own name and
    a workload's pod is created as its controller creates it, with ``generateName``
    ``<workload>-`` (what the webhook sees, and names in its answer as ``<workload>-*``)."""
    kind = raw.get("kind")
    if kind == "Pod":
        metadata = dict(metadata_of(raw))
        spec = raw.get("spec")
    else:
        spec_of = mapping(raw.get("spec"))
        if kind == "CronJob":
            spec_of = mapping(mapping(spec_of.get("jobTemplate")).get("spec"))
        template = mapping(spec_of.get("template"))
        if not template:
            return None
        metadata = dict(mapping(template.get("metadata")))
        metadata["generateName"] = f"{metadata_of(raw).get('name')}-"
        spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return None
    metadata["namespace"] = namespace
    if name is not None:
        metadata["name"] = name
        metadata.pop("generateName", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": dict(spec)}


def template_field(kind: object) -> str:
    """Where the pod template of a manifest of ``kind`` lies in it (a Pod's own fields: ""),
    so that a field of the pod :func:`template_pod` makes is named as it is written."""
    if kind == "Pod":
        return ""
    return "spec.jobTemplate.spec.template." if kind == "CronJob" else "spec.template."


def find_workload(objects: Sequence[JsonObject], namespace: str, pod: str) -> JsonObject | None:
    """The workload of ``namespace`` that names ``pod``, or whose name ``pod`` starts with
    (then ``-``): the longest such name."""
    best: JsonObject | None = None
    best_name = ""
    for raw in objects:
        if raw.get("kind") not in WORKLOAD_KINDS:
            continue
        meta = metadata_of(raw)
        name = meta.get("name")
        if not isinstance(name, str) or (meta.get("namespace") or "default") != namespace:
            continue
        if (pod == name or pod.startswith(f"{name}-")) and len(name) > len(best_name):
            best, best_name = raw, name
    return best


def create_events(
    objects: Sequence[JsonObject], namespace: str, kind: str, name: str
) -> tuple[CreateEvent, ...]:
    """The ``FailedCreate`` Events of workload ``kind`` ``namespace/name``, latest first."""
    return events_of(objects, namespace, kind, name, FAILED_CREATE)


def events_of(
    objects: Sequence[JsonObject], namespace: str, kind: str, name: str, reason: str
) -> tuple[CreateEvent, ...]:
    """The Events of ``reason`` about ``kind`` ``namespace/name``, latest first."""
    found: list[CreateEvent] = []
    for raw in objects:
        if raw.get("kind") != "Event" or raw.get("reason") != reason:
            continue
        involved = mapping(raw.get("involvedObject"))
        if (involved.get("kind"), involved.get("name")) != (kind, name):
            continue
        if (involved.get("namespace") or metadata_of(raw).get("namespace")) != namespace:
            continue
        series = mapping(raw.get("series"))
        count = raw.get("count") or series.get("count") or 1
        last = (
            raw.get("lastTimestamp")
            or series.get("lastObservedTime")
            or raw.get("eventTime")
            or raw.get("firstTimestamp")
            or ""
        )
        found.append(
            CreateEvent(
                count if isinstance(count, int) else 1, str(last), str(raw.get("message") or "")
            )
        )
    return tuple(sorted(found, key=lambda e: e.last, reverse=True))


def explain_absent(
    cluster: Cluster,
    raw_pod: JsonObject,
    *,
    source: str,
    events: tuple[CreateEvent, ...] = (),
    settings: AdmissionSettings | None = None,
) -> AbsentPod:
    """What the webhook would answer for ``raw_pod`` (a pod of :func:`template_pod`) now."""
    namespace = str(metadata_of(raw_pod).get("namespace") or "default")
    decision = decide(
        PodAdmission(namespace, raw_pod, request_uid=""),
        _ClusterView(cluster),
        settings or AdmissionSettings(),
    )
    tenant = decision.tenant
    policy = cluster.policies.get(tenant) if tenant else None
    dimensions = () if policy is None else quota_dimensions(policy, cluster.usage_of(policy.name))
    return AbsentPod(
        source=source,
        allowed=decision.allowed,
        reason=decision.reason,
        message=decision.message,
        tenant=tenant,
        profile=_profile(decision.patch),
        dimensions=dimensions,
        events=events,
        warnings=decision.warnings,
    )


def _profile(patch: Sequence[PatchOp]) -> str | None:
    """The profile annotation the webhook's patch writes (as a member, or in the map or the
    metadata it creates)."""
    member = pointer("metadata", "annotations", names.PROFILE)
    for op in patch:
        value = op.value
        if op.path == member and isinstance(value, str):
            return value
        if isinstance(value, Mapping):
            annotations = mapping(value.get("annotations")) if "annotations" in value else value
            found = annotations.get(names.PROFILE)
            if isinstance(found, str):
                return found
    return None
