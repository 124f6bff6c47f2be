"""The repartition controller's pass in the demo: the controller's own decision, plan record
and mig-parted merge on the demo's cluster file, with MIG Manager's part played here."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from migslice.demo.stage import (
    CONTROLLER_SETTINGS,
    MAX_STEPS,
    MIG_PREFIX,
    Cluster,
    DemoError,
)
from migslice.inventory import per_gpu_counts
from migslice.mig import CATALOG
from migslice.mig.render import render_bar
from migslice.names import (
    GPU_COUNT_LABEL,
    GPU_OPERATOR_NAMESPACE,
    MIG_CONFIG_KEY,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_MAP,
    MIG_CONFIG_STATE_LABEL,
    MIG_STATE_PENDING,
    MIG_STATE_SUCCESS,
    PRODUCT_LABEL,
    SCHEDULER_NAME,
)
from migslice.objects import load_cluster_text
from migslice.repartition import (
    ControllerSettings,
    Step,
    StepKind,
    apply_step,
    decide,
    read_config_map,
    render_record,
    snapshot_from_objects,
)
from migslice.whynot import WhyNot


def decide_on_cluster_file(
    path: Path, now_s: float, settings: ControllerSettings = CONTROLLER_SETTINGS
) -> Step:
    """The repartition controller's next step on the demo's cluster file."""
    snapshot = snapshot_from_objects(
        load_cluster_text(path.read_text()),
        config_map=(GPU_OPERATOR_NAMESPACE, MIG_CONFIG_MAP),
        key=MIG_CONFIG_KEY,
        now_s=now_s,
        scheduler_name=SCHEDULER_NAME,
    )
    record = snapshot.file.record
    if record is None:
        raise DemoError(f"plan record unreadable: {snapshot.file.problem}")
    return decide(
        record,
        snapshot.nodes,
        snapshot.pending,
        file_configs=snapshot.file.names,
        now=now_s,
        settings=settings,
    )


@dataclass
class RepartitionPass:
    cluster: Cluster
    say: Callable[[str], None]

    def run(self) -> None:
        """One controller pass, as ``migslice extender --repartition`` makes it: the same
        decision, the same plan record and mig-parted merge; MIG Manager's part played here."""
        for _ in range(MAX_STEPS):
            step = self._decide()
            if step.kind is StepKind.WAIT:
                if step.plan is not None:
                    for pod, reason in step.plan.unserved:
                        self.say(f"  still pending: {pod}: {reason}")
                return
            self._perform(step)
            if step.kind in (StepKind.FINISH, StepKind.ABORT):
                return

    def _decide(self) -> Step:
        return decide_on_cluster_file(self.cluster.path, time.time())

    def _perform(self, step: Step) -> None:
        config_map = self.cluster.mig_config_map()
        before = read_config_map(config_map, MIG_CONFIG_KEY)
        update = apply_step(
            config_map,
            key=MIG_CONFIG_KEY,
            expected_record=before.record_text,
            record_text=render_record(step.record),
            configs=step.configs,
            referenced=step.referenced,
        )
        if update.raw is None:
            raise DemoError(f"the mig-parted ConfigMap was not updated: {update.problem}")
        config_map.clear()
        config_map.update(update.raw)
        if step.kind is StepKind.START and step.plan is not None:
            self._show_plan(step)
        for label in step.labels:
            labels = self.cluster.node(label.node)["metadata"]["labels"]
            labels[MIG_CONFIG_LABEL] = label.config_name
            if label.mark_pending:
                labels[MIG_CONFIG_STATE_LABEL] = MIG_STATE_PENDING
            self.say(f"  controller: label {label.node} {MIG_CONFIG_LABEL}={label.config_name}")
        self.cluster.write()
        for label in step.labels:
            if label.mark_pending:
                self._mig_manager(label.node)
        for event in step.events:
            self.say(f"  event {event.reason} on {event.node}: {event.message}")

    def _show_plan(self, step: Step) -> None:
        assert step.plan is not None
        self.say(f"  controller: {step.reason} (plan record written to {MIG_CONFIG_MAP})")
        for change in step.plan.changes:
            model = CATALOG.get(change.model_key)
            serves = ", ".join(change.serves)
            self.say(f"  plan: node {change.node} -> config {change.config_name} (serves {serves})")
            for gpu in change.gpus:
                self.say(f"    GPU {gpu.index} {render_bar(model, gpu.old, cell=7)}")
                self.say(f"       -> {render_bar(model, gpu.new, cell=7)}")

    def _mig_manager(self, node_name: str) -> None:
        """MIG Manager's part: apply the labelled config, rewrite allocatable, report success."""
        node = self.cluster.node(node_name)
        labels = node["metadata"]["labels"]
        config = labels[MIG_CONFIG_LABEL]
        self.say(f"  MIG Manager: {node_name} {MIG_CONFIG_LABEL}={config}, state pending")
        configs = read_config_map(self.cluster.mig_config_map(), MIG_CONFIG_KEY).configs
        model = CATALOG.get(labels[PRODUCT_LABEL])
        counts = per_gpu_counts(config, model, int(labels[GPU_COUNT_LABEL]), configs=configs)
        if isinstance(counts, WhyNot):
            raise DemoError(f"MIG Manager cannot apply {config}: {counts.message}")
        allocatable = {
            k: v for k, v in node["status"]["allocatable"].items() if not k.startswith(MIG_PREFIX)
        }
        totals: dict[str, int] = {}
        for _, per_gpu in counts:
            for profile, count in per_gpu.items():
                resource = model.profile(profile).resource_name
                totals[resource] = totals.get(resource, 0) + count
        allocatable.update({k: str(v) for k, v in sorted(totals.items())})
        node["status"]["allocatable"] = allocatable
        labels[MIG_CONFIG_STATE_LABEL] = MIG_STATE_SUCCESS
        self.cluster.write()
        offers = ", ".join(f"{k.removeprefix(MIG_PREFIX)} x{v}" for k, v in sorted(totals.items()))
        self.say(
            f"  MIG Manager: {node_name} re-partitioned, state success; device plugin now "
            f"offers {offers}"
        )
