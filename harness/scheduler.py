"""kube-scheduler in the harness: its configuration and a running process."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.process import Process


def default_scheduler_config(
    scheduler_name: str = "default-scheduler",
    *,
    extenders: Sequence[Mapping[str, Any]] = (),
    extra_profiles: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A minimal ``KubeSchedulerConfiguration`` (v1): one profile, no leader election.

    ``clientConnection.kubeconfig`` is filled in by :meth:`ControlPlane.start_scheduler`.
    """
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}, *map(dict, extra_profiles)],
    }
    if extenders:
        cfg["extenders"] = [dict(e) for e in extenders]
    return cfg


class Scheduler:
    """A running kube-scheduler; :meth:`stop` it or let :meth:`ControlPlane.stop` do it."""

    def __init__(self, name: str, process: Process, config_path: Path, port: int) -> None:
        self.name = name
        self.process = process
        self.config_path = config_path
        self.port = port

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def stop(self) -> None:
        self.process.stop()


def effective_config(
    config: Mapping[str, Any] | Path | str | None,
    *,
    kubeconfig: Path,
    leader_elect: bool | None,
) -> dict[str, Any]:
    """The configuration a kube-scheduler of the harness runs with.

    ``config`` is a dict or a YAML/JSON file (default: :func:`default_scheduler_config`). Its
    ``clientConnection.kubeconfig`` is always replaced by ``kubeconfig``, and
    ``leaderElection.leaderElect`` by ``leader_elect`` unless that is None.
    """
    if config is None:
        cfg: dict[str, Any] = default_scheduler_config()
    elif isinstance(config, (str, Path)):
        cfg = yaml.safe_load(Path(config).read_text())
    else:
        cfg = json.loads(json.dumps(config))  # deep copy; must be JSON-able anyway
    cfg.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
    if leader_elect is not None:
        cfg.setdefault("leaderElection", {})["leaderElect"] = leader_elect
    return cfg
