"""The install harness maps a pod's mounted paths to local folders once per argument, wherever
the repository is checked out (a checkout under /tmp used to be mapped twice: its folders
start like the pod's /tmp mount)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.actors import ClusterActors


@pytest.mark.parametrize("root", ["/srv/checkout/run", "/tmp/checkout/run"])
def test_mounted_paths_become_local_folders_once(root: str) -> None:
    mounts = {"/tmp": Path(f"{root}/tmp"), "/var/run/tls": Path(f"{root}/tls")}
    argv = [
        "migslice",
        "--tls-cert=/var/run/tls/tls.crt",
        "--tls-key",
        "/var/run/tls/tls.key",
        "/tmp/x",
        "-v",
    ]
    assert ClusterActors.substitute(argv, mounts) == [
        "migslice",
        f"--tls-cert={root}/tls/tls.crt",
        "--tls-key",
        f"{root}/tls/tls.key",
        f"{root}/tmp/x",
        "-v",
    ]
