"""Workload traces for the simulator: the Alibaba v2023 pod list mapped to MIG profiles.

The trace (``cluster-trace-gpu-v2023``, Weng et al., ATC'23; research use) lists pods with
``num_gpu`` and ``gpu_milli`` (thousandths of one GPU); it has no GPU-memory column, so a MIG
profile has to be derived from the compute share (docs/benchmarks.md, "Packing"):

* ``gpu_milli == 1000`` with ``num_gpu == k``: ``k`` x ``7g.80gb`` on one node (whole GPUs);
* ``0 < gpu_milli < 1000`` (a sharing pod, ``num_gpu == 1``): one profile by ``k`` compute
  slices, 1 -> ``1g.10gb``, 2 -> ``2g.20gb``, 3 -> ``3g.40gb``, 4 -> ``4g.40gb``, 5..7 ->
  ``7g.80gb``, where ``k`` is ``ceil(7 gpu_milli / 1000)`` (M1, compute-ceil, the default)
  or ``round(7 gpu_milli / 1000)``, at least 1 (M2, compute-round: up to 1/14 GPU
  under-provisioned); M3 (memory-proportional) takes the smallest profile with at least
  ``ceil(7 gpu_milli / 1000)`` compute slices and ``ceil(8 gpu_milli / 1000)`` memory slices
  (adds ``1g.20gb``); M4 (cap at 4g) is M1 with 5 or 6 slices mapped to ``4g.40gb``, a
  deliberately under-provisioned stress case (benchmarks.md §5.1);
* pods without a GPU (``num_gpu == 0``) are skipped: the simulator models the GPU side only.

Profile names are the A100-80GB / H100-80GB ones. Parsing takes text, not files (reading the
file is the caller's business, as for cluster files).
"""

from __future__ import annotations

import csv
import enum
import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from migslice.errors import InvalidInputError
from migslice.mig import CATALOG, GpuModel

WHOLE_PROFILE = "7g.80gb"
PROFILE_BY_SLICES = {
    1: "1g.10gb",
    2: "2g.20gb",
    3: "3g.40gb",
    4: "4g.40gb",
    5: WHOLE_PROFILE,
    6: WHOLE_PROFILE,
    7: WHOLE_PROFILE,
}
GPU_MODEL: GpuModel = CATALOG.get("A100-80GB")
REQUIRED_COLUMNS = ("name", "num_gpu", "gpu_milli")
TRACE_FOLDER = "alibaba-cluster-trace-gpu-v2023"

SYNTHETIC_MIX: tuple[tuple[str, int], ...] = (
    ("1g.10gb", 40),
    ("2g.20gb", 25),
    ("3g.40gb", 20),
    ("4g.40gb", 5),
    ("7g.80gb", 10),
)
"""The MIG-friendly mix 1g:2g:3g:4g:7g = 40:25:20:5:10 by pod count (benchmarks.md §5.1)."""


class TraceError(InvalidInputError):
    """A pod list that cannot be read; the message names the row and the column."""


