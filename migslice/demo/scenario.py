"""``migslice demo``: the real webhook and extender, over HTTPS, on an example cluster.

The demo plays the parts of a cluster that it cannot have on a laptop, and only those:
kube-apiserver (it sends AdmissionReviews exactly as the API server does and stores the
objects in a cluster file), kube-scheduler (it sends ExtenderArgs with node names and binds to
the best-scored node) and NVIDIA MIG Manager (it applies a mig-parted config by rewriting a
node's labels and allocatable). migslice itself runs as it does in a cluster: ``migslice
webhook`` and ``migslice extender`` under gunicorn with TLS from ``migslice certs``, serving
the cluster file, which they re-read whenever the demo rewrites it. On the DRA node the demo
also plays kube-controller-manager's resourceclaim controller (a claim from the pod's
template, through the webhook as any claim CREATE) and kube-scheduler's allocator (the first
fit, as migslice predicts it).
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

from migslice import names
from migslice.demo.controller import RepartitionPass
from migslice.demo.stage import NAMESPACE, Cluster, DemoError, bundled_cluster
from migslice.inventory.first_fit import PoolUse, first_fit, wanted_of
from migslice.mig.render import render_bar
from migslice.names import DRA_DRIVER, MIG_CONFIG_MAP
from migslice.objects import format_time, load_cluster_text
from migslice.objects.claim_templates import migslice_claim_template
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.dra_pool import read_pool
from migslice.objects.resource_claims import claim_facts_from_raw, gpu_asks
from migslice.objects.resource_slices import slice_facts_from_raw
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
        for node in self.cluster.of_kind("Node"):
            name = node["metadata"]["name"]
            slices = [
                s for s in self.cluster.of_kind("ResourceSlice") if s["spec"]["nodeName"] == name
            ]
            if not slices:
                continue
            held = [
                result["device"]
                for claim in self.cluster.of_kind("ResourceClaim")
                for result in claim.get("status", {})
                .get("allocation", {})
                .get("devices", {})
                .get("results", [])
                if result["pool"] == name
            ]
            self.say(
                f"  {name} (A100-80GB, NVIDIA's DRA driver, DynamicMIG: every placement published, "
                "each instance made when a claim is prepared)"
            )
            self.say(f"    devices held by claims: {', '.join(held) or 'none'}")

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
        asked = [f"{k}: {v}" for k, v in limits.items()] + [
            f"claim {c['name']} from ResourceClaimTemplate {c['resourceClaimTemplateName']}"
            for c in mutated["spec"].get("resourceClaims", [])
        ]
        self.say(
            f"    admitted as {mutated['metadata']['name']}: "
            + ", ".join(asked)
            + f" (tenant {notes.get('migslice.io/tenant')}, "
            + f"policy {notes.get('migslice.io/policy')}, {len(patch)} patch operations)"
        )
        self.cluster.objects.append(mutated)
        self.cluster.write()
        return mutated

    def create_claims(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller's part: the pod's claims from their templates, each
        created through the webhook (charged there), and the pod's status naming them."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        statuses = []
        for entry in pod["spec"].get("resourceClaims", []):
            profile = pod["metadata"]["annotations"]["migslice.io/profile"]
            template = migslice_claim_template(namespace, profile)
            if template not in self.cluster.of_kind("ResourceClaimTemplate"):
                self.cluster.objects.append(template)  # as the webhook created it
            claim: dict[str, Any] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"{name}-{entry['name']}-{uuid.uuid4().hex[:5]}",
                    "namespace": namespace,
                    "annotations": {"resource.kubernetes.io/pod-claim-name": entry["name"]},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": name,
                         "uid": pod["metadata"]["uid"], "controller": True}
                    ],
                },
                "spec": _claim_spec(template),
            }  # fmt: skip
            status, answer = self.webhook.request(
                "POST", "/mutate", _review(claim, "resourceclaims")
            )
            response = answer["response"] if status == 200 else {"allowed": False}
            if not response["allowed"]:
                self.say(f"    resourceclaim controller: claim refused: {response.get('status')}")
                continue
            patch = json.loads(base64.b64decode(str(response["patch"])))
            claim = jsonpatch.apply_patch(claim, patch)
            notes = claim["metadata"]["annotations"]
            self.say(
                f"    resourceclaim controller: ResourceClaim {claim['metadata']['name']} from "
                f"{names.mig_claim_template(profile)}, charged by the webhook "
                f"({notes['migslice.io/profile']}, reservation "
                f"{notes['migslice.io/reservation'][:8]}...)"
            )
            self.cluster.objects.append(claim)
            statuses.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
        pod["status"]["resourceClaimStatuses"] = statuses
        self.cluster.write()

    def allocate(self, pod: dict[str, Any], node: str) -> None:
        """kube-scheduler's allocator on the chosen node: the first fit of each claim."""
        objects = load_cluster_text(self.cluster.path.read_text())
        slices = [f for f in map(slice_facts_from_raw, objects.resource_slices) if f is not None]
        pool = read_pool(node, [f for f in slices if f.node_name == node])
        classes = {c.name: c for c in map(device_class_facts_from_raw, objects.device_classes) if c}
        use = PoolUse(pool)
        for claim in self.cluster.of_kind("ResourceClaim"):
            for result in (
                claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
            ):
                use.hold(result["device"])
        made = {s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses", [])}
        for claim in self.cluster.of_kind("ResourceClaim"):
            if claim["metadata"]["name"] not in made:
                continue
            facts = claim_facts_from_raw(claim)
            assert facts is not None
            (ask,) = gpu_asks(facts, classes).asks
            wanted = wanted_of(ask)
            choice = first_fit(pool, wanted, use) if wanted is not None else None
            if choice is None:
                continue
            use.take(choice.gpu, choice.device)
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": ask.request, "driver": DRA_DRIVER, "pool": node,
                             "device": choice.name}
                        ]
                    }
                },
                "reservedFor": [
                    {"resource": "pods", "name": pod["metadata"]["name"],
                     "uid": pod["metadata"]["uid"]}
                ],
            }  # fmt: skip
            self.say(f"    allocator (first fit): {claim['metadata']['name']} -> {choice.name}")
        self.cluster.write()

    # -- the scheduler's part ---------------------------------------------------------------

    def schedule(self, pod: dict[str, Any]) -> str | None:
        """kube-scheduler's node affinity, then filter and prioritize through the extender
        (names only), then bind to the best."""
        names = [n["metadata"]["name"] for n in self.cluster.of_kind("Node") if _selects(pod, n)]
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
        pod["status"] = {**pod["status"], "phase": "Running"}
        pod["status"].pop("conditions", None)
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
            "(sizes medium/large/full), inference (small slices, 8 instances), vision "
            "(ResourceClaims on DRA nodes, 4 instances)"
        )

        self.step("inference asks for a small GPU: 10Gi becomes the smallest profile that holds it")
        pod = self.create_pod("inference", "small", "embed")
        if pod:
            self.schedule(pod)

        self.step(
            "vision (deviceAPI: ResourceClaim) asks for a small GPU: a claim from migslice's "
            "template, placed on the DRA node"
        )
        pod = self.create_pod("vision", "small", "detect")
        if pod:
            self.create_claims(pod)
            node = self.schedule(pod)
            if node:
                self.allocate(pod, node)

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


