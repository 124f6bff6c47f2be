"""The carving agent's surroundings for tests: a Node kept in memory (annotations, pods bound
there, the device plugin that re-advertises what the fake driver has when its pod is
restarted, as the kubelet reports it: after ``plugin_lag_s``, with its heartbeat), a clock
that the carver's sleeps move, and a :class:`agent.carve.carver.Carver` wired to the real
NVML code over the fake ``libnvidia-ml``."""

from __future__ import annotations

import copy
import datetime
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agent.carve.carver import Carver
from agent.carve.nvml_writes import NvmlMig, mig_session
from agent.nvml import nvml_session, read_gpus
from agent.publisher import Publisher
from harness.builders import make_node, make_pod
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION
from migslice.objects.carve_handshake import (
    CarveGpu,
    CarveRequest,
    CarveStatus,
    Doomed,
    Slot,
    parse_carve_status,
    render_carve_request,
)
from migslice.objects.times import format_time
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary

A100 = "NVIDIA A100-SXM4-80GB"


def advertised(library: FakeNvmlLibrary) -> dict[str, int]:
    """What the device plugin advertises after a restart: one device per compute instance."""
    counts = Counter(
        "nvidia.com/mig-" + i.profile.replace("+", ".")
        for gpu in library.gpus
        for i in gpu.instances
        if i.with_compute_instance
    )
    return dict(counts)


class Clock:
    """The node's time: the carver's sleeps move it (wall and monotonic alike)."""

    def __init__(self) -> None:
        self.start = datetime.datetime(2026, 6, 15, 15, 0, tzinfo=datetime.UTC)
        self.elapsed_s = 0.0

    def now(self) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=self.elapsed_s)

    def monotonic(self) -> float:
        return self.elapsed_s

    def sleep(self, seconds: float) -> None:
        self.elapsed_s += seconds


class MemoryNode:
    """One Node as the agent's ports see it (``CarveNode`` and the publisher's ``NodeStore``).

    A device plugin restart replaces its pod at once (Ready now); the kubelet reports the new
    plugin's devices ``plugin_lag_s`` later (1 s: its registration; read on the node's next
    read from then on), with a new heartbeat; until then allocatable shows what it showed
    before the restart."""

    def __init__(self, library: FakeNvmlLibrary, name: str = "gpu-a") -> None:
        self.name = name
        self.library = library
        self.clock = Clock()
        self.raw: dict[str, Any] = make_node(name, gpu_count=len(library.gpus), mig={})
        self.raw["metadata"]["annotations"] = {}
        self.pods: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.restarts = 0
        self.plugin_works = True
        self.plugin_lag_s = 1.0
        self.plugin_ready_at: datetime.datetime | None = self.clock.now()
        self._reports_at: float | None = None
        self.statuses: list[str] = []
        self.set_allocatable(advertised(library))

    def set_allocatable(self, counts: dict[str, int]) -> None:
        """What the kubelet reports: these counts, with a heartbeat now."""
        status = self.raw["status"]
        for key in [k for k in status["allocatable"] if k.startswith("nvidia.com/mig-")]:
            del status["allocatable"][key]
        status["allocatable"].update({k: str(v) for k, v in counts.items()})
        stamp = format_time(self.clock.now())
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "Ready"]
        ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": stamp}
        status["conditions"] = [*conditions, {**ready, "lastTransitionTime": stamp}]

    @property
    def plugin_uid(self) -> str:
        return f"uid-device-plugin-{self.restarts}"

    def hold(self, pod: str, profile: str) -> None:
        """A pod bound here, holding one ``profile`` instance (processes not started)."""
        self.pods.append(make_pod(pod, profile=profile, node_name=self.name))

    def ask(self, request: CarveRequest | None) -> None:
        annotations = self.raw["metadata"]["annotations"]
        if request is None:
            annotations.pop(CARVE_ANNOTATION, None)
        else:
            annotations[CARVE_ANNOTATION] = render_carve_request(request)

    @property
    def status(self) -> CarveStatus | None:
        text = self.raw["metadata"]["annotations"].get(CARVE_STATE_ANNOTATION)
        return None if text is None else parse_carve_status(text)

    # CarveNode
    def read_node(self) -> dict[str, Any]:
        due = self._reports_at
        if due is not None and self.clock.monotonic() >= due:
            self._reports_at = None
            if self.plugin_works:
                self.set_allocatable(advertised(self.library))
        return copy.deepcopy(self.raw)

    def write_status(self, text: str) -> None:
        self.raw["metadata"]["annotations"][CARVE_STATE_ANNOTATION] = text
        self.statuses.append(parse_carve_status(text).phase)

    def pods_on_node(self) -> list[dict[str, Any]]:
        return list(self.pods)

    def restart_device_plugin(self) -> frozenset[str]:
        replaced = frozenset({self.plugin_uid})
        self.restarts += 1
        self.plugin_ready_at = self.clock.now()
        self._reports_at = self.clock.monotonic() + self.plugin_lag_s
        return replaced

    def device_plugin_ready_at(self, replaced: frozenset[str]) -> datetime.datetime | None:
        return None if self.plugin_uid in replaced else self.plugin_ready_at

    def record_warning(self, node: str | None = None, *args: str) -> None:
        reason, message = (node, args[0]) if len(args) == 1 else (args[0], args[1])
        self.events.append((str(reason), message))

    # NodeStore (the publisher)
    def read_annotation(self, node: str, key: str) -> str | None:
        value = self.raw["metadata"]["annotations"].get(key)
        return value if isinstance(value, str) else None

    def write_annotation(self, node: str, key: str, value: str) -> None:
        self.raw["metadata"]["annotations"][key] = value


