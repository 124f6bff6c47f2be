"""Per node pool: every GPU's layout, each instance used or free and who holds it, and the
pool's fragmentation index (:class:`migslice.scheduling.fragmentation.FreeSpace`).

Built only on inventory values (:class:`NodeState`, :class:`GpuState`), whichever source gave
them (the node agent, a mig-parted config, a DRA driver's devices): nothing here reads a
device plugin's resources. Who holds an instance: the inventory knows per node and profile
how many instances pods hold and which ones it assumes (the extender's own pick, busy ones
first); the pods holding a profile on a node are laid on those instances in name order, so
where a node has several instances of one profile, which pod sits on which is that
assumption (``SlotView.assumed``). On a DRA node the holder is known: the ResourceClaim whose
allocation names the device, and the pod it is reserved for (or that owns it); a device the
inventory assumes for a pod whose claim no allocation shows yet goes to such pods in name
order, marked assumed. A DynamicMIG GPU's instances are the partitions claims hold; its free
slices (``.``) are carved on demand. A GPU held whole (a claim on a Hopper DynamicMIG GPU's
``gpu-<minor>``) is one :data:`WHOLE_GPU` slot, as a GPU with MIG off.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from migslice import names
from migslice.inventory import NodeState, mig_resource
from migslice.inventory.beside import WHOLE_GPU, Place, beside_claims, with_claims
from migslice.objects import PodFacts
from migslice.objects.resource_slices import DeviceKind
from migslice.scheduling import PreparedNode
from migslice.scheduling.fragmentation import (
    NO_FREE_SPACE,
    FreeSpace,
    dynamic_gpus,
    gpu_free_space,
)
from migslice.status.carving import carve_unknown
from migslice.status.cluster import Cluster

DRA_UNKNOWN = "dra-unknown"
"""The layout source of a DRA node whose slices cannot be read: its GPUs are unknown, neither
free nor held."""


@dataclass(frozen=True, slots=True)
class SlotView:
    """One instance (or a GPU with MIG off or held whole, profile :data:`WHOLE_GPU`): where it
    is, and the pod that holds it (None: free). ``busy``: the node agent sees processes on an
    instance no pod is known to hold. ``assumed``: other instances of the profile on the node
    could be this pod's (see the module docstring). On a DRA node ``claim``: the ResourceClaim
    whose allocation holds it (``pod`` None: no live pod uses the claim), ``sharing``: the
    other pods the claim is reserved for."""

    profile: str
    start: int
    size: int
    pod: str | None = None
    tenant: str | None = None
    busy: bool = False
    assumed: bool = False
    claim: str | None = None
    sharing: tuple[str, ...] = ()

    @property
    def is_used(self) -> bool:
        return self.pod is not None or self.busy or self.claim is not None

    def is_held_by(self, pod: str) -> bool:
        return self.pod == pod or pod in self.sharing


@dataclass(frozen=True, slots=True)
class GpuView:
    index: int
    mig_enabled: bool
    memory_slices: int
    slots: tuple[SlotView, ...]
    free: FreeSpace


@dataclass(frozen=True, slots=True)
class Holding:
    """A pod on a node known only by counts: what it holds there (``resource``, ``count``);
    on a DRA node whose slices cannot be read, a ResourceClaim allocated there or named by a
    pod there (``claim``; ``resource`` None) and its pod (None: no live pod uses it)."""

    pod: str | None
    tenant: str | None
    resource: str | None
    count: int
    claim: str | None = None
    devices: tuple[str, ...] = ()
    """The claim's devices allocated on the node."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node of a pool: its model, which source gave its layout, whether it takes pods now
    (``condition``), its GPUs (empty for a node known only by counts, whose ``holdings``
    say what pods hold), and the inventory's notes."""

    name: str
    pool: str
    model: str | None
    source: str
    condition: str
    gpus: tuple[GpuView, ...]
    free: FreeSpace
    counts: tuple[tuple[str, int, int], ...] = ()
    holdings: tuple[Holding, ...] = ()
    notes: tuple[str, ...] = ()
    placements: tuple[tuple[str, int, int], ...] = ()
    """On a DRA node: per resource, how many the claims leave free and how many the node
    offers (the driver's placements, as the inventory counts them)."""
    tainted: int = 0
    """On a DRA node: devices the slices' taints or DeviceTaintRules keep claims off."""
    steered: int = 0
    """On a DynamicMIG node: devices migslice's steer keeps new claims off (a one-device claim
    that fits the node still fits)."""
    claims_beside: tuple[Holding, ...] = ()
    """On a node read through its device plugin for which NVIDIA's DRA driver publishes
    ResourceSlices too: the claims allocated from those, which its counts and map leave out."""
    unknown: str = ""
    """On a DRA node whose ResourceSlices cannot be read (unknown, or not all published): why
    its GPUs are unknown; its layout source is then :data:`DRA_UNKNOWN`."""
    carve_unknown: str = ""
    """Why its carve state is unknown (the carve request or the node agent's journal cannot
    be read), and what to do (:func:`~migslice.status.carving.carve_unknown`); "" else."""


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    nodes: tuple[NodeView, ...]
    free: FreeSpace

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes) + self.free.unknown_gpus


