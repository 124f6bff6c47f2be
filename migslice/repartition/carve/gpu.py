"""One GPU of a carve-mode node while the carve planner reshapes it, and the ways one more
instance of a profile can be had on it.

An instance of the GPU is **pinned** when the planner must not touch it: the node agent sees
processes on it (busy), or a pod may hold it. The device plugin, not the scheduler, picks a
pod's device, so which instance a pod holds is known only when its processes run; an
instance of profile ``P`` is therefore pinned whenever the node's pods hold more ``P``
instances than the agent sees busy (some holder is not identified, and it may be this one).
Everything else is **idle**: it may be destroyed when a new instance needs its slices.

Ways to get one instance of ``P`` (an :class:`Option`): **use** an idle instance of ``P``
(it becomes reserved), or **create** ``P`` at a legal start whose slices no kept instance
covers, destroying the idle instances in the way (and, when SM slices or counts still do
not allow it, the fewest more). *Kept* instances are the pinned, the reserved and the
created ones; idle ones count as free room, since they may go.

An option **strands** compute when the kept instances fill the GPU's memory with compute
slices left unused after it and did not before (``3g.40gb`` next to a ``3g.40gb``:
:func:`migslice.mig.stranding.strands_with`). While the cluster's stranding rule is on
(``strand_guard``, :func:`migslice.mig.stranding.strand_guard`), such options rank after
every other, as the DRA steer ranks such placements. While the full-compute rule is on
(``complete``, :func:`migslice.mig.stranding.complete_rule`: the room beside the ``3g``
instances held is at least twice the memory the ``4g`` take), a GPU's options after which
``2g``-and-larger instances can still use every compute slice
(:func:`migslice.mig.stranding.completes`: ``2g`` at 0 rather than 4) are that GPU's pick
before room lost is compared; GPUs are then compared by their picks' keys.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from migslice.inventory import GpuState, NodeState
from migslice.mig import GpuModel, Layout, Placed, is_legal, make_layout
from migslice.mig.room import RoomLoss, room_loss
from migslice.mig.stranding import completes, strands_with
from migslice.objects.carve_handshake import CarveGpu, Doomed, Slot

_Way = tuple[bool, RoomLoss, tuple[int, ...], Placed | None, int | None]
"""An :class:`Option` without its GPU: strands, loss, destroyed positions, created, reused."""
_GpuState = tuple[
    GpuModel, Layout, tuple[bool, ...], frozenset[int], frozenset[int], tuple[Placed, ...]
]
"""What a GPU's options depend on: model, instances, pinned, destroyed, reserved, created."""


@dataclass(frozen=True, slots=True)
class Option:
    """One way to get an instance: ``use`` position ``reuse`` of the GPU's instances, or
    create ``placed`` after destroying the instances at positions ``destroy``."""

    gpu: int
    loss: RoomLoss
    destroy: tuple[int, ...] = ()
    placed: Placed | None = None
    reuse: int | None = None
    strands: bool = False
    """It strands compute, and the stranding rule was on when it was found."""

    def key(self) -> tuple[bool, RoomLoss, int, int, int, int]:
        """Not stranding before stranding, then least room lost, then fewest destroyed, then
        using before creating, then order."""
        start = self.placed.start if self.placed is not None else -1
        reuse = 0 if self.reuse is not None else 1
        return (self.strands, self.loss, len(self.destroy), reuse, self.gpu, start)


