"""Stranded compute: a GPU whose memory slices are all taken while some of its compute slices
are not, and when avoiding it pays.

On an A100/H100-80GB (8 memory slices, 7 compute) a ``3g.40gb`` next to a ``3g.40gb`` takes
all 8 memory slices and 6 compute: the 7th compute slice is lost until one of them leaves.
Placed on another GPU, the second ``3g`` leaves 4 memory slices next to the first, which a
``4g.40gb`` or ``1g``/``2g`` instances (compute and memory one for one) fill to 7 of 7. Opening
another GPU for it pays only while such small demand exists; where it is scarce, the opened
GPUs stay half empty (docs/dra.md, "Stranded compute").

So the rule is conditional on the cluster's held mix (:class:`FillerMix`): the *need* is the
memory a pairing profile (two of it fill the memory and leave compute, ``3g.40gb``) leaves
next to each held instance of it, 4 slices a ``3g.40gb``; the *fill* is the compute slices
held by the profiles that can fill that room without stranding themselves (compute and memory
one for one, fewer compute slices than the pairing profile: ``1g.10gb``, ``2g.20gb``).
:func:`strand_guard` is on while the fill covers the need, with a tenth of hysteresis so that
a cluster hovering at the line does not flip it on every claim.

Pure: the steer (:mod:`migslice.scheduling.dra_steer`), the DRA node score
(:mod:`migslice.scheduling.dra_placement`) and the simulator's M-dra read it alike.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from migslice.mig.catalog import GpuModel


def strands_compute(model: GpuModel, memory_after: int, compute_after: int) -> bool:
    """Whether a GPU of ``model`` whose instances take ``memory_after`` memory slices and
    ``compute_after`` compute slices has its memory full and compute slices left unused."""
    return memory_after >= model.memory_slices and compute_after < model.compute_slices


def strands_with(model: GpuModel, profiles: Iterable[str]) -> bool:
    """Whether instances of ``profiles`` (one name each) on one GPU of ``model`` strand
    compute (:func:`strands_compute`)."""
    memory = compute = 0
    for name in profiles:
        profile = model.profile(name)
        memory += profile.memory_slices
        compute += profile.compute_slices
    return strands_compute(model, memory, compute)


@dataclass(frozen=True, slots=True)
class FillerMix:
    """Held demand that decides :func:`strand_guard`: ``need``, memory slices that pairing
    instances leave next to them; ``fill``, compute slices of the instances that fill such
    room. Mixes of several GPU models add up."""

    fill: int = 0
    need: int = 0

    def __add__(self, other: FillerMix) -> FillerMix:
        return FillerMix(self.fill + other.fill, self.need + other.need)

    def __sub__(self, other: FillerMix) -> FillerMix:
        return FillerMix(self.fill - other.fill, self.need - other.need)


NO_MIX = FillerMix()


def filler_mix(model: GpuModel, profiles: Iterable[str]) -> FillerMix:
    """The mix of instances of ``profiles`` (one name per held instance) on GPUs of ``model``;
    names the model does not know count nothing."""
    fill = need = 0
    roles = _roles(model)
    for name in profiles:
        role = roles.get(name)
        if role is not None:
            fill += role[0]
            need += role[1]
    return FillerMix(fill, need)


def strand_guard(mix: FillerMix, *, was_on: bool = False) -> bool:
    """Whether placements that strand compute are avoided now: while the held fill covers the
    need (once on, while it covers nine tenths of it); never without a pairing instance held."""
    if mix.need <= 0:
        return False
    return 10 * mix.fill >= (9 if was_on else 10) * mix.need


def describe_mix(mix: FillerMix) -> str | None:
    """The rule's state and what it read, for people (``migslice plan``, ``migslice status``);
    None while no pairing instance is held (the rule cannot apply)."""
    if mix.need <= 0:
        return None
    state = "on" if strand_guard(mix) else "off"
    return (
        f"stranding rule {state} (1g/2g pods hold {_slices(mix.fill, 'compute')}; the 3g "
        f"pods leave {_slices(mix.need, 'memory')} beside them)"
    )


def _slices(count: int, kind: str) -> str:
    return f"{count} {kind} slice" if count == 1 else f"{count} {kind} slices"


def mix_json(mix: FillerMix) -> dict[str, object]:
    """The rule's state and what it read, for documents."""
    return {"on": strand_guard(mix), "fillComputeSlices": mix.fill, "needMemorySlices": mix.need}


@functools.lru_cache(maxsize=64)
def _roles(model: GpuModel) -> dict[str, tuple[int, int]]:
    """Per profile name of ``model``: (fill, need) one instance adds."""
    memory, compute = model.memory_slices, model.compute_slices
    pairing = [
        p
        for p in model.profiles
        if 2 * p.memory_slices == memory and 2 * p.compute_slices < compute
    ]
    roles: dict[str, tuple[int, int]] = {p.name: (0, memory - p.memory_slices) for p in pairing}
    if not pairing:
        return roles
    smallest = min(p.compute_slices for p in pairing)
    for p in model.profiles:
        if p.compute_slices == p.memory_slices and p.compute_slices < smallest:
            roles[p.name] = (p.compute_slices, 0)
    return roles
