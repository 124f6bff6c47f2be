"""The simulated cluster: N nodes x 8 GPUs of one MIG model, GPU side only.

CPU and host memory are not modelled: a pod fits wherever its GPU instances fit. A GPU is
either MIG-off (whole-GPU baseline) or MIG-on with a legal layout of instances, each free or
held by one pod. A MIG-on GPU without instances is idle and may be re-partitioned, like any
GPU no pod holds a part of.

Layouts change in two ways, both refusing to destroy an instance a pod holds:

* :meth:`SimCluster.repartition` gives a GPU a new layout that keeps the held instances in
  place (what MIG Manager does to an idle GPU, and what re-shaping the free part of a GPU in
  use amounts to);
* :meth:`SimCluster.create_instance` and :meth:`SimCluster.destroy_instance` change one
  instance of a GPU that may be in use (dynamic MIG, one instance at a time).

Every change bumps the node's ``version`` and is announced to the cluster's ``listeners``
(placement indexes keep per-node ranks and refresh only the nodes that changed).

The simulator's working state is mutable (one run owns it); everything it hands out is a
value: :class:`~migslice.inventory.NodeState` for the scheduling and planning core (the
same values the extender and the repartition controller read) and frozen snapshots.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from migslice.errors import MigsliceError
from migslice.inventory import GpuState, LayoutSource, NodeState, mig_resource
from migslice.inventory.picking import Occupancy
from migslice.mig import (
    WHOLE_GPU_RESOURCE,
    GpuModel,
    Layout,
    Placed,
    free_placements,
    is_legal,
    make_layout,
)
from migslice.names import MIG_STATE_SUCCESS, MIG_TRANSITION_STATES
from migslice.objects import NodeFacts
from migslice.objects.carve_handshake import CarveRequest, CarveStatus
from migslice.objects.gpu_layout import AgentGpu, AgentInstance, AgentReport
from migslice.scheduling import PreparedNode, prepare_node

GPUS_PER_NODE = 8
SIM_CONFIG = "migslice-sim"


class DisruptionError(MigsliceError, RuntimeError):
    """A layout change would have destroyed an instance a pod holds."""


@dataclass(slots=True)
class SimGpu:
    """One GPU of the working state. ``holders`` runs parallel to ``instances``."""

    index: int
    mig_enabled: bool
    instances: list[Placed] = field(default_factory=list)
    holders: list[str | None] = field(default_factory=list)
    whole_holder: str | None = None
    kept_state: GpuState | None = field(default=None, compare=False, repr=False)
    kept_report: AgentGpu | None = field(default=None, compare=False, repr=False)
    kept_held: Layout | None = field(default=None, compare=False, repr=False)
    kept_occupancy: tuple[Occupancy, int] | None = field(default=None, compare=False, repr=False)
    kept_counts: tuple[tuple[str, int, int], ...] | None = field(
        default=None, compare=False, repr=False
    )
    kept_sorted: Layout | None = field(default=None, compare=False, repr=False)
    """The GPU as the core reads it, as the node agent reports it, the instances pods hold,
    as the extender's ranking sees it (with the memory slices held), its resource counts
    (:meth:`counts`) and its instances sorted (:meth:`sorted_layout`), each built when first
    asked for and kept until the cluster changes the GPU (:meth:`forget`)."""
    version: int = field(default=0, compare=False, repr=False)
    """How many times the cluster has changed the GPU: a policy's per-GPU cache is current
    while it matches."""

    @property
    def is_idle(self) -> bool:
        return self.whole_holder is None and not any(self.holders)

    def held_layout(self) -> Layout:
        """The instances pods hold (what a layout change must keep)."""
        if self.kept_held is None:
            pairs = zip(self.instances, self.holders, strict=True)
            self.kept_held = tuple(p for p, h in pairs if h)
        return self.kept_held

    def free_positions(self, profile: str) -> list[int]:
        return [
            k
            for k, (p, h) in enumerate(zip(self.instances, self.holders, strict=True))
            if h is None and p.profile == profile
        ]

    def forget(self) -> None:
        self.kept_state = self.kept_report = self.kept_held = self.kept_occupancy = None
        self.kept_counts = self.kept_sorted = None
        self.version += 1

    def sorted_layout(self) -> Layout:
        """The instances, sorted (a layout as the DRA allocators read it)."""
        if self.kept_sorted is None:
            self.kept_sorted = tuple(sorted(self.instances))
        return self.kept_sorted

    def counts(self) -> tuple[tuple[str, int, int], ...]:
        """What the GPU adds to its node's resources: (resource, offered, held) per resource
        it offers, in the order first met (:func:`build_node_state` sums a node's GPUs)."""
        if self.kept_counts is None:
            found: tuple[tuple[str, int, int], ...]
            if not self.mig_enabled:
                found = ((WHOLE_GPU_RESOURCE, 1, int(self.whole_holder is not None)),)
            else:
                tally: dict[str, list[int]] = {}
                for placed, holder in zip(self.instances, self.holders, strict=True):
                    pair = tally.setdefault(_resource(placed.profile), [0, 0])
                    pair[0] += 1
                    if holder is not None:
                        pair[1] += 1
                found = tuple((r, n, h) for r, (n, h) in tally.items())
            self.kept_counts = found
        return self.kept_counts

    def as_state(self) -> GpuState:
        if self.kept_state is None:
            self.kept_state = GpuState(
                index=self.index,
                mig_enabled=self.mig_enabled,
                instances=tuple(self.instances),
                held=tuple(h is not None for h in self.holders),
                whole_held=self.whole_holder is not None,
            )
        return self.kept_state

    def as_occupancy(self, memory_slices: int) -> tuple[Occupancy, int]:
        """The GPU as :func:`~migslice.inventory.picking.best_free_instance` reads it, and its
        :func:`~migslice.inventory.picking.held_slices` (``memory_slices``: the model's)."""
        if self.kept_occupancy is None:
            occupancy, held = self.as_state().ranked()
            whole = memory_slices if occupancy.whole_held else 0
            self.kept_occupancy = (occupancy, held + whole)
        return self.kept_occupancy

    def as_report(self, node: str) -> AgentGpu:
        """The node agent's report of this GPU on ``node`` (see :func:`agent_report`)."""
        if self.kept_report is None:
            self.kept_report = AgentGpu(
                self.index,
                self.mig_enabled,
                tuple(
                    AgentInstance(
                        p.profile,
                        p.start,
                        p.size,
                        h is not None,
                        f"MIG-{node}-{self.index}-{p.start}-{p.profile}",
                    )
                    for p, h in zip(self.instances, self.holders, strict=True)
                ),
            )
        return self.kept_report


@dataclass(slots=True, eq=False)
class SimNode:
    """One node; ``position`` is its index in the cluster (names sort the same way)."""

    position: int
    name: str
    gpus: list[SimGpu]
    version: int = 0
    mig_config: str = SIM_CONFIG
    mig_config_state: str = MIG_STATE_SUCCESS
    cached: tuple[int, NodeState, PreparedNode | None] | None = None
    carve_request: CarveRequest | None = None
    """``migslice.io/carve``: what the controller asked the node agent to carve."""
    carve_status: CarveStatus | None = None
    """``migslice.io/carve-state``: the node agent's answer."""

    @property
    def is_carving(self) -> bool:
        request, status = self.carve_request, self.carve_status
        return request is not None and (status is None or status.plan_id != request.plan_id)

    @property
    def is_blocked(self) -> bool:
        """MIG Manager or the node agent is working on the node: the scheduler keeps off
        it (``prepare_node`` blocks a carving node whole, as it does in production)."""
        return self.mig_config_state in MIG_TRANSITION_STATES or self.is_carving


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a placed pod holds its GPU resources: (gpu index, instance or None if whole)."""

    pod: str
    node: str
    units: tuple[tuple[int, Placed | None], ...]


Listener = Callable[[SimNode], None]


class SimCluster:
    """The mutable working state of one simulation run."""

    def __init__(
        self,
        model: GpuModel,
        node_count: int,
        layouts: Sequence[Layout | None],
        *,
        gpus_per_node: int = GPUS_PER_NODE,
        agent_reports: bool = False,
    ) -> None:
        """``layouts`` gives each GPU's initial layout in node-major order, cycled when
        shorter; ``None`` means MIG off (whole GPU). ``agent_reports``: node states carry the
        node agent's report (carve mode reads it)."""
        self.agent_reports = agent_reports
        if not layouts:
            raise ValueError("at least one initial layout is needed (None for MIG off)")
        self.model = model
        self.gpus_per_node = gpus_per_node
        self.nodes: list[SimNode] = []
        made = [None if layout is None else make_layout(layout) for layout in layouts]
        starts: set[tuple[int, ...]] = set()  # which of ``made`` each node's GPUs took (two
        # patterns are enough to know the cheap answer below will not do)
        for n in range(node_count):
            gpus = []
            first = n * gpus_per_node
            for g in range(gpus_per_node):
                layout = made[(first + g) % len(made)]
                if layout is None:
                    gpus.append(SimGpu(g, False))
                else:
                    gpus.append(SimGpu(g, True, list(layout), [None] * len(layout)))
            if len(starts) < 2:
                starts.add(tuple((first + g) % len(made) for g in range(gpus_per_node)))
            self.nodes.append(SimNode(n, f"node-{n:04d}", gpus))
        self.by_name = {node.name: node for node in self.nodes}
        self.alike = (
            len(starts) <= 1
            or len({tuple((g.mig_enabled, tuple(g.instances)) for g in n.gpus) for n in self.nodes})
            <= 1
        )
        """Every node started with the same GPUs and layouts: until a node changes (its
        ``version``), its state is every other unchanged node's but for its name and
        position (:class:`migslice.sim.index.RankIndex` ranks such nodes once)."""
        self.assignments: dict[str, Assignment] = {}
        self.listeners: list[Listener] = []
        self.gpus_touched = 0
        self.repartitions = 0
        self.instances_created = 0
        """MIG instances created after the start, by re-partitions and one at a time."""
        self.changes = 0
        """How many changes the cluster has seen (a cheap "anything new?" test)."""
        self.legal: set[Layout] = set()
        """Layouts :meth:`repartition` found legal already: a run asks for the same 6-60
        layouts thousands of times, and checking one took longer than the rest of the
        change."""

    @property
    def gpu_count(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    def all_gpus(self) -> Iterable[tuple[SimNode, SimGpu]]:
        for node in self.nodes:
            for gpu in node.gpus:
                yield node, gpu

    def touched(self, node: SimNode, gpu: SimGpu | None = None) -> None:
        """``node`` changed: ``gpu`` of it, or (None) only its labels or annotations."""
        if gpu is not None:
            gpu.forget()
        node.version += 1
        self.changes += 1
        for listener in self.listeners:
            listener(node)

    # -- pods --------------------------------------------------------------------------------

    def hold_instance(self, node: SimNode, gpu: SimGpu, position: int, *, pod: str) -> None:
        if gpu.holders[position] is not None:
            raise ValueError(f"{node.name} GPU {gpu.index} instance {position} is held")
        gpu.holders[position] = pod
        self.touched(node, gpu)

    def hold_whole(self, node: SimNode, gpu: SimGpu, pod: str) -> None:
        if gpu.mig_enabled or gpu.whole_holder is not None:
            raise ValueError(f"{node.name} GPU {gpu.index} cannot be held whole")
        gpu.whole_holder = pod
        self.touched(node, gpu)

    def free_instance(self, node: SimNode, gpu: SimGpu, position: int, *, holder: str) -> None:
        """Give back instance ``position`` of ``gpu``, which ``holder`` must hold."""
        if gpu.holders[position] != holder:
            raise ValueError(
                f"{node.name} GPU {gpu.index} instance {position} is held by "
                f"{gpu.holders[position]!r}, not {holder!r}"
            )
        gpu.holders[position] = None
        self.touched(node, gpu)

    def record(self, assignment: Assignment) -> None:
        if assignment.pod in self.assignments:
            raise ValueError(f"pod {assignment.pod} is placed already; pod names must be unique")
        self.assignments[assignment.pod] = assignment

    def release(self, pod: str) -> Assignment:
        """The pod ``pod`` departs: its instances (or whole GPUs) become free again."""
        assignment = self.assignments.pop(pod)
        node = self.by_name[assignment.node]
        for index, placed in assignment.units:
            gpu = node.gpus[index]
            if placed is None:
                if gpu.whole_holder != pod:
                    raise ValueError(f"{node.name} GPU {index} is not held whole by {pod}")
                gpu.whole_holder = None
                self.touched(node, gpu)
            else:
                self.free_instance(node, gpu, gpu.instances.index(placed), holder=pod)
        return assignment

    # -- layouts -----------------------------------------------------------------------------

    def repartition(self, node: SimNode, index: int, new: Layout) -> bool:
        """Give GPU ``index`` of ``node`` the layout ``new``; held instances must survive.

        A held instance missing from ``new`` raises :class:`DisruptionError` (a policy bug):
        the simulator never disturbs a placed pod. Returns whether the layout changed.
        """
        gpu = node.gpus[index]
        kept = {p: h for p, h in zip(gpu.instances, gpu.holders, strict=True) if h is not None}
        lost = [h for p, h in kept.items() if p not in new]
        if lost:
            raise DisruptionError(
                f"re-partitioning {node.name} GPU {index} would destroy the instances of "
                f"{', '.join(lost)}"
            )
        if tuple(new) not in self.legal:
            if not is_legal(self.model, new):
                raise ValueError(f"illegal layout for {node.name} GPU {index}: {new}")
            self.legal.add(tuple(new))
        if tuple(gpu.instances) == tuple(new):
            return False
        self.instances_created += len(set(new) - set(gpu.instances))
        gpu.instances = list(new)
        gpu.holders = [kept.get(p) for p in gpu.instances]
        gpu.mig_enabled = True
        self.gpus_touched += 1
        self.touched(node, gpu)
        return True

    def create_instance(self, node: SimNode, gpu: SimGpu, placed: Placed) -> int:
        """Add one instance to ``gpu`` (in use or not) in its free memory slices; its
        position in ``gpu.instances``."""
        # The GPU's layout is legal, so the new one is when the placement is a legal addition
        # (free_placements: exactly those, against an oracle; kept per layout).
        if (
            not gpu.mig_enabled
            or not self.model.has_profile(placed.profile)
            or placed not in free_placements(self.model, gpu.instances, placed.profile)
        ):
            raise ValueError(f"{placed.profile}@{placed.start} does not fit {node.name} GPU")
        new = make_layout([*gpu.instances, placed])
        holders = dict(zip(gpu.instances, gpu.holders, strict=True))
        gpu.instances = list(new)
        gpu.holders = [holders.get(p) for p in new]
        self.instances_created += 1
        self.touched(node, gpu)
        return gpu.instances.index(placed)

    def destroy_instance(self, node: SimNode, gpu: SimGpu, position: int) -> None:
        """Remove a free instance of ``gpu``; a held one raises :class:`DisruptionError`."""
        holder = gpu.holders[position]
        if holder is not None:
            raise DisruptionError(f"{node.name} GPU {gpu.index}: {holder} holds the instance")
        del gpu.instances[position]
        del gpu.holders[position]
        self.touched(node, gpu)

    def set_carve(
        self, node: SimNode, request: CarveRequest | None, status: CarveStatus | None
    ) -> None:
        """The node's ``migslice.io/carve`` and ``migslice.io/carve-state`` annotations."""
        node.carve_request, node.carve_status = request, status
        self.touched(node)

    def set_mig_state(self, node: SimNode, config: str, state: str) -> None:
        """The node's ``nvidia.com/mig.config`` and ``nvidia.com/mig.config.state`` labels."""
        node.mig_config, node.mig_config_state = config, state
        self.touched(node)

    # -- values for the core ---------------------------------------------------------------

    def node_state(self, node: SimNode) -> NodeState:
        cached = node.cached
        if cached is None or cached[0] != node.version:
            state = build_node_state(self.model, node, agent=self.agent_reports)
            node.cached = (node.version, state, None)
            return state
        return cached[1]

    def prepared(self, node: SimNode) -> PreparedNode:
        """The node as the extender prepares it (built when first asked for, per version)."""
        state = self.node_state(node)
        cached = node.cached
        assert cached is not None
        if cached[2] is None:
            prepared = prepare_node(state)
            node.cached = (cached[0], state, prepared)
            return prepared
        return cached[2]


@functools.cache
def _resource(profile: str) -> str:
    return mig_resource(profile)


def build_node_state(model: GpuModel, node: SimNode, *, agent: bool = False) -> NodeState:
    """The node as the inventory would build it from an exact agent report (``agent``: with
    the report itself, which the carve planner reads: every held instance busy)."""
    allocatable: dict[str, int] = {}
    allocated: dict[str, int] = {}
    states = []
    for gpu in node.gpus:
        states.append(gpu.as_state())
        for resource, count, held in gpu.counts():
            allocatable[resource] = allocatable.get(resource, 0) + count
            if held:
                allocated[resource] = allocated.get(resource, 0) + held
    offered = tuple(sorted(allocatable.items()))
    product = facts_product(model)
    facts = NodeFacts(
        name=node.name,
        resource_version=str(node.version),
        product=product,
        gpu_count=len(node.gpus),
        mig_capable=True,
        mig_strategy="mixed",
        mig_config=node.mig_config,
        mig_config_state=node.mig_config_state,
        allocatable=offered,
        agent=agent_report(product, node) if agent else None,
        carve_request=node.carve_request,
        carve_status=node.carve_status,
    )
    return NodeState(
        facts=facts,
        model=model,
        source=LayoutSource.AGENT,
        gpus=tuple(states),
        allocated=tuple(sorted(allocated.items())),
        free=tuple((name, count - allocated.get(name, 0)) for name, count in offered),
    )


def facts_product(model: GpuModel) -> str:
    return model.product_names[0] if model.product_names else model.key


def agent_report(product: str, node: SimNode) -> AgentReport:
    """The node agent's ``migslice.io/gpu-layout``: each instance with a UUID of its place
    and busy when a pod holds it (a pod's processes run from the moment it is placed)."""
    return AgentReport(
        product=product,
        gpus=tuple([gpu.as_report(node.name) for gpu in node.gpus]),
    )
