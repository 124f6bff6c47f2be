"""What a repartition step asks its shell to do on the cluster, besides writing the record:
node labels, Events, quarantine marks and carve requests (values; ``extender/controller.py``
performs them)."""

from __future__ import annotations

from dataclasses import dataclass

from migslice.objects.carve_handshake import CarveRequest

REASON_STARTED = "MigRepartition"
REASON_FAILED = "MigRepartitionFailed"
REASON_SUPERSEDED = "MigRepartitionSuperseded"


@dataclass(frozen=True, slots=True)
class SetLabel:
    """Set ``nvidia.com/mig.config`` of ``node``; ``mark_pending`` also sets the state label.
    ``replaces``: for a roll back, the plan's config the label is set back from (a roll back
    the API server refused is tried again while the label still names it)."""

    node: str
    config_name: str
    mark_pending: bool = True
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class ClearPending:
    """Remove ``nvidia.com/mig.config.state`` from ``node``: the ``pending`` our label wrote,
    left on a node whose ``nvidia.com/mig.config`` someone removed (no MIG Manager run ever
    ends it, and the extender's filter and the in-flight budget would count it for ever)."""

    node: str


@dataclass(frozen=True, slots=True)
class NodeEvent:
    node: str
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class QuarantineMark:
    """Set the node's quarantine label and annotation (``note``), or remove both (None)."""

    node: str
    note: str | None


@dataclass(frozen=True, slots=True)
class CarveWrite:
    """Set (``request``) or remove (None) the node's ``migslice.io/carve`` annotation."""

    node: str
    request: CarveRequest | None