class MappingKind(enum.StrEnum):
    """How a sharing pod's ``gpu_milli`` becomes a profile."""

    COMPUTE_CEIL = "M1"
    COMPUTE_ROUND = "M2"
    MEMORY_PROPORTIONAL = "M3"
    CAP_AT_4G = "M4"


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of the pod list, GPU columns only."""

    name: str
    num_gpu: int
    gpu_milli: int
    group: str = ""
    """The ``qos`` column where the list has one (the simulator's tenant)."""

    @property
    def is_cpu_only(self) -> bool:
        return self.num_gpu == 0 or self.gpu_milli == 0

    @property
    def is_sharing(self) -> bool:
        return not self.is_cpu_only and self.gpu_milli < 1000


@dataclass(frozen=True, slots=True)
class SimPod:
    """A pod as the simulator places it: ``count`` instances of ``profile`` on one node.

    Under the whole-GPU baseline the pod takes ``count`` whole GPUs instead.
    """

    name: str
    profile: str
    count: int = 1
    tenant: str = ""
    """The trace group it belongs to (:mod:`migslice.sim.tenants`); empty: none."""

    @property
    def compute_slices(self) -> int:
        """The demand in compute slices (what arrived load is counted in)."""
        return GPU_MODEL.profile(self.profile).compute_slices * self.count

    @property
    def memory_slices(self) -> int:
        return GPU_MODEL.profile(self.profile).memory_slices * self.count


@dataclass(frozen=True, slots=True)
class Workload:
    """Pods to sample from, and what was left out of the source."""

    name: str
    pods: tuple[SimPod, ...]
    skipped_cpu_only: int = 0


def parse_pod_list(text: str) -> tuple[TracePod, ...]:
    """Parse an ``openb_pod_list_*.csv`` (header row; 5- or 11-column variants)."""
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceError(
            f"pod list lacks column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}"
        )
    pods: list[TracePod] = []
    for row_number, row in enumerate(reader, start=2):
        pods.append(
            TracePod(
                name=row["name"],
                num_gpu=_int(row, "num_gpu", row_number),
                gpu_milli=_int(row, "gpu_milli", row_number),
                group=(row.get("qos") or "").strip(),
            )
        )
    return tuple(pods)


def _int(row: dict[str, str], column: str, row_number: int) -> int:
    value = row.get(column) or "0"
    try:
        number = int(float(value))
    except ValueError:
        raise TraceError(f"row {row_number}: {column}={value!r} is not a number") from None
    if number < 0:
        raise TraceError(f"row {row_number}: {column}={number} is negative")
    return number


def compute_slices_for(gpu_milli: int, mapping: MappingKind) -> int:
    """Compute slices (1..7) of a sharing pod's ``gpu_milli`` under ``mapping`` (M3 and M4
    start from M1's)."""
    if not 0 < gpu_milli <= 1000:
        raise ValueError(f"gpu_milli={gpu_milli} is not a share of one GPU (1..1000)")
    if mapping is MappingKind.COMPUTE_ROUND:
        return max(1, (7 * gpu_milli + 500) // 1000)
    return -(-7 * gpu_milli // 1000)


def profile_for(gpu_milli: int, mapping: MappingKind) -> str:
    """The A100-80GB profile of a sharing pod's ``gpu_milli`` under ``mapping``."""
    slices = compute_slices_for(gpu_milli, mapping)
    if mapping is MappingKind.MEMORY_PROPORTIONAL:
        memory = -(-GPU_MODEL.memory_slices * gpu_milli // 1000)
        fitting = [
            p
            for p in GPU_MODEL.profiles
            if not p.parsed.attribute and p.compute_slices >= slices and p.memory_slices >= memory
        ]
        return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices)).name
    if mapping is MappingKind.CAP_AT_4G and slices in (5, 6):
        return "4g.40gb"
    return PROFILE_BY_SLICES[slices]


def map_pod(pod: TracePod, mapping: MappingKind) -> SimPod | None:
    """The pod's MIG demand; None for a pod without a GPU."""
    if pod.is_cpu_only:
        return None
    if pod.gpu_milli >= 1000:
        return SimPod(pod.name, WHOLE_PROFILE, pod.num_gpu, pod.group)
    return SimPod(pod.name, profile_for(pod.gpu_milli, mapping), 1, pod.group)


def map_trace(name: str, pods: Iterable[TracePod], mapping: MappingKind) -> Workload:
    mapped: list[SimPod] = []
    skipped = 0
    for pod in pods:
        sim_pod = map_pod(pod, mapping)
        if sim_pod is None:
            skipped += 1
        else:
            mapped.append(sim_pod)
    return Workload(f"{name}/{mapping.value}", tuple(mapped), skipped)


def synthetic_workload() -> Workload:
    """One pod per unit of :data:`SYNTHETIC_MIX` weight: uniform sampling gives the mix."""
    pods = tuple(
        SimPod(f"synthetic-{profile}-{i}", profile)
        for profile, weight in SYNTHETIC_MIX
        for i in range(weight)
    )
    return Workload("synthetic", pods)


def mix_counts(pods: Iterable[SimPod]) -> dict[str, int]:
    """Pods per profile (a ``k`` x 7g pod counts once), in the catalog's profile order."""
    counts = Counter(p.profile for p in pods)
    return {name: counts[name] for name in GPU_MODEL.profile_names if counts[name]}
