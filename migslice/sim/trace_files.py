"""The simulator's workloads as its commands and the benchmarks take them: the synthetic one,
or a pod list of the trace read from disk and mapped (the one place that reads trace files;
:mod:`migslice.sim.trace` parses text)."""

from __future__ import annotations

from pathlib import Path

from migslice.console import CommandError
from migslice.sim import (
    TRACE_FOLDER,
    MappingKind,
    TraceError,
    Workload,
    map_trace,
    parse_pod_list,
    synthetic_workload,
)

DEFAULT_DATA_DIR = Path("../shared/data")
MAPPINGS = ("M1", "M2", "M3", "M4", "synthetic")


def load_workload(data_dir: Path, trace: str, mapping: str) -> Workload:
    """The pods to sample: ``synthetic``, or ``openb_pod_list_<trace>.csv`` mapped by M1/M2."""
    if mapping == "synthetic":
        return synthetic_workload()
    try:
        kind = MappingKind(mapping)
    except ValueError:
        raise CommandError(f"unknown mapping {mapping!r}; choose {', '.join(MAPPINGS)}") from None
    if not data_dir.is_dir():
        raise CommandError(
            f"data directory {data_dir} not found (resolved {data_dir.resolve()}); the traces "
            f"live in ../shared/data beside the repository: run from the repository root, "
            f"pass --data-dir DIR (the folder holding {TRACE_FOLDER}/), or use the synthetic "
            f"workload, which needs no trace (`migslice simulate --mapping synthetic`, the "
            f"benchmarks' `--workloads synthetic`)"
        )
    path = data_dir / TRACE_FOLDER / f"openb_pod_list_{trace}.csv"
    if not path.is_file():
        raise CommandError(
            f"trace file {path} not found; --trace names openb_pod_list_<trace>.csv in "
            f"{data_dir / TRACE_FOLDER} (e.g. default, gpushare100)"
        )
    try:
        pods = parse_pod_list(path.read_text(encoding="utf-8"))
    except TraceError as error:
        raise CommandError(f"{path}: {error}") from None
    return map_trace(trace, pods, kind)
