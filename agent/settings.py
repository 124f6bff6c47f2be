"""Settings of the node agent: one typed value, validated here, built by ``command``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from migslice import names
from migslice.console import CommandError


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``node_name``: this node (the downward API's ``spec.nodeName``). ``interval_s``: seconds
    between NVML reads; ``heartbeat_s``: an unchanged layout is rewritten this often.

    ``carve``: carve when the repartition controller asks (``migslice.io/carve``), reading the
    Node every ``carve_interval_s``; after a carve the device plugin pods on the node (in
    ``device_plugin_namespace``, matching ``device_plugin_selector``) are restarted and the
    agent waits up to ``device_plugin_timeout_s`` for the node's allocatable to show the new
    devices."""

    node_name: str
    kubeconfig: str | None = None
    interval_s: float = 30.0
    heartbeat_s: float = 300.0
    once: bool = False
    log_level: str = "info"
    log_format: str = "text"
    carve: bool = False
    carve_interval_s: float = 5.0
    device_plugin_namespace: str = names.GPU_OPERATOR_NAMESPACE
    device_plugin_selector: str = names.DEVICE_PLUGIN_SELECTOR
    device_plugin_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for flag, value in (
            ("--interval-s", self.interval_s),
            ("--heartbeat-s", self.heartbeat_s),
            ("--carve-interval-s", self.carve_interval_s),
            ("--device-plugin-timeout-s", self.device_plugin_timeout_s),
        ):
            if not math.isfinite(value) or value <= 0:
                raise CommandError(f"{flag} {value}: must be a finite number > 0")
        if not self.node_name:
            raise CommandError("--node-name is empty; pass the node's name (spec.nodeName)")
