"""The policies the simulator compares: migslice and the baselines B0-B9 of benchmarks.md §5.5
(B7, the exact optimum, is an ILP in ``bench/packing/exact.py``), by id.

* ``B0``-``B4`` never change a layout (:mod:`migslice.sim.static`);
* ``B5`` is nos's partitioner (:mod:`migslice.sim.nos`), with the sensitivity variants
  ``B5-table``, ``B5-most``, ``B5-fewest`` (tie-break), ``B5-random-node`` (placement) and
  ``B5-catalog`` (nos's algorithm over every maximal geometry of the catalog, 4g + 3g and
  1g.20gb included, instead of nos's table of 12);
* ``B6`` is FGD adapted to MIG (:mod:`migslice.sim.fgd`);
* ``B8`` is HAMi v2.10's MIG mode (:mod:`migslice.sim.hami`);
* ``B9`` is NVIDIA's DRA driver in DynamicMIG mode allocated by kube-scheduler alone
  (:mod:`migslice.sim.dra_first_fit`), ``B9-random-node`` the same with v1.34's random
  choice among tied nodes, ``B9-least-allocated`` with NodeResourcesFit's spread of pods
  that ask no CPU or memory;
* ``M-dra`` is migslice on DynamicMIG nodes: the extender's node score and the steer's device
  (:mod:`migslice.sim.dra_steered`);
* ``migslice`` is the extender's score and the repartition controller's decision
  (:mod:`migslice.sim.ours`).

A policy is a value; :meth:`~migslice.sim.placement.Policy.start` binds it to one run.
"""

from __future__ import annotations

from collections.abc import Sequence

from migslice.mig import GpuModel
from migslice.names import MODE_CARVE
from migslice.sim.dra_first_fit import DraFirstFit
from migslice.sim.dra_steered import DraSteered
from migslice.sim.fgd import FgdForMig, typical_shapes
from migslice.sim.hami import HamiMig
from migslice.sim.limits import count_geometries, oracle_layouts
from migslice.sim.nos import NosLike
from migslice.sim.ours import Migslice, planned_reshape
from migslice.sim.placement import LayoutChange, Placer, Policy, Reshaper, static_layout
from migslice.sim.static import (
    ALL_1G,
    ALL_BALANCED,
    StaticBestFit,
    StaticFirstFit,
    WholeGpu,
    stock_mixed_layouts,
)
from migslice.sim.trace import SimPod

POLICY_IDS = (
    "B0",
    "B1",
    "B2",
    "B3",
    "B4",
    "B5",
    "B5-table",
    "B5-most",
    "B5-fewest",
    "B5-random-node",
    "B5-catalog",
    "B6",
    "B8",
    "B9",
    "B9-random-node",
    "B9-least-allocated",
    "migslice",
    "M-carve",
    "M-dra",
    "M-dra-reserve",
)
NOS_VARIANTS = {
    "B5": NosLike(),
    "B5-table": NosLike("B5 nos, ties to the table's first", tie="table"),
    "B5-most": NosLike("B5 nos, ties to the most instances", tie="most"),
    "B5-fewest": NosLike("B5 nos, ties to the fewest instances", tie="fewest"),
    "B5-random-node": NosLike("B5 nos, kube-scheduler's random node", placement="random"),
}


def make_policy(
    policy_id: str, model: GpuModel, expected: Sequence[SimPod], *, gpus: int
) -> Policy:
    """The policy called ``policy_id`` (:data:`POLICY_IDS`); B3 is fitted to ``expected``
    (the workload's pods) on ``gpus`` GPUs, B6 takes its typical pods from them."""
    if policy_id == "B0":
        return WholeGpu()
    if policy_id == "B1":
        return StaticFirstFit("B1 static all-1g first-fit", ALL_1G)
    if policy_id == "B2":
        return StaticFirstFit("B2 static all-balanced first-fit", ALL_BALANCED)
    if policy_id == "B3":
        return StaticBestFit("B3 oracle-static best-fit", oracle_layouts(expected, model, gpus))
    if policy_id == "B4":
        return StaticBestFit("B4 best-fit, stock mixed geometry", stock_mixed_layouts(model))
    if policy_id in NOS_VARIANTS:
        return NOS_VARIANTS[policy_id]
    if policy_id == "B5-catalog":
        # in nos's table order: larger profiles first (so one 7g is still the initial geometry)
        size = {p.name: p.memory_slices for p in model.profiles}
        geometries = tuple(
            sorted(
                (g.counts for g in count_geometries(model)),
                key=lambda c: (-max(size[p] for p, _ in c), sum(n for _, n in c), c),
            )
        )
        return NosLike("B5 nos on the catalog's geometries", geometries=geometries)
    if policy_id == "B6":
        return FgdForMig(typical_shapes(expected))
    if policy_id == "B8":
        return HamiMig()
    if policy_id == "B9":
        return DraFirstFit()
    if policy_id == "B9-random-node":
        return DraFirstFit("B9 DRA first-fit, random tied node", node="random")
    if policy_id == "B9-least-allocated":
        return DraFirstFit("B9 DRA first-fit, least-allocated node", node="least-allocated")
    if policy_id == "M-dra":
        return DraSteered()
    if policy_id == "M-dra-reserve":
        return DraSteered("M-dra with the large-job reserve", large_reserve=True)
    if policy_id == "migslice":
        return Migslice()
    if policy_id == "M-carve":
        return Migslice("migslice carve mode", mode=MODE_CARVE)
    raise ValueError(f"unknown policy {policy_id!r}; known: {', '.join(POLICY_IDS)}")


__all__ = [
    "NOS_VARIANTS",
    "POLICY_IDS",
    "LayoutChange",
    "Placer",
    "Policy",
    "Reshaper",
    "make_policy",
    "planned_reshape",
    "static_layout",
]
