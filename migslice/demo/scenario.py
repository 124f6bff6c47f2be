"""``migslice demo``: the real webhook and extender, over HTTPS, on an example cluster.

The demo plays the parts of a cluster that it cannot have on a laptop, and only those:
kube-apiserver (it sends AdmissionReviews exactly as the API server does and stores the
objects in a cluster file), kube-scheduler (it sends ExtenderArgs with node names and binds to
the best-scored node) and NVIDIA MIG Manager (it applies a mig-parted config by rewriting a
node's labels and allocatable). migslice itself runs as it does in a cluster: ``migslice
webhook`` and ``migslice extender`` under gunicorn with TLS from ``migslice certs``, serving
the cluster file, which they re-read whenever the demo rewrites it.
"""

from __future__ import annotations

import base64
import copy
import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import jsonpatch

from migslice.demo.controller import RepartitionPass
from migslice.demo.stage import NAMESPACE, Cluster, DemoError, bundled_cluster
from migslice.mig.render import render_bar
from migslice.names import (
    MIG_CONFIG_MAP,
)
from migslice.objects import format_time
from migslice.serving.certs import write_tls_bundle
from migslice.serving.process import ServerProcess, ServerStartError

# --------------------------------------------------------------------------- the walk


@dataclass
class Demo:
    cluster: Cluster
    webhook: ServerProcess
    extender: ServerProcess
    out: TextIO
    pause_s: float = 0.0

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def step(self, title: str) -> None:
        if self.pause_s:
            time.sleep(self.pause_s)
        self.say(f"\n== {title}")

    def show_gpus(self) -> None:
        for state in self.cluster.states():
            model = state.model
            if model is None:
                continue
            self.say(f"  {state.name} ({model.key}, {state.facts.mig_config})")
            for gpu in state.gpus:
                used = [p for p, held in zip(gpu.instances, gpu.held, strict=True) if held]
                in_use = ", ".join(f"{p.profile}@{p.start}" for p in used) or "idle"
                bar = render_bar(model, gpu.instances, cell=7)
                self.say(f"    GPU {gpu.index} {bar}  in use: {in_use}")

    # -- the API server's part ------------------------------------------------------------

    def create_pod(self, namespace: str, size: str, app: str) -> dict[str, Any] | None:
        """Admission as kube-apiserver does it; the stored pod, or None when denied."""
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{app}-",
                "namespace": namespace,
                "creationTimestamp": None,
                "annotations": {"migslice.io/gpu-size": size},
            },
            "spec": {"containers": [{"name": "main", "image": f"{app}:1"}]},
        }
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": "CREATE",
                "userInfo": {"username": f"{namespace}-engineer"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
        self.say(f"  {namespace}: create pod {app}-* with migslice.io/gpu-size: {size}")
        status, answer = self.webhook.request("POST", "/mutate", review)
        if status != 200:
            self.say(f"    webhook answered HTTP {status}: {answer}")
            return None
        response = answer["response"]
        if not response["allowed"]:
            message = response.get("status", {}).get("message", "")
            self.say(
                f'    Error from server (Forbidden): admission webhook "pods.webhook.migslice.io" '
                f"denied the request: {message}"
            )
            return None
        patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
        mutated: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
        mutated["metadata"]["name"] = f"{app}-{uuid.uuid4().hex[:5]}"
        mutated["metadata"]["uid"] = str(uuid.uuid4())
        mutated["status"] = {"phase": "Pending"}
        limits = mutated["spec"]["containers"][0].get("resources", {}).get("limits", {})
        notes = mutated["metadata"]["annotations"]
        self.say(
            f"    admitted as {mutated['metadata']['name']}: "
            + ", ".join(f"{k}: {v}" for k, v in limits.items())
            + f" (tenant {notes.get('migslice.io/tenant')}, "
            + f"policy {notes.get('migslice.io/policy')}, {len(patch)} patch operations)"
        )
        self.cluster.objects.append(mutated)
        self.cluster.write()
        return mutated

    # -- the scheduler's part ---------------------------------------------------------------

    def schedule(self, pod: dict[str, Any]) -> str | None:
        """Filter and prioritize through the extender (names only), then bind to the best."""
        names = [n["metadata"]["name"] for n in self.cluster.of_kind("Node")]
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        _, filtered = self.extender.request("POST", "/filter", args)
        if filtered.get("Error"):
            self.say(f"    extender error: {filtered['Error']}")
            return None
        fits = filtered.get("NodeNames") or []
        if not fits:
            reasons = {
                **(filtered.get("FailedNodes") or {}),
                **(filtered.get("FailedAndUnresolvableNodes") or {}),
            }
            self.say(f"    0/{len(names)} nodes are available:")
            for node, reason in sorted(reasons.items()):
                self.say(f"      {node}: {reason}")
            self._unschedulable(pod, f"0/{len(names)} nodes are available")
            return None
        _, scores = self.extender.request("POST", "/prioritize", {**args, "NodeNames": fits})
        by_node = {s["Host"]: s["Score"] for s in scores} if isinstance(scores, list) else {}
        best: str = max(fits, key=lambda n: (by_node.get(n, 0), -fits.index(n)))
        ranking = ", ".join(f"{n}={by_node.get(n, 0)}" for n in fits)
        self.say(f"    extender: fits on {len(fits)}/{len(names)} nodes, scores {ranking}")
        pod["spec"]["nodeName"] = best
        pod["status"] = {"phase": "Running"}
        self.cluster.write()
        self.say(f"    bound to {best}")
        return best

    def _unschedulable(self, pod: dict[str, Any], message: str) -> None:
        """What kube-scheduler writes on a pod it could not place."""
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": format_time(time.time()),
            }
        ]
        self.cluster.write()

    def repartition(self) -> None:
        """One pass of the repartition controller, MIG Manager played by the demo."""
        RepartitionPass(self.cluster, self.say).run()

    def run(self) -> None:
        self.step("The cluster (as GPU Feature Discovery and the device plugin describe it)")
        self.show_gpus()
        self.say(
            "  tenants: payments (hardware isolation, quota 4 compute slices), research "
            "(sizes medium/large/full), inference (small slices, 8 instances)"
        )

        self.step("inference asks for a small GPU: 10Gi becomes the smallest profile that holds it")
        pod = self.create_pod("inference", "small", "embed")
        if pod:
            self.schedule(pod)

        self.step("payments asks for medium GPUs under a quota of 4 compute slices")
        for app in ("risk", "fraud", "ledger"):
            pod = self.create_pod("payments", "medium", app)
            if pod:
                self.schedule(pod)

        self.step("research asks for a large GPU (40Gi, 3 compute slices)")
        pod = self.create_pod("research", "large", "train")
        if pod:
            self.schedule(pod)

        self.step("research asks for a whole 80GB slice: no GPU is shaped for it")
        big = self.create_pod("research", "full", "pretrain")
        if big and not self.schedule(big):
            self.step(
                "Re-partition: the controller plans an idle GPU for the waiting pod, "
                "MIG Manager applies it"
            )
            self.repartition()
            self.say("  kube-scheduler retries the pending pod:")
            self.schedule(big)

        self.step("A team without a TenantPolicy asks for a GPU")
        self.create_pod("sandbox", "small", "notebook")

        self.step("The cluster now")
        self.show_gpus()


