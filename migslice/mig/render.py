"""Render layouts for people and for nvidia-smi: creation commands and a bar per GPU.

mig-parted configs are read and written in :mod:`migslice.mig.migparted`.
"""

from __future__ import annotations

from collections.abc import Sequence

from migslice.mig.catalog import GpuModel
from migslice.mig.layout import Placed


def creation_order(layout: Sequence[Placed], model: GpuModel) -> list[Placed]:
    """Order in which creating instances without explicit placement succeeds.

    The driver puts a new instance without a placement at its highest free legal start, so
    smaller instances created first can block larger ones (``-cgi 19,19,14,9`` fails on an
    A100 where ``9,19,14,19`` works). Creating the largest first avoids it.
    """

    def key(placed: Placed) -> tuple[int, int, int]:
        profile = model.profile(placed.profile)
        return (-profile.memory_slices, -profile.compute_slices, placed.start)

    return sorted(layout, key=key)


def nvidia_smi_create(gpu_index: int, model: GpuModel, new: Sequence[Placed]) -> list[str]:
    """``nvidia-smi mig`` commands that create ``new`` instances (and their compute instances).

    Profiles go by GPU-instance profile id, or by name where the catalog has no id for the
    model: ``-cgi`` takes either (MIG User Guide, "Creating GPU Instances": ``-cgi 9,3g.20gb``).
    """
    if not new:
        return []
    ids = ",".join(_cgi_profile(model, p.profile) for p in creation_order(new, model))
    return [f"nvidia-smi mig -i {gpu_index} -cgi {ids} -C"]


def _cgi_profile(model: GpuModel, name: str) -> str:
    profile_id = model.profile(name).gi_profile_id
    return name if profile_id is None else str(profile_id)


def render_bar(model: GpuModel, layout: Sequence[Placed], cell: int = 8) -> str:
    """The GPU's memory slices as a bar: ``|3g.40gb                    |2g.20gb  |1g.10gb|..|``.

    Each memory slice is ``cell`` characters wide, or wider where a profile name of the model
    (or of ``layout``) needs it: names are never cut (``1g.10gb+me`` is 10 characters), and
    every bar of one model has the same width; free slices show as ``.``.
    """
    cell = max(cell, bar_cell(model, layout))
    return render_slots(model.memory_slices, [(p.start, p.size, p.profile) for p in layout], cell)


def render_slots(memory_slices: int, spans: Sequence[tuple[int, int, str]], cell: int) -> str:
    """The bar of :func:`render_bar` with the caller's text in each instance: ``spans`` are
    (start, size, text), each memory slice ``cell`` characters wide (text longer than its
    span is cut; :func:`slots_cell` gives the cell that keeps every text whole); free slices
    show as ``.``."""
    by_start = {start: (size, label) for start, size, label in spans}
    parts: list[str] = []
    index = 0
    while index < memory_slices:
        found = by_start.get(index)
        if found is None:
            parts.append("." * cell)
            index += 1
            continue
        size, label = found
        width = size * cell + size - 1
        parts.append(label[:width].ljust(width))
        index += size
    return "|" + "|".join(parts) + "|"


def slots_cell(spans: Sequence[tuple[int, int, str]], cell: int = 1) -> int:
    """The narrowest cell, at least ``cell``, that holds each span's text whole."""
    needed = (-(-(len(label) - size + 1) // max(size, 1)) for _, size, label in spans)
    return max(cell, *needed) if spans else cell


def bar_cell(model: GpuModel, layout: Sequence[Placed] = ()) -> int:
    """The narrowest memory-slice cell that holds every profile name of ``model`` and
    ``layout`` whole (a name spanning N slices has N cells and N - 1 separators)."""
    sized = [(p.name, p.memory_slices) for p in model.profiles]
    sized += [(p.profile, p.size) for p in layout]
    return max((-(-(len(name) - size + 1) // max(size, 1)) for name, size in sized), default=1)
