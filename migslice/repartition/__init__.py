"""The repartition wing: one decision for the controller, ``migslice plan``, the demo and the
simulator.

* :mod:`~migslice.repartition.planner` (with :mod:`~migslice.repartition.shapes`): pending
  demand + node states -> new layouts for idle GPUs;
* :mod:`~migslice.repartition.carve` (with :mod:`~migslice.repartition.carve_gpu`): carve
  mode, per GPU the instances to destroy and create around running ones, with its branch of
  the state machine in :mod:`~migslice.repartition.carve_decide`;
* :mod:`~migslice.repartition.decide`: the controller's state machine, record + snapshot +
  time -> the next step (plan, apply, observe, finish, abort; the step values in
  :mod:`~migslice.repartition.steps`), with :mod:`~migslice.repartition.applying` (a written
  plan applied and observed), :mod:`~migslice.repartition.closing` (how a node's step ends),
  :mod:`~migslice.repartition.quarantine` (nodes MIG Manager left stuck) and
  :mod:`~migslice.repartition.actions` (what the shell does besides writing the record);
* :mod:`~migslice.repartition.record`: the durable plan record;
* :mod:`~migslice.repartition.pending`: which pods wait for a geometry;
* :mod:`~migslice.repartition.snapshot` and :mod:`~migslice.repartition.configmap`: what the
  decision reads, and how a step changes the mig-parted ConfigMap.

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
from migslice.repartition.applying import recheck
from migslice.repartition.carve import plan_carve
from migslice.repartition.carve_decide import REASON_CARVE, REASON_CARVE_FAILED, recheck_carve
from migslice.repartition.configmap import (
    FileUpdate,
    MigConfigFile,
    apply_step,
    read_config_map,
)
from migslice.repartition.decide import decide
from migslice.repartition.pending import PendingPod, pending_pods, unschedulable_since
from migslice.repartition.planner import config_name, plan
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
from migslice.repartition.shapes import LayoutCache
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
    "SUCCESS",
    "SUPERSEDED",
    "TIMEOUT",
    "ActiveCarve",
    "ActivePlan",
    "CarvePlan",
    "CarveSettings",
    "CarveStep",
    "CarveWrite",
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
    "config_name",
    "decide",
    "merge_mig_parted",
    "node_states",
    "parse_record",
    "pending_pods",
    "plan",
    "plan_carve",
    "read_config_map",
    "recheck",
    "recheck_carve",
    "removed_configs",
    "render_record",
    "snapshot_from_objects",
    "unschedulable_since",
]