def _server(command: str, args: list[str], workdir: Path) -> ServerProcess:
    service = f"migslice-{command}"
    bundle = write_tls_bundle(workdir / command, service, NAMESPACE)
    return ServerProcess(
        command, args, bundle, workdir / f"{command}.log", f"{service}.{NAMESPACE}.svc"
    )


@contextmanager
def running_demo(out: TextIO, workdir: Path | None = None) -> Iterator[Demo]:
    """Certificates, the cluster file and both servers; everything stops on exit."""
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="migslice-demo-"))
            )
        cluster = Cluster(workdir / "cluster.yaml", bundled_cluster())
        print(
            f"starting migslice webhook and extender (HTTPS, CA and logs in {workdir}) ...",
            file=out,
            flush=True,
        )
        common = ["--cluster-file", str(cluster.path), "--workers", "1", "--threads", "2"]
        common += ["--log-level", "warning"]
        webhook = _server("webhook", common, workdir)
        extender = _server(
            "extender", [*common, "--mig-config-map", f"gpu-operator/{MIG_CONFIG_MAP}"], workdir
        )
        stack.callback(webhook.stop)
        stack.callback(extender.stop)
        try:
            webhook.start()
            extender.start()
        except ServerStartError as error:
            raise DemoError(str(error)) from None
        print(
            f"  webhook  https://127.0.0.1:{webhook.port}  extender https://127.0.0.1:{extender.port}",
            file=out,
        )
        yield Demo(cluster, webhook, extender, out)


def run(out: TextIO, workdir: Path | None = None, pause_s: float = 0.0) -> int:
    with running_demo(out, workdir) as demo:
        demo.pause_s = pause_s
        demo.run()
    return 0


__all__ = ["DemoError", "run", "running_demo"]
