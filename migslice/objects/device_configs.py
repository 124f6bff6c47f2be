"""NVIDIA's opaque device configs in ResourceClaims, their templates and DeviceClasses: which
sharing each asks for.

NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, ``api/nvidia.com/resource/
v1beta1``) reads ``opaque`` configs of driver ``gpu.nvidia.com`` whose ``parameters`` are a
``resource.nvidia.com/v1beta1`` ``GpuConfig`` or ``MigDeviceConfig``; either may carry
``sharing: {strategy: TimeSlicing | MPS, ...}``, and a class's configs apply before a claim's
(``device_state.go``, ``GetOpaqueDeviceConfigs``). :func:`sharing_strategies` names the
strategy of every such config that asks for sharing: ``TimeSlicing``, ``MPS``, or, for a
``sharing`` that names neither (or is not an object), the value as written, so that a config
the driver would read differently is never taken for none.
"""

from __future__ import annotations

from migslice.errors import shown
from migslice.names import DRA_DRIVER
from migslice.objects.json import items, mapping, text

TIME_SLICING = "TimeSlicing"
MPS = "MPS"


def sharing_strategies(raw_configs: object) -> tuple[str, ...]:
    """The sharing strategies the ``config`` list of a claim's ``spec.devices`` or a class's
    ``spec`` asks of NVIDIA's driver (see the module docstring); empty: none."""
    found: list[str] = []
    for raw in items(raw_configs):
        opaque = mapping(mapping(raw).get("opaque"))
        if opaque.get("driver") != DRA_DRIVER:
            continue
        parameters = opaque.get("parameters")
        if not isinstance(parameters, dict) or "sharing" not in parameters:
            continue
        sharing = parameters.get("sharing")
        if sharing is None:
            continue
        strategy = text(mapping(sharing).get("strategy"))
        found.append(strategy if strategy else shown(sharing))
    return tuple(dict.fromkeys(found))
