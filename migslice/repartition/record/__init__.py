"""The repartition controller's durable plan record: one document
(:mod:`~migslice.repartition.record.document`) composed of the MIG Manager part
(:mod:`~migslice.repartition.record.plan`) and the carve part
(:mod:`~migslice.repartition.record.carve_plan`), which share outcomes, times and errors
(:mod:`~migslice.repartition.record.wire`)."""

from migslice.repartition.record.carve_plan import ActiveCarve, CarveStep
from migslice.repartition.record.document import (
    RepartitionRecord,
    parse_record,
    render_record,
)
from migslice.repartition.record.plan import ActivePlan, NodeStep, Quarantined, Restore
from migslice.repartition.record.served import (
    CARVE_MARK,
    TOUCH_WINDOW_S,
    Served,
    still_served,
    with_served,
)
from migslice.repartition.record.wire import (
    ABORTED,
    FAILED,
    OPEN,
    SUCCESS,
    SUPERSEDED,
    TIMEOUT,
    NodeOutcome,
    RecordError,
)

__all__ = [
    "ABORTED",
    "CARVE_MARK",
    "FAILED",
    "OPEN",
    "SUCCESS",
    "SUPERSEDED",
    "TIMEOUT",
    "TOUCH_WINDOW_S",
    "ActiveCarve",
    "ActivePlan",
    "CarveStep",
    "NodeOutcome",
    "NodeStep",
    "Quarantined",
    "RecordError",
    "RepartitionRecord",
    "Restore",
    "Served",
    "parse_record",
    "render_record",
    "still_served",
    "with_served",
]
