"""Repartition controller core: the plan record, the decision state machine, pending pods and
the mig-parted merge. Pure: the time, the cluster and the record are inputs; the shell in
``extender/repartition.py`` persists the record and performs the steps."""

from migslice.mig.migparted import OWN_PREFIX, merge_mig_parted, removed_configs
from migslice.repartition.decide import (
    REASON_FAILED,
    REASON_STARTED,
    ControllerSettings,
    NodeEvent,
    SetLabel,
    Step,
    StepKind,
    decide,
    recheck,
)
from migslice.repartition.pending import SCHEDULER_NAME, pending_pods, unschedulable_since
from migslice.repartition.record import (
    ABORTED,
    FAILED,
    OPEN,
    RECORD_ANNOTATION,
    SUCCESS,
    SUPERSEDED,
    TIMEOUT,
    ActivePlan,
    NodeStep,
    RecordError,
    RepartitionRecord,
    format_time,
    parse_record,
    render_record,
)

__all__ = [
    "ABORTED",
    "FAILED",
    "OPEN",
    "OWN_PREFIX",
    "REASON_FAILED",
    "REASON_STARTED",
    "RECORD_ANNOTATION",
    "SCHEDULER_NAME",
    "SUCCESS",
    "SUPERSEDED",
    "TIMEOUT",
    "ActivePlan",
    "ControllerSettings",
    "NodeEvent",
    "NodeStep",
    "RecordError",
    "RepartitionRecord",
    "SetLabel",
    "Step",
    "StepKind",
    "decide",
    "format_time",
    "merge_mig_parted",
    "parse_record",
    "pending_pods",
    "recheck",
    "removed_configs",
    "render_record",
    "unschedulable_since",
]
