"""Nodes whose GPUs have different PCI device ids: the mig-parted config migslice writes gives
every GPU it plans its planned layout, and no GPU a layout planned for another model.

mig-parted applies an entry to each GPU that its ``device-filter`` (one id or a list of them)
and its ``devices`` both select (NVIDIA/mig-parted@bd7160f ``api/spec/v1/helpers.go``
``MatchesDeviceFilter``, ``cmd/nvidia-mig-parted/assert/assert.go``
``WalkSelectedMigConfigForEachGPU``); the checks read the written config back with migslice's
own reader of those rules (:func:`migslice.mig.migparted.resolve_gpus`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from harness.builders import make_node, make_pod
from migslice.inventory import LayoutSource, NodeState, resolve_node
from migslice.inventory.layouts import node_layout
from migslice.mig import CATALOG, Placed, place
from migslice.mig.migparted import (
    Outcome,
    parse_mig_parted,
    profile_counts,
    render_mig_parted,
    resolve_gpus,
)
from migslice.names import LAYOUT_ANNOTATION, MODE_CARVE, REPARTITION_MODE_LABEL
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.repartition import CarveSettings, PlanSettings, plan, plan_carve
from tests.repartition.test_planning import pending

H100 = CATALOG.get("H100-80GB")
A100_80 = CATALOG.get("A100-80GB")
A100_40 = CATALOG.get("A100-40GB")


def _gpu(index: int, pci: int, layout: Sequence[Placed]) -> dict[str, Any]:
    """A GPU as the node agent publishes it, with its own PCI device id."""
    instances = [
        {"profile": p.profile, "start": p.start, "size": p.size, "busy": False} for p in layout
    ]
    return {
        "index": index,
        "pciDeviceId": f"0x{pci:04X}",
        "migEnabled": True,
        "instances": instances,
    }


def mixed_raw(
    name: str,
    product: str,
    gpus: Sequence[tuple[int, Sequence[Placed]]],
    *,
    config: str | None = None,
    mig: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A node whose agent reports each GPU's PCI device id and layout (GPU 0's id is also the
    node's ``pciDeviceId``, as the agent has always written it); ``config``: its
    ``nvidia.com/mig.config``, applied (``success``); ``mig``: allocatable other than the
    agent's layouts."""
    annotation = {
        "version": "v1",
        "product": product,
        "pciDeviceId": f"0x{gpus[0][0]:04X}",
        "gpus": [_gpu(i, pci, layout) for i, (pci, layout) in enumerate(gpus)],
    }
    counts = Counter(p.profile for _, layout in gpus for p in layout)
    return make_node(
        name,
        gpu_count=len(gpus),
        product=product,
        mig=dict(counts) if mig is None else mig,
        config=config,
        config_state=None if config is None else "success",
        layout_annotation=json.dumps(annotation),
    )


def mixed_node(name: str, product: str, gpus: Sequence[tuple[int, Sequence[Placed]]]) -> NodeState:
    return resolve_node(node_facts_from_raw(mixed_raw(name, product, gpus)), [])


def applied(text: str, name: str, pci_ids: Sequence[int]) -> dict[int, tuple[tuple[str, int], ...]]:
    """What MIG Manager sets on each GPU of the node applying config ``name`` of ``text`` (a
    GPU no entry selects is left out)."""
    entries = parse_mig_parted(text)[name]
    settings = resolve_gpus(entries, [(pci,) for pci in pci_ids])
    assert all(s.outcome in (Outcome.SET, Outcome.UNTOUCHED) for s in settings), settings
    return {s.index: s.mig_devices for s in settings if s.outcome is Outcome.SET}


def test_gpus_of_one_model_with_different_pci_ids_each_get_their_planned_layout() -> None:
    """GPU 0 an H100-80GB-HBM3 (0x2330), GPU 1 an H800 (0x2324): one catalog model. Two 4g.40gb
    pods need both GPUs; the config's filter must select GPU 1 too, whose id is not GPU 0's."""
    all_1g = [place(H100, "1g.10gb", s) for s in range(7)]
    node = mixed_node("mixed", "NVIDIA-H100-80GB-HBM3", [(0x2330, all_1g), (0x2324, all_1g)])
    result = plan(
        [node],
        [pending("research/big-1", "4g.40gb"), pending("research/big-2", "4g.40gb")],
        settings=PlanSettings(min_pending_s=0),
    )
    (change,) = result.changes
    planned = {g.index: profile_counts(g.new) for g in change.gpus}
    assert sorted(planned) == [0, 1]
    text = render_mig_parted({change.config_name: change.entries})
    assert applied(text, change.config_name, [0x2330, 0x2324]) == planned


