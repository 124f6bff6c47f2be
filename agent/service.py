"""The node agent's loop and passes: publish the layout (always), and carve when asked
(``--carve``), until SIGTERM.

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
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.publisher import Publisher
from agent.readings import GpuReading
from agent.settings import AgentSettings
from migslice import console
from migslice.console import CommandError
from migslice.kube.nodes import KubeNodeStore
from migslice.kube.transport import ApiError, KubernetesTransport
from migslice.names import CARVE_STATE_ANNOTATION, MODE_MIG_MANAGER
from migslice.objects.nodes import NodeFacts, node_facts_from_raw

log = logging.getLogger(__name__)


def wants_carving(facts: NodeFacts) -> bool:
    """Whether this node's agent has carving to do: its own journal is open (or cannot be
    read), or a request it has not answered (or cannot read: the carver says so) waits on a
    node not in mig-manager mode."""
    status = facts.carve_status
    if status is not None and status.phase.is_open:
        return True
    if any(problem.startswith(CARVE_STATE_ANNOTATION) for problem in facts.problems):
        return True
    asked = facts.is_carving or bool(facts.unread_carve_request())
    return asked and facts.repartition_mode != MODE_MIG_MANAGER


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
        # A carve this process has open is finished or rolled back even when the Node lost
        # its journal (deleted and made again mid-carve): the carver writes it back.
        open_here = self._carver is not None and bool(self._carver.carving)
        if not open_here and not wants_carving(facts):
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
            from agent.carve.nvml_writes import NvmlMig, mig_session
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
                session=mig_session,
                publish=self._publish,
                now=self.now,
                sleep=self.sleep,
                advertise_timeout_s=settings.device_plugin_timeout_s,
                node_name=settings.node_name,
            )
        return self._carver


def serve_agent(settings: AgentSettings) -> int:
    """Publish the node's MIG state every ``interval_s`` until SIGTERM (or once); with
    ``--carve``, look for a carve request every ``carve_interval_s`` too."""
    from agent.nvml import nvml_session, read_gpus

    console.setup_logging(settings.log_level, settings.log_format)
    try:
        transport = KubernetesTransport.from_environment(settings.kubeconfig)
    except Exception as error:  # the kubernetes client raises several config errors
        raise CommandError(f"cannot configure access to the API server: {error}") from None

    def read() -> tuple[GpuReading, ...]:
        with nvml_session():
            return read_gpus()

    publisher = Publisher(
        node_name=settings.node_name,
        store=KubeNodeStore(transport),
        read=read,
        now=_now,
        heartbeat_s=settings.heartbeat_s,
    )
    service = AgentService(settings, transport, publisher, _now)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    delay, due = settings.interval_s, 0.0
    while True:
        if time.monotonic() >= due:
            delay = _publish_pass(settings, publisher, delay)
            due = time.monotonic() + delay
        if settings.carve:
            _carve_pass(settings, service)
        if settings.once:
            return 0
        wait = min(due - time.monotonic(), settings.carve_interval_s) if settings.carve else delay
        if stop.wait(max(wait, 0.1)):
            return 0


def _publish_pass(settings: AgentSettings, publisher: Publisher, delay: float) -> float:
    """One publish pass; the delay until the next one (longer after API errors)."""
    from agent.nvml import NvmlUnavailableError

    try:
        written, _ = publisher.publish_once()
        log.debug("agent pass node=%s written=%s", settings.node_name, written)
        return settings.interval_s
    except NvmlUnavailableError as error:
        if settings.once:
            raise CommandError(str(error)) from None
        log.error(
            "NVML unavailable node=%s: %s; retrying in %.0fs", settings.node_name, error, delay
        )
        return delay
    except ApiError as error:
        if settings.once:
            raise CommandError(f"cannot publish on node {settings.node_name}: {error}") from None
        delay = min(delay * 2, 300.0)
        log.error("publish failed node=%s: %s; retrying in %.0fs", settings.node_name, error, delay)
        return delay


def _carve_pass(settings: AgentSettings, service: AgentService) -> None:
    """One carve pass; a failure is logged and the journal on the Node resumes it later."""
    try:
        service.carve_pass()
    except Exception as error:  # the loop outlives any one pass; the journal knows the rest
        if settings.once:
            raise CommandError(f"carve pass on node {settings.node_name}: {error}") from None
        log.error(
            "carve pass failed node=%s: %s; retrying in %.0fs",
            settings.node_name,
            error,
            settings.carve_interval_s,
            exc_info=not isinstance(error, ApiError),  # a traceback: our own error
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