def _claim_spec(template: dict[str, object]) -> object:
    spec = template["spec"]
    assert isinstance(spec, dict)
    return spec["spec"]


def _selects(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the pod's nodeSelector and required node affinity admit the node (kube-
    scheduler's NodeAffinity plugin, which runs before the extender)."""
    labels = node["metadata"].get("labels") or {}
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []

    def holds(expression: dict[str, Any]) -> bool:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        return {
            "In": lambda: labels.get(key) in values,
            "NotIn": lambda: labels.get(key) not in values,
            "Exists": lambda: key in labels,
            "DoesNotExist": lambda: key not in labels,
        }[operator]()

    return not terms or any(all(holds(e) for e in t.get("matchExpressions") or []) for t in terms)


def _review(raw_object: dict[str, Any], resource: str) -> dict[str, Any]:
    """An AdmissionReview of a ``resource.k8s.io/v1`` object's CREATE, as kube-apiserver
    sends it."""
    kind = {"group": "resource.k8s.io", "version": "v1", "kind": raw_object["kind"]}
    plural = {"group": "resource.k8s.io", "version": "v1", "resource": resource}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": plural,
            "requestKind": kind,
            "requestResource": plural,
            "namespace": raw_object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:resourceclaim-controller"},
            "object": raw_object,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


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
