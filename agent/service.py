"""The node agent's passes: publish the layout (always), and carve when asked (``--carve``).

The carve gate reads the Node and looks only at its carve annotations; the carve code path
(the package :mod:`agent.carve`, and :mod:`migslice.kube.carve_node`) is imported the first
time a carve is wanted here, so an agent on a node that is never asked (any node not
in carve mode: the controller asks carve-mode nodes only) runs read-only code alone. A
request on a node labelled ``migslice.io/repartition-mode=mig-manager`` is ignored (logged
once): MIG Manager owns that node. A carve the agent itself journalled as under way is
always finished or rolled back, whatever the label says now.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.publisher import Publisher
from agent.settings import AgentSettings
from migslice.kube.transport import KubernetesTransport
from migslice.names import MODE_MIG_MANAGER
from migslice.objects.nodes import NodeFacts, node_facts_from_raw

log = logging.getLogger(__name__)


def wants_carving(facts: NodeFacts) -> bool:
    """Whether this node's agent has carving to do: its own journal is open, or a request
    it has not answered waits on a node not in mig-manager mode."""
    status = facts.carve_status
    if status is not None and status.phase.is_open:
        return True
    return facts.is_carving and facts.repartition_mode != MODE_MIG_MANAGER


@dataclass
class AgentService:
    settings: AgentSettings
    transport: KubernetesTransport
    publisher: Publisher
    now: Callable[[], datetime.datetime]
    sleep: Callable[[float], None] = time.sleep
    _carver: Any = None
    _ignored: set[str] = field(default_factory=set)

    def carve_pass(self) -> str | None:
        """One look at the Node; what a carve did, None when there was nothing to carve."""
        raw = self.transport.get_json(f"/api/v1/nodes/{self.settings.node_name}", {})
        facts = node_facts_from_raw(raw)
        if not wants_carving(facts):
            request = facts.carve_request
            if request is not None and facts.is_carving and request.plan_id not in self._ignored:
                self._ignored.add(request.plan_id)
                log.warning(
                    "carve request plan=%s ignored: node=%s is in mig-manager mode",
                    request.plan_id,
                    self.settings.node_name,
                )
            return None
        said = str(self._load().run_once())
        log.info("carve pass node=%s: %s", self.settings.node_name, said)
        return said

    def _publish(self) -> None:
        self.publisher.publish_once()

    def _load(self) -> Any:
        if self._carver is None:
            from agent.carve.carver import Carver
            from agent.carve.nvml_writes import NvmlMig
            from agent.nvml import nvml_session
            from migslice.kube.carve_node import KubeCarveNode

            settings = self.settings
            self._carver = Carver(
                node=KubeCarveNode(
                    self.transport,
                    settings.node_name,
                    device_plugin_namespace=settings.device_plugin_namespace,
                    device_plugin_selector=settings.device_plugin_selector,
                ),
                driver=NvmlMig(),
                session=nvml_session,
                publish=self._publish,
                now=self.now,
                sleep=self.sleep,
                advertise_timeout_s=settings.device_plugin_timeout_s,
            )
        return self._carver
