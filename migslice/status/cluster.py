"""The cluster as status and why read it, derived once from its objects (pure).

One pass over the objects: every Node projected and resolved once into the extender's
:class:`~migslice.scheduling.PreparedNode` (its inventory :class:`NodeState` inside; a DRA
node's from NVIDIA's ResourceSlices and the ResourceClaims allocated in it), every Pod read
once (its GPU requests or GPU ResourceClaims, where it holds them, its charge in slice units
as the webhook prices it, whether it waits), every ResourceClaim priced as the webhook
charges it (:mod:`migslice.status.charges`), the TenantPolicies into the webhook's
:class:`~migslice.policy.tenancy.Tenancy`, and the mig-parted ConfigMap with the repartition
controller's record. The views (tenants, pools, waiting pods, why) only read this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migslice import names
from migslice.admission.claims import controlling_pod
from migslice.admission.usage import ZERO, SliceUsage, pricing_models, usage_of
from migslice.inventory import ClusterIndex, NodeState
from migslice.mig import CATALOG
from migslice.objects import ClusterObjects, PodFacts, node_facts_from_raw
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.dra_pool import DraPool
from migslice.objects.dra_products import node_products
from migslice.objects.json import JsonObject, items, mapping
from migslice.objects.pod_gpus import PodGpuMemo, Requests
from migslice.objects.pods import (
    bound_node_of,
    has_resource_claims,
    is_admission_gated,
    is_terminal,
    metadata_of,
    nominated_node_of,
    pod_claims,
    pod_key,
    pod_priority,
)
from migslice.objects.resource_claims import ClaimFacts, claim_facts_from_raw, gpu_asks
from migslice.policy import PolicyError, TenantPolicy, read_tenant_policy
from migslice.policy.tenancy import Tenancy
from migslice.repartition import MigConfigFile, read_config_map
from migslice.scheduling import PreparedNode, prepare_node
from migslice.status.charges import Payer, claim_charges

NO_POOL = "(no GPU product)"
"""The pool of nodes without the pool label (no GPU, or the label missing)."""


@dataclass(frozen=True, slots=True)
class StatusSettings:
    """What a status or why run reads the cluster with. ``pool_label``: the node label whose
    value names a node's pool; None for the GPU product (``nvidia.com/gpu.product``, else
    the model the inventory found)."""

    now_s: float
    pool_label: str | None = None
    mig_config_map: tuple[str, str] = (names.GPU_OPERATOR_NAMESPACE, names.MIG_CONFIG_MAP)
    scheduler_name: str = names.SCHEDULER_NAME

    @property
    def pool_key(self) -> str:
        return self.pool_label or names.PRODUCT_LABEL


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A live pod that asks for a GPU resource: where it is, what it holds, its charge."""

    key: str
    namespace: str
    raw: JsonObject = field(repr=False)
    requests: tuple[tuple[str, int], ...]
    node: str | None
    nominated: str | None
    usage: SliceUsage
    claims: tuple[str, ...] = ()
    """Its ResourceClaims (``namespace/name``), for a pod that asks NVIDIA's DRA driver."""
    gated: bool = False
    """Behind the admission gate (created in a fail-open namespace while the webhook was
    unavailable, docs/outages.md): it waits for admission, holds nothing and is charged nothing
    until the webhook's gate reconciler admits it."""
    unmade: tuple[tuple[str, str], ...] = ()
    """Its claims from templates (name in ``spec.resourceClaims``, template) that the
    resourceclaim controller has not made yet: kube-scheduler does not try the pod until they
    exist."""

    @property
    def is_waiting(self) -> bool:
        return self.node is None


@dataclass(frozen=True, slots=True)
class InvalidPolicy:
    """A TenantPolicy that does not parse: its message, and the policy as far as it reads
    (whose namespaces it selects) with its problems alone."""

    name: str
    message: str
    partial: TenantPolicy | None = None
    problems: str = ""


