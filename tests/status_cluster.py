"""A representative cluster for ``migslice status`` and ``migslice why``: two GPU pools and a
CPU node, a tenant at its quota, a waiting pod for each reason the extender gives (all
instances in use, a model without the profile, a node being re-partitioned, a quarantined
node, kube-scheduler's own node selection), a plan in flight in the repartition record, a
node cooling down, and a TenantPolicy whose ``status.used`` lags behind its pods."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.builders import (
    make_mig_config_map,
    make_namespace,
    make_node,
    make_pod,
    make_policy,
    unschedulable,
)
from migslice.cli import main

NOW = "2025-06-15T15:10:00Z"
NOW_S = 1750000200.0  # 2025-06-15T15:10:00Z
MIG_CONFIGS = """version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  all-1g.6gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.6gb": 4}
"""

RECORD = {
    "version": "v1",
    "plan": {
        "id": "9c1e0f4a2b7d",
        "createdAt": "2025-06-15T15:01:00Z",
        "appliedAt": "2025-06-15T15:01:01Z",
        "nodes": [
            {
                "node": "a100-2",
                "config": "migslice-a100-2-1a2b3c4d",
                "previousConfig": "all-1g.10gb",
                "gpus": [0],
                "serves": ["team-b/wait-plan"],
                "entries": [
                    {
                        "devices": [0],
                        "mig-enabled": True,
                        "mig-devices": {"3g.40gb": 2},
                    }
                ],
                "outcome": "",
                "detail": "",
                "appliedAt": "2025-06-15T15:01:01Z",
            }
        ],
    },
    "finished": {"a100-1": "2025-06-15T15:05:00Z"},
    "backoff": {},
    "quarantine": {
        "a100-q": {
            "since": "2025-06-15T14:40:00Z",
            "config": "migslice-a100-q-9f8e7d6c",
            "detail": "state pending after 601s; deadline 600s",
        }
    },
}


def representative_cluster() -> list[dict[str, Any]]:
    """The objects (see the module docstring), as a cluster file holds them."""
    objects: list[dict[str, Any]] = [
        make_mig_config_map(
            MIG_CONFIGS, annotations={"migslice.io/repartition": json.dumps(RECORD)}
        ),
        make_node(
            "a100-0",
            gpu_count=1,
            mig={"3g.40gb": 2},
            config="all-3g.40gb",
            config_state="success",
        ),
        make_node(
            "a100-1",
            gpu_count=2,
            mig={"1g.10gb": 14},
            config="all-1g.10gb",
            config_state="success",
        ),
        make_node(
            "a100-2",
            gpu_count=1,
            mig={"1g.10gb": 7},
            config="migslice-a100-2-1a2b3c4d",
            config_state="pending",
        ),
        make_node(
            "a100-q",
            gpu_count=1,
            mig={"1g.10gb": 7},
            config="all-1g.10gb",
            config_state="pending",
            extra_labels={"migslice.io/repartition-quarantine": "timeout"},
        ),
        make_node(
            "a30-0",
            product="NVIDIA-A30",
            gpu_count=2,
            mig={"1g.6gb": 8},
            config="all-1g.6gb",
            config_state="success",
        ),
        _tainted(
            make_node(
                "h100-0",
                product="NVIDIA-H100-80GB-HBM3",
                gpu_count=1,
                mig={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
                config="all-balanced",
                config_state="success",
                extra_labels={"pool": "reserved"},
            )
        ),
        make_node("cpu-0", product=None, gpu_count=None, mig_capable=None, strategy=None),
        make_namespace("team-a"),
        make_namespace("team-b"),
        make_namespace("team-c"),
        _with_status(
            make_policy("team-a", quota={"computeSlices": 9}),
            {"instances": 2, "computeSlices": 6, "memorySlices": 8, "profiles": {"3g.40gb": 2}},
        ),
        make_policy("team-b", namespaces=["team-b"], quota={"profiles": {"1g.10gb": 8}}),
        make_policy("team-c", namespaces=["team-c"], nodeSelector={"pool": "reserved"}),
    ]
    # team-a: three 3g.40gb pods, two bound and one waiting, at its quota of 9 compute slices.
    for index in range(2):
        objects.append(make_pod(f"train-{index}", profile="3g.40gb", node_name="a100-0"))
    objects.append(unschedulable(make_pod("train-2", profile="3g.40gb"), "2025-06-15T15:00:00Z"))
    # team-b: five 1g.10gb pods on a100-1 and two on the A30s' neighbour; one waits for the
    # plan in flight.
    for index in range(5):
        objects.append(
            make_pod(f"serve-{index}", namespace="team-b", profile="1g.10gb", node_name="a100-1")
        )
    objects.append(
        unschedulable(
            make_pod("wait-plan", namespace="team-b", profile="3g.40gb"), "2025-06-15T15:00:30Z"
        )
    )
    objects.append(make_pod("serve-h", namespace="team-b", profile="2g.20gb", node_name="h100-0"))
    # team-c: a 7g.80gb pod that only the reserved pool may take (its policy's nodeSelector).
    objects.append(
        unschedulable(
            _tolerating(
                make_pod(
                    "big", namespace="team-c", profile="7g.80gb", node_selector={"pool": "reserved"}
                )
            ),
            "2025-06-15T14:50:00Z",
        )
    )
    # A pod that asks for no GPU, and one kube-scheduler has not tried yet.
    objects.append(make_pod("web", namespace="team-c", node_name="cpu-0", phase="Running"))
    objects.append(make_pod("fresh", namespace="team-b", profile="1g.10gb"))
    for raw in objects:
        if "kind" not in raw:
            raw["kind"] = "Pod" if "containers" in raw.get("spec", {}) else "Node"
            raw["apiVersion"] = "v1"
    return objects


def _tainted(node: dict[str, Any]) -> dict[str, Any]:
    node["spec"]["taints"] = [{"key": "dedicated", "value": "team-c", "effect": "NoSchedule"}]
    return node


def _tolerating(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "team-c", "effect": "NoSchedule"}
    ]
    return pod


def _with_status(policy: dict[str, Any], used: dict[str, Any]) -> dict[str, Any]:
    policy["status"] = {"observedGeneration": 1, "used": used}
    return policy


def write_cluster_file(path: Path, objects: Iterable[dict[str, Any]]) -> Path:
    """``objects`` written to ``path`` as a cluster file, each without one given apiVersion
    ``v1`` and kind ``Pod`` (it has containers) or ``Node``."""
    listed = list(objects)
    for raw in listed:
        raw.setdefault("apiVersion", "v1")
        raw.setdefault("kind", "Pod" if "containers" in raw.get("spec", {}) else "Node")
    path.write_text(yaml.safe_dump_all(listed))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``migslice <argv>`` prints; it must exit 0."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out
