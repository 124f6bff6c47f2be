"""Turn a pod's GPU intent into a concrete GPU plan under one tenant's policy.

Annotated pods (``migslice.io/gpu-size`` or ``gpu-memory``) get a resource chosen for them;
pods that request ``nvidia.com/mig-*``, ``nvidia.com/gpu`` or ``nvidia.com/gpu.shared``
directly are checked against the same policy (no bypass). Either way the result is a
:class:`GpuPlan` or a :class:`Denial` whose message names the annotation or field to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from migslice import names
from migslice.admission.decision import Denial
from migslice.admission.intent import ContainerRequest, PodIntent
from migslice.admission.usage import SliceUsage, charge
from migslice.mig import profile_from_resource
from migslice.names import SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE
from migslice.objects.pod_gpus import ContainerKind, effective_counts
from migslice.policy import Need, Offer, TenantPolicy, Tier, resolve_profile
from migslice.policy.resolution import usable_offers, whole_gpu_memory_mib
from migslice.quantity import QuantityError, parse_count, parse_memory_mib
from migslice.whynot import WhyNot

MAX_COUNT = 64
TIME_SLICED_SUFFIX = ".shared"
"""What the device plugin's time-slicing with ``renameByDefault`` appends to a resource."""
_SHARING = {Tier.SHARED: "time-slicing", Tier.MPS: "mps"}


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """What the pod will get: the resource to set (annotated pods only), steering, charge."""

    profile: str  # the value of migslice.io/profile
    charge: SliceUsage
    node_requirements: tuple[tuple[str, tuple[str, ...]], ...]
    set_resource: ContainerRequest | None = None
    unlabelled: bool = False
    """Nodes without the product label may serve it too (DRA nodes without GPU Feature
    Discovery): the policy narrows no product, and the resource names what it needs."""
    claim_template: str | None = None
    """``deviceAPI: ResourceClaim``: the pod gets ``set_resource``'s count of claims from this
    template of its namespace instead of the resource."""


def plan_annotated(
    policy: TenantPolicy, intent: PodIntent, offers: Sequence[Offer]
) -> GpuPlan | Denial:
    """The plan for a pod that asks with migslice annotations."""
    size_name = intent.annotation(names.GPU_SIZE)
    memory_text = intent.annotation(names.GPU_MEMORY)
    compute_text = intent.annotation(names.GPU_COMPUTE)
    if size_name is not None and memory_text is not None:
        return _bad(
            f"annotations {names.GPU_SIZE} and {names.GPU_MEMORY} are both set; use one of them"
        )
    if size_name is not None and compute_text is not None:
        return _bad(
            f"annotation {names.GPU_COMPUTE} goes with {names.GPU_MEMORY}, not with "
            f"{names.GPU_SIZE} (the size defines its compute slices)"
        )
    count = _count(intent.annotation(names.GPU_COUNT))
    if isinstance(count, Denial):
        return count
    container = _container(intent.annotation(names.GPU_CONTAINER), intent.containers)
    if isinstance(container, Denial):
        return container
    wanted = (
        _memory_need(memory_text, compute_text)
        if memory_text is not None
        else _size_need(policy, size_name)
    )
    if isinstance(wanted, Denial):
        return wanted
    need, tier = wanted
    if not policy.allows_tier(tier):
        return _tier_denial(policy, tier)
    return _plan_tier(policy, need, tier, offers, count=count, container=container)


def _memory_need(memory_text: str, compute_text: str | None) -> tuple[Need, Tier] | Denial:
    """``gpu-memory`` (with optional ``gpu-compute``): a MIG need."""
    try:
        memory_mib = parse_memory_mib(memory_text)
    except QuantityError as error:
        return _bad(f"annotation {names.GPU_MEMORY}: {error}")
    compute = None
    if compute_text is not None:
        try:
            compute = parse_count(compute_text)
        except QuantityError:
            compute = 0
        if not 1 <= compute <= 7:
            return _bad(
                f"annotation {names.GPU_COMPUTE} is {compute_text!r}; expected a number of "
                "compute slices from 1 to 7"
            )
    return Need(memory_mib, compute), Tier.MIG


def _size_need(policy: TenantPolicy, size_name: str | None) -> tuple[Need, Tier] | Denial:
    """``gpu-size`` (or the policy's default size): the size's need and tier."""
    name = size_name if size_name is not None else policy.default_size
    if name is None:
        return _bad(
            f"the pod sets migslice annotations but neither {names.GPU_SIZE} nor "
            f'{names.GPU_MEMORY}, and policy "{policy.name}" has no default size '
            "(spec.defaultSize)"
        )
    size = policy.size(name)
    if size is None:
        defined = ", ".join(s.name for s in policy.sizes) or "none"
        return Denial(
            "unknown-size",
            f'size "{name}" is not defined by policy "{policy.name}" (spec.sizes); '
            f"defined sizes: {defined}",
        )
    return Need(size.memory_mib, size.compute_slices, size), size.tier