def carver(node: MemoryNode, timeout_s: float = 10.0) -> Carver:
    def read() -> Any:
        with nvml_session():
            return read_gpus()

    publisher = Publisher(node.name, node, read, node.clock.now)
    return Carver(
        node=node,
        driver=NvmlMig(),
        session=mig_session,
        publish=lambda: publisher.publish_once() and None,
        now=node.clock.now,
        sleep=node.clock.sleep,
        advertise_timeout_s=timeout_s,
        poll_s=1.0,
        clock=node.clock.monotonic,
    )


def balanced() -> FakeNvmlLibrary:
    """One A100-80GB: a busy 3g.40gb at 4 (a pod holds it), idle 1g.10gb at 0 and 1."""
    return FakeNvmlLibrary(
        [
            FakeGpu(
                A100,
                "A100-80GB",
                instances=[
                    FakeInstance("3g.40gb", 4, processes=1, holder="team-a/running"),
                    FakeInstance("1g.10gb", 0),
                    FakeInstance("1g.10gb", 1),
                ],
            )
        ]
    )


def uuid_of(library: FakeNvmlLibrary, gpu: int, profile: str, start: int) -> str:
    with nvml_session():
        for reading in read_gpus():
            names = {p.gi_profile_id: p.profile_name for p in reading.profiles}
            for i in reading.instances:
                if reading.index == gpu and names[i.gi_profile_id] == profile and i.start == start:
                    return i.uuid
    return ""


def request(
    plan: str,
    gpu: int,
    destroy: Sequence[tuple[str, int, str]],
    create: Sequence[tuple[str, int]],
    layout: Sequence[tuple[str, int]],
) -> CarveRequest:
    return CarveRequest(
        plan,
        (
            CarveGpu(
                gpu,
                tuple(Doomed(s, p, u) for p, s, u in destroy),
                tuple(Slot(s, p) for p, s in create),
                tuple(sorted(Slot(s, p) for p, s in layout)),
            ),
        ),
    )


def layout(library: FakeNvmlLibrary, gpu: int = 0) -> list[tuple[str, int, bool]]:
    """The fake GPU's instances: profile, start, whether its compute instance exists."""
    found = library.gpus[gpu].instances
    return sorted((i.profile, i.start, i.with_compute_instance) for i in found)
