"""The repartition controller's carve-mode writes and reads, apart from its loop: asking node
agents to carve (annotation ``migslice.io/carve``), and telling from the extender's cache
that a carve is done (so that the pods it served are touched at the right time)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from extender.leading import NotLeadingError
from migslice.names import CARVE_ANNOTATION, MIG_STATE_SUCCESS
from migslice.objects import NodeFacts
from migslice.objects.carve_handshake import CarvePhase, render_carve_request
from migslice.repartition import CarveWrite
from migslice.repartition.record import CARVE_MARK

log = logging.getLogger(__name__)


class Annotator(Protocol):
    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None: ...


def write_carve_requests(api: Annotator, writes: Sequence[CarveWrite], reason: str) -> bool:
    """Ask node agents to carve (or withdraw the ask); False when a write failed (the next
    round decides again: an applied plan whose request is missing writes it again)."""
    ok = True
    for write in writes:
        text = None if write.request is None else render_carve_request(write.request)
        try:
            api.set_node_annotations(write.node, {CARVE_ANNOTATION: text})
            log.info("node=%s %s %s", write.node, "asked" if text else "released", reason)
        except NotLeadingError:
            raise  # the round ends: no write of a replica that does not lead
        except Exception as error:  # one failed write must not stop the others
            ok = False
            log.warning(
                "node=%s carve request not written (%s); next round decides again",
                write.node,
                error,
            )
    return ok


def shows(facts: NodeFacts, config: str) -> bool:
    """Whether the cached node is in ``config``: a mig-parted config applied with
    ``success``, or for ``carve:<plan>`` the plan carved and the node open to pods again."""
    if config.startswith(CARVE_MARK):
        status = facts.carve_status
        return (
            not facts.is_carving
            and status is not None
            and status.plan_id == config.removeprefix(CARVE_MARK)
            and status.phase == CarvePhase.SUCCESS
        )
    return facts.mig_config == config and facts.mig_config_state == MIG_STATE_SUCCESS
