"""Settings of the node agent: one typed value, validated here, built by ``command``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from migslice.console import CommandError


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``node_name``: this node (the downward API's ``spec.nodeName``). ``interval_s``: seconds
    between NVML reads; ``heartbeat_s``: an unchanged layout is rewritten this often."""

    node_name: str
    kubeconfig: str | None = None
    interval_s: float = 30.0
    heartbeat_s: float = 300.0
    once: bool = False
    log_level: str = "info"

    def __post_init__(self) -> None:
        for flag, value in (("--interval-s", self.interval_s), ("--heartbeat-s", self.heartbeat_s)):
            if not math.isfinite(value) or value <= 0:
                raise CommandError(f"{flag} {value}: must be a finite number > 0")
        if not self.node_name:
            raise CommandError("--node-name is empty; pass the node's name (spec.nodeName)")
