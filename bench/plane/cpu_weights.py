"""``bench.plane.cluster --cpu-weights``: each process in a CPU cgroup weighted by its pod's
request.

On a node, the kubelet puts every Burstable pod in a cgroup whose CPU weight follows the pod's
CPU request (``cpu.shares`` = millicores x 1024 / 1000 on cgroup v1; cgroup v2's ``cpu.weight``
is converted from the shares as runc does), so under contention each pod's processes get the
share their request asks for. Without this the benchmark runs every process in one cgroup, each
thread weighing the same, which is not how any of them would run in a cluster.

The requests are the shipped ones: kubeadm's static pods for etcd (100m) and kube-apiserver
(250m), and the chart's ``values.yaml`` for the extender, the webhook and the migslice-scheduler
(the bench's schedulers, with the extender, without it and stock, are all that one binary, so
all get its request). A null extender stands in for the extender, so it gets the extender's
request in a cgroup of its own. The bench's own process is a client that would not run on the
node; it gets one CPU's weight (1024 shares) so that its watch of the binds is not starved.

Needs root and a writable cgroup ``cpu`` controller (v1 at ``/sys/fs/cgroup/cpu``, or v2 with
``cpu`` in ``/sys/fs/cgroup/cgroup.controllers``); the groups go under ``migslice-bench-<pid>``
and are removed when the bench ends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from harness.paths import REPO
from migslice.quantity import QuantityError, parse_quantity

CHART_VALUES = REPO / "charts" / "migslice" / "values.yaml"
CGROUP_ROOT = Path("/sys/fs/cgroup")

# kubeadm's static pods (cmd/kubeadm/app/phases/controlplane/manifests.go and
# phases/etcd/local.go): requests only, no CPU limits.
KUBEADM_REQUESTS_M = {"etcd": 100, "kube-apiserver": 250}
BENCH_SHARES = 1024
# The chart's workloads whose requests weight their processes (values.yaml keys).
CHART_COMPONENTS = ("extender", "webhook", "scheduler")


class CpuWeightsError(RuntimeError):
    pass


def shares_for(millicores: int) -> int:
    """The kubelet's ``MilliCPUToShares``: 1024 per CPU, at least 2."""
    return max(2, millicores * 1024 // 1000)


def weight_for(shares: int) -> int:
    """cgroup v2 ``cpu.weight`` (1-10000) from v1 shares, as runc converts them."""
    return 1 + ((shares - 2) * 9999) // 262142


def chart_requests_m(values_path: Path = CHART_VALUES) -> dict[str, int]:
    """The CPU request in millicores of each of the chart's components (``values.yaml``)."""
    values = yaml.safe_load(values_path.read_text())
    found: dict[str, int] = {}
    for component in CHART_COMPONENTS:
        try:
            request = values[component]["resources"]["requests"]["cpu"]
        except (KeyError, TypeError) as error:
            raise CpuWeightsError(
                f"{values_path}: no {component}.resources.requests.cpu to weight its process by"
            ) from error
        # YAML reads 0.5 as a float; Kubernetes takes a number there as the quantity it spells.
        text = str(request) if isinstance(request, float) else request
        try:
            found[component] = int(parse_quantity(text) * 1000)
        except QuantityError as error:
            raise CpuWeightsError(f"{values_path}: {component}'s CPU request: {error}") from error
    return found


def parse_requests(texts: list[str]) -> dict[str, int]:
    """``--cpu-request GROUP=QUANTITY`` values as millicores by group (what-if runs)."""
    found: dict[str, int] = {}
    for text in texts:
        group, sep, quantity = text.partition("=")
        if not sep or not group:
            raise CpuWeightsError(
                f"--cpu-request {text!r}: write GROUP=QUANTITY, e.g. kube-scheduler=1"
            )
        try:
            found[group.strip()] = int(parse_quantity(quantity.strip()) * 1000)
        except QuantityError as error:
            raise CpuWeightsError(f"--cpu-request {text!r}: {error}") from error
    return found


def shipped_shares(
    values_path: Path = CHART_VALUES, overrides: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Each group's cpu.shares: the control plane, our services, the null and the bench;
    ``overrides``: millicores by group instead of the shipped request."""
    chart = chart_requests_m(values_path)
    requests = {
        **KUBEADM_REQUESTS_M,
        # Every scheduler the bench runs is one binary, weighted by the chart's request.
        "kube-scheduler": chart["scheduler"],
        "extender": chart["extender"],
        "webhook": chart["webhook"],
        "null-extender": chart["extender"],
    }
    unknown = set(overrides or {}) - set(requests)
    if unknown:
        raise CpuWeightsError(
            f"--cpu-request: no group {', '.join(sorted(unknown))}; groups: {', '.join(requests)}"
        )
    requests.update(overrides or {})
    return {group: shares_for(m) for group, m in requests.items()} | {"bench": BENCH_SHARES}


class CpuGroups:
    """One cgroup per group name under ``<cpu controller>/migslice-bench-<pid>``."""

    def __init__(self, shares: Mapping[str, int], controller: Path, *, v2: bool) -> None:
        self.shares = dict(shares)
        self.v2 = v2
        self.controller = controller
        self.base = controller / f"migslice-bench-{os.getpid()}"
        self._made: list[Path] = []
        self._placed: dict[int, str] = {}

    @classmethod
    def open(cls, shares: Mapping[str, int], root: Path = CGROUP_ROOT) -> CpuGroups:
        """The machine's writable cpu controller, or a :class:`CpuWeightsError` saying why not."""
        v1 = root / "cpu"
        if (v1 / "cpu.shares").exists():
            groups = cls(shares, v1, v2=False)
        elif "cpu" in _read(root / "cgroup.controllers").split():
            groups = cls(shares, root, v2=True)
        else:
            raise CpuWeightsError(
                f"--cpu-weights: no cgroup cpu controller under {root} (neither v1 "
                f"{v1}/cpu.shares nor cpu in {root}/cgroup.controllers)"
            )
        try:
            groups._make(groups.base)
            if groups.v2:
                _enable_cpu(root)
                _enable_cpu(groups.base)
        except OSError as error:
            groups.close()
            raise CpuWeightsError(
                f"--cpu-weights: cannot create a cgroup under {groups.controller} ({error}); "
                "it needs root and a writable cgroup filesystem"
            ) from error
        return groups

    def place(self, group: str, pid: int) -> None:
        """Move ``pid`` (all its threads; children it forks later follow) into ``group``."""
        if group not in self.shares:
            raise CpuWeightsError(f"no CPU weight for {group!r}; known: {sorted(self.shares)}")
        path = self.base / group
        if path not in self._made:
            self._make(path)
            if self.v2:
                (path / "cpu.weight").write_text(f"{weight_for(self.shares[group])}\n")
            else:
                (path / "cpu.shares").write_text(f"{self.shares[group]}\n")
        try:
            (path / "cgroup.procs").write_text(f"{pid}\n")
        except ProcessLookupError:
            return  # it exited meanwhile
        self._placed[pid] = group

    def placed(self) -> dict[str, dict[str, int | list[int]]]:
        """What the report records: each group's weight and the processes placed in it."""
        groups: dict[str, dict[str, int | list[int]]] = {}
        for pid, group in sorted(self._placed.items()):
            entry = groups.setdefault(group, {"cpu_shares": self.shares[group], "pids": []})
            pids = entry["pids"]
            assert isinstance(pids, list)
            pids.append(pid)
        return groups

    def close(self) -> None:
        """Move every process left in the groups back to the top and remove the groups."""
        for path in reversed(self._made):
            for pid in _read(path / "cgroup.procs").split():
                with contextlib.suppress(OSError):
                    (self.controller / "cgroup.procs").write_text(f"{pid}\n")
            with contextlib.suppress(OSError):
                path.rmdir()
        self._made.clear()

    def _make(self, path: Path) -> None:
        path.mkdir(exist_ok=True)
        self._made.append(path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _enable_cpu(group: Path) -> None:
    if "cpu" not in _read(group / "cgroup.subtree_control").split():
        (group / "cgroup.subtree_control").write_text("+cpu\n")