@dataclass
class Cluster:
    """Everything status and why read, derived once (see the module docstring)."""

    settings: StatusSettings
    nodes: dict[str, PreparedNode]
    node_labels: dict[str, Mapping[str, object]]
    pools: dict[str, str]
    tenancy: Tenancy
    policies: dict[str, TenantPolicy]
    invalid_policies: dict[str, InvalidPolicy]
    policy_status: dict[str, Mapping[str, object]]
    gpu_pods: dict[str, GpuPod]
    holders: dict[str, tuple[PodFacts, ...]]
    mig_file: MigConfigFile
    cluster_models: tuple[str, ...]
    claims: Mapping[str, ClaimFacts] = field(default_factory=dict)
    classes: Mapping[str, DeviceClassFacts] = field(default_factory=dict)
    products: Mapping[str, str] = field(default_factory=dict)
    """Per node its GPU product as admission offers and prices it (the GFD label, else the
    one product its ResourceSlices name; :func:`~migslice.objects.dra_products.node_product`)."""
    claim_charges: Mapping[str, SliceUsage] = field(default_factory=dict)
    """What the webhook charges each ResourceClaim (by ``namespace/name``; those it charges
    nothing left out)."""
    index: ClusterIndex[PreparedNode] | None = field(default=None, repr=False)
    """The inventory ``nodes`` came from: a node as kube-scheduler sees it for one pod,
    without the pods only nominated there that it does not count for that pod
    (:meth:`for_pod`)."""
    _tenants: dict[str, str | None] = field(default_factory=dict, repr=False)

    def states(self) -> list[NodeState]:
        return [node.state for node in self.nodes.values()]

    def for_pod(self, key: str, priority: int) -> dict[str, PreparedNode] | None:
        """The nodes as the extender judges pod ``key`` of ``priority``: those holding a pod
        only nominated there that kube-scheduler does not count for it (the pod itself, a
        preemptor whose victims are leaving; or one of lower priority) derived again without
        it (``addGENominatedPods``, :meth:`~migslice.inventory.ClusterIndex.derive_for_pod`).
        None when no node holds such a pod: :attr:`nodes` as they are."""
        index = self.index
        uncounted = None if index is None else index.uncounted_nominations(key, priority)
        if index is None or not uncounted:
            return None
        nodes = dict(self.nodes)
        for name in uncounted:
            derived = index.derive_for_pod(name, key, priority)
            if derived is not None and name in nodes:
                nodes[name] = derived
        return nodes

    def dra_pool(self, node: str) -> DraPool | None:
        """The ``gpu.nvidia.com`` pool NVIDIA's DRA driver publishes for ``node`` (read
        whatever serves the node: on a node both device APIs serve, the slices the inventory
        does not use); None when no slice names it."""
        inputs = None if self.index is None else self.index.dra_inputs(node, ())
        return None if inputs is None else inputs.pool

    def tenant_of(self, namespace: str) -> str | None:
        """The one TenantPolicy that selects ``namespace`` (None: none, or a conflict)."""
        if namespace in self._tenants:
            return self._tenants[namespace]
        selecting = self.tenancy.selecting(namespace)
        tenant = self._tenants[namespace] = selecting[0].name if len(selecting) == 1 else None
        return tenant

    def pods_of(self, tenant: str) -> list[GpuPod]:
        namespaces = self.tenancy.namespaces_of(tenant)
        return [pod for pod in self.gpu_pods.values() if pod.namespace in namespaces]

    def usage_of(self, tenant: str) -> SliceUsage:
        """The tenant's usage as the webhook counts it: its GPU pods' extended resources and
        its ResourceClaims (docs/policy.md, "How claims are charged")."""
        namespaces = self.tenancy.namespaces_of(tenant)
        total = ZERO
        for pod in self.pods_of(tenant):
            total = total + pod.usage
        for key, charge in self.claim_charges.items():
            if key.partition("/")[0] in namespaces:
                total = total + charge
        return total