@dataclass
class CarvedGpu:
    """A GPU's instances as the agent reports them, and what the plan has done to it so far."""

    index: int
    model: GpuModel
    old: Layout
    uuids: tuple[str, ...]
    pinned: tuple[bool, ...]
    destroyed: set[int] = field(default_factory=set)
    reserved: set[int] = field(default_factory=set)
    created: list[Placed] = field(default_factory=list)
    _best: dict[tuple[str, bool, bool], Option | None] = field(
        default_factory=dict, compare=False, repr=False
    )
    """:meth:`best` per (profile, stranding rule, full-compute rule), until :meth:`take`
    changes the GPU."""
    _kept_state: _GpuState | None = field(default=None, compare=False, repr=False)

    def copy(self) -> CarvedGpu:
        return CarvedGpu(
            self.index,
            self.model,
            self.old,
            self.uuids,
            self.pinned,
            set(self.destroyed),
            set(self.reserved),
            list(self.created),
        )

    def _idle(self, k: int) -> bool:
        return not self.pinned[k] and k not in self.reserved and k not in self.destroyed

    def kept(self) -> list[Placed]:
        """Instances that stay whatever comes next: pinned, reserved and created."""
        old = [p for k, p in enumerate(self.old) if not self._idle(k) and k not in self.destroyed]
        return old + self.created

    def present(self) -> list[Placed]:
        """The GPU's instances as the plan leaves them so far."""
        return [p for k, p in enumerate(self.old) if k not in self.destroyed] + self.created

    @property
    def changed(self) -> bool:
        return bool(self.destroyed or self.created)

    def best(
        self, profile: str, *, strand_guard: bool = False, complete: bool = False
    ) -> Option | None:
        """The option of least :meth:`Option.key` on this GPU; ``strand_guard``: the
        cluster's stranding rule is on; ``complete``: its full-compute rule is on (options
        that keep every compute slice usable first)."""
        cache = self._best
        asked = (profile, strand_guard, complete)
        if asked in cache:
            return cache[asked]
        found = _best_on(self._state(), profile, strand_guard, complete)
        option = None
        if found is not None:
            strands, loss, destroy, placed, reuse = found
            option = Option(
                self.index, loss, destroy=destroy, placed=placed, reuse=reuse, strands=strands
            )
        cache[asked] = option
        return option

    def _state(self) -> _GpuState:
        if self._kept_state is None:
            self._kept_state = (
                self.model,
                self.old,
                self.pinned,
                frozenset(self.destroyed),
                frozenset(self.reserved),
                tuple(self.created),
            )
        return self._kept_state

    def _options(self, profile: str, strand_guard: bool = False) -> Iterator[_Way]:
        if not self.model.has_profile(profile):
            return
        kept = self.kept()
        held = [p.profile for p in kept]
        strands = (
            strand_guard
            and not strands_with(self.model, held)
            and strands_with(self.model, [*held, profile])
        )
        for k, placed in enumerate(self.old):
            if placed.profile == profile and self._idle(k):
                yield (strands, room_loss(self.model, kept, [*kept, placed]), (), None, k)
        wanted = self.model.profile(profile)
        for start in wanted.placements:
            new = Placed(start, profile, wanted.memory_slices)
            if start + new.size > self.model.memory_slices or any(new.mask & p.mask for p in kept):
                continue
            destroy = self._clearing(new)
            if destroy is not None:
                yield (strands, room_loss(self.model, kept, [*kept, new]), destroy, new, None)

    def _clearing(self, new: Placed) -> tuple[int, ...] | None:
        """The idle instances to destroy so that ``new`` can be created: those in its way,
        then the fewest others that SM slices, counts or media rules still need gone."""
        idle = [k for k in range(len(self.old)) if self._idle(k)]
        in_way = [k for k in idle if self.old[k].mask & new.mask]
        others = [k for k in idle if k not in in_way]
        for extra in range(len(others) + 1):
            for more in combinations(others, extra):
                gone = {*in_way, *more, *self.destroyed}
                after = [p for k, p in enumerate(self.old) if k not in gone] + self.created
                if is_legal(self.model, [*after, new]):
                    return tuple(sorted({*in_way, *more}))
        return None

    def take(self, option: Option) -> None:
        self._best.clear()
        self._kept_state = None
        if option.reuse is not None:
            self.reserved.add(option.reuse)
            return
        assert option.placed is not None
        self.destroyed.update(option.destroy)
        self.created.append(option.placed)

    def step(self) -> CarveGpu:
        """What the node agent is asked to do on this GPU."""
        return CarveGpu(
            index=self.index,
            destroy=tuple(
                sorted(
                    Doomed(self.old[k].start, self.old[k].profile, self.uuids[k])
                    for k in self.destroyed
                )
            ),
            create=tuple(sorted(Slot(p.start, p.profile) for p in self.created)),
            layout=tuple(sorted(Slot(p.start, p.profile) for p in self.present())),
        )

    def new_layout(self) -> Layout:
        return make_layout(self.present())


