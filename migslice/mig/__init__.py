"""The MIG geometry engine: profiles, the catalog of GPU models, layouts and rendering."""

from migslice.mig.catalog import (
    Catalog,
    GpuModel,
    NvmlProfileInfo,
    Profile,
    UnknownModelError,
    UnknownProfileError,
    model_from_nvml,
)
from migslice.mig.catalog_data import CATALOG
from migslice.mig.fitting import FitResult, fit
from migslice.mig.layout import (
    Layout,
    Placed,
    Rules,
    enumerate_maximal_layouts,
    free_placements,
    is_legal,
    make_layout,
    place,
    violations,
)
from migslice.mig.profiles import (
    MIG_RESOURCE_PREFIX,
    WHOLE_GPU_RESOURCE,
    ProfileName,
    ProfileNameError,
    parse_profile_name,
    profile_from_resource,
)

__all__ = [
    "CATALOG",
    "MIG_RESOURCE_PREFIX",
    "WHOLE_GPU_RESOURCE",
    "Catalog",
    "FitResult",
    "GpuModel",
    "Layout",
    "NvmlProfileInfo",
    "Placed",
    "Profile",
    "ProfileName",
    "ProfileNameError",
    "Rules",
    "UnknownModelError",
    "UnknownProfileError",
    "enumerate_maximal_layouts",
    "fit",
    "free_placements",
    "is_legal",
    "make_layout",
    "model_from_nvml",
    "parse_profile_name",
    "place",
    "profile_from_resource",
    "violations",
]
