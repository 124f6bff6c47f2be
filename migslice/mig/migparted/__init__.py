"""NVIDIA mig-parted configs, read and applied the way mig-parted and MIG Manager do.

The file MIG Manager applies (``version: v1``; ``mig-configs`` maps a name to a list of
entries, each with an optional ``device-filter`` of PCI ids, ``devices`` as ``all`` or GPU
indices, ``mig-enabled`` and ``mig-devices`` counts per MIG device name). The node label
``nvidia.com/mig.config`` selects a config by name. Everything here follows NVIDIA's code at the
pinned versions, NVIDIA/mig-parted @bd7160f (go-nvlib v0.12.0, sigs.k8s.io/yaml v1.6.0) and
NVIDIA/k8s-device-plugin @1b826ac (docs/mig-parted.md says what that means in practice):

* :func:`parse_mig_parted` gives the verdicts of ``api/spec/v1/spec.go`` (``Spec`` and
  ``MigConfigSpec.UnmarshalJSON``) on a file read as mig-parted reads it
  (:mod:`migslice.mig.goyaml`: go-yaml v2 scalars, then ``encoding/json``).
* ``mig-devices`` keys are checked as go-nvlib's ``parseMigProfile`` checks them: a format, not a
  catalog lookup (``0g.0gb`` and ``1g.5gb+foo`` pass; whether the GPU has them shows at apply).
* ``device-filter`` matching is ``pkg/types/device.go`` (``NewDeviceIDFromString``, ``Matches``):
  against the GPU's PCI device id ``0xDDDD10DE``, never the GPU model.
* Which entry sets which GPU is ``cmd/nvidia-mig-parted/assert/assert.go``
  (``WalkSelectedMigConfigForEachGPU``) with ``apply/mode.go`` and ``apply/config.go``: every entry
  is applied, in order, to each GPU its filter and ``devices`` select; a GPU no entry selects is
  left as it is.
* MIG Manager's generated names are ``pkg/mig/builder`` and ``pkg/mig/discovery``.
* Compute-instance names (``1c.3g.20gb``) create instances as ``pkg/mig/config/config.go``
  (``SetMigConfig``) does; the device plugin's mixed strategy advertises only devices whose
  compute instance spans the GPU instance (k8s-device-plugin ``internal/rm/rm.go``
  ``AddDefaultResourcesToConfig``) and fails to build its device map on any other
  (``internal/rm/device_map.go`` ``buildMigDeviceMap``: "does not match any resource patterns").
"""

from migslice.mig.migparted.apply import (
    Outcome,
    applied_instances,
    builtin_counts,
    gpu_pci_ids,
    per_gpu_counts,
    resolve_gpus,
)
from migslice.mig.migparted.common import OWN_PREFIX, MigPartedError
from migslice.mig.migparted.names import (
    MigDeviceName,
    creation_orders,
    gpu_instances,
    parse_mig_device_name,
)
from migslice.mig.migparted.spec import (
    DeviceId,
    MigPartedEntry,
    entry_json,
    merge_mig_parted,
    mig_parted_entries,
    parse_device_id,
    parse_entries,
    parse_mig_parted,
    profile_counts,
    removed_configs,
    render_mig_parted,
)

__all__ = [
    "OWN_PREFIX",
    "DeviceId",
    "MigDeviceName",
    "MigPartedEntry",
    "MigPartedError",
    "Outcome",
    "applied_instances",
    "builtin_counts",
    "creation_orders",
    "entry_json",
    "gpu_instances",
    "gpu_pci_ids",
    "merge_mig_parted",
    "mig_parted_entries",
    "parse_device_id",
    "parse_entries",
    "parse_mig_device_name",
    "parse_mig_parted",
    "per_gpu_counts",
    "profile_counts",
    "removed_configs",
    "render_mig_parted",
    "resolve_gpus",
]
