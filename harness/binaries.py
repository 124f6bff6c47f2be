"""The control plane's binaries: built by ``e2e/build.sh`` into ``e2e/.bin`` (or
``MIGSLICE_E2E_BIN``), cached by pin."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.paths import E2E_DIR

DEFAULT_BIN_DIR = Path(os.environ.get("MIGSLICE_E2E_BIN", E2E_DIR / ".bin"))
BUILD_SCRIPT = E2E_DIR / "build.sh"


def build(bin_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """Run ``e2e/build.sh`` (a no-op when the binaries match the pin); return the bin dir."""
    env = dict(os.environ)
    if bin_dir is not None:
        env["MIGSLICE_E2E_BIN"] = str(bin_dir)
    out = subprocess.DEVNULL if quiet else None
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, env=env, stdout=out)
    return Path(env.get("MIGSLICE_E2E_BIN", DEFAULT_BIN_DIR))


def missing_binaries(bin_dir: Path) -> list[str]:
    return [n for n in ("etcd", "kube-apiserver", "kube-scheduler") if not _is_exe(bin_dir / n)]


def _is_exe(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)