def build_cluster(objects: ClusterObjects, settings: StatusSettings) -> Cluster:
    """:class:`Cluster` of ``objects`` (see the module docstring)."""
    mig_file = read_config_map(objects.config_map(*settings.mig_config_map), names.MIG_CONFIG_KEY)
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node, CATALOG)
    index.set_mig_configs(mig_file.configs)
    facts = [node_facts_from_raw(raw) for raw in objects.nodes]
    index.replace_nodes(facts)
    index.load_dra(objects)
    claims: dict[str, ClaimFacts] = {}
    owners: dict[str, tuple[str, str] | None] = {}  # claim key -> the pod controlling it
    for raw in objects.resource_claims:
        claim = claim_facts_from_raw(raw)
        if claim is not None:
            claims[claim.key] = claim
            owners[claim.key] = controlling_pod(metadata_of(raw))
    classes = index.classes
    raw_nodes = {f.name: raw for f, raw in zip(facts, objects.nodes, strict=True) if f.name}
    node_labels = {name: mapping(metadata_of(raw).get("labels")) for name, raw in raw_nodes.items()}
    products = node_products({f.name: f.product for f in facts if f.name}, objects.resource_slices)
    models = sorted({m.key for p in products.values() if (m := CATALOG.by_product(p)) is not None})
    cluster_models = tuple(models)

    tenancy = Tenancy()
    for raw in objects.others:
        if raw.get("kind") == "Namespace":
            meta = metadata_of(raw)
            labels = mapping(meta.get("labels"))
            if isinstance(meta.get("name"), str):
                tenancy.put_namespace(
                    str(meta["name"]), {str(k): str(v) for k, v in labels.items()}
                )
    policies: dict[str, TenantPolicy] = {}
    invalid: dict[str, InvalidPolicy] = {}
    statuses: dict[str, Mapping[str, object]] = {}
    for raw in objects.tenant_policies:
        name = metadata_of(raw).get("name")
        status = raw.get("status")
        if isinstance(name, str) and isinstance(status, Mapping):
            statuses[name] = status
        name_read, policy, errors = read_tenant_policy(raw)
        if policy is None or errors:
            error = PolicyError(name_read or "?", errors)
            problems = "; ".join(str(e) for e in errors)
            invalid[error.name] = InvalidPolicy(error.name, str(error), policy, problems)
            continue
        policies[policy.name] = policy
        tenancy.put_policy(policy)

    gpu_pods: dict[str, GpuPod] = {}
    payers: dict[str, Payer] = {}  # the GPU pods the webhook charges: their requests, uid
    holding: list[PodFacts] = []
    priced: dict[str | None, tuple[str, ...]] = {}  # product -> the models it prices on
    charges: dict[tuple[Requests, str | None], SliceUsage] = {}  # a few shapes, many pods
    reader = PodGpuMemo()  # the pods of one controller are read once
    for raw in objects.pods:
        if is_terminal(raw):
            continue
        requests = reader.requests(raw)
        uses, unmade = _gpu_claims(raw, requests, claims, classes)
        if not requests and not uses and not unmade:
            continue
        key = pod_key(raw)
        namespace = key.partition("/")[0]
        node, nominated = bound_node_of(raw), nominated_node_of(raw)
        tenancy.touch_namespace(namespace)
        gated = is_admission_gated(raw)
        product = products.get(node) if node else None
        usage = ZERO if gated else charges.get((requests, product))
        if usage is None:
            priced_on = priced.get(product)
            if priced_on is None:
                priced_on = priced[product] = pricing_models(product, cluster_models)
            usage = charges[(requests, product)] = usage_of(dict(requests), priced_on)
        gpu_pods[key] = GpuPod(
            key, namespace, raw, requests, node, nominated, usage, uses, gated, unmade
        )
        if requests and not gated:
            uid = metadata_of(raw).get("uid")
            payers[key] = (requests, uid if isinstance(uid, str) else None)
        if node is not None or nominated is not None:
            holding.append(PodFacts(key, node, nominated, requests, uses, pod_priority(raw)))
    index.replace_pods(holding)
    claimed = claim_charges(
        objects.pods, claims, owners, classes, payers, pricing=(products, cluster_models)
    )
    for key in claimed:
        tenancy.touch_namespace(key.partition("/")[0])
    index.derive_pending()
    nodes: dict[str, PreparedNode] = {}
    for name in sorted(index.node_names()):
        prepared = index.get(name)
        if prepared is not None:
            nodes[name] = prepared
    holders: dict[str, list[PodFacts]] = {}
    for pod in holding:
        node_name = pod.holding_node
        if node_name is not None:
            holders.setdefault(node_name, []).append(pod)
    pools = {
        name: pool_of(node.state, node_labels.get(name, {}), settings, products.get(name))
        for name, node in nodes.items()
    }
    return Cluster(
        settings=settings,
        nodes=nodes,
        node_labels=node_labels,
        pools=pools,
        tenancy=tenancy,
        policies=policies,
        invalid_policies=invalid,
        policy_status=statuses,
        gpu_pods=gpu_pods,
        holders={n: tuple(sorted(p, key=lambda f: f.key)) for n, p in holders.items()},
        mig_file=mig_file,
        cluster_models=cluster_models,
        claims=claims,
        classes=classes,
        products=products,
        claim_charges=claimed,
        index=index,
    )


