"""Re-partitioning: one decision for the controller, ``migslice plan``, the demo and the
simulator, in three parts that import downwards only (an import-linter contract holds it).

* the entry, :func:`~migslice.repartition.decide.decide`: record + snapshot + time -> the next
  step; the carve branch decides first, then the MIG Manager path;
* two wings that never import each other: :mod:`~migslice.repartition.migmanager` (whole idle
  GPUs through MIG Manager: planner, applying, closing, quarantine, messages) and
  :mod:`~migslice.repartition.carve` (the free part of GPUs in use through the node agent:
  planner, gpu, branch);
* the shared base: the plan record (:mod:`~migslice.repartition.record`), the step values
  (:mod:`~migslice.repartition.steps`) and what steps ask of the shell
  (:mod:`~migslice.repartition.actions`), the two planners' answers
  (:mod:`~migslice.repartition.plans`) and settings (:mod:`~migslice.repartition.settings`),
  pending demand (:mod:`~migslice.repartition.pending`), layout shapes
  (:mod:`~migslice.repartition.shapes`), each node's mode (:mod:`~migslice.repartition.modes`),
  and what the decision reads: :mod:`~migslice.repartition.snapshot` and the mig-parted
  ConfigMap that holds the record (:mod:`~migslice.repartition.configmap`).

Pure: the time, the cluster and the record are inputs; the shells (``extender/controller.py``,
``migslice plan``, the demo, the simulator) persist the record and perform the steps.
"""

from migslice.mig.migparted import OWN_PREFIX, merge_mig_parted, removed_configs
from migslice.names import RECORD_ANNOTATION
from migslice.repartition.actions import (
    REASON_FAILED,
    REASON_STARTED,
    CarveWrite,
    NodeEvent,
    QuarantineMark,
    SetLabel,
)
from migslice.repartition.carve.branch import REASON_CARVE, REASON_CARVE_FAILED, recheck_carve
from migslice.repartition.carve.gpu import CarvedGpu, carved_gpu, carved_gpus
from migslice.repartition.carve.planner import (
    CarveMemo,
    CarveTrial,
    carve_trial,
    plan_carve,
)
from migslice.repartition.configmap import (
    FileUpdate,
    MigConfigFile,
    apply_step,
    read_config_map,
)
from migslice.repartition.decide import STEPS_PER_ROUND, decide, preview_round
from migslice.repartition.migmanager.applying import recheck
from migslice.repartition.migmanager.planner import config_name, plan
from migslice.repartition.pending import PendingPod, eligible_demand, pending_pods
from migslice.repartition.plans import CarvePlan, GpuChange, NodeCarve, NodeChange, RepartitionPlan
from migslice.repartition.record import (
    ABORTED,
    FAILED,
    OPEN,
    SUCCESS,
    SUPERSEDED,
    TIMEOUT,
    ActiveCarve,
    ActivePlan,
    CarveStep,
    NodeOutcome,
    NodeStep,
    Quarantined,
    RecordError,
    RepartitionRecord,
    parse_record,
    render_record,
)
from migslice.repartition.settings import (
    CARVE_MIN_PENDING_S,
    CarveSettings,
    ControllerSettings,
    PlanSettings,
)
from migslice.repartition.shapes import LayoutCache, held_mix
from migslice.repartition.snapshot import Snapshot, node_states, snapshot_from_objects
from migslice.repartition.steps import PlanResult, Step, StepKind

__all__ = [
    "ABORTED",
    "CARVE_MIN_PENDING_S",
    "FAILED",
    "OPEN",
    "OWN_PREFIX",
    "REASON_CARVE",
    "REASON_CARVE_FAILED",
    "REASON_FAILED",
    "REASON_STARTED",
    "RECORD_ANNOTATION",
    "STEPS_PER_ROUND",
    "SUCCESS",
    "SUPERSEDED",
    "TIMEOUT",
    "ActiveCarve",
    "ActivePlan",
    "CarveMemo",
    "CarvePlan",
    "CarveSettings",
    "CarveStep",
    "CarveTrial",
    "CarveWrite",
    "CarvedGpu",
    "ControllerSettings",
    "FileUpdate",
    "GpuChange",
    "LayoutCache",
    "MigConfigFile",
    "NodeCarve",
    "NodeChange",
    "NodeEvent",
    "NodeOutcome",
    "NodeStep",
    "PendingPod",
    "PlanResult",
    "PlanSettings",
    "QuarantineMark",
    "Quarantined",
    "RecordError",
    "RepartitionPlan",
    "RepartitionRecord",
    "SetLabel",
    "Snapshot",
    "Step",
    "StepKind",
    "apply_step",
    "carve_trial",
    "carved_gpu",
    "carved_gpus",
    "config_name",
    "decide",
    "eligible_demand",
    "held_mix",
    "merge_mig_parted",
    "node_states",
    "parse_record",
    "pending_pods",
    "plan",
    "plan_carve",
    "preview_round",
    "read_config_map",
    "recheck",
    "recheck_carve",
    "removed_configs",
    "render_record",
    "snapshot_from_objects",
]
