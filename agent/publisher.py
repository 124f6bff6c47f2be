"""Publish the node's MIG state as the ``migslice.io/gpu-layout`` annotation, on change.

One pass: read NVML, build the report, and PATCH the Node's annotation when its content (all
but the timestamp) changed or the last write is older than the heartbeat. Warnings (a model
the catalog lacks, NVML and catalog disagreeing, a GPU with MIG on and no instances) are
logged and recorded as Events on the Node, once per distinct warning.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.readings import GpuReading
from agent.report import Report, build_report
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects.gpu_layout import (
    LayoutAnnotationError,
    parse_layout_annotation,
    render_layout_annotation,
)
from migslice.objects.times import format_time, parse_time

log = logging.getLogger(__name__)


class NodeStore(Protocol):
    """Where the annotation goes (a port: the API server, or a test's local server)."""

    def read_annotation(self, node: str, key: str) -> str | None: ...

    def write_annotation(self, node: str, key: str, value: str) -> None: ...

    def record_warning(self, node: str, reason: str, message: str) -> None: ...


@dataclass
class Publisher:
    node_name: str
    store: NodeStore
    read: Callable[[], Sequence[GpuReading]]
    now: Callable[[], datetime.datetime]
    heartbeat_s: float = 300.0
    _last_key: str | None = None
    _last_write: datetime.datetime | None = None
    _warned: set[str] = field(default_factory=set)

    def publish_once(self) -> tuple[bool, Report]:
        """Read and publish; returns (whether the Node was written, the report)."""
        now = self.now()
        report = build_report(self.read(), format_time(now))
        for warning in report.warnings:
            if warning not in self._warned:
                log.warning("gpu layout warning node=%s: %s", self.node_name, warning)
                self.store.record_warning(self.node_name, "MigLayoutWarning", warning)
                self._warned.add(warning)
        key = report.content_key()
        if self._last_key is None:
            current = self.store.read_annotation(self.node_name, LAYOUT_ANNOTATION)
            if current is not None:
                self._last_key, self._last_write = _published(current)
        # A last write in the future is the clock stepped back: written again now, or the
        # heartbeat stopped for as long as the step (and observedAt went stale).
        fresh = self._last_write is not None and (
            0.0 <= (now - self._last_write).total_seconds() < self.heartbeat_s
        )
        if key == self._last_key and fresh:
            return False, report
        self.store.write_annotation(self.node_name, LAYOUT_ANNOTATION, report.text())
        if key != self._last_key:
            log.info(
                "gpu layout published node=%s gpus=%d instances=%d",
                self.node_name,
                len(report.layout.gpus),
                sum(len(gpu.instances) for gpu in report.layout.gpus),
            )
        self._last_key, self._last_write = key, now
        return True, report


def _published(text: str) -> tuple[str | None, datetime.datetime | None]:
    """Content key and write time of an annotation already on the Node (after a restart)."""
    try:
        parsed = parse_layout_annotation(text)
    except LayoutAnnotationError:
        return None, None
    written = parse_time(parsed.observed_at)
    return render_layout_annotation(dataclasses.replace(parsed, observed_at="")), written
