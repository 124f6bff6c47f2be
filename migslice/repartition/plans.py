"""What the two planners answer, as values: new layouts for idle GPUs as mig-parted configs
(:class:`RepartitionPlan`, the MIG Manager planner's) and per GPU the instances to destroy and
create around running ones (:class:`CarvePlan`, the carve planner's). Steps carry them, and
``migslice plan`` shows them."""

from __future__ import annotations

from dataclasses import dataclass

from migslice.mig import Layout
from migslice.mig.migparted import MigPartedEntry
from migslice.mig.room import NO_LOSS, RoomLoss
from migslice.objects.carve_handshake import CarveGpu


@dataclass(frozen=True, slots=True)
class GpuChange:
    index: int
    old: Layout
    new: Layout


@dataclass(frozen=True, slots=True)
class NodeChange:
    """New layouts for some GPUs of one node, as a named mig-parted config."""

    node: str
    model_key: str
    config_name: str
    previous_config: str | None
    gpus: tuple[GpuChange, ...]
    serves: tuple[str, ...]
    entries: tuple[MigPartedEntry, ...]


@dataclass(frozen=True, slots=True)
class RepartitionPlan:
    changes: tuple[NodeChange, ...] = ()
    unserved: tuple[tuple[str, str], ...] = ()
    skipped_nodes: tuple[tuple[str, str], ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.changes


@dataclass(frozen=True, slots=True)
class GpuCarve:
    """One GPU's change: its layout before and after, and the step the agent is asked for."""

    index: int
    old: Layout
    new: Layout
    step: CarveGpu


@dataclass(frozen=True, slots=True)
class NodeCarve:
    node: str
    gpus: tuple[GpuCarve, ...]
    serves: tuple[str, ...]
    loss: RoomLoss = NO_LOSS


@dataclass(frozen=True, slots=True)
class CarvePlan:
    changes: tuple[NodeCarve, ...] = ()
    unserved: tuple[tuple[str, str], ...] = ()
    skipped_nodes: tuple[tuple[str, str], ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.changes
