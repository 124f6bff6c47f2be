"""Per-node answers computed once per cache update, so a request is dictionary lookups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from migslice.inventory import NodeState
from migslice.inventory.layouts import serves_through_device_plugin
from migslice.mig import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE
from migslice.mig.catalog import product_label_of
from migslice.mig.stranding import NO_MIX, FillerMix
from migslice.names import MIG_TRANSITION_STATES
from migslice.objects.dra_pool import PoolState
from migslice.scheduling import reasons
from migslice.scheduling.dra_placement import dra_capacity, dra_filler_mix
from migslice.scheduling.fragmentation import unit_scores


@dataclass(frozen=True, slots=True)
class PreparedNode:
    """What the filter and the scorer read about one node.

    ``blocked``: why no GPU pod may use the node now (re-partitioning, DRA devices not
    understood), else None; ``not_ready``: why none may yet, a passing state (its DRA slices
    being published), else None.
    ``mig_reason``: why no MIG profile can be served here (no GPU, MIG off, ...), else None.
    ``claim_reason``: why a ResourceClaim's GPU request cannot be served here (not a DRA
    node), else None.
    ``offered``: the MIG resources the node's GPU model has (None: model unknown, trust
    allocatable). ``unit_scores``: the fragmentation score of taking one unit of a resource
    (see :mod:`migslice.scheduling.fragmentation`), for every resource with a free unit.
    ``labelled``: the MIG devices GPU Feature Discovery counts on the node, which may run
    ahead of allocatable (:data:`reasons.NOT_ADVERTISED`). ``shared``: the MIG resources it
    labels as time-sliced or MPS replicas, which no MIG pod is given (none is free).
    """

    name: str
    resource_version: str
    product: str | None
    model_key: str | None
    blocked: str | None
    mig_reason: str | None
    offered: frozenset[str] | None
    allocatable: Mapping[str, int]
    free: Mapping[str, int]
    unit_scores: Mapping[str, int]
    state: NodeState = field(repr=False, compare=False)
    labelled: Mapping[str, int] = field(default_factory=dict)
    shared: frozenset[str] = frozenset()
    not_ready: str | None = None
    claim_reason: str | None = None
    held_slices: int = 0
    """Memory slices pods hold on the node's GPUs (a whole GPU counts all of its): what the
    best-fit filter keeps the fullest of among nodes of equal score."""
    filler_mix: FillerMix = NO_MIX
    """What the node's DynamicMIG GPUs hold towards the stranding rule
    (:func:`migslice.mig.stranding.filler_mix`); the steer loop adds them up."""
    strand_guard: bool = False
    """Whether the scores avoid stranding compute on DynamicMIG GPUs
    (:func:`migslice.mig.stranding.strand_guard`, the cluster's, when the node was derived)."""
    dra_capacity: tuple[int, float] = (0, 0.0)
    """The node's idle DynamicMIG GPUs and their free capacity in whole GPUs
    (:func:`migslice.scheduling.dra_placement.dra_capacity`); the steer loop adds them up for
    the large-job reserve."""


def prepare_node(state: NodeState, *, strand_guard: bool = False) -> PreparedNode:
    """The node's answers; ``strand_guard``: the cluster's stranding rule is on (it changes
    only DynamicMIG nodes' scores)."""
    facts = state.facts
    allocatable = dict(state.allocatable)
    free = dict(state.free)
    shared = frozenset(facts.shared_mig)
    for resource in shared:
        free.pop(resource, None)
    blocked = None
    not_ready = None
    dra = state.dra
    if facts.mig_config_state in MIG_TRANSITION_STATES:
        blocked = reasons.repartitioning(facts.mig_config_state or "")
    elif facts.is_carving:
        blocked = reasons.CARVING
    elif dra is not None and dra.pool.state is PoolState.UNKNOWN:
        blocked = reasons.DRA_UNKNOWN
    elif dra is not None and dra.pool.state is PoolState.INCOMPLETE:
        not_ready = reasons.DRA_INCOMPLETE
    model = state.model
    offered = None if model is None else model.mig_resources
    scored = unit_scores(
        state,
        (
            resource
            for resource, count in free.items()
            if count > 0
            and (resource == WHOLE_GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX))
        ),
        strand_guard=strand_guard,
    )
    product = facts.product
    if product is None and dra is not None and dra.pool.gpus:
        product = product_label_of(dra.pool.gpus[0].product)
    if dra is not None:
        claim_reason = None
    elif serves_through_device_plugin(facts):
        claim_reason = reasons.DEVICE_PLUGIN_NODE
    else:
        claim_reason = reasons.NO_DRA
    return PreparedNode(
        name=facts.name,
        resource_version=facts.resource_version,
        product=product,
        model_key=None if model is None else model.key,
        blocked=blocked,
        mig_reason=_mig_reason(state, allocatable),
        offered=offered,
        allocatable=allocatable,
        free=free,
        unit_scores=scored,
        state=state,
        labelled=dict(facts.labelled_mig),
        shared=shared,
        not_ready=not_ready,
        claim_reason=claim_reason,
        held_slices=_held_slices(state),
        filler_mix=NO_MIX if dra is None else dra_filler_mix(state),
        strand_guard=strand_guard,
        dra_capacity=(0, 0.0) if dra is None else dra_capacity(state),
    )


def _held_slices(state: NodeState) -> int:
    whole = state.model.memory_slices if state.model is not None else 0
    return sum(whole if gpu.whole_held else gpu.held_slices for gpu in state.gpus)


def _mig_reason(state: NodeState, allocatable: Mapping[str, int]) -> str | None:
    facts = state.facts
    if any(r.startswith(MIG_RESOURCE_PREFIX) and c > 0 for r, c in allocatable.items()):
        return None
    if facts.product is None and state.model is None:
        return reasons.NO_GPU
    if state.model is None:
        return reasons.unknown_product(facts.product or "")
    if facts.mig_capable is False:
        return reasons.mig_unsupported(facts.product or state.model.key)
    if facts.labelled_mig:
        return None  # labelled, not yet advertised: each unit says so (reasons.NOT_ADVERTISED)
    if facts.mig_strategy == "single":
        return reasons.wrong_strategy("single")
    if facts.mig_config == "all-disabled" or facts.mig_strategy in (None, "none"):
        return reasons.MIG_DISABLED
    if state.gpus and not any(gpu.mig_enabled for gpu in state.gpus):
        return reasons.MIG_DISABLED
    return None
