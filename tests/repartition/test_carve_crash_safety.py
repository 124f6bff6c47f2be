"""Crash safety of carving, as a property over the fake driver: random interleavings of plans
(the planner's and arbitrary ones), containers starting (processes appearing on the
instances their pods were given) and the agent killed between any two NVML calls, with the
controller sometimes withdrawing its request. Whatever happens, no instance with processes
or held by a pod is destroyed, and the node converges: the journal ends ``success`` (NVML
has the plan's layout) or ``failed`` (rolled back), with no half-made instance left."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.inventory import resolve_node
from migslice.mig import CATALOG
from migslice.names import REPARTITION_MODE_LABEL
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.objects.carve_handshake import (
    CarveGpu,
    CarvePhase,
    CarveRequest,
    CarveStatus,
    Doomed,
    Slot,
)
from migslice.repartition import plan_carve
from migslice.repartition.record import CarveStep
from tests import mig_oracle
from tests.carve_agent_harness import MemoryNode, advertised, carver
from tests.carve_builders import waiting
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary, installed

MODEL = CATALOG.get("A100-80GB")
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
LEGAL = sorted(
    sorted(legal) for legal in mig_oracle.legal_sets("A100-80GB", PROFILES) if len(legal) <= 5
)


class Killed(BaseException):
    """The agent's process dies (not an Exception: nothing in the agent catches it)."""


@dataclass
class Chaos:
    """What happens at which NVML call (counted across passes): kills and container starts."""

    library: FakeNvmlLibrary
    kills: set[int]
    starts: dict[int, int]
    calls: int = 0
    started: list[FakeInstance] = field(default_factory=list)

    def __call__(self, name: str) -> None:
        self.calls += 1
        if self.calls in self.starts:  # a pod's container starts on the device it was given
            waiting = [i for g in self.library.gpus for i in g.instances if i.holder]
            if waiting:
                chosen = waiting[self.starts[self.calls] % len(waiting)]
                if chosen.with_compute_instance:
                    chosen.processes += 1
                    self.started.append(chosen)
        if self.calls in self.kills:
            self.kills.discard(self.calls)
            raise Killed


def build(
    layouts: list[list[tuple[str, int]]], roles: list[int]
) -> tuple[FakeNvmlLibrary, MemoryNode]:
    """GPUs with ``layouts``; per instance a role: 0 idle, 1 busy (a pod, processes), 2 held by
    a pod whose container has not started."""
    library = FakeNvmlLibrary(
        [
            FakeGpu(
                "NVIDIA A100-SXM4-80GB",
                "A100-80GB",
                instances=[FakeInstance(name, start) for name, start in layout],
            )
            for layout in layouts
        ]
    )
    node = MemoryNode(library)
    node.raw["metadata"]["labels"][REPARTITION_MODE_LABEL] = "carve"
    everything = [i for g in library.gpus for i in g.instances]
    for k, instance in enumerate(everything):
        role = roles[k % len(roles)] if roles else 0
        if role:
            instance.holder = f"team-a/pod-{k}"
            instance.processes = 1 if role == 1 else 0
            node.hold(f"pod-{k}", instance.profile)
    return library, node


def planned(node: MemoryNode, profile: str, plan_id: str) -> CarveRequest | None:
    """The request the controller would send for a pod wanting ``profile``."""
    carver(node).publish()
    node.set_allocatable(advertised(node.library))
    pods = [pod_facts_from_raw(p) for p in node.pods]
    state = resolve_node(node_facts_from_raw(node.raw), [p for p in pods if p is not None])
    result = plan_carve([state], [waiting("t/wants", profile)])
    if result.is_empty:
        return None
    change = result.changes[0]
    return CarveStep(change.node, tuple(g.step for g in change.gpus), change.serves).request(
        plan_id
    )


