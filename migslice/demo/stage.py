"""The demo's stage: the bundled cluster file the servers read, kept as the demo's stand-in
API server writes it, and what the demo plays with."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from migslice.console import CommandError
from migslice.inventory import NodeState
from migslice.names import MIG_CONFIG_KEY, MIG_CONFIG_MAP, MIG_RESOURCE_PREFIX
from migslice.objects import load_cluster_text
from migslice.repartition import ControllerSettings, PlanSettings, node_states, read_config_map

MIG_PREFIX = MIG_RESOURCE_PREFIX
MAX_STEPS = 6
# The demo does not wait: a pod counts as pending demand as soon as it is unschedulable.
# The demo plays MIG Manager and reads the ConfigMap itself: no copy of it to wait for.
CONTROLLER_SETTINGS = ControllerSettings(
    plan=PlanSettings(min_pending_s=0.0), config_propagation_s=0.0
)
NAMESPACE = "migslice-system"


def bundled_cluster() -> str:
    return resources.files("migslice.demo").joinpath("cluster.yaml").read_text()


class DemoError(CommandError):
    """The demo could not run (a server did not start); the message says which and why."""


# --------------------------------------------------------------------------- the servers


# --------------------------------------------------------------------------- the cluster


class Cluster:
    """The objects the demo's stand-in API server holds, kept in the served cluster file."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.objects = [d for d in yaml.safe_load_all(text) if d]
        self.write()

    def write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(yaml.safe_dump_all(self.objects, sort_keys=False))
        temporary.replace(self.path)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.of_kind("Node") if n["metadata"]["name"] == name)

    def mig_config_map(self) -> dict[str, Any]:
        return next(c for c in self.of_kind("ConfigMap") if c["metadata"]["name"] == MIG_CONFIG_MAP)

    def states(self) -> tuple[NodeState, ...]:
        objects = load_cluster_text(self.path.read_text())
        configs = read_config_map(self.mig_config_map(), MIG_CONFIG_KEY).configs
        return node_states(objects.nodes, objects.pods, configs)
