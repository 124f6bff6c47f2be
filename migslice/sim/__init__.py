"""The cluster simulator: traces, baselines, mode A saturation, mode B churn and metrics.

It places pods with the same core the extender and the repartition controller use
(:mod:`migslice.scheduling`, :mod:`migslice.repartition.migmanager.planner`) on a simulated
cluster of MIG GPUs (GPU side only), against the baselines of benchmarks.md §5.5. Pure and
deterministic: the seed is an input. ``bench/packing/packing.py`` and ``migslice simulate``
are its shells.
"""

from migslice.sim.churn import run_arrivals, run_churn
from migslice.sim.churn_model import (
    Arrival,
    ChurnConfig,
    ChurnResult,
    Lifetimes,
    sample_churn,
)
from migslice.sim.limits import (
    Bound,
    LimitPoint,
    count_geometries,
    limit_curve,
    limit_first_failure_pct,
    oracle_layouts,
    slice_bound,
)
from migslice.sim.metrics import LoadPoint, RunResult
from migslice.sim.policies import POLICY_IDS, Policy, Reshaper, make_policy
from migslice.sim.saturation import (
    SaturationConfig,
    run_saturation,
    run_sequence,
    sample_arrivals,
)
from migslice.sim.trace import (
    GPU_MODEL,
    SYNTHETIC_MIX,
    TRACE_FOLDER,
    MappingKind,
    SimPod,
    TraceError,
    TracePod,
    Workload,
    map_pod,
    map_trace,
    mix_counts,
    parse_pod_list,
    profile_for,
    synthetic_workload,
)

__all__ = [
    "GPU_MODEL",
    "POLICY_IDS",
    "SYNTHETIC_MIX",
    "TRACE_FOLDER",
    "Arrival",
    "Bound",
    "ChurnConfig",
    "ChurnResult",
    "Lifetimes",
    "LimitPoint",
    "LoadPoint",
    "MappingKind",
    "Policy",
    "Reshaper",
    "RunResult",
    "SaturationConfig",
    "SimPod",
    "TraceError",
    "TracePod",
    "Workload",
    "count_geometries",
    "limit_curve",
    "limit_first_failure_pct",
    "make_policy",
    "map_pod",
    "map_trace",
    "mix_counts",
    "oracle_layouts",
    "parse_pod_list",
    "profile_for",
    "run_arrivals",
    "run_churn",
    "run_saturation",
    "run_sequence",
    "sample_arrivals",
    "sample_churn",
    "slice_bound",
    "synthetic_workload",
]
