"""The large-job reserve's wiring (``--dra-large-reserve``, :mod:`migslice.scheduling.reserve`).

The arrivals are the pods this replica filters, each counted once at its first call (replicas
behind one Service each see a sample of them; the share is a ratio, so a sample reads alike).
The idle GPUs and free capacity are the steer loop's sums over the index
(:class:`extender.state.ReserveStats`), the same on every replica.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from extender.state import ReserveStats
from migslice.scheduling.demand import PodDemand
from migslice.scheduling.reserve import DEFAULT_HALF_LIFE_S, ArrivalMix, LargeReserve, is_large

MAX_SEEN = 100_000
"""Pods remembered as seen (the oldest first forgotten): a pod filtered again after this many
others counts again."""


class Arrivals:
    """The decaying tally of the GPU pods seen (see the module docstring). Thread-safe."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        max_seen: int = MAX_SEEN,
    ) -> None:
        self._clock = clock
        self._max_seen = max_seen
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._mix = ArrivalMix(half_life_s=half_life_s)
        self._lock = threading.Lock()

    def saw(self, demand: PodDemand, sizes: Sequence[tuple[int, int]]) -> float:
        """Count the pod of ``demand`` (its :func:`device_sizes`) if it is new and asks for
        GPUs; the large share after it."""
        with self._lock:
            if sizes and not demand.error and demand.key not in self._seen:
                self._seen[demand.key] = None
                if len(self._seen) > self._max_seen:
                    self._seen.popitem(last=False)
                slices = sum(slices for slices, _ in sizes)
                self._mix = self._mix.add(slices, is_large(sizes), self._clock())
            return self._mix.share

    def held_back(self, stats: ReserveStats) -> None:
        """Count one filter call the reserve left without a node (filter threads race)."""
        with self._lock:
            stats.held_back += 1

    def released(self, stats: ReserveStats) -> None:
        """Count one filter call the reserve let past because the pod waited its longest."""
        with self._lock:
            stats.released += 1


def current_reserve(stats: ReserveStats, share: float) -> LargeReserve | None:
    """The reserve the filter applies now at the arrivals' ``share``, or None when it is off
    or keeps nothing."""
    if not stats.enabled:
        return None
    reserve = LargeReserve(stats.idle, stats.free, share, stats.max_hold_s)
    return reserve if reserve.kept > 0 else None