def _plan_tier(
    policy: TenantPolicy,
    need: Need,
    tier: Tier,
    offers: Sequence[Offer],
    *,
    count: int,
    container: tuple[str, int],
) -> GpuPlan | Denial:
    """The resource an annotated pod gets in ``tier``, and where it may run."""
    field, index = container
    if tier is Tier.MIG:
        resolved = resolve_profile(policy, need, offers)
        if isinstance(resolved, WhyNot):
            return Denial(resolved.reason, resolved.message)
        unit = SliceUsage(
            1, resolved.compute_slices, resolved.memory_slices, ((resolved.profile, 1),)
        )
        return GpuPlan(
            profile=resolved.profile,
            charge=_times(unit, count),
            node_requirements=((names.PRODUCT_LABEL, resolved.products),),
            set_resource=ContainerRequest(field, index, "", resolved.resource, count),
            unlabelled=not policy.allowed_products,
        )
    if tier is Tier.DEDICATED:
        products = tuple(
            sorted(
                o.product
                for o in usable_offers(policy, offers)
                if o.is_whole and whole_gpu_memory_mib(o.model) >= need.memory_mib
            )
        )
        if not products:
            return Denial(
                "no-model",
                f'{need.describe()}: no whole, unshared GPU that policy "{policy.name}" allows '
                "in the cluster has that much memory (spec.allowedProducts; nodes whose "
                "nvidia.com/gpu.product ends in -SHARED or -MIG-<profile> serve replicas or "
                "slices, never a whole GPU)",
            )
        return GpuPlan(
            profile="gpu",
            charge=charge(WHOLE_GPU_RESOURCE, count),
            node_requirements=((names.PRODUCT_LABEL, products),),
            set_resource=ContainerRequest(field, index, "", WHOLE_GPU_RESOURCE, count),
            unlabelled=not policy.allowed_products,
        )
    return GpuPlan(
        profile=tier.value,
        charge=charge(SHARED_GPU_RESOURCE, count),
        node_requirements=_shared_requirements(policy, offers, (tier,)),
        set_resource=ContainerRequest(field, index, "", SHARED_GPU_RESOURCE, count),
    )


def plan_direct(
    policy: TenantPolicy, requests: Sequence[ContainerRequest], offers: Sequence[Offer]
) -> GpuPlan | Denial:
    """Check GPU resources a pod requests directly against the policy (no bypass)."""
    usable = usable_offers(policy, offers)
    products: set[str] | None = None
    priced_on: dict[str, tuple[str, ...]] = {}
    profiles: list[str] = []
    sharing: tuple[tuple[str, tuple[str, ...]], ...] = ()
    for request in requests:
        where = f'container "{request.container}" requests {request.resource}: {request.count}'
        checked = _direct_request(policy, request, offers, where)
        if isinstance(checked, Denial):
            return checked
        offered, profile, requirements = checked
        profiles.append(profile)
        sharing = requirements or sharing
        if not offered:
            return Denial(
                "no-model",
                f'{where}; no GPU product that policy "{policy.name}" allows is in the cluster',
            )
        products = offered if products is None else products & offered
        if not products:
            return Denial(
                "no-model",
                "asks for GPU resources that no single GPU product in the cluster offers together",
            )
        priced_on[request.resource] = tuple(
            sorted({o.model.key for o in usable if o.product in offered})
        )
    # Charged as Kubernetes counts the pod (init containers run before the app containers
    # and give their devices back), so the charge is what the pod holds once it is seen.
    in_pod_order = sorted(requests, key=lambda r: (r.field != "initContainers", r.index))
    counts = effective_counts(
        (
            ContainerKind.APP
            if r.field == "containers"
            else ContainerKind.SIDECAR
            if r.sidecar
            else ContainerKind.INIT,
            r.resource,
            r.count,
        )
        for r in in_pod_order
    )
    total = SliceUsage()
    for resource, count in counts.items():
        total = total + charge(resource, count, priced_on[resource])
    requirements = ((names.PRODUCT_LABEL, tuple(sorted(products or ()))), *sharing)
    unlabelled = not policy.allowed_products and not sharing
    return GpuPlan(",".join(dict.fromkeys(profiles)), total, requirements, unlabelled=unlabelled)