def pool_views(cluster: Cluster) -> list[PoolView]:
    """Every pool of GPU nodes, by name; nodes without any GPU are left out."""
    by_pool: dict[str, list[NodeView]] = {}
    for prepared in cluster.nodes.values():
        state = prepared.state
        if (
            state.model is None
            and state.dra is None
            and not state.facts.product
            and not state.facts.allocatable
        ):
            continue
        view = node_view(cluster, prepared)
        by_pool.setdefault(view.pool, []).append(view)
    pools = []
    for pool, nodes in sorted(by_pool.items()):
        free = NO_FREE_SPACE
        for node in nodes:
            free = free + node.free
        pools.append(PoolView(pool, tuple(nodes), free))
    return pools


def node_view(cluster: Cluster, prepared: PreparedNode) -> NodeView:
    view = _node_view(cluster, prepared)
    unknown = carve_unknown(prepared.state.facts)
    return dataclasses.replace(view, carve_unknown=unknown) if unknown else view


def _node_view(cluster: Cluster, prepared: PreparedNode) -> NodeView:
    state = prepared.state
    holders = cluster.holders.get(state.name, ())
    tenant_of = cluster.tenant_of
    condition = _condition(prepared)
    if state.dra is not None and not state.dra.is_ready:
        return _unknown_dra_view(cluster, prepared, condition)
    if state.model is None or not state.gpus:
        counts = tuple(
            (resource, state.allocated_of(resource), total)
            for resource, total in state.facts.allocatable
            if total
        )
        holdings = tuple(
            Holding(pod.key, tenant_of(pod.key.partition("/")[0]), resource, count)
            for pod in holders
            for resource, count in pod.requests
        )
        unknown = FreeSpace(unknown_gpus=state.facts.gpu_count or 0)
        return NodeView(
            state.name,
            cluster.pools[state.name],
            state.model.key if state.model else None,
            str(state.source),
            condition,
            (),
            unknown,
            counts,
            holdings,
            state.notes,
            claims_beside=_claims_beside(cluster, state, holders),
        )
    dra = _dra_holders(cluster, state, holders) if state.dra is not None else None
    claimed: DraHolders = {}
    beside: tuple[Holding, ...] = ()
    if state.dra_beside:
        claimed, beside = _beside_claims(cluster, state, holders)
    gpus = _gpu_views(state, holders, tenant_of, dra, claimed)
    free = NO_FREE_SPACE
    for gpu in gpus:
        free = free + gpu.free
    placements: tuple[tuple[str, int, int], ...] = ()
    if state.dra is not None:
        placements = tuple(
            (resource, state.free_of(resource), offered) for resource, offered in state.allocatable
        )
    return NodeView(
        state.name,
        cluster.pools[state.name],
        state.model.key,
        str(state.source),
        condition,
        gpus,
        free,
        notes=state.notes,
        claims_beside=beside,
        placements=placements,
        tainted=len(state.dra.pool.tainted) if state.dra is not None else 0,
        steered=len(state.dra.pool.steered) if state.dra is not None else 0,
    )


def _unknown_dra_view(cluster: Cluster, prepared: PreparedNode, condition: str) -> NodeView:
    """A DRA node whose slices cannot be read: its GPUs unknown (never free), and the claims
    allocated there or named by its pods, with their pods."""
    state = prepared.state
    dra = state.dra
    assert dra is not None
    holders = cluster.holders.get(state.name, ())
    holdings = list(_claim_holdings(cluster, state.name, holders))
    for holder in holders:
        tenant = cluster.tenant_of(holder.key.partition("/")[0])
        holdings += (Holding(holder.key, tenant, r, n) for r, n in holder.requests)
    return NodeView(
        state.name,
        cluster.pools[state.name],
        None,
        DRA_UNKNOWN,
        condition,
        (),
        FreeSpace(unknown_gpus=state.facts.gpu_count or 0),
        holdings=tuple(holdings),
        notes=state.notes,
        unknown=f"DRA pool gpu.nvidia.com {dra.pool.state}: {dra.pool.reason}",
    )


