"""``migslice status``, ``migslice why`` and ``kubectl migslice`` against a real kube-apiserver,
and the metrics the chart's alerts and dashboard read, on the real servers' ``/metrics``.

One fresh control plane for the module, installed as the README says (Helm; the webhook, the
extender, whose repartition controller runs in dry-run as installed, and kube-scheduler run as
processes by :class:`harness.actors.ClusterActors`). Then a cluster with every reason a GPU pod
waits, all through the real webhook and the real kube-scheduler:

* tenant ``team-a`` at its quota (two ``large`` pods, 6 of 6 compute slices, bound on
  ``a100-3g``); its third pod is refused at admission, so it never exists: once as a bare pod
  (``kubectl create``: 403), once as the pod of Job ``train`` (the test plays the Job
  controller: its create is refused and it records the ``FailedCreate`` Event);
* ``team-b/serve-3g`` (``large``): no free 3g.40gb instance (``a100-3g`` is full), a node being
  re-partitioned (``a100-rp``, mig.config.state=pending, the controller's durable record
  written with its plan applying for this pod) and a quarantined node (``a100-q``);
* ``ops/direct-3g`` asks ``nvidia.com/mig-3g.40gb`` itself (its namespace is out of the
  webhook's reach): the A30 has no such profile;
* a DRA node (``dra-0``: :class:`harness.dra_driver.FakeDraDriver`, DynamicMIG, two A100s)
  whose claims ``team-b/a`` (1g.10gb), ``team-b/b`` and ``team-b/e`` (3g.40gb) and ``team-b/c``
  (4g.40gb) kube-scheduler allocated, and ``team-b/d`` whose 7g.80gb claim no free placement
  hosts. The chart's DeviceClasses let the node serve ``nvidia.com/mig-3g.40gb`` too (KEP-5004),
  so its claims come first and leave no 3g.40gb placement free for the 3g pods above.

Every check compares the commands' output with what the API server holds (read here with the
admin client): per tenant its pods, the waiting pods, every bound pod on its node's map, the DRA
allocations on the map with their pods, the record, the quarantine.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from harness import dra_slices
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.builders import make_pod, make_policy
from harness.controlplane import ControlPlane
from harness.dra_driver import MIG_CLASS, FakeDraDriver, claim_objects, settled
from harness.install import Cluster, fresh_workdir, readme_commands
from harness.paths import REPO

pytestmark = pytest.mark.e2e

CM_NAMESPACE, CM_NAME = "gpu-operator", "migslice-mig-config"
RECORD = "migslice.io/repartition"
QUARANTINE = "migslice.io/repartition-quarantine"
CONFIG, STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
PLAN_CONFIG = "migslice-a100-rp-1a2b3c4d"
GPU_NODES = ("gpu-a100-1", "a100-3g", "a100-rp", "a100-q", "a30-0", "dra-0")
A30_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A30",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.capable": "true",
}
MONITORING = REPO / "charts" / "migslice" / "files" / "monitoring"
DRA_CLAIMS = (
    ("a", "1g.10gb"),
    ("b", "3g.40gb"),
    ("c", "4g.40gb"),
    ("e", "3g.40gb"),
    ("d", "7g.80gb"),
)
"""team-b's claims on dra-0, in order, each once the extender's steer follows the one before:
a 1g@6 and b 3g@0 on GPU 0, c 4g@0 and e 3g@4 on GPU 1; no 7g.80gb placement is left for d."""


def sized_pod(name: str, namespace: str, size: str) -> dict[str, Any]:
    """A pod as its owner writes it: a size, no GPU resource (the webhook sets it)."""
    return make_pod(
        name,
        namespace=namespace,
        stored=False,
        tenant=None,
        limits={},
        annotations={"migslice.io/gpu-size": size},
        scheduler_name=None,
        with_type_meta=True,
    )


def the_record(now: float) -> dict[str, Any]:
    """The controller's durable record: a plan applying on a100-rp for team-b/serve-3g, and
    a100-q quarantined (as the controller writes them; migslice.repartition.record)."""

    def at(seconds_ago: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - seconds_ago))

    return {
        "version": "v1",
        "plan": {
            "id": "9c1e0f4a2b7d",
            "createdAt": at(120),
            "appliedAt": at(119),
            "nodes": [
                {
                    "node": "a100-rp",
                    "config": PLAN_CONFIG,
                    "previousConfig": "all-1g.10gb",
                    "gpus": [0],
                    "serves": ["team-b/serve-3g"],
                    "entries": [
                        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
                    ],
                    "outcome": "",
                    "detail": "",
                    "appliedAt": at(119),
                }
            ],
        },
        "finished": {},
        "backoff": {},
        "quarantine": {
            "a100-q": {
                "since": at(900),
                "config": "migslice-a100-q-9f8e7d6c",
                "detail": "state pending after 601s; deadline 600s",
            }
        },
    }


class Scenario:
    """The installed cluster with the pods of the module docstring, and the commands run
    against it as an admin runs them (the admin kubeconfig, from outside the cluster)."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        api = cluster.cp.api_client()
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.kubeconfig = str(cluster.cp.kubeconfig)
        self.refusals: dict[str, str] = {}
        self.driver: FakeDraDriver | None = None

    # -- the cluster -------------------------------------------------------------------------

    def build(self) -> None:
        core, custom = self.core, self.custom
        for name, resources, labels in (
            ("a100-3g", {"nvidia.com/mig-3g.40gb": 2}, {CONFIG: "all-3g.40gb"}),
            ("a100-rp", {"nvidia.com/mig-1g.10gb": 7}, {CONFIG: PLAN_CONFIG, STATE: "pending"}),
            (
                "a100-q",
                {"nvidia.com/mig-1g.10gb": 7},
                {CONFIG: "all-1g.10gb", STATE: "pending", QUARANTINE: "timeout"},
            ),
        ):
            register_gpu_node(
                self.api,
                name,
                resources,
                labels={"nvidia.com/gpu.count": "1", STATE: "success", **labels},
            )
        register_gpu_node(
            self.api,
            "a30-0",
            {"nvidia.com/mig-1g.6gb": 4},
            gfd_labels=A30_LABELS,
            labels={CONFIG: "all-1g.6gb", STATE: "success"},
        )
        register_gpu_node(self.api, "dra-0", {})
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", MIG_CLASS)
        config_map = core.read_namespaced_config_map(CM_NAME, CM_NAMESPACE)
        annotations = {RECORD: json.dumps(the_record(time.time()))}
        config_map.metadata.annotations = {**(config_map.metadata.annotations or {}), **annotations}
        core.replace_namespaced_config_map(CM_NAME, CM_NAMESPACE, config_map)

        for name in ("team-a", "team-b"):
            ensure_namespace(core, name)
            policy = make_policy(name, namespaces=[name])
            if name == "team-a":
                policy["spec"]["quota"] = {"computeSlices": 6}
            del policy["metadata"]["uid"], policy["metadata"]["generation"]
            custom.create_cluster_custom_object("migslice.io", "v1alpha1", "tenantpolicies", policy)
        ensure_namespace(core, "ops", {"migslice.io/admission": "disabled"})
        time.sleep(2)  # the webhook's caches follow the new policies

        for index in range(2):
            core.create_namespaced_pod("team-a", sized_pod(f"train-{index}", "team-a", "large"))
        self.bound("team-a", "train-0", "train-1")
        self.refuse_bare_pod()
        self.refuse_as_the_job_controller()
        # The DRA node's GPUs only now: the chart's DeviceClasses let it serve
        # nvidia.com/mig-3g.40gb too (KEP-5004), and it scores as a100-3g does for team-a's
        # 3g.40gb pods, which must be a100-3g's. Its claims then leave no 3g.40gb placement
        # free before the 3g pods come.
        self.driver = FakeDraDriver(self.api, "dra-0", [dra_slices.a100(0), dra_slices.a100(1)])
        self.driver.publish()
        self.steered()
        for name, profile in DRA_CLAIMS:
            claim, pod = claim_objects(name, "team-b", profile, scheduler="migslice-scheduler")
            custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", "team-b", "resourceclaims", claim
            )
            core.create_namespaced_pod("team-b", pod)
            if name != "d":
                self.bound("team-b", name)
                self.steered()
        core.create_namespaced_pod("team-b", sized_pod("serve-3g", "team-b", "large"))
        direct = make_pod(
            "direct-3g",
            namespace="ops",
            stored=False,
            tenant=None,
            profile="3g.40gb",
            with_type_meta=True,
        )
        core.create_namespaced_pod("ops", direct)
        for namespace, name in (("team-b", "serve-3g"), ("ops", "direct-3g"), ("team-b", "d")):
            self.unschedulable(namespace, name)

    def steered(self) -> None:
        """Wait until the extender's steer of dra-0 matches its allocations (the next claim
        would otherwise meet the rules of the state before: see docs/dra.md)."""
        objects = k8s.CustomObjectsApi(self.api)
        wait_for("the steer of dra-0", lambda: settled(self.core, objects, ["dra-0"]), 60)

    def bound(self, namespace: str, *names: str) -> None:
        for name in names:
            wait_for(
                f"{namespace}/{name} bound",
                lambda name=name: self.core.read_namespaced_pod(name, namespace).spec.node_name,
                90,
            )

    def unschedulable(self, namespace: str, name: str) -> None:
        def marked() -> bool:
            conditions = self.core.read_namespaced_pod(name, namespace).status.conditions or ()
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

        wait_for(f"{namespace}/{name} marked Unschedulable", marked, 90)

    def refuse_bare_pod(self) -> None:
        """``kubectl create -f`` of team-a's third pod: the webhook says 403, nothing stays."""
        manifest = self.workdir / "train-2.yaml"
        manifest.write_text(yaml.safe_dump(sized_pod("train-2", "team-a", "large")))
        done = self.run(["kubectl", "create", "-f", str(manifest)], check=False)
        assert done.returncode != 0 and "denied the request" in done.stderr, done.stderr
        self.refusals["bare"] = done.stderr

    def refuse_as_the_job_controller(self) -> None:
        """Job ``team-a/train``: its controller's create of a pod is refused; it records the
        ``FailedCreate`` Event on the Job, as kube-controller-manager's Job controller does."""
        template = sized_pod(None, "team-a", "large")  # type: ignore[arg-type]
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {
                "template": {
                    "metadata": {"annotations": template["metadata"]["annotations"]},
                    "spec": {**template["spec"], "restartPolicy": "Never"},
                }
            },
        }
        stored = self.batch.create_namespaced_job("team-a", job)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "train-",
                "namespace": "team-a",
                "annotations": job["spec"]["template"]["metadata"]["annotations"],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "train",
                        "uid": stored.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": job["spec"]["template"]["spec"],
        }
        with pytest.raises(k8s.ApiException) as refused:
            self.core.create_namespaced_pod("team-a", pod)
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        self.refusals["job"] = message
        self.core.create_namespaced_event(
            "team-a",
            {
                "metadata": {"generateName": "train."},
                "involvedObject": {
                    "kind": "Job",
                    "apiVersion": "batch/v1",
                    "name": "train",
                    "namespace": "team-a",
                    "uid": stored.metadata.uid,
                },
                "reason": "FailedCreate",
                "message": f"Error creating: {message}",
                "type": "Warning",
                "count": 1,
                "firstTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "source": {"component": "job-controller"},
            },
        )

    # -- the commands ------------------------------------------------------------------------

    def run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self.cluster.env,
            timeout=120,
        )
        self.cluster.transcript.append(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def migslice(self, *argv: str) -> str:
        command = [sys.executable, "-m", "migslice.cli", *argv, "--kubeconfig", self.kubeconfig]
        return self.run(command).stdout

    def status(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.migslice("status", "-o", "json"))
        return found

    def why(self, namespace: str, *argv: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            self.migslice("why", "-n", namespace, *argv, "-o", "json")
        )
        return found

    # -- what the API server holds -----------------------------------------------------------

    def gpu_pods(self) -> list[k8s.V1Pod]:
        """Live pods that ask a GPU: an nvidia.com/* limit, or a ResourceClaim."""

        def asks(pod: k8s.V1Pod) -> bool:
            limits = [
                r
                for c in pod.spec.containers
                for r in ((c.resources and c.resources.limits) or {})
                if r.startswith("nvidia.com/")
            ]
            return bool(limits or pod.spec.resource_claims)

        return [p for p in self.core.list_pod_for_all_namespaces().items if asks(p)]

    def claims(self) -> dict[str, dict[str, Any]]:
        listed = self.custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")
        return {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in listed["items"]}


@pytest.fixture(scope="module")
def scenario(e2e_bin: Path) -> Iterator[Scenario]:
    workdir = fresh_workdir("status")
    with ControlPlane(workdir, e2e_bin) as control_plane:
        cluster = Cluster(control_plane, workdir / "home")
        cluster.actors.start()
        try:
            for command in readme_commands(REPO / "README.md", "### With Helm"):
                cluster.sh(command)
            cluster.sized_pod_lands()
            made = Scenario(cluster, workdir)
            made.build()
            yield made
        finally:
            cluster.actors.stop()
            (workdir / "transcript.txt").write_text("\n".join(cluster.transcript))


def _by_name(items: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


def test_status_counts_what_the_api_server_holds(scenario: Scenario) -> None:
    document = scenario.status()
    pods = scenario.gpu_pods()
    policies = scenario.custom.list_cluster_custom_object(
        "migslice.io", "v1alpha1", "tenantpolicies"
    )["items"]
    tenants = _by_name(document["tenants"])
    assert set(tenants) == {p["metadata"]["name"] for p in policies}
    for policy in policies:
        namespaces = set(policy["spec"]["namespaces"])
        mine = [p for p in pods if p.metadata.namespace in namespaces]
        tenant = tenants[policy["metadata"]["name"]]
        assert tenant["boundPods"] == sum(1 for p in mine if p.spec.node_name), tenant
        assert tenant["waitingPods"] == sum(1 for p in mine if not p.spec.node_name), tenant
    team_a = tenants["team-a"]
    assert team_a["atLimit"] == ["computeSlices"]
    compute = _by_name(team_a["usage"], "dimension")["computeSlices"]
    assert (compute["used"], compute["limit"]) == (6, 6)

    waiting = {f"{p.metadata.namespace}/{p.metadata.name}" for p in pods if not p.spec.node_name}
    assert waiting == {"team-b/serve-3g", "team-b/d", "ops/direct-3g"}
    assert {w["pod"] for w in document["waiting"]} == waiting

    nodes = {n["name"]: n for pool in document["pools"] for n in pool["nodes"]}
    assert set(nodes) == set(GPU_NODES)
    assert len(nodes) == len(scenario.core.list_node().items)
    # Every bound GPU pod once, on its node: on an instance of the map, or (a node known only
    # by counts: gpu-a100-1 has no nvidia.com/gpu.count label) among its holdings.
    held = [
        (s["pod"], name)
        for name, node in nodes.items()
        for g in node["gpus"]
        for s in g["instances"]
    ]
    held += [(h["pod"], name) for name, node in nodes.items() for h in node["holdings"]]
    bound = {f"{p.metadata.namespace}/{p.metadata.name}": p.spec.node_name for p in pods}
    bound = {k: v for k, v in bound.items() if v}
    assert sorted((pod, name) for pod, name in held if pod) == sorted(bound.items())
    assert nodes["gpu-a100-1"]["gpus"] == [] and nodes["gpu-a100-1"]["layoutSource"] == "counts"
    # team-a holds both 3g.40gb instances of a100-3g; nothing else there is free.
    assert [s["pod"] for g in nodes["a100-3g"]["gpus"] for s in g["instances"]] == [
        "team-a/train-0",
        "team-a/train-1",
    ]


def test_the_dra_node_shows_the_allocations_with_their_pods_and_what_is_free(
    scenario: Scenario,
) -> None:
    document = scenario.status()
    node = next(n for pool in document["pools"] for n in pool["nodes"] if n["name"] == "dra-0")
    assert node["layoutSource"] == "dra-dynamic"
    used = {
        (g["index"], s["profile"], s["start"]): s["pod"]
        for g in node["gpus"]
        for s in g["instances"]
    }
    expected = {}
    for key, claim in scenario.claims().items():
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
        for result in results.get("results") or ():
            match = re.fullmatch(r"gpu-(\d+)-mig-(\w+)-\d+-(\d+)", result["device"])
            assert match, result
            profile = {"1g10gb": "1g.10gb", "3g40gb": "3g.40gb", "4g40gb": "4g.40gb"}[
                match.group(2)
            ]
            reserved = claim["status"]["reservedFor"][0]["name"]
            expected[(int(match.group(1)), profile, int(match.group(3)))] = (
                f"{key.split('/')[0]}/{reserved}"
            )
    bound = {f"team-b/{name}" for name, _ in DRA_CLAIMS if name != "d"}
    assert used == expected and set(expected.values()) == bound
    free = _by_name(node["draPlacements"], "resource")
    assert free["nvidia.com/mig-7g.80gb"]["free"] == 0
    assert free["nvidia.com/mig-1g.10gb"]["free"] > 0
    d = _by_name(document["waiting"], "pod")["team-b/d"]
    assert d["requests"] == {"nvidia.com/mig-7g.80gb": 1}
    on_dra = [c for c in d["nodes"] if "dra-0" in c["names"]]
    assert [c["outcome"] for c in on_dra] == ["failed"] and "7g.80gb" in on_dra[0]["reason"]


def test_every_waiting_pod_has_its_reason_per_node(scenario: Scenario) -> None:
    waiting = _by_name(scenario.status()["waiting"], "pod")
    total = len(scenario.core.list_node().items)
    for pod in waiting.values():
        assert len(pod["fits"]) + sum(c["count"] for c in pod["nodes"]) == total, pod
        assert pod["unschedulableSeconds"] is not None
    # None fits now: kube-scheduler keeps them all waiting (the DRA node serves
    # nvidia.com/mig-3g.40gb through the chart's DeviceClass, but its claims hold both
    # 3g.40gb placements of each GPU or block them).
    assert all(pod["fits"] == [] for pod in waiting.values()), waiting
    reasons = {c["reason"]: (c["outcome"], c["names"]) for c in waiting["team-b/serve-3g"]["nodes"]}
    assert reasons["all 3g.40gb MIG instances in use"] == ("failed", ["a100-3g", "dra-0"])
    pending = reasons["node being re-partitioned (nvidia.com/mig.config.state=pending)"]
    assert pending == ("unresolvable", ["a100-q", "a100-rp"])
    direct = {c["reason"]: c for c in waiting["ops/direct-3g"]["nodes"]}
    lacks = direct["A30-24GB has no MIG profile 3g.40gb"]
    assert (lacks["outcome"], lacks["names"]) == ("unresolvable", ["a30-0"])
    # why says the same of each, pod by pod.
    for key, pod in waiting.items():
        namespace, name = key.split("/")
        assert scenario.why(namespace, name)["placement"]["nodes"] == pod["nodes"], key
    # why gives kube-scheduler's own words: the pod's FailedScheduling Events, through the API
    # server's field selector (an Event of another pod or reason is not among them).
    for name, reason, message in (
        ("serve-3g", "FailedScheduling", "0/9 nodes are available: kept whole for 7g (...)"),
        ("serve-3g", "Scheduled", "not a failure"),
        ("other-pod", "FailedScheduling", "another pod's words"),
    ):
        event = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{name}."),
            involved_object=k8s.V1ObjectReference(kind="Pod", name=name, namespace="team-b"),
            reason=reason,
            message=message,
            count=2,
            last_timestamp=datetime.datetime.now(datetime.UTC),
        )
        scenario.core.create_namespaced_event("team-b", event)
    said = [
        (e["count"], e["message"])
        for e in scenario.why("team-b", "serve-3g")["placement"]["schedulerSaid"]
    ]
    assert (2, "0/9 nodes are available: kept whole for 7g (...)") in said
    assert not {"not a failure", "another pod's words"} & {message for _, message in said}


def test_the_record_shows_the_plan_in_flight_and_the_quarantine(scenario: Scenario) -> None:
    record = scenario.status()["repartition"]
    stored = scenario.core.read_namespaced_config_map(CM_NAME, CM_NAMESPACE)
    written = json.loads(stored.metadata.annotations[RECORD])
    assert [(s["node"], s["state"], s["serves"]) for s in record["steps"]] == [
        (n["node"], "applying", n["serves"]) for n in written["plan"]["nodes"]
    ]
    labelled = scenario.core.list_node(label_selector=QUARANTINE).items
    assert (
        {h["node"] for h in record["held"] if h["why"] == "quarantined"}
        == {n.metadata.name for n in labelled}
        == set(written["quarantine"])
    )
    pending = scenario.core.list_node(label_selector=f"{STATE}=pending").items
    assert {n.metadata.name for n in pending} == {"a100-rp", "a100-q"}
    why = scenario.why("team-b", "serve-3g")
    assert [(s["node"], s["state"]) for s in why["repartition"]["inRecord"]] == [
        ("a100-rp", "applying")
    ]
    assert "a100-q" in {h["node"] for h in why["heldNodes"]}


def test_why_of_pods_the_webhook_refused_says_what_it_answers(scenario: Scenario) -> None:
    job = scenario.why("team-a", "train-x7k2p")
    absent = job["absent"]
    assert job["phase"] == "not found" and absent["from"] == "Job team-a/train"
    assert (absent["allowed"], absent["reason"]) == (False, "quota")
    assert absent["message"] in scenario.refusals["job"]
    (event,) = absent["failedCreate"]
    assert event["message"] == f"Error creating: {scenario.refusals['job']}"
    bare = scenario.why("team-a", "-f", str(scenario.workdir / "train-2.yaml"))
    assert bare["pod"] == "team-a/train-2"
    assert (bare["absent"]["allowed"], bare["absent"]["reason"]) == (False, "quota")
    assert bare["absent"]["message"] in " ".join(scenario.refusals["bare"].split())
    admitted = scenario.why("team-b", "-f", str(scenario.workdir / "train-2.yaml"))
    assert admitted["absent"]["allowed"] is True and admitted["absent"]["profile"] == "3g.40gb"


def test_the_table_says_the_same(scenario: Scenario) -> None:
    text = scenario.migslice("status")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("team-")}
    assert rows["team-a"][:5] == ["team-a", "2", "0", "2", "6/6"]
    assert rows["team-b"][:3] == ["team-b", "4", "2"]
    assert "a100-q: quarantined for" in text and f"kubectl label node a100-q {QUARANTINE}-" in text
    assert "a100-rp: mig-manager plan 9c1e0f4a2b7d applying" in text
    assert "1g.10gb team-b/team-b/a" in text and "4g.40gb team-b/team-b/c" in text
    assert "dra-0  A100-80GB  layout from dra-dynamic" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_kubectl_plugin_runs_status_with_kubectls_flags(scenario: Scenario) -> None:
    kubectl = str(scenario.cluster.cp.bin_dir / "kubectl")
    listed = scenario.run([kubectl, "plugin", "list"])
    assert str(Path(sys.executable).parent / "kubectl-migslice") in listed.stdout
    env_free = {**scenario.cluster.env}
    env_free.pop("KUBECONFIG", None)
    done = subprocess.run(
        [kubectl, "migslice", "status", "--kubeconfig", scenario.kubeconfig, "-o", "json"],
        capture_output=True,
        text=True,
        env=env_free,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    through_kubectl = json.loads(done.stdout)
    direct = scenario.status()
    assert through_kubectl["tenants"] == direct["tenants"]
    assert through_kubectl["pools"] == direct["pools"]
    assert [w["pod"] for w in through_kubectl["waiting"]] == [w["pod"] for w in direct["waiting"]]


# -- the metrics the chart's alerts and dashboard read -----------------------------------------


def _queries() -> list[str]:
    found = [
        rule["expr"] for rule in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["rules"]
    ]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    found += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return found


def _exported(scenario: Scenario) -> dict[str, set[str]]:
    """Metric -> the labels its samples carry, on both running servers' /metrics."""
    from tests.promql import exposition_labels

    text = ""
    for server in ("migslice-webhook", "migslice-extender"):
        status, body = scenario.cluster.actors.servers[server].request("GET", "/metrics")
        assert status == 200
        text += str(body)
    return {name: labels for name, labels in exposition_labels(text).items()}


def test_every_metric_a_rule_or_panel_reads_is_served_with_its_labels(scenario: Scenario) -> None:
    """Samples, not declarations: every metric a query names has a sample on the webhook's or
    the extender's /metrics, as the chart runs them, carrying every label the query matches on
    or groups by (``job`` and ``le`` are Prometheus's and the histograms')."""
    from tests.promql import reads

    def missing() -> list[str]:
        exported = _exported(scenario)
        lost: list[str] = []
        for query in _queries():
            found = reads(re.sub(r"__[A-Z_]+__", "1", query))
            for name, labels in found.metrics.items():
                if name == "time":
                    continue
                if name in _UNLABELLED:
                    if name not in exported:
                        lost.append(f"{name}: not served (in {query!r})")
                elif not exported.get(name):
                    lost.append(f"{name}: no sample (in {query!r})")
                elif labels - exported.get(name, set()):
                    lost.append(f"{name}: no label {sorted(labels - exported[name])}")
            used = set().union(*(exported.get(n, set()) for n in found.metrics)) | {"le", "job"}
            if found.grouping - used:
                lost.append(f"grouping {sorted(found.grouping - used)} in {query!r}")
        return lost

    # The repartition leader exports the pending pods from its last round (every 15 s).
    deadline = time.monotonic() + 45
    while True:
        lost = missing()
        if not lost or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not lost, lost


_UNLABELLED = {
    "migslice_webhook_ready",
    "migslice_extender_ready",
    "migslice_repartition_leader",
    "migslice_repartition_nodes_in_flight",
    "migslice_repartition_nodes_quarantined",
    "migslice_repartition_deadline_seconds",
    "migslice_repartition_mig_manager_config_mismatch",
    "migslice_tls_certificate_expiry_timestamp_seconds",
    "migslice_dra_steer_failures_total",
    "migslice_dra_steer_lifts_total",
    "migslice_dra_steer_capped_nodes",
    "migslice_dra_steer_rules",
    "migslice_dra_strand_guard",
    "migslice_dra_complete_rule",
    "migslice_repartition_complete_rule",
    "migslice_dra_idle_gpus",
    "migslice_dra_large_reserve_gpus",
    "migslice_dra_large_reserve_enabled",
    "migslice_dra_large_reserve_held_back_total",
    "migslice_dra_large_reserve_released_total",
    "migslice_repartition_strand_guard",
    "migslice_extender_pod_touch_failures_total",
}
"""Metrics without labels: served means their family is on /metrics."""


def test_the_servers_metrics_count_what_the_cluster_holds(scenario: Scenario) -> None:
    """The values the dashboard shows, on the running servers, against the cluster."""
    text = ""
    for server in ("migslice-webhook", "migslice-extender"):
        _, body = scenario.cluster.actors.servers[server].request("GET", "/metrics")
        text += str(body)
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['migslice_webhook_tenant_usage{dimension="computeSlices",tenant="team-a"}'] == 6
    assert samples['migslice_webhook_tenant_quota{dimension="computeSlices",tenant="team-a"}'] == 6
    assert samples["migslice_repartition_nodes_quarantined"] == 1
    assert samples['migslice_extender_pending_pods{profile="3g.40gb"}'] >= 1
    assert samples['migslice_repartition_open_step_age_seconds{mode="mig-manager"}'] > 0
    denied = [k for k in samples if k.startswith("migslice_webhook_denials_total{")]
    assert any('reason="quota"' in k for k in denied), denied