@functools.lru_cache(maxsize=1 << 15)
def _best_on(state: _GpuState, profile: str, strand_guard: bool, complete: bool) -> _Way | None:
    """The least of a GPU's options in ``state`` by :meth:`Option.key` (those that keep every
    compute slice usable first while ``complete``), whichever GPU it is: a cluster's GPUs
    repeat a few states, and a planner asks every GPU of every node."""
    model, old, pinned, destroyed, reserved, created = state
    gpu = CarvedGpu(0, model, old, (), pinned, set(destroyed), set(reserved), list(created))
    ways = gpu._options(profile, strand_guard)
    if not complete:
        return min(ways, key=_way_key, default=None)
    kept = gpu.kept()

    def ends(way: _Way) -> bool:
        placed = way[3] if way[4] is None else old[way[4]]
        return placed is not None and not completes(model, (*kept, placed))

    return min(ways, key=lambda way: (ends(way), _way_key(way)), default=None)


def _way_key(way: _Way) -> tuple[bool, RoomLoss, int, int, int]:
    strands, loss, destroy, placed, reuse = way
    return (
        strands,
        loss,
        len(destroy),
        0 if reuse is not None else 1,
        -1 if placed is None else placed.start,
    )


def carved_gpus(node: NodeState) -> list[CarvedGpu]:
    """The node's MIG GPUs with their pinned instances (see the module docstring); the node's
    layout must come from the agent (exact placements, UUIDs and busy flags)."""
    model = node.model
    report = node.facts.agent
    assert model is not None and report is not None
    reported = {
        (gpu.index, i.start, i.profile): (i.busy, i.uuid)
        for gpu in report.gpus
        for i in gpu.instances
    }
    # Pods hold more of these profiles than the agent saw busy: which of their instances
    # they hold is not known, so every one is pinned (the module docstring).
    unidentified = node.unidentified_holds()
    other = node.other_model_gpus()  # a layout of the node's model is not theirs to get
    return [
        carved_gpu(model, gpu, reported, unidentified)
        for gpu in node.gpus
        if gpu.mig_enabled and gpu.index not in other
    ]


def carved_gpu(
    model: GpuModel,
    gpu: GpuState,
    reported: Mapping[tuple[int, int, str], tuple[bool, str]],
    unidentified: Collection[str] = (),
) -> CarvedGpu:
    """One MIG GPU of :func:`carved_gpus`: ``reported``, the agent's instances by (GPU index,
    start, profile) with their busy flag and UUID; ``unidentified``, the profiles the node's
    pods hold more of than the agent saw busy (every instance of them pinned). A caller that
    keeps GPUs apart (the simulator, GPU by GPU as they change) builds the same value."""
    if not gpu.instances:
        return CarvedGpu(gpu.index, model, gpu.instances, (), ())
    flags = [reported.get((gpu.index, p.start, p.profile), _UNREPORTED) for p in gpu.instances]
    pinned = tuple(
        is_busy or p.profile in unidentified
        for p, (is_busy, _) in zip(gpu.instances, flags, strict=True)
    )
    uuids = tuple(uuid for _, uuid in flags)
    return CarvedGpu(gpu.index, model, gpu.instances, uuids, pinned)


_UNREPORTED = (False, "")
"""An instance the agent's report lacks: not busy, no UUID."""


def best_option(
    gpus: Sequence[CarvedGpu],
    profile: str,
    *,
    strand_guard: bool = False,
    complete: bool = False,
) -> tuple[int, Option] | None:
    """The option of least :meth:`Option.key` over ``gpus`` (each GPU's :meth:`CarvedGpu.best`),
    with its GPU's position there."""
    best: tuple[tuple[bool, RoomLoss, int, int, int, int], int, Option] | None = None
    for k, gpu in enumerate(gpus):
        option = gpu.best(profile, strand_guard=strand_guard, complete=complete)
        if option is not None:
            key = option.key()
            if best is None or key < best[0]:
                best = (key, k, option)
    return None if best is None else (best[1], best[2])