def _claims_beside(
    cluster: Cluster, state: NodeState, holders: Sequence[PodFacts]
) -> tuple[Holding, ...]:
    """On a node both NVIDIA's device plugin and its DRA driver serve (read through the
    former): the claims of the latter there (:func:`_claim_holdings`); () elsewhere."""
    if not state.dra_beside:
        return ()
    return _claim_holdings(cluster, state.name, holders)


def _beside_claims(
    cluster: Cluster, state: NodeState, holders: Sequence[PodFacts]
) -> tuple[DraHolders, tuple[Holding, ...]]:
    """On a node both NVIDIA's device plugin and its DRA driver serve, with a per-GPU map: who
    holds each of the map's instances through a ResourceClaim the driver allocated (keyed as
    :data:`DraHolders`, by the map's GPU index; :func:`~migslice.inventory.beside.beside_claims`),
    and the claims, with the devices, that the map cannot place, then those its pods name
    that show no allocation there."""
    on_node = {key: holder for key, _, holder in _claims_on(cluster, state, holders)}
    found = beside_claims(
        state,
        cluster.dra_pool(state.name),
        (cluster.claims[key] for key in on_node),
    )
    claimed = {where: on_node[key] for where, key in found.held.items()}
    unplaced = found.unplaced
    holdings = tuple(
        dataclasses.replace(h, devices=unplaced[h.claim]) if h.devices and h.claim else h
        for h in _claim_holdings(cluster, state.name, holders)
        if not h.devices or h.claim in unplaced
    )
    return claimed, holdings


def _claim_holdings(
    cluster: Cluster, node: str, holders: Sequence[PodFacts]
) -> tuple[Holding, ...]:
    """The ResourceClaims allocated on ``node`` (each with its devices there and its pods,
    or None: no live pod uses it), then those its pods name that show no allocation there."""
    holdings: list[Holding] = []
    listed: set[str] = set()
    for claim in sorted(cluster.claims.values(), key=lambda c: c.key):
        devices = claim.devices_in(node)
        if devices:
            listed.add(claim.key)
            users: tuple[str | None, ...] = _claim_users(cluster, claim.key, holders) or (None,)
            tenant = cluster.tenant_of(claim.key.partition("/")[0])
            holdings += (Holding(user, tenant, None, 1, claim.key, devices) for user in users)
    for holder in holders:
        tenant = cluster.tenant_of(holder.key.partition("/")[0])
        holdings += (
            Holding(holder.key, tenant, None, 1, c) for c in holder.claims if c not in listed
        )
    return tuple(holdings)


def _claim_users(cluster: Cluster, key: str, holders: Sequence[PodFacts]) -> tuple[str, ...]:
    """The live pods using claim ``key``: those it is reserved for, else the pod that owns
    it, else the node's pods that name it."""
    claim = cluster.claims[key]
    users = claim.reserved_for or ((claim.owner,) if claim.owner else ())
    live = tuple(pod for pod in users if pod in cluster.gpu_pods)
    return live or tuple(p.key for p in holders if key in p.claims)


@dataclass(frozen=True, slots=True)
class DraHolder:
    """Who holds a device of a DRA node: its pod (None: none known), whether that is assumed,
    the claim whose allocation names it, and the other pods that claim is reserved for."""

    pod: str | None
    assumed: bool = False
    claim: str | None = None
    sharing: tuple[str, ...] = ()


NO_HOLDER = DraHolder(None)
DraHolders = dict[Place, DraHolder]
"""(GPU index, profile or :data:`WHOLE_GPU`, start) -> who holds it."""


def _claims_on(
    cluster: Cluster, state: NodeState, holders: Sequence[PodFacts]
) -> Iterator[tuple[str, tuple[str, ...], DraHolder]]:
    """Each claim allocated devices on the node: its key, those devices and who holds them."""
    for claim in sorted(cluster.claims.values(), key=lambda c: c.key):
        devices = claim.devices_in(state.name)
        if devices:
            users = _claim_users(cluster, claim.key, holders)
            yield (
                claim.key,
                devices,
                DraHolder(users[0] if users else None, False, claim.key, users[1:]),
            )


def _dra_holders(cluster: Cluster, state: NodeState, holders: Sequence[PodFacts]) -> DraHolders:
    """Who holds each device of a DRA node (see the module docstring)."""
    dra = state.dra
    assert dra is not None
    by_device: dict[str, DraHolder] = {}
    for _, devices, holder in _claims_on(cluster, state, holders):
        for held in devices:
            by_device.setdefault(held, holder)
    waiting = [
        p.key
        for p in holders
        if p.requests or any(not _allocated(cluster, key) for key in p.claims)
    ]
    found: DraHolders = {}
    for gpu in dra.pool.gpus:
        for device in gpu.devices:
            name = device.name(gpu.minor)
            if name not in dra.held:
                continue
            if device.kind is DeviceKind.GPU:
                where = (gpu.minor, WHOLE_GPU, 0)
            else:
                where = (gpu.minor, device.profile, device.start)
            known = by_device.get(name)
            if known is not None:
                found[where] = known
            else:
                found[where] = DraHolder(waiting.pop(0) if waiting else None, True)
    return found


