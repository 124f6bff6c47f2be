"""The MIG Manager test actor itself, against the real API server."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from harness.api import ensure_namespace, wait_for
from harness.migmanager import CONFIG_LABEL, STATE_LABEL, FakeMigManager
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted

pytestmark = pytest.mark.e2e


def test_the_actor_applies_a_mig_parted_config_to_a_fake_node(
    k8s_api: k8s.ApiClient, core_v1: k8s.CoreV1Api, gpu_node: Callable[..., k8s.V1Node]
) -> None:
    model = CATALOG.get("A100-80GB")
    layout = [place(model, "3g.40gb", 4), place(model, "2g.20gb", 0), place(model, "1g.10gb", 2)]
    text = render_mig_parted({"balanced": mig_parted_entries(model, {0: layout, 1: layout})})
    ensure_namespace(core_v1, "gpu-operator")
    core_v1.create_namespaced_config_map(
        "gpu-operator",
        {"metadata": {"name": "migslice-mig-config"}, "data": {"config.yaml": text}},
    )
    try:
        node = gpu_node(
            {"nvidia.com/mig-1g.10gb": 14},
            labels={"nvidia.com/gpu.count": "2"},
        )
        name = node.metadata.name
        with FakeMigManager(k8s_api):
            core_v1.patch_node(name, {"metadata": {"labels": {CONFIG_LABEL: "balanced"}}})
            wait_for(
                "state success",
                lambda: core_v1.read_node(name).metadata.labels.get(STATE_LABEL) == "success",
            )
            allocatable = core_v1.read_node(name).status.allocatable
            assert allocatable["nvidia.com/mig-3g.40gb"] == "2"
            assert allocatable["nvidia.com/mig-2g.20gb"] == "2"
            assert allocatable["nvidia.com/mig-1g.10gb"] == "2"

            core_v1.patch_node(name, {"metadata": {"labels": {CONFIG_LABEL: "missing"}}})
            wait_for(
                "state failed",
                lambda: core_v1.read_node(name).metadata.labels.get(STATE_LABEL) == "failed",
            )
    finally:
        core_v1.delete_namespaced_config_map("migslice-mig-config", "gpu-operator")
