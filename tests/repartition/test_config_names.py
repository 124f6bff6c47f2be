"""The planner's config names are label values the API server accepts (nvidia.com/mig.config)."""

from __future__ import annotations

import re

import pytest

from migslice.mig import CATALOG, place
from migslice.repartition import GpuChange, config_name

LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
"""Kubernetes' label value syntax (apimachinery validation.IsValidLabelValue): <= 63."""

MODEL = CATALOG.get("A100-80GB")


def change(index: int) -> GpuChange:
    """GPU ``index`` becoming two 3g.40gb."""
    return GpuChange(index, (), (place(MODEL, "3g.40gb", 0), place(MODEL, "3g.40gb", 4)))


@pytest.mark.parametrize(
    "node",
    [
        "gpu-a",
        "ip-10-0-123-45.us-west-2.compute.internal",
        "gke-ml-prod-cluster-a100-mig-pool-1a2b3c4d-x7yz",
        "a" * 63,
        "node." * 50 + "x",
    ],
    ids=["short", "eks", "gke-47", "63", "253"],
)
def test_every_config_name_is_a_label_value(node: str) -> None:
    """A name over 63 characters was refused by the API server (422) on every label patch,
    until the deadline quarantined the node."""
    name = config_name(node, [change(0)])
    assert LABEL_VALUE.fullmatch(name), name
    assert name.startswith("migslice-")


def test_short_names_are_unchanged_and_long_ones_differ_per_node() -> None:
    """Names already written (records, mig-parted files) keep their form; two long node names
    alike in their first characters never share a config (another model's entries)."""
    gpus = [change(0)]
    assert re.fullmatch(r"migslice-gpu-a-[0-9a-f]{8}", config_name("gpu-a", gpus))
    prefix = "gke-ml-prod-cluster-a100-mig-pool-1a2b3c4d-"
    one, two = config_name(prefix + "x7yz", gpus), config_name(prefix + "q9rw", gpus)
    assert one != two
    assert config_name(prefix + "x7yz", gpus) == one  # a content name: the same plan, the same
