"""What makes ``migslice status`` fast at 5,000 nodes changes none of its answers: nodes of one
shape share one layout and one pick of held instances, pods of one shape are read once, a bar
drawn once is drawn again the same, a line that fits is wrapped as textwrap wraps it, and the
command loads only its own module."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from harness.builders import make_mig_config_map, make_node, make_pod, unschedulable
from migslice.cli import MODULE_OF, SERVICE_MODULES, service_commands
from migslice.inventory import ClusterIndex
from migslice.inventory.layouts import layout_key, node_layout, resolve_node
from migslice.mig import CATALOG
from migslice.mig.migparted import parse_mig_parted
from migslice.objects import parse_cluster_objects, pod_facts_from_raw
from migslice.objects.nodes import node_facts_from_raw
from migslice.objects.pod_gpus import PodGpuMemo, read_pod_gpu, shape_problems
from migslice.objects.pods import pod_key
from migslice.repartition import ControllerSettings
from migslice.status.cluster import StatusSettings, build_cluster
from migslice.status.report import build_status, render_text, status_document
from migslice.status.text import gpu_bar, wrapped
from tests.status_cluster import MIG_CONFIGS, NOW_S

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")


def shaped_cluster() -> list[dict[str, object]]:
    """Twelve nodes of three shapes (one failing its config, one without a count label) and
    pods over them in several patterns, so that shapes and held counts repeat and differ."""
    objects: list[dict[str, object]] = [make_mig_config_map(MIG_CONFIGS)]
    shapes = [
        ({"1g.10gb": 14}, "all-1g.10gb", "success", 2),
        ({"1g.10gb": 4, "2g.20gb": 2, "3g.40gb": 2}, "all-balanced", "success", 2),
        ({"3g.40gb": 4}, "all-3g.40gb", "success", 2),
        ({"1g.10gb": 7}, "all-1g.10gb", "failed", 1),
        ({"1g.10gb": 7}, "all-1g.10gb", "success", None),
    ]
    for index in range(12):
        mig, config, state, gpus = shapes[index % len(shapes)]
        objects.append(
            make_node(
                f"n-{index:02d}",
                gpu_count=gpus,
                mig=mig,
                config=config,
                config_state=state,
                with_type_meta=True,
            )
        )
    for index in range(40):
        node = f"n-{(index * 5) % 12:02d}"
        profile = PROFILES[index % 3]
        objects.append(make_pod(f"p-{index}", profile=profile, node_name=node, with_type_meta=True))
    objects.append(unschedulable(make_pod("w-0", profile="3g.40gb", with_type_meta=True)))
    return objects


def test_nodes_of_one_shape_share_a_layout_and_every_state_is_as_if_derived_alone() -> None:
    objects = parse_cluster_objects(shaped_cluster())
    configs = parse_mig_parted(MIG_CONFIGS)
    index: ClusterIndex[object] = ClusterIndex(lambda state: state, CATALOG)
    index.set_mig_configs(configs)
    index.load_objects(objects)
    pods = [p for p in map(pod_facts_from_raw, objects.pods) if p is not None]
    layouts = {}
    for raw in objects.nodes:
        facts = node_facts_from_raw(raw)
        alone = resolve_node(facts, [p for p in pods if p.holding_node == facts.name], configs)
        assert index.get(facts.name) == alone
        layouts.setdefault(layout_key(facts), set()).add(id(index._layouts[facts.name][2]))
    assert all(len(ids) == 1 for ids in layouts.values()) and len(layouts) == 5


def test_a_layout_remembers_held_picks_without_changing_them() -> None:
    facts = node_facts_from_raw(
        make_node("n", gpu_count=2, mig={"1g.10gb": 14}, config="all-1g.10gb")
    )
    configs = parse_mig_parted(MIG_CONFIGS)
    layout = node_layout(facts, configs)
    pod = pod_facts_from_raw(make_pod("p", profile="1g.10gb", node_name="n"))
    assert pod is not None
    first = resolve_node(facts, [pod], configs, layout=layout)
    again = resolve_node(facts, [pod], configs, layout=layout)
    assert first.gpus is again.gpus and first == resolve_node(facts, [pod], configs)
    assert list(layout.held) == [(("nvidia.com/mig-1g.10gb", 1),)]


def test_pods_of_one_shape_are_read_once_and_read_the_same() -> None:
    memo = PodGpuMemo()
    pods = [p for p in shaped_cluster() if p.get("kind") == "Pod"]
    bad = make_pod("bad", profile="1g.10gb", node_name="n-00")
    bad["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    twin = make_pod("twin", profile="1g.10gb")
    twin["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    twin["spec"]["nodeName"] = 7
    for raw in [*pods, bad, twin, {"spec": "x"}, {"metadata": {"name": "none"}}]:
        assert memo.read(raw) == read_pod_gpu(raw), pod_key(raw)
        assert memo.shape_problems(raw) == shape_problems(raw), pod_key(raw)
    assert len(memo._read) == 4  # three profiles and the bad twins; no spec: read each time


@pytest.mark.parametrize("pair", [("1", 1), (1, 1.0), (1, True), (None, float("nan"))])
def test_values_json_would_blur_are_read_apart(pair: tuple[object, object]) -> None:
    memo = PodGpuMemo()
    for value in pair:
        raw = make_pod("p", profile="1g.10gb")
        raw["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = value
        assert memo.read(raw) == read_pod_gpu(raw)
        assert memo.shape_problems(raw) == shape_problems(raw)


@pytest.mark.parametrize("width", [None, 20, 80])
@pytest.mark.parametrize(
    "text",
    [
        "",
        "fits",
        "3g.40gb team-a/team-a/train-0, 1g.10gb team-b/team-b/serve-1",
        " leading space",
        "trailing space ",
        "a\ttab",
        "two  spaces inside",
        "x" * 79,
        "y" * 100,
    ],
)
def test_a_line_is_wrapped_as_textwrap_wraps_it(text: str, width: int | None) -> None:
    indent = "    "
    expected = (
        [indent + text]
        if width is None
        else textwrap.wrap(
            text,
            width=width,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=True,
            break_on_hyphens=False,
        )
        or [indent]
    )
    assert wrapped(text, indent, width) == expected


def test_the_status_of_a_shaped_cluster_is_the_same_drawn_once_or_again() -> None:
    objects = parse_cluster_objects(shaped_cluster())
    cluster = build_cluster(objects, StatusSettings(now_s=NOW_S))
    report = build_status(cluster, settings=ControllerSettings())
    drawn: dict[tuple[object, ...], str] = {}
    for pool in report.pools:
        for node in pool.nodes:
            for gpu in node.gpus:
                for short in (False, True):
                    alone = gpu_bar(gpu, 9, short=short)
                    assert gpu_bar(gpu, 9, short=short, drawn=drawn) == alone
    again = build_status(
        build_cluster(objects, StatusSettings(now_s=NOW_S)), settings=ControllerSettings()
    )
    assert render_text(again) == render_text(report)
    assert status_document(again) == status_document(report)


def test_a_command_loads_only_its_own_module() -> None:
    for name, module in MODULE_OF.items():
        assert module in SERVICE_MODULES
        assert name in {c.name for c in importlib.import_module(module).COMMANDS}
    everything = {c.name for c in service_commands([])}
    assert set(MODULE_OF) == everything
    assert {c.name for c in service_commands(["status", "--cluster-file", "x"])} == {
        "status",
        "why",
    }
    assert {c.name for c in service_commands(["--help"])} == everything