def _gpu_claims(
    raw_pod: JsonObject,
    requests: Requests,
    claims: Mapping[str, ClaimFacts],
    classes: Mapping[str, DeviceClassFacts],
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The pod's ResourceClaims, as the inventory keeps them (:func:`pod_facts_from_raw`),
    when it uses NVIDIA GPUs through them: a request for the driver's devices, or devices of
    it allocated (a claim not seen yet is counted too); () for a pod without claims. Then its
    claims from templates not made yet (name, template), counted too (a deviceAPI:
    ResourceClaim tenant's sized pod has only such a claim until the resourceclaim controller
    makes it)."""
    if not has_resource_claims(raw_pod) and not (
        requests and "extendedResourceClaimStatus" in mapping(raw_pod.get("status"))
    ):
        return (), ()
    found = pod_claims(raw_pod)
    keys = found.keys
    unmade = _templates_of(raw_pod, found.waiting)
    for key in keys:
        claim = claims.get(key)
        if claim is None or claim.devices or gpu_asks(claim, classes).asks:
            return keys, unmade
    return (keys if found.waiting or requests else ()), unmade


def _templates_of(raw_pod: JsonObject, waiting: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(claim name, template) of each of ``waiting``, the pod's claim names not made yet."""
    if not waiting:
        return ()
    templates: dict[str, str] = {}
    for raw in items(mapping(raw_pod.get("spec")).get("resourceClaims")):
        entry = mapping(raw)
        name, template = entry.get("name"), entry.get("resourceClaimTemplateName")
        if isinstance(name, str) and isinstance(template, str):
            templates.setdefault(name, template)
    return tuple((name, templates.get(name, "")) for name in waiting)


def pool_of(
    state: NodeState,
    labels: Mapping[str, object],
    settings: StatusSettings,
    product: str | None = None,
) -> str:
    """A node's pool: its ``pool_label`` value; without one, its GPU product (the label, else
    the model the inventory found: a node whose GPUs a DRA driver publishes may lack GFD's
    label; else the model of ``product``, the one its ResourceSlices name, for a DRA node
    whose slices the inventory could not read, as for its siblings whose it could);
    :data:`NO_POOL` when none says, or ``(no label L)`` for a ``pool_label`` L the node
    lacks."""
    value = labels.get(settings.pool_key)
    if isinstance(value, str) and value:
        return value
    if settings.pool_label is not None:
        return f"(no label {settings.pool_label})"
    if state.model is not None:
        return state.facts.product or state.model.key
    if product:
        model = CATALOG.by_product(product)
        return product if model is None else model.key
    return NO_POOL


def waiting_pods(cluster: Cluster) -> Sequence[GpuPod]:
    """The live GPU pods not bound to a node, by key."""
    return [pod for key, pod in sorted(cluster.gpu_pods.items()) if pod.is_waiting]
