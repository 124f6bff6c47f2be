"""Constants and the error of the mig-parted module."""

from __future__ import annotations

from collections.abc import Mapping

from migslice.errors import InvalidInputError
from migslice.names import OWN_CONFIG_PREFIX

VERSION = "v1"
OWN_PREFIX = OWN_CONFIG_PREFIX
NVIDIA_VENDOR_ID = 0x10DE
RESOURCE_PREFIX = "nvidia.com/mig-"

# Compute-instance sizes a GPU instance of G slices offers (mig-parted
# pkg/mig/config/known_configs.go, A100-SXM4-40GB: 1c.1g .. 7c.7g).
CI_SIZES: Mapping[int, tuple[int, ...]] = {
    1: (1,),
    2: (1, 2),
    3: (1, 2, 3),
    4: (1, 2, 4),
    7: (1, 2, 3, 4, 7),
}

# MIG Manager's all-balanced, G -> count, by the GPU's largest G (pkg/mig/builder/balanced.go).
BALANCED_FORMULA: Mapping[int, Mapping[int, int]] = {
    7: {1: 2, 2: 1, 3: 1},
    4: {1: 2, 2: 1},
}


class MigPartedError(InvalidInputError):
    """A mig-parted config that mig-parted would refuse; the message says where and why."""
