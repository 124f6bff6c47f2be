"""Process figures for ``bench.plane.cluster``: resident memory, CPU seconds and the scheduler's
run and run-queue times from ``/proc``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (depth first)."""
    found: list[int] = []
    for task in _tasks(pid):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                kids = [int(k) for k in handle.read().split()]
        except OSError:
            continue
        for kid in kids:
            found.append(kid)
            found.extend(children(kid))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) in MiB; empty when the process is gone."""
    figures: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    figures["rss_mib" if key == "VmRSS" else "peak_mib"] = (
                        int(value.split()[0]) / 1024
                    )
    except OSError:
        pass
    return figures


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


class Sched(NamedTuple):
    """A thread's (or a process's threads') scheduling so far, from the kernel's schedstat."""

    on_core_s: float
    """Seconds running on a core."""
    waiting_s: float
    """Seconds runnable but waiting for a core."""
    timeslices: int
    """Times it was put on a core (about one per wake-up)."""
    slept: int
    """Times it gave up its core to wait (for I/O, a lock, Python's GIL): voluntary switches."""
    preempted: int
    """Times the kernel took its core while it could still run: involuntary switches."""


def sched_s(pid: int, tid: int | None = None) -> Sched:
    """:class:`Sched` of thread ``tid`` of ``pid``, or summed over the threads ``pid`` has now
    (``/proc/<pid>/task/<tid>/schedstat`` and the switch counts of its ``status``; a thread
    that ended meanwhile drops out of the sum). Zeros when it is gone."""
    tasks = [str(tid)] if tid is not None else _tasks(pid)
    on_core = waiting = slices = slept = preempted = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                run_ns, wait_ns, count = handle.read().split()
            with open(f"/proc/{pid}/task/{task}/status") as handle:
                switches = _switches(handle.read())
        except (OSError, ValueError):
            continue
        on_core += int(run_ns)
        waiting += int(wait_ns)
        slices += int(count)
        slept += switches[0]
        preempted += switches[1]
    return Sched(on_core / 1e9, waiting / 1e9, slices, slept, preempted)


def _switches(status: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches from a ``/proc/.../status`` text."""
    found = dict.fromkeys(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"), 0)
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in found:
            found[key] = int(value)
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def machine_s() -> dict[str, float]:
    """Seconds every CPU of the machine spent so far busy, idle (with I/O wait) and stolen by
    the hypervisor (``/proc/stat``'s first line)."""
    with open("/proc/stat") as handle:
        fields = [int(f) for f in handle.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return {
        "busy": (user + nice + system + irq + softirq) / TICKS,
        "idle": (idle + iowait) / TICKS,
        "steal": steal / TICKS,
    }


def server_processes(pid: int) -> dict[str, int]:
    """The gunicorn master and worker under a ``migslice <command>`` launcher ``pid``.

    The worker is the master's child; the master is the first descendant running Python
    (the launcher may be a wrapper such as ``unshare``/``chroot``)."""
    tree = [pid, *children(pid)]
    pythons = [p for p in tree if "python" in cmdline(p) or "migslice" in cmdline(p)]
    if not pythons:
        return {}
    master = pythons[0]
    workers = children(master)
    found = {"master": master}
    if workers:
        found["worker"] = workers[0]
    return found


def snapshot(processes: Iterable[tuple[str, int]]) -> dict[str, dict[str, float]]:
    return {name: memory_mib(pid) | {"cpu_s": cpu_s(pid)} for name, pid in processes}


# One garbage collection of a Go process run with GODEBUG=gctrace=1 (Go's runtime package
# documentation), printed when it ends: "gc 12 @3.456s 2%: 0.1+20+0.05 ms clock,
# 0.4+10/40/80+0.2 ms cpu, ...": when it began (seconds since the process started), its phases'
# wall time, and their CPU (sweep termination + assist/background/idle marking + mark
# termination).
GC_TRACE = re.compile(rb"gc (\d+) @([\d.]+)s \d+%: ([\d.+]+) ms clock, ([\d.+/]+) ms cpu")
# The runtime writes a trace line in pieces, so a line the process logs meanwhile (klog's, or
# etcd's JSON) can land inside one; each of those is one write, dropped whole to rejoin it.
LOGGED_LINE = re.compile(rb"(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}|\{\"level\":)[^\n]*\n")


class GoGC(NamedTuple):
    """Garbage collections of a Go process (``GODEBUG=gctrace=1``) during a stretch of time."""

    cycles: int
    """Collections that ran, at least in part, in the stretch."""
    cpu_ms: float
    """Their CPU by the runtime's own account (idle-time marking included), each counted for the
    share of its wall time that fell in the stretch."""


def log_size(path: Path) -> int:
    """Bytes in ``path`` so far (0 when it is not there): where a stretch of a log begins."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def started_s(pid: int) -> float | None:
    """When ``pid`` started, in seconds of the clock ``time.monotonic()`` reads (both count from
    the machine's boot), to a clock tick; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[19]) / TICKS


def gc_traces(text: bytes) -> list[tuple[float, float, float]]:
    """``(began_s, wall_s, cpu_ms)`` of each collection traced in ``text`` (a Go process's log
    with GODEBUG=gctrace=1), whatever lines landed inside the trace lines; ``began_s`` counts
    from the process's start."""
    found = []
    for trace in GC_TRACE.finditer(LOGGED_LINE.sub(b"", text)):
        wall_ms = sum(float(part) for part in trace.group(3).split(b"+"))
        cpu_ms = sum(float(part) for part in re.split(rb"[+/]", trace.group(4)))
        found.append((float(trace.group(2)), wall_ms / 1000, cpu_ms))
    return found


def go_gc(path: Path, offset: int, started: float, since: float, until: float) -> GoGC:
    """The collections of the Go process that started at ``started`` (:func:`started_s`) and
    logs to ``path`` from byte ``offset`` on, that ran between ``since`` and ``until`` (the
    clock of ``time.monotonic()``), each counted for the share of its wall time inside."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read()
    except OSError:
        return GoGC(0, 0.0)
    cycles, cpu_ms = 0, 0.0
    for began, wall, cpu in gc_traces(text):
        begin, end = started + began, started + began + wall
        inside = min(end, until) - max(begin, since)
        if inside > 0 or (wall == 0 and since <= begin <= until):
            cycles += 1
            cpu_ms += cpu * (inside / wall if wall > 0 else 1.0)
    return GoGC(cycles, round(cpu_ms, 3))


class GoLog:
    """A Go process of the control plane, whose collections a run reads from its log."""

    def __init__(self, path: Path, offset: int, pid: int) -> None:
        self.path, self.offset, self.pid = path, offset, pid
        self.started: float | None = None

    def note_start(self) -> None:
        """Reads when the process started, while it runs (kube-scheduler stops after a run)."""
        if self.started is None:
            self.started = started_s(self.pid)

    def per_pod(self, since: float, until: float, pods: int) -> dict[str, float]:
        """Collections between ``since`` and ``until``, and their CPU ms per pod of ``pods``."""
        if self.started is None:
            return {"cycles": 0, "cpu_ms_per_pod": 0.0}
        cycles, cpu_ms = go_gc(self.path, self.offset, self.started, since, until)
        return {"cycles": cycles, "cpu_ms_per_pod": round(cpu_ms / max(1, pods), 2)}
