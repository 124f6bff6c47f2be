"""The large-job reserve: idle GPUs kept whole for 7g and multi-GPU pods, as many as their
share of the demand arriving asks for.

Every online packer meets one wall: the moment idle GPUs run out. After it a pod that needs a
whole GPU (a ``7g`` instance, or several GPUs) has nowhere to go, while small pods still find
room beside others. The reserve moves that wall for the large pods:

* ``share``: the large pods' part of the compute slices that arrived lately
  (:class:`ArrivalMix`, a decaying tally: arrivals, not the pods held, since a cluster that
  holds only large pods would otherwise lock small ones out);
* ``free``: the free capacity of the GPUs counted, in whole GPUs (each GPU's free compute
  slices over its compute slices, summed);
* a pod smaller than a whole GPU may not take an idle GPU (its first instance there) while the
  idle GPUs left would fall below ``share x free``. It goes beside other pods if any node has
  room there, else it waits for a departure;
* ``max_hold_s``: but not for ever. A small pod that has waited that long (kube-scheduler
  found no node for it that long: ``PodScheduled=False``, ``Unschedulable``) may take an idle
  GPU. Without it, under churn a pod that needs most of a GPU (``4g`` on an A100) finds room
  beside others only when a departure leaves it and gives up first (bench/packing's churn).

Large pods are never held back, and nothing already placed moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from migslice.mig.catalog_data import CATALOG
from migslice.objects.dra_pool import DraMode
from migslice.scheduling import reasons
from migslice.scheduling.decide import FilterResult
from migslice.scheduling.demand import PodDemand, UnitKind
from migslice.scheduling.dra_placement import dra_idle_breaks
from migslice.scheduling.prepared import PreparedNode

DEFAULT_HALF_LIFE_S = 3600.0
"""How fast the arrival tally forgets: an arrival an hour old counts half."""
DEFAULT_MAX_HOLD_S = 60.0
"""How long the reserve holds a small pod back at most (bench/packing's churn: 30-120 s all
end level; 60 s places the most 8 x 7g jobs there)."""


def is_large(units: Iterable[tuple[int, int]]) -> bool:
    """Whether a pod is large: ``units`` gives each device it asks for as (compute slices of
    the device, compute slices of its GPU); large when it asks for more than one device or a
    whole GPU's worth (``7g``, or a whole GPU)."""
    found = list(units)
    return len(found) > 1 or any(slices >= whole for slices, whole in found)


@dataclass(frozen=True, slots=True)
class ArrivalMix:
    """Compute slices that arrived, all and those of large pods, decayed with
    ``half_life_s`` to ``at`` (seconds on any clock; a tally whose arrivals all share one
    instant is a plain sum)."""

    large: float = 0.0
    total: float = 0.0
    at: float = 0.0
    half_life_s: float = DEFAULT_HALF_LIFE_S

    def add(self, slices: int, large: bool, now: float) -> ArrivalMix:
        """The tally with one more pod of ``slices`` compute slices arrived at ``now`` (an
        arrival older than the tally counts as arriving now)."""
        kept = self._kept(now)
        return ArrivalMix(
            self.large * kept + (slices if large else 0),
            self.total * kept + slices,
            max(self.at, now),
            self.half_life_s,
        )

    def _kept(self, now: float) -> float:
        if now <= self.at or self.half_life_s <= 0:
            return 1.0
        return math.pow(0.5, (now - self.at) / self.half_life_s)

    @property
    def share(self) -> float:
        """The large pods' part of what arrived (0 when nothing did)."""
        return self.large / self.total if self.total > 0 else 0.0


NO_ARRIVALS = ArrivalMix()


@dataclass(frozen=True, slots=True)
class LargeReserve:
    """The reserve as it stands: the idle GPUs, the free capacity in whole GPUs, the share."""

    idle_gpus: int
    free_gpus: float
    share: float
    max_hold_s: float = DEFAULT_MAX_HOLD_S

    @property
    def kept(self) -> float:
        """How many idle GPUs the reserve keeps whole."""
        return self.share * self.free_gpus

    def lets_past(self, waited_s: float) -> bool:
        """Whether a small pod that has waited ``waited_s`` is held back no longer."""
        return waited_s >= self.max_hold_s

    def holds_back(self, breaks: int, waited_s: float = 0.0) -> bool:
        """Whether a small pod whose devices would break ``breaks`` idle GPUs, and that has
        waited ``waited_s``, must go elsewhere (see the module docstring)."""
        if self.lets_past(waited_s):
            return False
        return breaks > 0 and self.kept > 0 and self.idle_gpus - breaks < self.kept


def _whole_of() -> dict[str, int]:
    """Per MIG profile name the catalog knows, the compute slices of the largest GPU that
    offers it (what a pod of that profile is measured against)."""
    found: dict[str, int] = {}
    for model in CATALOG.models:
        for profile in model.profiles:
            found[profile.name] = max(found.get(profile.name, 0), model.compute_slices)
    return found


_WHOLE = _whole_of()
_LARGEST = max(model.compute_slices for model in CATALOG.models)


def device_sizes(demand: PodDemand) -> list[tuple[int, int]]:
    """(compute slices, compute slices of its GPU) of each device ``demand`` asks for; a
    whole GPU counts as the largest GPU's compute slices (7), a profile the catalog lacks as
    small (1 of 7)."""
    sizes: list[tuple[int, int]] = []
    for unit in demand.units:
        if unit.kind is UnitKind.WHOLE_GPU or unit.profile is None:
            sizes += [(_LARGEST, _LARGEST)] * unit.count
            continue
        head = unit.profile.split(".", 1)[0].removesuffix("g")
        slices = int(head) if head.isdigit() else 1
        sizes += [(slices, _WHOLE.get(unit.profile, 7))] * unit.count
    return sizes


def hold_back(
    result: FilterResult,
    demand: PodDemand,
    lookup: Callable[[str], PreparedNode | None],
    reserve: LargeReserve,
) -> FilterResult:
    """``result`` with the DynamicMIG nodes where the small pod of ``demand`` would break an
    idle GPU the reserve keeps moved from ``fits`` to ``failed``, as on the pod's first try
    (a large pod's result is returned as it is; :meth:`LargeReserve.lets_past` says when a
    pod that waited is held back no longer)."""
    if is_large(device_sizes(demand)) or reserve.kept <= 0 or not result.fits:
        return result
    fits: list[str] = []
    failed = dict(result.failed)
    for name in result.fits:
        node = lookup(name)
        dra = None if node is None else node.state.dra
        if node is not None and dra is not None and dra.mode is DraMode.DYNAMIC:
            if reserve.holds_back(dra_idle_breaks(node.state, demand.units)):
                failed[name] = reasons.kept_for_large(
                    reserve.idle_gpus, reserve.kept, reserve.share, reserve.max_hold_s
                )
                continue
        fits.append(name)
    if len(fits) == len(result.fits):
        return result
    return FilterResult(tuple(fits), failed, result.unresolvable)
