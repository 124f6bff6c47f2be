"""An install on a fresh control plane, as an admin runs it: a GPU cluster before migslice
(the GPU Operator's namespace, its ClusterPolicy and an A100 node), the README's commands through
bash, and what an install must leave behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from harness.actors import NAMESPACE, ClusterActors
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.controlplane import ControlPlane
from harness.paths import E2E_DIR, REPO

FIXTURES = E2E_DIR / "fixtures" / "gpu-operator"
Obj = dict[str, Any]


def readme_commands(readme: Path, heading: str) -> list[str]:
    """The lines of the first ```sh block under ``heading`` in the README."""
    lines = readme.read_text().splitlines()
    start = lines.index(heading)
    commands: list[str] = []
    inside = False
    for line in lines[start + 1 :]:
        if not inside and line.startswith("#") and not line.startswith("# "):
            break  # the next heading
        if line.strip() == "```sh" and not inside:
            inside = True
            continue
        if inside:
            if line.strip() == "```":
                return commands
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line)
    raise LookupError(f"no ```sh block under {heading!r} in {readme}")


def render_chart(helm: Path, *values: str, namespace: str = "migslice-system") -> list[Obj]:
    """``helm template`` of charts/migslice with ``--set`` values, as objects."""
    command = [
        str(helm),
        "template",
        "migslice",
        str(REPO / "charts" / "migslice"),
        "--namespace",
        namespace,
    ]
    for value in values:
        command += ["--set", value]
    text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(text) if d]


class Cluster:
    """A fresh control plane with what an admin's GPU cluster has before migslice."""

    def __init__(
        self,
        control_plane: ControlPlane,
        home: Path,
        policy: Obj | None = None,
    ) -> None:
        self.cp = control_plane
        api = control_plane.api_client()
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.admission = k8s.AdmissionregistrationV1Api(api)
        self.actors = ClusterActors(control_plane, NAMESPACE, control_plane.workdir / "actors")
        home.mkdir(parents=True, exist_ok=True)
        venv_bin = Path(sys.executable).parent  # `migslice`, for the by-hand certificates
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join(
                (str(control_plane.bin_dir), str(venv_bin), os.environ["PATH"])
            ),
            "KUBECONFIG": str(control_plane.kubeconfig),
            "HOME": str(home),
        }
        self.transcript: list[str] = []
        # The GPU Operator: its namespace and ClusterPolicy (the real CRD), an A100 node that
        # MIG Manager partitioned all-1g.10gb and the device plugin advertises (mixed strategy).
        ensure_namespace(self.core, "gpu-operator")
        control_plane.apply(FIXTURES / "clusterpolicies.nvidia.com.yaml")
        self.custom.create_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", policy or cluster_policy()
        )
        register_gpu_node(
            api,
            "gpu-a100-1",
            {"nvidia.com/mig-1g.10gb": 7},
            labels={"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.capable": "true"},
        )

    def sh(self, command: str, timeout: float = 300) -> str:
        """One README line through bash, as the admin types it."""
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self.env,
            timeout=timeout,
        )
        self.transcript.append(f"$ {command}\n{done.stdout}{done.stderr}")
        assert done.returncode == 0, (
            f"{command}\n{done.stdout}{done.stderr}\nactors: {self.actors.errors}\n"
            f"jobs: {self.actors.job_runs}"
        )
        return done.stdout

    def sized_pod_lands(self) -> k8s.V1Pod:
        """The README's pod: admitted with a MIG profile and bound by migslice-scheduler."""

        def bound() -> k8s.V1Pod | None:
            pods = self.core.list_namespaced_pod("inference").items
            return pods[0] if len(pods) == 1 and pods[0].spec.node_name else None

        pod: k8s.V1Pod = wait_for("the inference pod to be bound", bound, 60)
        assert pod.spec.node_name == "gpu-a100-1"
        assert pod.spec.scheduler_name == "migslice-scheduler"
        assert pod.metadata.annotations["migslice.io/profile"] == "1g.10gb"
        assert pod.metadata.annotations["migslice.io/tenant"] == "inference"
        limits = pod.spec.containers[0].resources.limits
        assert limits == {"nvidia.com/mig-1g.10gb": "1"}
        return pod

    def ca_bundles_match_the_secret(self) -> None:
        secret = self.core.read_namespaced_secret("migslice-webhook-tls", NAMESPACE)
        ca = secret.data["ca.crt"]
        for kind in ("mutating", "validating"):
            read = getattr(self.admission, f"read_{kind}_webhook_configuration")
            hooks = read("migslice-webhook").webhooks
            # both base64; the mutating configuration has the pods' and the claims' webhooks
            assert hooks and [h.client_config.ca_bundle for h in hooks] == [ca] * len(hooks)

    def cluster_policy_reads_back(self) -> None:
        policy = self.custom.get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
        )
        assert policy["spec"]["mig"]["strategy"] == "mixed"
        assert policy["spec"]["migManager"]["config"]["name"] == "migslice-mig-config"


def cluster_policy() -> Obj:
    """A ClusterPolicy with the fields its CRD requires, as the GPU Operator's chart makes it."""
    required = ("daemonsets", "dcgm", "dcgmExporter", "devicePlugin", "driver", "gfd")
    required += ("nodeStatusExporter", "operator", "toolkit")
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {**{k: {} for k in required}, "mig": {"strategy": "single"}},
    }


def fresh_workdir(name: str) -> Path:
    return E2E_DIR / ".run" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{name}"
