"""DeviceClasses (``resource.k8s.io/v1``): which devices a class selects, and the extended
resource it serves (KEP-5004's ``spec.extendedResourceName``).

NVIDIA's chart ships ``mig.nvidia.com`` (``type == 'mig'``, no profile) and ``gpu.nvidia.com``
(``type == 'gpu'``, ``extendedResourceName: nvidia.com/gpu``); migslice's classes are one per
MIG profile, named :func:`migslice.names.mig_device_class` (``migslice-mig-1g.10gb``: driver
``gpu.nvidia.com``, type ``mig``, that profile, ``extendedResourceName:
nvidia.com/mig-1g.10gb``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from migslice.mig import Catalog
from migslice.names import DRA_DRIVER, mig_device_class, mig_resource_name
from migslice.objects.device_configs import sharing_strategies
from migslice.objects.dra_selectors import DeviceSelection, read_selectors
from migslice.objects.json import JsonObject, items, mapping, text


@dataclass(frozen=True, slots=True)
class DeviceClassFacts:
    """A class's name, the selection of its selectors and the extended resource it serves."""

    name: str
    selection: DeviceSelection
    extended_resource: str | None = None
    sharing: tuple[str, ...] = ()
    """Sharing strategies its ``spec.config`` asks of NVIDIA's driver (``TimeSlicing``, ``MPS``)."""


def device_class_facts_from_raw(raw_class: JsonObject) -> DeviceClassFacts | None:
    name = text(mapping(raw_class.get("metadata")).get("name"))
    if not name:
        return None
    spec = mapping(raw_class.get("spec"))
    expressions = []
    for selector in items(spec.get("selectors")):
        expression = text(mapping(mapping(selector).get("cel")).get("expression"))
        expressions.append(expression if expression is not None else "<not a CEL selector>")
    extended = text(spec.get("extendedResourceName"))
    return DeviceClassFacts(
        sys.intern(name),
        read_selectors(expressions),
        sys.intern(extended) if extended else None,
        sharing_strategies(spec.get("config")),
    )


def extended_resources(classes: Iterable[DeviceClassFacts]) -> frozenset[str]:
    """The extended resources the classes serve from DRA (their ``extendedResourceName``):
    on a DRA node kube-scheduler's NodeResourcesFit gives a pod's request of any other
    ``nvidia.com/*`` resource no device (KEP-5004)."""
    return frozenset(c.extended_resource for c in classes if c.extended_resource)


def mig_profiles(catalog: Catalog) -> tuple[str, ...]:
    """Every MIG profile of the catalog's models, each once, in catalog order: the profiles
    migslice ships a DeviceClass for (``charts/migslice/files/dra/mig-profiles.yaml``)."""
    return tuple(dict.fromkeys(p.name for m in catalog.models for p in m.profiles))


def migslice_device_class(profile: str) -> JsonObject:
    """migslice's DeviceClass of ``profile`` as the chart renders it (less its labels)."""
    expression = (
        f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'mig' "
        f"&& device.attributes['{DRA_DRIVER}'].profile == '{profile}'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": mig_device_class(profile)},
        "spec": {
            "selectors": [{"cel": {"expression": expression}}],
            "extendedResourceName": mig_resource_name(profile),
        },
    }
