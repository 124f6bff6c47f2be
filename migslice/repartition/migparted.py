"""Merge a plan's configs into the mig-parted file that MIG Manager reads.

Every config already in the file is kept as written (its YAML is carried over, not re-parsed
into our types and rendered back), ours are added or replaced, and ``migslice-*`` configs
that nothing references any more (no node label, no plan in progress) are removed. YAML
comments do not survive the rewrite.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import yaml

from migslice.mig.render import MigPartedEntry, MigPartedError, render_mig_parted

OWN_PREFIX = "migslice-"


def merge_mig_parted(
    text: str,
    add: Mapping[str, Sequence[MigPartedEntry]],
    referenced: Collection[str],
) -> str:
    """``text`` with the configs in ``add`` put in, and unreferenced ``migslice-*`` ones gone.

    MigPartedError when ``text`` is not a mig-parted v1 document (nothing is merged then).
    """
    try:
        document = yaml.safe_load(text) if text.strip() else {"version": "v1"}
    except yaml.YAMLError as error:
        raise MigPartedError(f"mig-parted config is not YAML: {error}") from None
    if not isinstance(document, dict) or document.get("version") != "v1":
        raise MigPartedError("mig-parted config must be a v1 mapping; not merging into it")
    existing = document.get("mig-configs") or {}
    if not isinstance(existing, dict):
        raise MigPartedError("mig-configs must be a mapping of name to entries")
    ours: dict[str, Any] = yaml.safe_load(render_mig_parted(add))["mig-configs"] if add else {}
    merged: dict[str, Any] = {}
    for name, entries in existing.items():
        name = str(name)
        if name in ours:
            continue
        if name.startswith(OWN_PREFIX) and name not in referenced:
            continue
        merged[name] = entries
    merged.update(ours)
    document["mig-configs"] = merged
    return str(yaml.safe_dump(document, sort_keys=False, default_flow_style=False))


def removed_configs(before: str, after: str) -> list[str]:
    """Names present in ``before`` and absent from ``after`` (for the log)."""

    def names(text: str) -> set[str]:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            return set()
        configs = document.get("mig-configs") if isinstance(document, dict) else None
        return {str(n) for n in configs} if isinstance(configs, dict) else set()

    return sorted(names(before) - names(after))
