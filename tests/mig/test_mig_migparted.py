"""migslice.mig.migparted against NVIDIA's own verdicts, shipped configs and apply semantics.

Fixtures under tests/fixtures/mig-parted/ are NVIDIA's files, vendored with their source commit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from harness.builders import make_node
from migslice.inventory import LayoutSource, resolve_node
from migslice.mig import CATALOG, Placed, goyaml
from migslice.mig.migparted import (
    DeviceId,
    MigDeviceName,
    MigPartedEntry,
    MigPartedError,
    Outcome,
    applied_instances,
    builtin_counts,
    creation_orders,
    gpu_instances,
    gpu_pci_ids,
    parse_device_id,
    parse_entries,
    parse_mig_device_name,
    parse_mig_parted,
    per_gpu_counts,
    profile_counts,
    resolve_gpus,
)
from migslice.objects import node_facts_from_raw
from migslice.whynot import WhyNot
from tests import paths

FIXTURES = paths.FIXTURES / "mig-parted"
PROFILE_NAMES = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


VERDICTS: list[dict[str, Any]] = yaml.safe_load(fixture("verdicts.yaml"))["cases"]
DEFAULT = parse_mig_parted(fixture("config-default.yaml"))
EXAMPLE = parse_mig_parted(fixture("example-config.yaml"))


def entry(**fields: object) -> MigPartedEntry:
    raw = {"devices": "all", "mig-enabled": False, **fields}
    (parsed,) = parse_entries([{k.replace("_", "-"): v for k, v in raw.items()}], "test")
    return parsed


# -- parsing: NVIDIA's verdicts -----------------------------------------------------------------


@pytest.mark.parametrize("case", VERDICTS, ids=[c["id"] for c in VERDICTS])
def test_a_document_gets_the_verdict_mig_parted_gives_it(case: dict[str, Any]) -> None:
    if case["accepted"]:
        parse_mig_parted(case["document"])
        return
    with pytest.raises(MigPartedError) as error:
        parse_mig_parted(case["document"])
    assert case["where"] in str(error.value)
    assert "\n" not in str(error.value)


def test_values_are_read_as_mig_parted_reads_them() -> None:
    text = """
version: v1
mig-configs:
  y:
    - device-filter: null
      devices: [null, 1.0, -3, 010]
      mig-enabled: y
      mig-devices: {"1g.10gb": null, "3g.40gb": 2.0, "1c.3g.40gb": 1e0}
  2024-01-02: [{devices: all, mig-enabled: off}]
  123: [{devices: all, mig-enabled: false, device-filter: [null]}]
