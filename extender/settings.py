"""Settings of the extender service (from the command line; no environment reads here)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORT = 8443
DEFAULT_MIG_CONFIG_MAP = "gpu-operator/migslice-mig-config"


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """``max_body_bytes``: larger requests get an ``Error`` (500 full Nodes with managedFields,
    images and conditions are about 2.5 MB; names-only requests are tiny). ``max_staleness_s``:
    readiness fails when a cache has not heard from the API server for longer. ``mig_config_map``:
    ``namespace/name`` of the ConfigMap holding the mig-parted config under ``mig_config_key``.
    """

    max_body_bytes: int = 64 << 20
    max_staleness_s: float = 180.0
    mig_config_map: str = DEFAULT_MIG_CONFIG_MAP
    mig_config_key: str = "config.yaml"

    @property
    def mig_config_namespace(self) -> str:
        return self.mig_config_map.partition("/")[0] if "/" in self.mig_config_map else ""

    @property
    def mig_config_name(self) -> str:
        return self.mig_config_map.rpartition("/")[2]