def arbitrary(
    library: FakeNvmlLibrary, pick: int, slot: tuple[str, int], plan_id: str
) -> CarveRequest:
    """A request the planner would never make: destroy any instance, create anything."""
    gpu = library.gpus[0]
    doomed = []
    if gpu.instances:
        chosen = gpu.instances[pick % len(gpu.instances)]
        uuid = library.mig_uuid(0, chosen) if chosen.with_compute_instance else ""
        doomed.append(Doomed(chosen.start, chosen.profile, uuid))
    gone = {(d.start, d.profile) for d in doomed}
    kept = [Slot(i.start, i.profile) for i in gpu.instances if (i.start, i.profile) not in gone]
    create = Slot(slot[1], slot[0])
    step = CarveGpu(0, tuple(doomed), (create,), tuple(sorted([*kept, create])))
    return CarveRequest(plan_id, (step,))


PLACEMENTS = [(p, s) for p in PROFILES for s in MODEL.profile(p).placements]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, object]:
    gpus = draw(st.integers(1, 2))
    return {
        "layouts": [list(draw(st.sampled_from(LEGAL))) for _ in range(gpus)],
        "roles": draw(st.lists(st.integers(0, 2), min_size=1, max_size=6)),
        "plans": draw(
            st.lists(
                st.tuples(
                    st.sampled_from(PROFILES),
                    st.booleans(),  # arbitrary instead of the planner's
                    st.integers(0, 9),
                    st.sampled_from(
                        [(p, s) for p in PROFILES for s in MODEL.profile(p).placements]
                    ),
                    st.booleans(),  # the controller withdraws after the first kill
                ),
                min_size=1,
                max_size=3,
            )
        ),
        "kills": draw(st.sets(st.integers(1, 300), max_size=4)),
        "starts": draw(st.dictionaries(st.integers(1, 300), st.integers(0, 20), max_size=3)),
    }


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_no_busy_or_held_instance_is_ever_destroyed_and_every_carve_converges(
    case: dict[str, object],
) -> None:
    library, node = build(case["layouts"], case["roles"])  # type: ignore[arg-type]
    chaos = Chaos(library, set(case["kills"]), dict(case["starts"]))  # type: ignore[arg-type]
    with installed(library):
        plans = case["plans"]
        for n, (profile, wild, pick, slot, withdraw) in enumerate(plans):  # type: ignore[arg-type]
            plan_id = f"plan-{n}"
            if wild:
                request = arbitrary(library, pick, slot, plan_id)
            else:
                request = planned(node, profile, plan_id)
            if request is None:
                continue
            node.ask(request)
            library.on_call = chaos
            status = converge(node, withdraw)
            library.on_call = None
            assert status.phase in (CarvePhase.SUCCESS, CarvePhase.FAILED)
            assert carver(node).run_once() == "nothing to carve"
            check(library, request, status.phase)
            node.ask(None)


def converge(node: MemoryNode, withdraw: bool) -> CarveStatus:
    """Passes until the journal closes; a killed agent restarts (the controller may withdraw
    its request meanwhile, as it does past its deadline)."""
    for _ in range(12):
        try:
            carver(node, timeout_s=2).run_once()
        except Killed:
            if withdraw:
                node.ask(None)
            continue
        status = node.status
        if status is not None and not status.phase.is_open:
            return status
    raise AssertionError(f"no convergence: {node.status}")


def check(library: FakeNvmlLibrary, request: CarveRequest, phase: CarvePhase) -> None:
    for gone in library.destroyed:
        assert gone.processes == 0, f"destroyed {gone.profile}@{gone.start} with processes"
        assert not gone.holder, f"destroyed {gone.profile}@{gone.start} held by {gone.holder}"
    for gpu in library.gpus:
        assert all(i.with_compute_instance for i in gpu.instances), "a half-made instance is left"
        assert mig_oracle.is_legal(MODEL, [(i.profile, i.start) for i in gpu.instances])
    if phase == CarvePhase.SUCCESS:
        for step in request.gpus:
            have = sorted(Slot(i.start, i.profile) for i in library.gpus[step.index].instances)
            assert have == sorted(step.layout)