@pytest.mark.parametrize(
    ("gpu1", "source"),
    [
        ([place(A100_40, "1g.5gb", s) for s in range(7)], LayoutSource.COUNTS),
        ([], LayoutSource.AGENT),
    ],
    ids=["partitioned-read-by-counts", "empty-read-from-the-agent"],
)
def test_a_gpu_of_another_model_is_never_planned_nor_selected(
    gpu1: list[Placed], source: LayoutSource
) -> None:
    """An A100-80GB node (GFD's label, GPU 0) whose GPU 1 is an A100-40GB (0x20B0): layouts
    planned for the node's model are illegal there. The plan leaves GPU 1 alone and no entry
    of the config selects it; GPU 0 gets its planned layout. Partitioned, GPU 1's instances
    are illegal on the node's model and the node is known by counts; empty, the agent's
    report is the node's layout."""
    gpu0 = [place(A100_80, "1g.10gb", s) for s in range(7)]
    node = mixed_node("mixed", "NVIDIA-A100-SXM4-80GB", [(0x20B2, gpu0), (0x20B0, gpu1)])
    assert node.source is source, node.notes
    result = plan(
        [node],
        [pending("research/big-1", "4g.40gb"), pending("research/big-2", "4g.40gb")],
        settings=PlanSettings(min_pending_s=0),
    )
    (change,) = result.changes
    planned = {g.index: profile_counts(g.new) for g in change.gpus}
    assert sorted(planned) == [0]
    text = render_mig_parted({change.config_name: change.entries})
    assert applied(text, change.config_name, [0x20B2, 0x20B0]) == planned
    assert "research/big-2" in dict(result.unserved)


def test_the_inventory_reads_each_gpu_of_a_mixed_node_by_its_own_id_from_the_config() -> None:
    """Right after MIG Manager applied migslice's config to the H100 + H800 node, the agent
    still reports the old layouts: the inventory reads the GPUs from the config the label
    names, each GPU by its own PCI device id (GPU 0's for both left GPU 1 unset, and the node
    known by counts only)."""
    all_1g = [place(H100, "1g.10gb", s) for s in range(7)]
    gpus = [(0x2330, all_1g), (0x2324, all_1g)]
    node = mixed_node("mixed", "NVIDIA-H100-80GB-HBM3", gpus)
    result = plan(
        [node],
        [pending("research/big-1", "7g.80gb"), pending("research/big-2", "4g.40gb")],
        settings=PlanSettings(min_pending_s=0),
    )
    (change,) = result.changes
    assert len(change.entries) == 2  # the GPUs differ: an entry each, each by its own id
    now = Counter(p.profile for g in change.gpus for p in g.new)
    raw = mixed_raw(
        "mixed", "NVIDIA-H100-80GB-HBM3", gpus, config=change.config_name, mig=dict(now)
    )
    layout = node_layout(node_facts_from_raw(raw), {change.config_name: change.entries})
    assert layout.source is LayoutSource.MIG_PARTED, layout.notes
    assert layout.gpus is not None
    assert {g.index: profile_counts(g.instances) for g in layout.gpus} == {
        g.index: profile_counts(g.new) for g in change.gpus
    }


def test_the_carve_path_never_carves_a_gpu_of_another_model() -> None:
    """A carve-mode A100-80GB node whose GPU 1 is an empty A100-40GB (0x20B0), GPU 0 full and
    busy: the only room for a 4g.40gb pod is on GPU 1, where the node's model's profile is no
    profile at all. The carve planner leaves GPU 1 alone."""
    busy = [place(A100_80, "7g.80gb", 0)]
    raw = mixed_raw("mixed", "NVIDIA-A100-SXM4-80GB", [(0x20B2, busy), (0x20B0, [])])
    annotation = json.loads(raw["metadata"]["annotations"][LAYOUT_ANNOTATION])
    annotation["gpus"][0]["instances"][0]["busy"] = True
    raw["metadata"]["annotations"][LAYOUT_ANNOTATION] = json.dumps(annotation)
    raw["metadata"]["labels"][REPARTITION_MODE_LABEL] = MODE_CARVE
    held = pod_facts_from_raw(make_pod("held", profile="7g.80gb", node_name="mixed"))
    node = resolve_node(node_facts_from_raw(raw), [held] if held is not None else [])
    assert node.source is LayoutSource.AGENT, node.notes
    carve = plan_carve(
        [node],
        [pending("research/big-1", "4g.40gb")],
        settings=CarveSettings(min_pending_s=0, default_mode=MODE_CARVE),
    )
    assert carve.changes == ()
