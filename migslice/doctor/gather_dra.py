"""The DRA checks' facts, read from the cluster (:mod:`migslice.doctor.checks.dra`)."""

from __future__ import annotations

from dataclasses import replace

from migslice import names
from migslice.doctor.checks.dra import DraApiFacts, DraFacts, SteerFacts
from migslice.doctor.facts import Settings
from migslice.doctor.gather import nodes, read_deployment
from migslice.doctor.reading import ClusterReader
from migslice.names import DRA_API


def gather_dra_api(reader: ClusterReader, settings: Settings) -> DraApiFacts:
    """``dra-api``'s reads alone: discovery of the API and kube-apiserver's version."""
    return DraApiFacts(reader.get(DRA_API), reader.get("/version"))


def gather_dra_nodes(reader: ClusterReader, settings: Settings) -> DraFacts:
    """``dra-nodes``'s reads: discovery, the ResourceSlices and the Nodes (no DeviceClass or
    TenantPolicy, which it does not judge: an account denied those fails the checks that read
    them alone)."""
    api = gather_dra_api(reader, settings)
    served = api.discovery is not None
    slices = reader.list(f"{DRA_API}/resourceslices") if served else None
    return DraFacts(api.discovery, api.version, slices, [] if served else None, nodes(reader))


def gather_dra(reader: ClusterReader, settings: Settings) -> DraFacts:
    """``dra-device-classes``'s reads: those of ``dra-nodes`` (where the DRA nodes are), the
    DeviceClasses and the TenantPolicies."""
    facts = gather_dra_nodes(reader, settings)
    served = facts.discovery is not None
    return replace(
        facts,
        classes=reader.list(f"{DRA_API}/deviceclasses") if served else None,
        policies=reader.list(f"/apis/{names.GROUP}/{names.VERSION}/{names.POLICY_PLURAL}") or (),
    )


def gather_dra_steer(reader: ClusterReader, settings: Settings) -> SteerFacts:
    """``dra-steer``'s reads: every DeviceTaintRule and the extender's Deployment."""
    return SteerFacts(
        reader.list(f"{DRA_API}/devicetaintrules"),
        read_deployment(reader, settings, names.EXTENDER_SERVICE),
    )