def _direct_request(
    policy: TenantPolicy, request: ContainerRequest, offers: Sequence[Offer], where: str
) -> tuple[set[str], str, tuple[tuple[str, tuple[str, ...]], ...]] | Denial:
    """One directly requested resource against the policy: the products that offer it, its
    name in ``migslice.io/profile``, and the sharing node requirements it adds."""
    usable = usable_offers(policy, offers)
    if request.resource == WHOLE_GPU_RESOURCE:
        if not policy.allows_tier(Tier.DEDICATED):
            return _tier_denial(policy, Tier.DEDICATED, where)
        return {o.product for o in usable if o.is_whole}, "gpu", ()
    if request.resource == SHARED_GPU_RESOURCE:
        tiers = tuple(t for t in (Tier.SHARED, Tier.MPS) if policy.allows_tier(t))
        if not tiers:
            return _tier_denial(policy, Tier.SHARED, where)
        return {o.product for o in usable}, "shared", _shared_requirements(policy, offers, tiers)
    parsed = profile_from_resource(request.resource)
    if parsed is None:
        return _bad(_not_a_profile(request.resource, where))
    name = str(parsed)
    if not policy.allows_tier(Tier.MIG):
        return _tier_denial(policy, Tier.MIG, where)
    if not policy.allows_profile(name):
        return Denial(
            "profile-not-allowed",
            f'{where}; profile "{name}" is not allowed by policy "{policy.name}" '
            f"(spec.allowedProfiles: {_listed(policy.allowed_profiles, 'all plain')}; "
            f"spec.deniedProfiles: {_listed(policy.denied_profiles, 'none')})",
        )
    offered = {o.product for o in usable if o.model.has_profile(name)}
    if not offered:
        return Denial(
            "no-model",
            f'{where}; no GPU product in the cluster that policy "{policy.name}" allows '
            f"offers profile {name} (spec.allowedProducts)",
        )
    return offered, name, ()


def _shared_requirements(
    policy: TenantPolicy, offers: Sequence[Offer], tiers: tuple[Tier, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    requirements: list[tuple[str, tuple[str, ...]]] = [
        (names.SHARING_STRATEGY_LABEL, tuple(sorted(_SHARING[t] for t in tiers)))
    ]
    # Replicas of whole GPUs only: under GFD's single strategy a shared nvidia.com/gpu is a
    # time-sliced MIG slice, which a shared tier never promised.
    products = tuple(sorted({o.product for o in usable_offers(policy, offers) if not o.is_sliced}))
    requirements.append((names.PRODUCT_LABEL, products or ("none",)))
    return tuple(requirements)


def _times(unit: SliceUsage, count: int) -> SliceUsage:
    return SliceUsage(
        unit.instances * count,
        unit.compute_slices * count,
        unit.memory_slices * count,
        tuple((n, c * count) for n, c in unit.profiles),
    )


def _count(text: str | None) -> int | Denial:
    if text is None:
        return 1
    try:
        count = parse_count(text)
    except QuantityError:
        count = 0
    if not 1 <= count <= MAX_COUNT:
        return _bad(
            f"annotation {names.GPU_COUNT} is {text!r}; "
            f"expected a whole number from 1 to {MAX_COUNT}"
        )
    return count


def _container(name: str | None, containers: tuple[str, ...]) -> tuple[str, int] | Denial:
    if name is None:
        return ("containers", 0)
    if name not in containers:
        return _bad(
            f'annotation {names.GPU_CONTAINER} names container "{name}"; the pod\'s containers '
            f"are {', '.join(containers)}"
        )
    return ("containers", containers.index(name))


def _tier_denial(policy: TenantPolicy, tier: Tier, where: str = "") -> Denial:
    prefix = f"{where}; " if where else ""
    return Denial(
        "tier-not-allowed",
        f'{prefix}tier "{tier.value}" is not allowed for tenant "{policy.name}": policy '
        f'"{policy.name}" allows {", ".join(t.value for t in policy.tiers)} with isolation '
        f'"{policy.isolation.value}" (spec.tiers, spec.isolation)',
    )


def _listed(values: tuple[str, ...], empty: str) -> str:
    return ", ".join(values) or empty


def _not_a_profile(resource: str, where: str) -> str:
    replicated = resource.removesuffix(TIME_SLICED_SUFFIX)
    shared = replicated != resource and profile_from_resource(replicated)
    if shared:
        return (
            f"{where}, a time-sliced replica of a {shared} MIG instance (the device plugin's "
            f"time-slicing with renameByDefault), which migslice does not admit: ask "
            f"{replicated} for an instance of its own, or {SHARED_GPU_RESOURCE} for a "
            "time-sliced GPU where the policy's tiers allow shared"
        )
    return f"{where}, which is not a MIG profile resource (nvidia.com/mig-<G>g.<M>gb)"


def _bad(message: str) -> Denial:
    return Denial("bad-annotation", message, 422)
