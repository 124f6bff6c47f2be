"""Child processes of the harness: each in its own process group, logging to a file.

A child gets ``PR_SET_PDEATHSIG=SIGKILL``, so even a ``kill -9`` of the Python process leaves
no stray etcd, kube-apiserver or kube-scheduler behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or to become ready."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pdeathsig_preexec() -> Callable[[], None] | None:
    """preexec_fn that makes the child get SIGKILL when its parent thread dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def _set() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return _set


class Process:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            log.write(f"### {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=pdeathsig_preexec(),
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout``; always reaps the child."""
        if self.popen.returncode is None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.popen.pid, sig)
                try:
                    self.popen.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Anything else left in the group (the leader exited first): kill it too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)

    def __repr__(self) -> str:
        return f"<Process {self.name} pid={self.pid} rc={self.popen.returncode}>"


def kill(process: Process) -> None:
    """SIGKILL a process group at once (a crash, not a shutdown) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.popen.wait(10)


def wait_until(
    what: str,
    check: Callable[[], bool],
    procs: Iterable[Process],
    timeout: float,
    interval: float = 0.2,
) -> None:
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if not p.running():
                raise ControlPlaneError(
                    f"{p.name} exited with code {p.popen.returncode} while waiting for {what}; "
                    f"log {p.log_path}:\n{p.log_tail()}"
                )
        if check():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(20)}" for p in procs)
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(interval)


def http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        e.close()
        return False
    except (OSError, ssl.SSLError):
        return False
