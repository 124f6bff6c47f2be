"""The mig-parted ConfigMap as the repartition wing reads and writes it (pure).

MIG Manager reads its mig-parted file from the ConfigMap's ``data[<key>]``; the repartition
controller keeps its plan record in the same object's annotation ``migslice.io/repartition``,
so a plan's configs and the record that says they are being applied change in one write.

:func:`read_config_map` turns the object into a :class:`MigConfigFile`; :func:`apply_step`
turns a decided step into the object to write back (or says why it must not be written).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from migslice.mig.migparted import (
    MigPartedEntry,
    MigPartedError,
    merge_mig_parted,
    parse_mig_parted,
    removed_configs,
)
from migslice.names import RECORD_ANNOTATION
from migslice.objects.json import JsonObject, mapping
from migslice.repartition.record import RecordError, RepartitionRecord, parse_record

RawObject = JsonObject
MigConfigs = Mapping[str, tuple[MigPartedEntry, ...]]


@dataclass(frozen=True, slots=True)
class MigConfigFile:
    """The ConfigMap as read once: its configs, their names (None when the file is missing or
    unreadable: then nothing may move), the plan record (None when unreadable) and what is
    wrong, if anything."""

    raw: RawObject | None = None
    configs: MigConfigs = field(default_factory=dict)
    names: frozenset[str] | None = None
    record_text: str = ""
    record: RepartitionRecord | None = field(default_factory=RepartitionRecord)
    problem: str = ""
    record_fix: str = ""
    """What to do about an unreadable record (its :class:`RecordError`'s ``fix``)."""


def read_config_map(raw: RawObject | None, key: str) -> MigConfigFile:
    if raw is None:
        return MigConfigFile(problem="ConfigMap not found")
    metadata = raw.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(RECORD_ANNOTATION) if isinstance(annotations, Mapping) else None
    record_text = text if isinstance(text, str) else ""
    try:
        record = parse_record(record_text)
    except RecordError as error:
        return MigConfigFile(
            raw, record_text=record_text, record=None, problem=str(error), record_fix=error.fix
        )
    data = raw.get("data")
    config_text = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(config_text, str):
        return MigConfigFile(
            raw, record_text=record_text, record=record, problem=f"ConfigMap has no data key {key}"
        )
    try:
        configs = parse_mig_parted(config_text)
    except MigPartedError as error:
        return MigConfigFile(raw, record_text=record_text, record=record, problem=str(error))
    return MigConfigFile(raw, configs, frozenset(configs), record_text, record)


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """What to write: the ConfigMap object (None: write nothing, ``problem`` says why) and the
    names of ``migslice-*`` configs the merge removed (for the log)."""

    raw: dict[str, object] | None
    removed: tuple[str, ...] = ()
    problem: str = ""


def apply_step(
    current: RawObject,
    *,
    key: str,
    expected_record: str,
    record_text: str,
    configs: Mapping[str, tuple[MigPartedEntry, ...]],
    referenced: frozenset[str],
) -> FileUpdate:
    """``current`` with the step's record (and, for ``APPLY``, its ``configs`` merged into the
    mig-parted file), unless the record changed since it was read (``expected_record``)."""
    updated: dict[str, object] = copy.deepcopy(dict(current))
    metadata = dict(mapping(updated.get("metadata")))
    annotations = dict(mapping(metadata.get("annotations")))
    if str(annotations.get(RECORD_ANNOTATION) or "") != expected_record:
        return FileUpdate(None, problem="plan record changed since it was read")
    removed: tuple[str, ...] = ()
    if configs:
        data = dict(mapping(updated.get("data")))
        before = str(data.get(key) or "")
        try:
            after = merge_mig_parted(before, configs, referenced)
        except MigPartedError as error:
            return FileUpdate(None, problem=f"mig-parted file not merged ({error})")
        data[key] = after
        removed = tuple(removed_configs(before, after))
        updated["data"] = data
    annotations[RECORD_ANNOTATION] = record_text
    metadata["annotations"] = annotations
    updated["metadata"] = metadata
    return FileUpdate(updated, removed)
