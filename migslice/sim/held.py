"""The stranding rules as the repartition controller reads them from every node
(:func:`migslice.repartition.held_mix`), kept GPU by GPU in the simulator: each GPU's part
is recomputed only when the GPU changed since the rule was last asked for."""

from __future__ import annotations

from migslice.mig.stranding import NO_MIX, FillerMix, complete_rule, filler_mix, strand_guard
from migslice.sim.cluster import SimCluster


class HeldMix:
    """The held mix of the device-plugin MIG instances pods hold, and the rules it sets; each
    GPU's part counted again only when the cluster changed the GPU (its ``version``)."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster
        self._mix = NO_MIX
        self._parts: list[list[tuple[int, FillerMix]]] = [
            [(-1, NO_MIX)] * len(node.gpus) for node in cluster.nodes
        ]
        """Per node, per GPU: the GPU's version when counted (-1: not yet) and its part."""
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
        model = self._cluster.model
        for position in self._dirty:
            parts = self._parts[position]
            for k, gpu in enumerate(self._cluster.nodes[position].gpus):
                version, old = parts[k]
                if version == gpu.version:
                    continue
                part = filler_mix(model, [placed.profile for placed in gpu.held_layout()])
                if part != old:
                    self._mix = self._mix - old + part
                parts[k] = (gpu.version, part)
        self._dirty.clear()
        return self._mix