def _allocated(cluster: Cluster, key: str) -> bool:
    claim = cluster.claims.get(key)
    return claim is not None and claim.allocated


def _gpu_views(
    state: NodeState,
    holders: Sequence[PodFacts],
    tenant_of: Callable[[str], str | None],
    dra: DraHolders | None = None,
    claimed: DraHolders | None = None,
) -> tuple[GpuView, ...]:
    """The map's GPUs; ``claimed``: on a node both device APIs serve, the instances claims of
    its DRA driver hold (:func:`_beside_claims`), held by them
    (:func:`~migslice.inventory.beside.with_claims`)."""
    model = state.model
    assert model is not None
    queues: dict[str, list[str]] = {}
    for holder in holders:
        for resource, count in holder.requests:
            queues.setdefault(resource, []).extend([holder.key] * count)
    offered: dict[str, int] = {}
    for gpu in state.gpus:
        for placed in gpu.instances:
            offered[placed.profile] = offered.get(placed.profile, 0) + 1
    views: list[GpuView] = []
    lookup = tenant_of
    dynamic = dynamic_gpus(state)
    claimed = claimed or {}
    for gpu in with_claims(state, claimed):
        slots: list[SlotView] = []
        if not gpu.mig_enabled or gpu.whole_held:  # held whole: a Hopper DynamicMIG GPU too
            who = NO_HOLDER
            if gpu.whole_held and dra is not None:
                who = dra.get((gpu.index, WHOLE_GPU, 0), NO_HOLDER)
            elif (gpu.index, WHOLE_GPU, 0) in claimed:
                who = claimed[(gpu.index, WHOLE_GPU, 0)]
            elif gpu.whole_held:
                who = DraHolder(_take(queues, names.WHOLE_GPU_RESOURCE))
            slots.append(_held_slot(WHOLE_GPU, 0, model.memory_slices, who, lookup))
        for placed, held in zip(gpu.instances, gpu.held, strict=True):
            if not held:
                slots.append(_free_slot(placed.profile, placed.start, placed.size))
                continue
            if dra is not None:
                who = dra.get((gpu.index, placed.profile, placed.start), NO_HOLDER)
            elif (gpu.index, placed.profile, placed.start) in claimed:
                who = claimed[(gpu.index, placed.profile, placed.start)]
            else:
                pod = _take(queues, mig_resource(placed.profile))
                who = DraHolder(pod, pod is not None and offered.get(placed.profile, 0) > 1)
            busy = who.pod is None and who.claim is None
            slots.append(_held_slot(placed.profile, placed.start, placed.size, who, lookup, busy))
        views.append(
            GpuView(
                gpu.index,
                gpu.mig_enabled,
                model.memory_slices,
                tuple(slots),
                gpu_free_space(gpu, model, dynamic=gpu.index in dynamic),
            )
        )
    return tuple(views)


def _held_slot(
    profile: str,
    start: int,
    size: int,
    holder: DraHolder,
    tenant_of: Callable[[str], str | None],
    busy: bool = False,
) -> SlotView:
    """A held instance's view; its tenant: its pod's, else its claim's namespace's."""
    owner = holder.pod or holder.claim
    tenant = tenant_of(owner.partition("/")[0]) if owner else None
    return SlotView(
        profile,
        start,
        size,
        holder.pod,
        tenant,
        busy=busy,
        assumed=holder.assumed,
        claim=holder.claim,
        sharing=holder.sharing,
    )


@functools.lru_cache(maxsize=4096)
def _free_slot(profile: str, start: int, size: int) -> SlotView:
    """A free instance's view: one value for every free instance of that place (a cluster's
    GPUs have a few layouts and many free instances)."""
    return SlotView(profile, start, size)


def _take(queues: dict[str, list[str]], resource: str) -> str | None:
    queue = queues.get(resource)
    return queue.pop(0) if queue else None


def _condition(prepared: PreparedNode) -> str:
    """Whether the node takes GPU pods now, in the extender's words where it does not."""
    facts = prepared.state.facts
    if facts.quarantine_label:
        return f"quarantined ({names.QUARANTINE_LABEL}={facts.quarantine_label})"
    if prepared.blocked is not None:
        return prepared.blocked
    if prepared.not_ready is not None:
        return prepared.not_ready
    if prepared.mig_reason is not None:
        return prepared.mig_reason
    return "ready"
