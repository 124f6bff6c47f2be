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
from dataclasses import dataclass

from migslice.objects.dra_selectors import DeviceSelection, read_selectors
from migslice.objects.json import JsonObject, items, mapping, text


@dataclass(frozen=True, slots=True)
class DeviceClassFacts:
    """A class's name, the selection of its selectors and the extended resource it serves."""

    name: str
    selection: DeviceSelection
    extended_resource: str | None = None


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
    )
