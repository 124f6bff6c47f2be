"""The stranding rules as the repartition controller reads them from every node
(:func:`migslice.repartition.held_mix`), kept node by node in the simulator: each node's
part is recomputed only when the node changed since the rule was last asked for."""

from __future__ import annotations

from migslice.mig.stranding import NO_MIX, FillerMix, complete_rule, filler_mix, strand_guard
from migslice.sim.cluster import SimCluster, SimNode


class HeldMix:
    """The held mix of the device-plugin MIG instances pods hold, and the rules it sets."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster
        self._mix = NO_MIX
        self._parts = [NO_MIX] * len(cluster.nodes)
        self._dirty: set[int] = set(range(len(cluster.nodes)))
        cluster.listeners.append(lambda node: self._dirty.add(node.position))

    def guard(self) -> bool:
        """Whether the stranding rule is on now."""
        return strand_guard(self._now())

    def rules(self) -> tuple[bool, bool]:
        """Whether the stranding rule and the full-compute rule are on now."""
        mix = self._now()
        return strand_guard(mix), complete_rule(mix)

    def _now(self) -> FillerMix:
        for position in self._dirty:
            part = _held_part(self._cluster, self._cluster.nodes[position])
            self._mix = self._mix - self._parts[position] + part
            self._parts[position] = part
        self._dirty.clear()
        return self._mix


def _held_part(cluster: SimCluster, node: SimNode) -> FillerMix:
    """The node's part of the mix: its held instances."""
    return filler_mix(
        cluster.model,
        (
            placed.profile
            for gpu in node.gpus
            for placed, holder in zip(gpu.instances, gpu.holders, strict=True)
            if holder is not None
        ),
    )