"""
    configs = parse_mig_parted(text)
    assert list(configs) == ["true", "2024-01-02", "123"]
    assert configs["true"] == (
        MigPartedEntry((0, 1, -3, 8), True, (("1c.3g.40gb", 1), ("1g.10gb", 0), ("3g.40gb", 2))),
    )
    assert configs["2024-01-02"] == (MigPartedEntry(None, False, ()),)
    assert configs["123"] == (MigPartedEntry(None, False, (), ("",)),)


@pytest.mark.parametrize(
    "name", ["config-default.yaml", "example-config.yaml", "example-dgx-station-80gb-config.yaml"]
)
def test_nvidias_shipped_configs_are_accepted(name: str) -> None:
    assert parse_mig_parted(fixture(name))


def test_the_gpu_operator_ships_mig_parteds_default_config() -> None:
    config_map = yaml.safe_load(fixture("gpu-operator-default-mig-parted-config.yaml"))
    operator = parse_mig_parted(config_map["data"]["config.yaml"])
    assert set(operator) == set(DEFAULT)
    ids = [(pci,) for model in CATALOG.models for pci in model.pci_device_ids]

    def applied(entries: tuple[MigPartedEntry, ...]) -> list[object]:
        return [(s.outcome, s.mig_enabled, s.mig_devices) for s in resolve_gpus(entries, ids)]

    for name, entries in DEFAULT.items():  # the same configs, some entries in another order
        assert applied(entries) == applied(operator[name]), name


@given(st.text(st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1))
def test_a_string_written_for_mig_parted_reads_back_as_the_same_string(text: str) -> None:
    assert goyaml.load(goyaml.dump({text: [text]}), "test") == {text: [text]}


# -- device filters: PCI ids, as pkg/types/device_test.go and api/spec/v1/helpers_test.go -------

A16 = DeviceId(0x25B6, 0x10DE, (0x14A9, 0x10DE))
A2 = DeviceId(0x25B6, 0x10DE, (0x157E, 0x10DE))
H100 = DeviceId(0x2330, 0x10DE, (0x16C0, 0x10DE))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0x25B610DE", DeviceId(0x25B6, 0x10DE)),
        ("0x25B610DE:0x14A910DE", A16),
        ("not-a-device-id", None),
        ("0x25B610DE:not-a-subsystem", None),
        ("0x25B610DE:0x14A910DE:extra", None),
        ("0x25b6_10de", DeviceId(0x25B6, 0x10DE)),
        ("0x25B6", DeviceId(0x0000, 0x25B6)),
        ("0x125B610DE", None),
    ],
)
def test_device_filter_strings_parse_as_mig_parted_parses_them(
    text: str, expected: DeviceId | None
) -> None:
    assert parse_device_id(text) == expected


@pytest.mark.parametrize(
    ("device_filter", "gpu", "expected"),
    [
        (DeviceId(0x25B6, 0x10DE), A16, True),
        (A16, A16, True),
        (A16, A2, False),
        (A16, DeviceId(0x25B6, 0x10DE, (0, 0)), False),
        (DeviceId(0x25B6, 0x10DE, (0, 0)), DeviceId(0x25B6, 0x10DE, (0, 0)), True),
        (DeviceId(0x1E30, 0x10DE), A16, False),
        (A16, DeviceId(0x25B6), None),  # migslice knows no subsystem ids
    ],
)
def test_a_filter_matches_a_gpu_as_mig_parted_matches_it(
    device_filter: DeviceId, gpu: DeviceId, expected: bool | None
) -> None:
    assert device_filter.matches(gpu) is expected


@pytest.mark.parametrize(
    ("device_filter", "expected"),
    [
        ("", True),
        ("0x233010DE", True),
        ("0x233010DE:0x16C010DE", True),
        ("0x233010DE:0x16C110DE", False),
        (["0x233010DE:0x16C110DE", "0x233010DE:0x16C010DE"], True),
        ("0x233010DE:0x16C010DE:extra", False),
        ("A100-SXM4-40GB", False),
        ([""], False),
    ],
)
def test_an_entry_selects_a_gpu_by_its_filters_as_mig_parted_does(
    device_filter: object, expected: bool
) -> None:
    assert entry(device_filter=device_filter).selects_device(H100) is expected


# -- which entry sets which GPU ----------------------------------------------------------------


def test_the_example_custom_config_sets_each_gpu_from_its_entry() -> None:
    settings = resolve_gpus(EXAMPLE["custom-config"], [(0x20B0,)] * 9)
    assert [(s.outcome, s.entries) for s in settings] == [
        *[(Outcome.SET, (0,))] * 4,
        (Outcome.SET, (1,)),
        (Outcome.SET, (2,)),
        (Outcome.SET, (3,)),
        (Outcome.SET, (4,)),
        (Outcome.UNTOUCHED, ()),
    ]
    assert settings[7].mig_devices == (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))
    assert "no entry selects GPU 8 (PCI device id 0x20B0)" in settings[8].reason


def test_the_dgx_station_example_leaves_the_display_gpu_without_mig() -> None:
    config = parse_mig_parted(fixture("example-dgx-station-80gb-config.yaml"))
    a100, display = resolve_gpus(config["all-1g.10gb-dgx-station-80"], [(0x20B2,), (0x1FB0,)])
    assert (a100.mig_enabled, a100.mig_devices) == (True, (("1g.10gb", 7),))
    assert (display.outcome, display.mig_enabled) == (Outcome.SET, False)


def test_two_entries_selecting_a_gpu_are_both_applied_and_the_last_stays() -> None:
    entries = (
        entry(mig_enabled=True, mig_devices={"3g.40gb": 2}),
        entry(devices=[0], mig_enabled=True, mig_devices={"1g.10gb": 7}),
    )
    first, second = resolve_gpus(entries, [(0x20B2,)] * 2)
    assert (first.entries, first.mig_devices) == ((0, 1), (("1g.10gb", 7),))
    assert (second.entries, second.mig_devices) == ((0,), (("3g.40gb", 2),))


def test_two_entries_selecting_a_gpu_with_mig_on_and_off_fail_the_apply() -> None:
    entries = (entry(mig_enabled=True, mig_devices={"3g.40gb": 2}), entry(devices=[0]))
    (setting,) = resolve_gpus(entries, [(0x20B2,)])
    assert setting.outcome is Outcome.FAILS
    assert "entries 0 (MIG on) and 1 (MIG off)" in setting.reason


def test_an_overridden_entry_that_does_not_fit_fails_the_apply() -> None:
    entries = (
        entry(mig_enabled=True, mig_devices={"3g.40gb": 3}),
        entry(mig_enabled=True, mig_devices={"7g.80gb": 1}),
    )
    result = per_gpu_counts("c", CATALOG.get("A100-80GB"), 1, configs={"c": entries})
    assert isinstance(result, WhyNot)
    assert result.message.startswith("mig-parted config 'c' entry 0, GPU 0:")


# -- NVIDIA's default config on GPUs that share a model but not a PCI id -----------------------

BALANCED_40 = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
BALANCED_94 = {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}
BALANCED_141 = {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
BALANCED_RTX = {"1g.24gb": 2, "2g.48gb": 1}


@pytest.mark.parametrize(
    ("model", "pci", "config", "expected"),
    [
        ("A100-40GB", 0x20B0, "all-balanced", BALANCED_40),
        ("A100-40GB", 0x20BD, "all-balanced", None),  # A800 SXM4 40GB
        ("A100-40GB", 0x20BD, "all-1g.10gb", None),
        ("A100-40GB", 0x20F6, "all-1g.10gb", {"1g.10gb": 4}),  # A800 40GB PCIe
        ("H100-94GB", 0x2321, "all-balanced", BALANCED_94),  # H100 NVL
        ("H100-94GB", 0x2339, "all-balanced", None),  # H100 SXM5 94GB
        ("H200-141GB", 0x2335, "all-1g.35gb", {"1g.35gb": 4}),
        ("H200-141GB", 0x233B, "all-1g.35gb", None),  # H200 NVL
        ("H200-141GB", 0x233B, "all-balanced", BALANCED_141),
        ("RTX-PRO-6000", 0x2BB5, "all-balanced", BALANCED_RTX),  # Server Edition
        ("RTX-PRO-6000", 0x2BB1, "all-balanced", None),  # Workstation Edition
        ("RTX-PRO-6000", 0x2BB4, "all-balanced", None),  # Max-Q Workstation Edition
    ],
    ids=lambda v: f"0x{v:04X}" if isinstance(v, int) else v if isinstance(v, str) else "",
)
def test_the_default_config_sets_a_gpu_only_where_its_filter_names_the_pci_id(
    model: str, pci: int, config: str, expected: dict[str, int] | None
) -> None:
    result = per_gpu_counts(config, CATALOG.get(model), 2, configs=DEFAULT, pci_device_ids=(pci,))
    if expected is None:
        assert isinstance(result, WhyNot)
        assert f"no entry selects GPU 0 (PCI device id 0x{pci:04X})" in result.message
    else:
        assert result == [(True, expected)] * 2


@pytest.mark.parametrize(
    ("product", "pci_ids"),
    [
        ("NVIDIA-A100-SXM4-40GB", (0x20B0,)),
        ("NVIDIA-A800-SXM4-40GB-MIG-1g.5gb", (0x20BD,)),
        ("NVIDIA-A100-PCIE-40GB", (0x20B1, 0x20F1)),
        ("NVIDIA-H100-SHARED", (0x2339,)),  # plain "NVIDIA H100", time-sliced
        (None, (0x2321, 0x2339, 0x233A)),
    ],
)
def test_without_the_agent_a_gpus_pci_ids_come_from_its_product(
    product: str | None, pci_ids: tuple[int, ...]
) -> None:
    model = CATALOG.by_product(product or "NVIDIA-H100-NVL")
    assert model is not None
    assert gpu_pci_ids(model, product, None) == pci_ids
    assert gpu_pci_ids(model, product, 0x2339) == (0x2339,)


def test_a_product_with_several_ids_has_an_answer_where_the_config_treats_them_alike() -> None:
    model = CATALOG.get("A100-40GB")
    result = per_gpu_counts(
        "all-balanced", model, 1, configs=DEFAULT, pci_device_ids=(0x20B1, 0x20F1)
    )
    assert result == [(True, BALANCED_40)]


def test_ids_the_config_treats_differently_make_the_answer_unknown_and_say_why() -> None:
    model = CATALOG.get("H100-94GB")
    result = per_gpu_counts(
        "all-balanced", model, 1, configs=DEFAULT, pci_device_ids=model.pci_device_ids
    )
    assert isinstance(result, WhyNot)
    assert "could have PCI device id 0x2321, 0x2339, 0x233A" in result.message
    assert "0x2339: no entry, left as is" in result.message


@pytest.mark.parametrize(
    ("product", "source"),
    [("NVIDIA-A100-SXM4-40GB", LayoutSource.MIG_PARTED), ("NVIDIA-A800-SXM4-40GB", None)],
)
def test_the_inventory_predicts_no_layout_for_a_gpu_mig_manager_leaves_untouched(
    product: str, source: LayoutSource | None
) -> None:
    raw = make_node("n1", product=product, gpu_count=1, mig=BALANCED_40, config="all-balanced")
    state = resolve_node(node_facts_from_raw(raw), (), DEFAULT)
    if source is not None:
        assert state.source is source
    else:
        assert state.source is LayoutSource.COUNTS
        assert "no entry selects GPU 0 (PCI device id 0x20BD)" in state.notes[0]


# -- MIG Manager's generated names -------------------------------------------------------------

# Where the generated config sets a GPU that the shipped default config's filters leave out.
GENERATED_ONLY = [
    ("A100-40GB", 0x20BD, "all-1g.10gb"),
    ("A100-40GB", 0x20BD, "all-balanced"),
    ("H100-94GB", 0x2339, "all-balanced"),
    ("H200-141GB", 0x233B, "all-1g.35gb"),
    ("RTX-PRO-6000", 0x2BB1, "all-balanced"),
    ("RTX-PRO-6000", 0x2BB4, "all-balanced"),
]


# Where the shipped default config sets a GPU with more than it holds: it has no RTX PRO 5000
# block, and its `devices: all` entries for the RTX PRO 6000 ask for 4 x 1g / 2 x 2g, so MIG
# Manager fails on a 5000 (at most 2 instances) where the generated names give its maximum.
SHIPPED_TOO_MANY = [
    ("RTX-PRO-5000", 0x2BB3, "all-1g.24gb"),
    ("RTX-PRO-5000", 0x2BB3, "all-1g.24gb-me"),
    ("RTX-PRO-5000", 0x2BB3, "all-1g.24gb.gfx"),
    ("RTX-PRO-5000", 0x2BB3, "all-2g.48gb"),
    ("RTX-PRO-5000", 0x2BB3, "all-2g.48gb.gfx"),
]


# Generated names the shipped default config lacks altogether: it has no RTX PRO 4500 block and
# no config of its profiles, so only the config MIG Manager generates from the hardware (its
# default) has them; per_gpu_counts takes builtin_counts for a name the file lacks.
GENERATED_NOT_SHIPPED = [
    ("RTX-PRO-4500", 0x2C31, "all-1g.16gb"),
    ("RTX-PRO-4500", 0x2C31, "all-1g.16gb-me"),
    ("RTX-PRO-4500", 0x2C31, "all-1g.16gb.gfx"),
    ("RTX-PRO-4500", 0x2C31, "all-1g.16gb.me.all"),
    ("RTX-PRO-4500", 0x2C31, "all-2g.32gb"),
    ("RTX-PRO-4500", 0x2C31, "all-2g.32gb.gfx"),
]


def test_generated_names_agree_with_the_shipped_default_config_where_it_sets_the_gpu() -> None:
    differences = []
    too_many = []
    not_shipped = []
    for model in CATALOG.models:
        generated = {"all-disabled", "all-enabled", "all-balanced"}
        generated |= {"all-" + p.name.replace("+", ".") for p in model.profiles}
        for pci in model.pci_device_ids:
            for name in sorted(generated | set(DEFAULT)):
                ours = builtin_counts(name, model)
                shipped: object = "absent"
                if name in DEFAULT:
                    (setting,) = resolve_gpus(DEFAULT[name], [(pci,)])
                    profiles = {
                        parse_mig_device_name(d).gpu_instance for d, _ in setting.mig_devices
                    }
                    shipped = setting.outcome
                    if setting.outcome is Outcome.SET and all(map(model.has_profile, profiles)):
                        shipped = (setting.mig_enabled, dict(setting.mig_devices))
                if ours != shipped and (ours is not None or isinstance(shipped, tuple)):
                    if shipped == "absent":
                        not_shipped.append((model.key, pci, name))
                        continue
                    if isinstance(shipped, tuple) and isinstance(
                        applied_instances(model, shipped[1]), str
                    ):
                        too_many.append((model.key, pci, name))
                        continue
                    assert shipped is Outcome.UNTOUCHED, (model.key, name, shipped, ours)
                    differences.append((model.key, pci, name))
    assert differences == GENERATED_ONLY
    assert too_many == SHIPPED_TOO_MANY
    assert not_shipped == GENERATED_NOT_SHIPPED


def test_generated_all_balanced_takes_the_plain_profile_with_most_instances_per_size() -> None:
    assert builtin_counts("all-balanced", CATALOG.get("A100-80GB")) == (
        True,
        {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    )
    assert builtin_counts("all-balanced", CATALOG.get("A30")) == (True, {"1g.6gb": 2, "2g.12gb": 1})
    assert builtin_counts("all-1g.24gb-me", CATALOG.get("RTX-PRO-6000")) == (
        True,
        {"1g.24gb-me": 4},
    )
    assert builtin_counts("all-1c.3g.40gb", CATALOG.get("A100-80GB")) is None
    assert builtin_counts("balanced", CATALOG.get("A100-80GB")) is None


# -- MIG device names: compute instances and attributes ----------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "canonical", "resource"),
    [
        ("1c.3g.20gb", MigDeviceName(1, 3, 20), "1c.3g.20gb", None),
        ("3c.3g.20gb", MigDeviceName(3, 3, 20), "3g.20gb", "nvidia.com/mig-3g.20gb"),
        (
            "1g.24gb+gfx",
            MigDeviceName(1, 1, 24, ("gfx",)),
            "1g.24gb+gfx",
            "nvidia.com/mig-1g.24gb.gfx",
        ),
        ("1g.24gb+me.all", MigDeviceName(1, 1, 24, ("me.all",)), "1g.24gb+me.all", None),
        (
            "1g.24gb-me",
            MigDeviceName(1, 1, 24, (), ("me",)),
            "1g.24gb-me",
            "nvidia.com/mig-1g.24gb-me",
        ),
        ("1c.2g.48gb+gfx", MigDeviceName(1, 2, 48, ("gfx",)), "1c.2g.48gb+gfx", None),
        ("1g.5gb+me,gfx", MigDeviceName(1, 1, 5, ("gfx", "me")), "1g.5gb+gfx,me", None),
        ("01g.010gb", MigDeviceName(1, 1, 10), "1g.10gb", "nvidia.com/mig-1g.10gb"),
    ],
)
def test_a_mig_device_name_says_its_gpu_instance_and_the_resource_it_yields(
    text: str, name: MigDeviceName, canonical: str, resource: str | None
) -> None:
    parsed = parse_mig_device_name(text)
    assert parsed == name
    assert str(parsed) == canonical
    if resource is not None or parsed.is_compute_instance:
        assert parsed.resource == resource


def test_every_catalog_profile_yields_the_resource_migslice_requests() -> None:
    for model in CATALOG.models:
        for profile in model.profiles:
            assert parse_mig_device_name(profile.name).resource == profile.resource_name


@pytest.mark.parametrize(
    ("mig_devices", "expected"),
    [
        ({"1c.3g.20gb": 4}, [("3g.20gb", ("1c.3g.20gb",) * 3), ("3g.20gb", ("1c.3g.20gb",))]),
        (
            {"3g.20gb": 1, "1c.3g.20gb": 1},
            [("3g.20gb", ("3g.20gb",)), ("3g.20gb", ("1c.3g.20gb",))],
        ),
        ({"2c.3g.20gb": 1, "1c.3g.20gb": 1}, [("3g.20gb", ("2c.3g.20gb", "1c.3g.20gb"))]),
        ({"1c.7g.40gb": 7}, [("7g.40gb", ("1c.7g.40gb",) * 7)]),
        ({"3c.3g.20gb": 1}, [("3g.20gb", ("3g.20gb",))]),
        (
            {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
            [("3g.20gb", ("3g.20gb",)), ("2g.10gb", ("2g.10gb",))] + [("1g.5gb", ("1g.5gb",))] * 2,
        ),
    ],
)
def test_mig_parted_puts_compute_instances_into_the_gpu_instance_it_just_made(
    mig_devices: dict[str, int], expected: list[tuple[str, tuple[str, ...]]]
) -> None:
    assert [(i.profile, i.compute) for i in gpu_instances(mig_devices)] == expected


def cis(order: tuple[MigDeviceName, ...]) -> str:
    return ",".join(str(name).split(".")[0] for name in order)


def test_mig_parted_tries_each_distinct_order_once_in_its_own_sequence() -> None:
    """NVIDIA/mig-parted@bd7160f4 pkg/mig/config/config.go:255-293, its permutation walk."""
    orders = [cis(o) for o in creation_orders({"1c.3g.20gb": 2, "2c.3g.20gb": 2})]
    assert orders == [
        "2c,2c,1c,1c",
        "2c,1c,2c,1c",
        "2c,1c,1c,2c",
        "1c,2c,2c,1c",
        "1c,2c,1c,2c",
        "1c,1c,2c,2c",
    ]


@pytest.mark.parametrize(
    "mig_devices",
    [
        {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
        {"1c.3g.20gb": 2, "2c.3g.20gb": 2, "1g.5gb": 1},
        {"1g.5gb": 7},
        {"1c.7g.40gb": 3, "2c.7g.40gb": 2},
    ],
)
def test_the_number_of_orders_tried_is_the_multinomial_as_mig_parted_asserts(
    mig_devices: dict[str, int],
) -> None:
    """pkg/mig/config/config_test.go:211-278 (TestIteratePermutationsUntilSuccess)."""
    orders = list(creation_orders(mig_devices))
    expected = math.factorial(sum(mig_devices.values()))
    for count in mig_devices.values():
        expected //= math.factorial(count)
    assert len(orders) == len(set(orders)) == expected


A100_40GB_APPLIED = [
    (
        {"1c.3g.20gb": 2, "2c.3g.20gb": 2},
        [("3g.20gb", ("2c.3g.20gb", "1c.3g.20gb"))] * 2,  # order 2: 2c,1c,2c,1c
    ),
    ({"1c.3g.20gb": 4}, [("3g.20gb", ("1c.3g.20gb",) * 3), ("3g.20gb", ("1c.3g.20gb",))]),
    ({"2c.3g.20gb": 1, "1c.3g.20gb": 1}, [("3g.20gb", ("2c.3g.20gb", "1c.3g.20gb"))]),
    (
        {"1c.2g.10gb": 3, "2g.10gb": 1},
        [("2g.10gb", ("2g.10gb",)), ("2g.10gb", ("1c.2g.10gb",) * 2), ("2g.10gb", ("1c.2g.10gb",))],
    ),
    ({"2c.3g.20gb": 3}, "3 x 3g.20gb exceed the maximum of 2 per GPU on A100-40GB (in the one"),
    (
        {"1c.3g.20gb": 2, "2c.3g.20gb": 2, "1g.5gb": 1},
        "(in the first of the 30 orders mig-parted tries; none fits)",
    ),
    ({"1c.3g.20gb": 8}, "need 8 compute slices of 7, so no order mig-parted tries fits"),
    ({"3c.4g.20gb": 1}, "3-slice compute instance in a 4-slice GPU instance"),
    ({"1g.6gb": 1}, "A100-40GB has no MIG profile 1g.6gb"),
]


@pytest.mark.parametrize(
    ("mig_devices", "expected"),
    A100_40GB_APPLIED,
    ids=[",".join(f"{n}x{d}" for d, n in devices.items()) for devices, _ in A100_40GB_APPLIED],
)
def test_an_entry_applies_when_any_order_mig_parted_tries_fits_the_gpu(
    mig_devices: dict[str, int], expected: list[tuple[str, tuple[str, ...]]] | str
) -> None:
    """{1c.3g.20gb: 2, 2c.3g.20gb: 2} was refused: the first order makes three 3g.20gb."""
    made = applied_instances(CATALOG.get("A100-40GB"), mig_devices)
    if isinstance(expected, str):
        assert isinstance(made, str) and expected in made, made
    else:
        assert not isinstance(made, str), made
        assert [(i.profile, i.compute) for i in made] == expected


def test_an_entry_mig_parted_applies_on_its_second_order_is_not_refused_before_the_last() -> None:
    entries = (
        entry(mig_enabled=True, mig_devices={"1c.3g.20gb": 2, "2c.3g.20gb": 2}),
        entry(mig_enabled=True, mig_devices={"3g.20gb": 2}),
    )
    result = per_gpu_counts("two", CATALOG.get("A100-40GB"), 1, configs={"two": entries})
    assert result == [(True, {"3g.20gb": 2})]


def test_a_compute_size_the_gpu_instance_lacks_fails() -> None:
    with pytest.raises(MigPartedError, match="3-slice compute instance in a 4-slice GPU instance"):
        gpu_instances({"3c.4g.20gb": 1})


def test_a_config_with_compute_instances_yields_no_resources_and_says_why() -> None:
    entries = (entry(mig_enabled=True, mig_devices={"1c.3g.20gb": 4}),)
    result = per_gpu_counts("ci", CATALOG.get("A100-40GB"), 1, configs={"ci": entries})
    assert isinstance(result, WhyNot)
    assert "3g.20gb holding 1c.3g.20gb, 1c.3g.20gb, 1c.3g.20gb" in result.message
    assert "device plugin's mixed strategy advertises no resource" in result.message


def test_a_full_compute_instance_counts_as_its_gpu_instance() -> None:
    entries = (entry(mig_enabled=True, mig_devices={"3c.3g.20gb": 1, "3g.20gb": 1}),)
    result = per_gpu_counts("full", CATALOG.get("A100-40GB"), 1, configs={"full": entries})
    assert result == [(True, {"3g.20gb": 2})]


@given(
    st.lists(
        st.builds(Placed, st.integers(0, 7), st.sampled_from(PROFILE_NAMES), st.integers(1, 8)),
        max_size=8,
    )
)
def test_profile_counts_count_each_profile_sorted_by_name(layout: list[Placed]) -> None:
    assert profile_counts(layout) == tuple(sorted(Counter(p.profile for p in layout).items()))


def test_a_config_whose_aliases_expand_past_any_config_is_refused_at_once() -> None:
    """As go-yaml refuses "excessive aliasing": nested aliases in the mig-parted ConfigMap
    would otherwise expand to billions of values in the extender's and webhook's reader."""
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = "version: v1\nmig-configs: {}\n" + "\n".join(laughs) + "\n"
    with pytest.raises(goyaml.GoYamlError, match="YAML aliases expand it to 1,234,567,9"):
        goyaml.load(text, "mig-parted config")
    assert goyaml.load("a: &x [1, 2]\nb: *x\n", "small") == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "version: v1\x07\nmig-configs: {}\n",
            "mig-parted config is not YAML: unacceptable character #x0007",
        ),
        (
            "version: v1\nmig-configs: " + "[" * 3000 + "]" * 3000 + "\n",
            "mig-parted config nests too deep",
        ),
        (
            "version: v1\nx: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
            "mig-parted config nests too deep",
        ),
    ],
    ids=["control-character", "deep-list", "deep-map"],
)
def test_a_config_yaml_cannot_read_is_refused_in_one_line(text: str, error: str) -> None:
    """Each raised past every reader (yaml.reader.ReaderError, RecursionError): a traceback
    from migslice status, why and plan over a cluster file whose ConfigMap held it."""
    with pytest.raises(goyaml.GoYamlError, match=re.escape(error)) as raised:
        goyaml.load(text, "mig-parted config")
    assert "\n" not in str(raised.value)
