"""Rendering: mig-parted configs round-trip, nvidia-smi creation order succeeds."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import CATALOG, GpuModel, enumerate_maximal_layouts, place
from migslice.mig.migparted import (
    MigPartedError,
    mig_parted_entries,
    parse_mig_parted,
    render_mig_parted,
)
from migslice.mig.render import (
    creation_order,
    nvidia_smi_create,
    render_bar,
)
from tests import mig_oracle

ROUND_TRIP_MODELS = ["A30", "A100-80GB", "H200-141GB", "RTX-PRO-6000"]


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(ROUND_TRIP_MODELS).flatmap(
        lambda key: st.tuples(
            st.just(key),
            st.dictionaries(
                st.integers(0, 7),
                st.sampled_from(enumerate_maximal_layouts(CATALOG.get(key))),
                min_size=1,
                max_size=8,
            ),
        )
    )
)
def test_mig_parted_yaml_parses_back_to_the_same_counts_per_gpu(case: tuple) -> None:
    key, layouts = case
    model = CATALOG.get(key)
    text = render_mig_parted({"migslice-node-1": mig_parted_entries(model, layouts)})
    parsed = parse_mig_parted(text)
    assert list(parsed) == ["migslice-node-1"]
    per_gpu: dict[int, Counter[str]] = {}
    for entry in parsed["migslice-node-1"]:
        assert entry.mig_enabled
        assert entry.device_filter == model.pci_filters
        assert entry.devices is not None
        for index in entry.devices:
            assert index not in per_gpu, "entries must not overlap"
            per_gpu[index] = Counter(entry.counts())
    assert per_gpu == {i: Counter(p.profile for p in layout) for i, layout in layouts.items()}


def test_mig_parted_yaml_uses_the_names_mig_parted_expects() -> None:
    model = CATALOG.get("A100-80GB")
    layout = [place(model, "1g.10gb+me", 6), place(model, "3g.40gb", 0)]
    document = yaml.safe_load(
        render_mig_parted({"c": mig_parted_entries(model, {0: layout, 1: layout})})
    )
    assert document == {
        "version": "v1",
        "mig-configs": {
            "c": [
                {
                    "device-filter": ["0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"],
                    "devices": [0, 1],
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb+me": 1, "3g.40gb": 1},
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "only v1"),
        ("version: v1\nmig-configs: {}", "non-empty mapping"),
        ("version: v1\nextra: 1\nmig-configs: {a: []}", "unknown keys: extra"),
        ("version: v1\nmig-configs: {a: [{devices: [x], mig-enabled: true}]}", "devices must be"),
        ("version: v1\nmig-configs: {a: [{devices: all}]}", "mig-enabled must be"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
            "mig-devices: {x: 1}}]}",
            "is not a MIG profile name",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, "
            "mig-devices: {1g.10gb: 1}}]}",
            "must be empty when mig-enabled is false",
        ),
        ("[1, 2", "not YAML"),
    ],
)
def test_malformed_mig_parted_configs_are_rejected_with_the_place(text: str, message: str) -> None:
    with pytest.raises(MigPartedError, match=message):
        parse_mig_parted(text)


def test_the_user_guide_creation_order_example() -> None:
    model = CATALOG.get("A100-40GB")

    def create_all(names: list[str]) -> bool:
        made: list[tuple[str, int]] = []
        for name in names:
            instance = mig_oracle.driver_create(model, made, name)
            if instance is None:
                return False
            made.append(instance)
        return True

    by_id = {p.gi_profile_id: p.name for p in model.profiles}
    assert not create_all([by_id[i] for i in (19, 19, 14, 9)])
    assert create_all([by_id[i] for i in (9, 19, 14, 19)])


@pytest.mark.parametrize("key", ["A30", "A100-80GB", "H100-80GB", "RTX-PRO-6000"])
def test_our_creation_order_succeeds_for_every_maximal_layout(key: str) -> None:
    model = CATALOG.get(key)
    for layout in enumerate_maximal_layouts(model):
        made: list[tuple[str, int]] = []
        for placed in creation_order(layout, model):
            instance = mig_oracle.driver_create(model, made, placed.profile)
            assert instance is not None, f"{layout} fails at {placed.profile}"
            made.append(instance)


def test_nvidia_smi_commands_create_largest_first_and_tear_down_ci_before_gi() -> None:
    model = CATALOG.get("A100-40GB")
    layout = [
        place(model, n, s)
        for n, s in [("1g.5gb", 0), ("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)]
    ]
    assert nvidia_smi_create(3, model, layout) == ["nvidia-smi mig -i 3 -cgi 9,14,19,19 -C"]
    assert nvidia_smi_create(0, model, []) == []


def test_the_bar_shows_each_memory_slice() -> None:
    model = CATALOG.get("A100-80GB")
    layout = [place(model, "3g.40gb", 0), place(model, "2g.20gb", 4), place(model, "1g.10gb", 6)]
    assert render_bar(model, layout, cell=12) == (
        "|3g.40gb" + " " * 44 + "|2g.20gb" + " " * 18 + "|1g.10gb     |............|"
    )


@pytest.mark.parametrize("model", CATALOG.models, ids=lambda m: m.key)
def test_the_bar_never_cuts_a_profile_name_and_keeps_one_width_per_model(model: GpuModel) -> None:
    """``migslice layouts`` showed ``1g.10gb+me`` as ``1g.10gb+``."""
    widths = set()
    for profile in model.profiles:
        for cell in (1, 3, 8):
            bar = render_bar(model, [place(model, profile.name, profile.placements[0])], cell=cell)
            assert f"|{profile.name}" in bar, (profile.name, bar)
            widths.add(len(render_bar(model, [place(model, profile.name, 0)])))
    assert len(widths) == 1, widths
