"""The physical upper bound on slice allocation for an expected mix (benchmarks.md §5.6).

The configuration LP: ``x_c >= 0`` GPUs use count-geometry ``c`` (the profile counts of a
maximal legal layout; any legal layout is dominated by a maximal one), ``y_p`` instances of
profile ``p`` are allocated::

    maximise   sum_p slices(p) * y_p
    subject to y_p <= arrived_p                      (no more than arrived)
               y_p <= sum_c cnt(c, p) * x_c          (only instances some GPU has)
               sum_c x_c <= G                        (G GPUs)

It ignores that a multi-GPU pod needs its GPUs on one node, that pods arrive in an order
and that the geometry must be chosen before the pods are known, so no scheduler can beat it.
Solving the LP relaxation (``x`` real) instead of the integer program only raises the bound,
so it stays an upper bound; at hundreds of GPUs the difference is below one GPU.

The solver is a small exact simplex (fractions, Bland's rule): every constraint is ``<=``
with a non-negative right-hand side, so the slack basis is feasible at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from migslice.mig import GpuModel, Layout, Rules, enumerate_maximal_layouts
from migslice.mig.layout import DEFAULT_RULES
from migslice.sim.trace import SimPod


@dataclass(frozen=True, slots=True)
class Geometry:
    """A count-geometry and one legal layout that realises it."""

    counts: tuple[tuple[str, int], ...]
    layout: Layout

    def count(self, profile: str) -> int:
        return dict(self.counts).get(profile, 0)


@dataclass(frozen=True, slots=True)
class Bound:
    """The LP optimum: allocated compute slices, per-profile allocation, GPUs per geometry."""

    slices: float
    allocated: tuple[tuple[str, float], ...]
    gpus_per_geometry: tuple[tuple[Geometry, float], ...]


def count_geometries(
    model: GpuModel, profiles: Sequence[str] | None = None, rules: Rules = DEFAULT_RULES
) -> tuple[Geometry, ...]:
    """Distinct count vectors of the maximal layouts (of ``profiles``; default all plain)."""
    names = (
        list(profiles) if profiles else [p.name for p in model.profiles if not p.parsed.attribute]
    )
    found: dict[tuple[tuple[str, int], ...], Layout] = {}
    for layout in enumerate_maximal_layouts(model, names, rules):
        counts = tuple(sorted(Counter(p.profile for p in layout).items()))
        found.setdefault(counts, layout)
    return tuple(Geometry(c, layout) for c, layout in sorted(found.items()))


def slice_bound(
    model: GpuModel,
    arrived: Mapping[str, float],
    gpus: float,
    *,
    geometries: Sequence[Geometry] | None = None,
) -> Bound:
    """The most compute slices any scheduler can allocate to ``arrived`` instances on
    ``gpus`` GPUs (the LP above)."""
    profiles = sorted(p for p, n in arrived.items() if n > 0)
    if geometries is None:
        geometries = count_geometries(model)
    useful = [g for g in geometries if any(g.count(p) for p in profiles)]
    if not profiles or not useful or gpus <= 0:
        return Bound(0.0, (), ())
    n_x, n_y = len(useful), len(profiles)
    # Variables: x_0..x_{n_x-1}, y_0..y_{n_y-1}. Rows: y_p <= a_p; y_p - cnt x <= 0; sum x <= G.
    rows: list[list[Fraction]] = []
    rhs: list[Fraction] = []
    for i, profile in enumerate(profiles):
        row = [Fraction(0)] * (n_x + n_y)
        row[n_x + i] = Fraction(1)
        rows.append(row)
        rhs.append(Fraction(str(arrived[profile])))
    for i, profile in enumerate(profiles):
        row = [Fraction(-g.count(profile)) for g in useful] + [Fraction(0)] * n_y
        row[n_x + i] = Fraction(1)
        rows.append(row)
        rhs.append(Fraction(0))
    rows.append([Fraction(1)] * n_x + [Fraction(0)] * n_y)
    rhs.append(Fraction(str(gpus)))
    objective = [Fraction(0)] * n_x + [Fraction(model.profile(p).compute_slices) for p in profiles]
    value, solution = maximise(objective, rows, rhs)
    return Bound(
        slices=float(value),
        allocated=tuple((p, float(solution[n_x + i])) for i, p in enumerate(profiles)),
        gpus_per_geometry=tuple(
            (g, float(solution[j])) for j, g in enumerate(useful) if solution[j] > 0
        ),
    )


def maximise(
    objective: Sequence[Fraction], rows: Sequence[Sequence[Fraction]], rhs: Sequence[Fraction]
) -> tuple[Fraction, list[Fraction]]:
    """max c.x subject to A x <= b, x >= 0, with b >= 0 (tableau simplex, Bland's rule)."""
    if any(b < 0 for b in rhs):
        raise ValueError("the slack basis needs every right-hand side >= 0")
    m, n = len(rows), len(objective)
    tableau = [
        [*row, *(Fraction(int(i == k)) for k in range(m)), b]
        for i, (row, b) in enumerate(zip(rows, rhs, strict=True))
    ]
    cost = [*(-c for c in objective), *([Fraction(0)] * m), Fraction(0)]
    basis = [n + i for i in range(m)]
    while True:
        entering = next((j for j in range(n + m) if cost[j] < 0), None)
        if entering is None:
            break
        best: tuple[Fraction, int, int] | None = None
        for i, row in enumerate(tableau):
            if row[entering] > 0:
                ratio = row[-1] / row[entering]
                if best is None or (ratio, basis[i]) < (best[0], best[1]):
                    best = (ratio, basis[i], i)
        if best is None:
            raise ValueError("the LP is unbounded")
        pivot_row = best[2]
        pivot = tableau[pivot_row][entering]
        tableau[pivot_row] = [v / pivot for v in tableau[pivot_row]]
        for i, row in enumerate(tableau):
            if i != pivot_row and row[entering] != 0:
                factor = row[entering]
                tableau[i] = [v - factor * p for v, p in zip(row, tableau[pivot_row], strict=True)]
        if cost[entering] != 0:
            factor = cost[entering]
            cost = [v - factor * p for v, p in zip(cost, tableau[pivot_row], strict=True)]
        basis[pivot_row] = entering
    solution = [Fraction(0)] * n
    for i, var in enumerate(basis):
        if var < n:
            solution[var] = tableau[i][-1]
    return cost[-1], solution


def expected_instances(pods: Sequence[SimPod], model: GpuModel) -> dict[str, float]:
    """Instances per profile per compute slice of arrived demand (sampling is uniform)."""
    counts: Counter[str] = Counter()
    slices = 0
    for pod in pods:
        counts[pod.profile] += pod.count
        slices += pod.compute_slices
    return {profile: count / slices for profile, count in counts.items()}


@dataclass(frozen=True, slots=True)
class LimitPoint:
    arrived_pct: int
    slice_allocation: float


def limit_curve(
    pods: Sequence[SimPod], model: GpuModel, gpus: int, *, arrived_pcts: Sequence[int]
) -> tuple[LimitPoint, ...]:
    """The bound on slice allocation when the expected mix has arrived at each load."""
    per_slice = expected_instances(pods, model)
    geometries = count_geometries(model)
    capacity = model.compute_slices * gpus
    points = []
    for pct in arrived_pcts:
        arrived = {p: rate * capacity * pct / 100 for p, rate in per_slice.items()}
        bound = slice_bound(model, arrived, gpus, geometries=geometries)
        points.append(LimitPoint(pct, bound.slices / capacity))
    return tuple(points)


def limit_first_failure_pct(
    pods: Sequence[SimPod], model: GpuModel, gpus: int, *, tolerance_pct: float = 0.1
) -> float:
    """The highest arrived load (%) at which the bound still places all expected demand."""
    per_slice = expected_instances(pods, model)
    geometries = count_geometries(model)
    capacity = model.compute_slices * gpus

    def all_fit(pct: float) -> bool:
        arrived = {p: rate * capacity * pct / 100 for p, rate in per_slice.items()}
        bound = slice_bound(model, arrived, gpus, geometries=geometries)
        return bound.slices >= capacity * pct / 100 * (1 - 1e-9)

    low, high = 0.0, 100.0
    while high - low > tolerance_pct:
        middle = (low + high) / 2
        if all_fit(middle):
            low = middle
        else:
            high = middle
    return low


def oracle_layouts(pods: Sequence[SimPod], model: GpuModel, gpus: int) -> tuple[Layout, ...]:
    """One layout per GPU: the LP's geometry mix for the expected mix at 100 % arrived,
    rounded to whole GPUs (largest remainder), whole-GPU layouts first so that they fill
    whole nodes (multi-GPU pods need their GPUs on one node)."""
    per_slice = expected_instances(pods, model)
    capacity = model.compute_slices * gpus
    arrived = {p: rate * capacity for p, rate in per_slice.items()}
    bound = slice_bound(model, arrived, gpus)
    shares = [(g, x) for g, x in bound.gpus_per_geometry]
    whole = [int(x) for _, x in shares]
    left = gpus - sum(whole)
    order = sorted(range(len(shares)), key=lambda i: -(shares[i][1] - whole[i]))
    for i in order[:left]:
        whole[i] += 1
    layouts: list[Layout] = []
    ranked = sorted(
        range(len(shares)), key=lambda i: (-max(p.size for p in shares[i][0].layout), i)
    )
    for i in ranked:
        layouts.extend([shares[i][0].layout] * whole[i])
    if not layouts:
        raise ValueError("the LP chose no geometry; is the workload empty?")
    while len(layouts) < gpus:
        layouts.append(layouts[-1])
    return tuple(layouts[:gpus])


def arrived_instances(
    arrivals: Sequence[SimPod], capacity_slices: int, arrived_pcts: Sequence[int]
) -> dict[int, Counter[str]]:
    """Instances per profile of the pods that had arrived when arrived demand first reached
    each load (the pod that crosses it included, as the run's load points count it)."""
    wanted = sorted(set(arrived_pcts))
    found: dict[int, Counter[str]] = {}
    counts: Counter[str] = Counter()
    arrived = 0
    for pod in arrivals:
        counts[pod.profile] += pod.count
        arrived += pod.compute_slices
        while wanted and 100 * arrived >= wanted[0] * capacity_slices:
            found[wanted.pop(0)] = Counter(counts)
    return found


def sampled_limit(
    arrivals: Sequence[SimPod], model: GpuModel, gpus: int, *, arrived_pcts: Sequence[int]
) -> tuple[LimitPoint, ...]:
    """The bound for the pods a run actually drew (not the expected mix), at each load."""
    capacity = model.compute_slices * gpus
    geometries = count_geometries(model)
    points = []
    for pct, counts in sorted(arrived_instances(arrivals, capacity, arrived_pcts).items()):
        bound = slice_bound(model, dict(counts), gpus, geometries=geometries)
        points.append(LimitPoint(pct, bound.slices / capacity))
    return tuple(points)


def sampled_first_failure_pct(arrivals: Sequence[SimPod], model: GpuModel, gpus: int) -> float:
    """The arrived load (%) of the longest prefix of the drawn pods that the bound places
    entirely (binary search over prefixes: the bound is monotone in the pods)."""
    capacity = model.compute_slices * gpus
    geometries = count_geometries(model)
    prefix: list[tuple[int, Counter[str]]] = []
    counts: Counter[str] = Counter()
    arrived = 0
    for pod in arrivals:
        counts[pod.profile] += pod.count
        arrived += pod.compute_slices
        prefix.append((arrived, Counter(counts)))

    def all_fit(index: int) -> bool:
        slices, drawn = prefix[index]
        return slice_bound(model, dict(drawn), gpus, geometries=geometries).slices >= slices - 1e-9

    low, high = -1, len(prefix)
    while high - low > 1:
        middle = (low + high) // 2
        if all_fit(middle):
            low = middle
        else:
            high = middle
    return 0.0 if low < 0 else 100.0 * prefix[low][0] / capacity
