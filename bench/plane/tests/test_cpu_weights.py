"""``bench.plane.cluster --cpu-weights``: each process in a CPU cgroup weighted as the kubelet
would.

The weights follow the kubelet's and runc's conversions; the groups are written as cgroupfs
reads them (on a directory shaped like it, and, where this runs as root with a writable cpu
controller, on the real one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.plane.cluster import control_plane_group, parse_args
from bench.plane.cpu_weights import (
    CGROUP_ROOT,
    CHART_VALUES,
    CpuGroups,
    CpuWeightsError,
    chart_requests_m,
    parse_requests,
    shares_for,
    shipped_shares,
    weight_for,
)
from bench.plane.report import _render_weights
from harness.controlplane import ControlPlane


def test_shares_follow_the_kubelets_conversion() -> None:
    # pkg/kubelet/cm: shares = milliCPU * 1024 / 1000, never under 2.
    assert [shares_for(m) for m in (0, 1, 100, 250, 500, 1000, 2500)] == [
        2, 2, 102, 256, 512, 1024, 2560,
    ]  # fmt: skip


def test_v2_weights_follow_runcs_conversion() -> None:
    # runc ConvertCPUSharesToCgroupV2Value: the ends of both ranges map onto each other.
    assert weight_for(2) == 1
    assert weight_for(262144) == 10000
    assert weight_for(1024) == 39
    assert weight_for(102) < weight_for(256) < weight_for(512)


def write_values(path: Path, **cpu: str) -> Path:
    lines = []
    for component, request in cpu.items():
        lines += [f"{component}:", "  resources:", f"    requests: {{cpu: {request}, memory: 1Gi}}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_charts_requests_are_read_from_its_values(tmp_path: Path) -> None:
    values = write_values(tmp_path / "values.yaml", extender="1500m", webhook="0.2", scheduler="1")
    assert chart_requests_m(values) == {"extender": 1500, "webhook": 200, "scheduler": 1000}
    shares = shipped_shares(values)
    assert shares["extender"] == shares["null-extender"] == 1536
    assert shares["kube-scheduler"] == 1024
    assert (shares["etcd"], shares["kube-apiserver"]) == (102, 256)  # kubeadm's static pods


def test_the_shipped_chart_names_every_request() -> None:
    requests = chart_requests_m(CHART_VALUES)
    assert set(requests) == {"extender", "webhook", "scheduler"}
    assert all(m > 0 for m in requests.values())


def test_a_chart_without_a_request_is_named(tmp_path: Path) -> None:
    values = write_values(tmp_path / "values.yaml", extender="500m", webhook="200m")
    with pytest.raises(CpuWeightsError, match=r"scheduler\.resources\.requests\.cpu"):
        chart_requests_m(values)
    values = write_values(tmp_path / "values.yaml", extender="500m", webhook="lots", scheduler=1)
    with pytest.raises(CpuWeightsError, match="webhook's CPU request"):
        chart_requests_m(values)


def fake_v1(root: Path) -> Path:
    controller = root / "cpu"
    controller.mkdir(parents=True)
    (controller / "cpu.shares").write_text("1024\n")
    return controller


def test_v1_groups_get_shares_and_processes(tmp_path: Path) -> None:
    controller = fake_v1(tmp_path)
    groups = CpuGroups.open({"extender": 512, "etcd": 102}, root=tmp_path)
    groups.place("extender", 41)
    groups.place("extender", 42)
    groups.place("etcd", 7)
    base = controller / f"migslice-bench-{os.getpid()}"
    assert (base / "extender" / "cpu.shares").read_text() == "512\n"
    assert (base / "extender" / "cgroup.procs").read_text() == "42\n"  # the last write
    assert (base / "etcd" / "cpu.shares").read_text() == "102\n"
    assert groups.placed() == {
        "etcd": {"cpu_shares": 102, "pids": [7]},
        "extender": {"cpu_shares": 512, "pids": [41, 42]},
    }
    with pytest.raises(CpuWeightsError, match="no CPU weight for 'webhook'"):
        groups.place("webhook", 9)
    groups.close()
    # What was left in a group goes back to the top (a plain file keeps the last write: the
    # groups are emptied last made first).
    assert (controller / "cgroup.procs").read_text() == "42\n"


def test_v2_groups_enable_the_controller_and_write_weights(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    groups = CpuGroups.open({"extender": 512}, root=tmp_path)
    groups.place("extender", 41)
    base = tmp_path / f"migslice-bench-{os.getpid()}"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert (base / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert (base / "extender" / "cpu.weight").read_text() == f"{weight_for(512)}\n"
    assert not (base / "extender" / "cpu.shares").exists()


def test_no_cpu_controller_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(CpuWeightsError, match="no cgroup cpu controller"):
        CpuGroups.open({"extender": 512}, root=tmp_path)


def test_every_scheduler_is_weighted_as_kube_scheduler() -> None:
    assert control_plane_group("etcd") == "etcd"
    assert control_plane_group("kube-apiserver") == "kube-apiserver"
    for name in ("migslice-scheduler", "bench-no-extender", "bench-stock"):
        assert control_plane_group(name) == "kube-scheduler"


def test_the_report_says_how_processes_were_weighted() -> None:
    assert _render_weights(None) == ["Every process in one CPU cgroup.", ""]
    line = _render_weights({"etcd": {"cpu_shares": 102, "pids": [7]}})[0]
    assert "etcd 102 (1 processes)" in line


def test_the_control_plane_hands_each_spawned_process_over(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    # A command line no other process on the machine has.
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)", f"sleeper-{uuid.uuid4().hex}"]
    plane = ControlPlane(tmp_path, on_spawn=lambda name, pid: seen.append((name, pid)))
    process = plane._spawn("sleeper", sleeper)
    try:
        assert seen == [("sleeper", process.pid)]
    finally:
        process.stop()

    def refuse(name: str, pid: int) -> None:
        raise CpuWeightsError("refused")

    refusing = ControlPlane(tmp_path, on_spawn=refuse)
    sleeper[-1] = f"sleeper-{uuid.uuid4().hex}"
    with pytest.raises(CpuWeightsError):
        refusing._spawn("sleeper", sleeper)
    # The process it could not place is not left running.
    leftover = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and sleeper[-1] in _cmdline(int(pid))
    ]
    assert leftover == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _writable_v1() -> bool:
    return os.geteuid() == 0 and os.access(CGROUP_ROOT / "cpu" / "cpu.shares", os.W_OK)


@pytest.mark.skipif(not _writable_v1(), reason="needs root and a writable cgroup v1 cpu controller")
def test_a_real_process_moves_into_its_group_and_back() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    groups = CpuGroups.open({"extender": 512})
    try:
        groups.place("extender", child.pid)
        cgroups = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert f"migslice-bench-{os.getpid()}/extender" in cgroups
        assert (groups.base / "extender" / "cpu.shares").read_text().strip() == "512"
    finally:
        groups.close()
        child.kill()
        child.wait()
    assert not groups.base.exists()


def test_a_what_if_request_replaces_the_shipped_one(tmp_path: Path) -> None:
    values = write_values(tmp_path / "values.yaml", extender="500m", webhook="200m", scheduler=0.1)
    overrides = parse_requests(["kube-scheduler=1", "webhook = 50m"])
    assert overrides == {"kube-scheduler": 1000, "webhook": 50}
    shares = shipped_shares(values, overrides)
    assert (shares["kube-scheduler"], shares["webhook"], shares["extender"]) == (1024, 51, 512)
    with pytest.raises(CpuWeightsError, match="no group kube-controller-manager"):
        shipped_shares(values, {"kube-controller-manager": 200})
    with pytest.raises(CpuWeightsError, match="GROUP=QUANTITY"):
        parse_requests(["kube-scheduler"])
    with pytest.raises(CpuWeightsError, match="'extender=lots'"):
        parse_requests(["extender=lots"])


def test_weights_are_the_default_and_a_what_if_needs_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse_args([]).cpu_weights is None  # weighted where the machine allows it
    assert parse_args(["--no-cpu-weights"]).cpu_weights is False
    assert parse_args(["--cpu-request", "kube-scheduler=1"]).cpu_request == ["kube-scheduler=1"]
    with pytest.raises(SystemExit):
        parse_args(["--no-cpu-weights", "--cpu-request", "kube-scheduler=1"])
    assert "needs the CPU weights" in capsys.readouterr().err
