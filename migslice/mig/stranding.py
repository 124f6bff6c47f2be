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

A second rule reads the same mix, for where a GPU's last compute slice goes
(:func:`complete_rule`, :func:`completes`). An A100/H100-80GB's ``2g.20gb`` starts are 0, 2
and 4, its ``4g.40gb``'s 0 alone. A ``2g`` at 4 keeps the ``4g`` placement, but a later
``3g.40gb`` can then take only start 0, beside which the last compute slice fits a ``1g``
alone; a ``2g`` at 0 ends the ``4g`` placement and leaves ``3g`` at 4 and a second ``2g`` (7 of
7). Which pays depends on which of the two half-GPU profiles the cluster holds more of: the
rule prefers placements that can still reach every compute slice while the room ``3g``
instances leave beside them (*need*) is at least the memory ``4g`` instances hold (*wide*).

Pure: the steer (:mod:`migslice.scheduling.dra_steer`), the DRA node score
(:mod:`migslice.scheduling.dra_placement`) and the simulator's M-dra read it alike.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from migslice.mig.catalog import GpuModel
from migslice.mig.layout import Placed, free_placements


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
    """Held demand that decides :func:`strand_guard` and :func:`complete_rule`: ``need``,
    memory slices that pairing instances leave next to them; ``fill``, compute slices of the
    instances that fill such room; ``wide``, memory slices held by the half-memory instances
    with more than half the compute (``4g.40gb``). Mixes of several GPU models add up."""

    fill: int = 0
    need: int = 0
    wide: int = 0

    def __add__(self, other: FillerMix) -> FillerMix:
        return FillerMix(self.fill + other.fill, self.need + other.need, self.wide + other.wide)

    def __sub__(self, other: FillerMix) -> FillerMix:
        return FillerMix(self.fill - other.fill, self.need - other.need, self.wide - other.wide)


NO_MIX = FillerMix()


def filler_mix(model: GpuModel, profiles: Iterable[str]) -> FillerMix:
    """The mix of instances of ``profiles`` (one name per held instance) on GPUs of ``model``;
    names the model does not know count nothing."""
    fill = need = wide = 0
    roles = _roles(model)
    for name in profiles:
        role = roles.get(name)
        if role is not None:
            fill += role[0]
            need += role[1]
            wide += role[2]
    return FillerMix(fill, need, wide)


def strand_guard(mix: FillerMix, *, was_on: bool = False) -> bool:
    """Whether placements that strand compute are avoided now: while the held fill covers the
    need (once on, while it covers nine tenths of it); never without a pairing instance held."""
    if mix.need <= 0:
        return False
    return 10 * mix.fill >= (9 if was_on else 10) * mix.need


def complete_rule(mix: FillerMix, *, was_on: bool = False) -> bool:
    """Whether the steer prefers placements that leave a GPU able to reach all its compute
    slices with instances of 2 or more (:func:`completes`): while the room held ``3g``
    instances leave beside them is at least twice the memory held ``4g`` instances take (once
    on, nine tenths of that); never without a pairing instance held. Twice: a ``2g`` at 0
    ends the GPU's one ``4g`` placement, where a ``2g`` at 4 risks one compute slice; at
    once the memory, the rule also turned on where 4g pods come in bursts between long runs
    of 3g pods (default/M1 on 64 GPUs, bench/dra README) and there cost more than it gained."""
    if mix.need <= 0:
        return False
    return 10 * mix.need >= (9 if was_on else 10) * 2 * mix.wide


def completes(model: GpuModel, kept: Iterable[Placed]) -> bool:
    """Whether instances of 2 or more compute slices can still bring a GPU of ``model`` that
    holds ``kept`` to all its compute slices. An A100/H100's 2g.20gb starts are 0, 2 and 4:
    ``3g.40gb`` at 0 beside a ``2g.20gb`` at 4 leaves room for a ``1g`` alone, while ``2g``
    at 0 and ``3g`` at 4 leave room for a second ``2g``."""
    return _reachable(model, tuple(sorted(kept))) >= model.compute_slices


@functools.lru_cache(maxsize=1 << 14)
def _reachable(model: GpuModel, kept: tuple[Placed, ...]) -> int:
    """The most compute slices ``kept`` plus instances of 2 or more compute slices reach."""
    best = sum(model.profile(p.profile).compute_slices for p in kept)
    if best >= model.compute_slices:
        return best
    for profile in model.profiles:
        if profile.parsed.attribute or profile.compute_slices < 2:
            continue
        for placed in free_placements(model, kept, profile.name):
            best = max(best, _reachable(model, tuple(sorted((*kept, placed)))))
            if best >= model.compute_slices:
                return best
    return best


def describe_mix(mix: FillerMix) -> str | None:
    """The rule's state and what it read, for people (``migslice plan``, ``migslice status``);
    None while no pairing instance is held (the rule cannot apply)."""
    if mix.need <= 0:
        return None
    read = f"1g/2g pods hold {_slices(mix.fill, 'compute')}; the 3g pods leave "
    return _said(
        "stranding rule", strand_guard(mix), f"{read}{_slices(mix.need, 'memory')} beside them"
    )


def describe_complete(mix: FillerMix) -> str | None:
    """The full-compute rule's state and what it read, for people; None while no pairing
    instance is held (the rule cannot apply)."""
    if mix.need <= 0:
        return None
    read = f"the 3g pods leave {_slices(mix.need, 'memory')} beside them; the 4g pods hold "
    return _said("full-compute rule", complete_rule(mix), read + _slices(mix.wide, "memory"))


def _said(rule: str, on: bool, read: str) -> str:
    return f"{rule} {'on' if on else 'off'} ({read})"


def _slices(count: int, kind: str) -> str:
    return f"{count} {kind} slice" if count == 1 else f"{count} {kind} slices"


def mix_json(mix: FillerMix) -> dict[str, object]:
    """The rule's state and what it read, for documents."""
    return {
        "on": strand_guard(mix),
        "fillComputeSlices": mix.fill,
        "needMemorySlices": mix.need,
        "fullComputeRule": complete_rule(mix),
        "wideMemorySlices": mix.wide,
    }


@functools.lru_cache(maxsize=64)
def _roles(model: GpuModel) -> dict[str, tuple[int, int, int]]:
    """Per profile name of ``model``: (fill, need, wide) one instance adds."""
    memory, compute = model.memory_slices, model.compute_slices
    pairing = [
        p
        for p in model.profiles
        if 2 * p.memory_slices == memory and 2 * p.compute_slices < compute
    ]
    roles: dict[str, tuple[int, int, int]] = {
        p.name: (0, memory - p.memory_slices, 0) for p in pairing
    }
    if not pairing:
        return roles
    smallest = min(p.compute_slices for p in pairing)
    for p in model.profiles:
        if p.compute_slices == p.memory_slices and p.compute_slices < smallest:
            roles[p.name] = (p.compute_slices, 0, 0)
        elif 2 * p.memory_slices == memory and 2 * p.compute_slices > compute:
            roles[p.name] = (0, 0, p.memory_slices)
    return roles
