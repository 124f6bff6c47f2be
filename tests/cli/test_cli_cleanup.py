"""``migslice cleanup`` (the chart's post-delete hook): which DeviceTaintRules, node keys and
pods it picks, what it changes and what it keeps, against a real HTTP server that stores
objects, selects by label and field and applies merge patches as kube-apiserver does."""

from __future__ import annotations

import copy
import datetime
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from migslice import names
from migslice.cli import main
from migslice.kube.cleanup import NODE_ANNOTATIONS, NODE_LABELS, node_marks, stranded_pod
from migslice.objects.device_taint_rules import steer_rule
from tests.local_api import UNAUTHORIZED, Request, kubeconfig_file, local_api_url

RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
OWN_RULE = steer_rule("gpu-a", "gpu-0-mig-1g10gb-0", "1g.10gb")
ADMINS_RULE = {  # an admin's maintenance rule: not the steer's name, not its label
    "metadata": {"name": "gpu-a-maintenance"},
    "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-a"}},
}
ADMINS_STEER_NAMED = {  # named like the steer's, but not labelled as the steer labels its rules
    "metadata": {"name": "migslice-steer-by-hand", "labels": {"team": "ops"}},
    "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-b"}},
}
ADMINS_LABELLED = {  # labelled as migslice's, but not named as a steer rule
    "metadata": {"name": "ops-rule", "labels": {"app.kubernetes.io/managed-by": "migslice"}},
    "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-b"}},
}
FOREIGN_LABELS = {
    names.MIG_CONFIG_LABEL: "migslice-gpu-a-1234",
    names.MIG_CONFIG_STATE_LABEL: "success",
    names.MIG_CAPABLE_LABEL: "true",
    names.REPARTITION_MODE_LABEL: "carve",  # the admin's
    names.DRA_STEER_LABEL: "off",  # the admin's
    "team": "ml",
}
FOREIGN_ANNOTATIONS = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done", "note": "x"}


class Store:
    """DeviceTaintRules, Nodes and Pods as kube-apiserver keeps them; ``refuse`` maps a method
    and path prefix to a status to answer instead (403 for RBAC, 404 for a type not served)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rules: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.refuse: dict[tuple[str, str], int] = {}
        self.writes: list[tuple[str, str]] = []
        self.page = 500  # the most items a list answers with (kube-apiserver honours limit)
        self.fail_once: dict[tuple[str, str], int] = {}  # a transient answer, then served
        self.expire_continue = False  # the next continue token is too old (410 Gone)
        self.stop_writers_after = 0  # writer pods gone after this many looks at them
        self.writer_looks = 0

    def answer(self, request: Request) -> tuple[int, Any]:
        for (method, prefix), status in self.refuse.items():
            if request.method == method and request.path.startswith(prefix):
                return status, {"kind": "Status", "message": f"refused {request.path}"}
        with self.lock:
            for (method, prefix), status in list(self.fail_once.items()):
                if request.method == method and request.path.startswith(prefix):
                    del self.fail_once[(method, prefix)]
                    return status, {"kind": "Status", "message": "etcdserver: request timed out"}
            if request.query.get("continue") and self.expire_continue:
                self.expire_continue = False
                return 410, {
                    "kind": "Status",
                    "reason": "Expired",
                    "message": "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a new list without the continue "
                    "parameter.",
                }
            self.write_again()
            if request.method != "GET":
                self.writes.append((request.method, request.path))
            if request.path == "/version":
                return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
            if request.path == RULES and request.method == "GET":
                return 200, self.listing(self.rules.values(), request.query)
            if request.path.startswith(RULES + "/") and request.method == "DELETE":
                name = request.path.rsplit("/", 1)[1]
                if self.rules.pop(name, None) is None:
                    return 404, {"kind": "Status", "message": "not found"}
                return 200, {"kind": "Status", "status": "Success"}
            if request.path == "/api/v1/nodes" and request.method == "GET":
                return 200, self.listing(sorted_by_name(self.nodes.values()), request.query)
            if request.path.startswith("/api/v1/nodes/") and request.method == "PATCH":
                name = request.path.rsplit("/", 1)[1]
                if name not in self.nodes:
                    return 404, {"kind": "Status", "message": "not found"}
                assert request.content_type == "application/merge-patch+json"
                self.nodes[name] = merge(self.nodes[name], request.body)
                return 200, self.nodes[name]
            if request.path == "/api/v1/pods" and request.method == "GET":
                if "fieldSelector" not in request.query:  # the writers, by label
                    self.writer_looks += 1
                    if self.stop_writers_after and self.writer_looks >= self.stop_writers_after:
                        for key in [k for k, p in self.pods.items() if is_writer(p)]:
                            del self.pods[key]  # terminated: the kubelet removed them
                    return 200, self.listing(self.pods.values(), request.query)
                assert request.query["fieldSelector"] == "spec.nodeName="
                unbound = [p for p in self.pods.values() if not p["spec"].get("nodeName")]
                return 200, self.listing(unbound, request.query)
        return 404, {"kind": "Status", "message": f"no {request.method} {request.path}"}

    def write_again(self) -> None:
        """A running extender and agent: each request the API serves finds their rule and
        node keys written again, as the steer and the agent's publisher do every round."""
        if any(is_writer(p) for p in self.pods.values()):
            self.rules[OWN_RULE["metadata"]["name"]] = copy.deepcopy(OWN_RULE)
            for raw in self.nodes.values():
                if raw["metadata"]["name"].startswith("gpu-"):
                    raw["metadata"]["annotations"][names.LAYOUT_ANNOTATION] = "{}"

    def listing(self, items: Any, query: dict[str, str]) -> dict[str, Any]:
        """One page of at most ``limit`` (and :attr:`page`) items, with a continue token."""
        found = listing(items, query)["items"]
        limit = min(int(query.get("limit") or len(found) or 1), self.page)
        start = int(query.get("continue") or 0)
        token = str(start + limit) if start + limit < len(found) else ""
        return {"kind": "List", "metadata": {"continue": token}, "items": found[start:][:limit]}


def listing(items: Any, query: dict[str, str]) -> dict[str, Any]:
    """The objects matching a label selector of ``key=value`` and ``key in (a,b)`` terms."""
    selector = query.get("labelSelector", "")
    terms = re.findall(r"([^,=\s]+)\s+in\s+\(([^)]*)\)|([^,=\s]+)=([^,]*)", selector)
    wanted = [
        (key or equal_key, set(values.split(",")) if key else {value})
        for key, values, equal_key, value in terms
    ]
    found = [
        copy.deepcopy(i)
        for i in items
        if all((i["metadata"].get("labels") or {}).get(k) in v for k, v in wanted)
    ]
    return {"kind": "List", "metadata": {}, "items": found}


def sorted_by_name(items: Any) -> list[Any]:
    return sorted(items, key=lambda i: i["metadata"]["name"])


def is_writer(raw_pod: dict[str, Any]) -> bool:
    labels = raw_pod["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/name") == "migslice" and labels.get(
        "app.kubernetes.io/component"
    ) in ("extender", "agent")


def writer(component: str, name: str, deletion: str | None = None) -> dict[str, Any]:
    """A pod of migslice's extender or agent; ``deletion``: its deletionTimestamp."""
    metadata: dict[str, Any] = {
        "namespace": "migslice-system",
        "name": name,
        "labels": {"app.kubernetes.io/name": "migslice", "app.kubernetes.io/component": component},
    }
    if deletion:
        metadata["deletionTimestamp"] = deletion
    return {"metadata": metadata, "spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running"}}


def stamp(seconds_from_now: float) -> str:
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def node(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def pod(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"schedulerName": "default-scheduler", **spec},
        "status": {"phase": "Pending"},
    }


OURS = {names.QUARANTINE_LABEL: names.QUARANTINE_TIMEOUT}
OUR_ANNOTATIONS = {
    names.QUARANTINE_ANNOTATION: "{}",
    names.CARVE_ANNOTATION: "{}",
    names.LAYOUT_ANNOTATION: "{}",
    names.CARVE_STATE_ANNOTATION: "{}",
}


@pytest.fixture
def store() -> Store:
    made = Store()
    for rule in (OWN_RULE, ADMINS_RULE, ADMINS_STEER_NAMED, ADMINS_LABELLED):
        made.rules[rule["metadata"]["name"]] = copy.deepcopy(rule)
    made.nodes["gpu-a"] = node(
        "gpu-a", {**FOREIGN_LABELS, **OURS}, {**FOREIGN_ANNOTATIONS, **OUR_ANNOTATIONS}
    )
    made.nodes["cpu-a"] = node("cpu-a", {"team": "web"}, {})
    gate = [{"name": names.ADMISSION_GATE}]
    for made_pod in (
        pod("batch", "gated", schedulingGates=gate, schedulerName=names.SCHEDULER_NAME),
        pod("plain", "waiting", schedulerName=names.SCHEDULER_NAME),
        pod("plain", "default", schedulingGates=[{"name": "someone.else/gate"}]),
        pod("plain", "bound", schedulerName=names.SCHEDULER_NAME, nodeName="gpu-a"),
        {
            **pod("plain", "going", schedulerName=names.SCHEDULER_NAME),
            "metadata": {"namespace": "plain", "name": "going", "deletionTimestamp": "x"},
        },
    ):
        made.pods[(made_pod["metadata"]["namespace"], made_pod["metadata"]["name"])] = made_pod
    return made


@pytest.fixture
def kubeconfig(store: Store, tmp_path: Path) -> Iterator[Path]:
    with local_api_url(store.answer) as url:
        yield kubeconfig_file(tmp_path, url)


def cleanup(kubeconfig: Path, *extra: str) -> int:
    """``migslice cleanup``, looking again at once after a pass that removed something."""
    return main(["cleanup", "--kubeconfig", str(kubeconfig), "--settle-s", "0", *extra])


def test_it_deletes_the_steers_rules_and_migslices_node_keys_and_keeps_everything_else(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cleanup(kubeconfig) == 0
    out = capsys.readouterr().out
    assert sorted(store.rules) == ["gpu-a-maintenance", "migslice-steer-by-hand", "ops-rule"]
    assert f"DeviceTaintRule {OWN_RULE['metadata']['name']}: deleted" in out
    gpu = store.nodes["gpu-a"]["metadata"]
    assert gpu["labels"] == FOREIGN_LABELS
    assert gpu["annotations"] == FOREIGN_ANNOTATIONS
    assert store.nodes["cpu-a"] == node("cpu-a", {"team": "web"}, {})
    assert ("PATCH", "/api/v1/nodes/cpu-a") not in store.writes  # nothing of ours on it
    assert f"Node gpu-a: removed label {names.QUARANTINE_LABEL}; annotations" in out


def test_it_lists_the_pods_waiting_for_migslice_with_the_command_and_deletes_none(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods_before = copy.deepcopy(store.pods)
    assert cleanup(kubeconfig) == 0
    out = capsys.readouterr().out
    assert store.pods == pods_before
    assert not [w for w in store.writes if "/pods" in w[1]]
    assert "2 pods wait for migslice" in out
    assert "kubectl -n batch delete pod gated --wait=false    # behind the scheduling gate" in out
    assert "kubectl -n plain delete pod waiting --wait=false    # waits for migslice-sch" in out
    for other in ("default", "bound", "going"):
        assert f"pod {other} " not in out


def test_a_dry_run_changes_nothing_and_says_what_it_would(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (copy.deepcopy(store.rules), copy.deepcopy(store.nodes))
    assert cleanup(kubeconfig, "--dry-run") == 0
    out = capsys.readouterr().out
    assert (store.rules, store.nodes) == before and store.writes == []
    assert f"DeviceTaintRule {OWN_RULE['metadata']['name']}: would delete" in out
    assert "Node gpu-a: would remove label" in out


def test_a_second_run_finds_nothing_and_a_clean_cluster_is_no_error(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cleanup(kubeconfig) == 0
    store.pods.clear()
    capsys.readouterr()
    store.writes.clear()
    assert cleanup(kubeconfig) == 0
    assert store.writes == []
    assert capsys.readouterr().out.startswith("nothing to clean")


def test_a_cluster_without_device_taint_rules_is_cleaned_all_the_same(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store.refuse[("GET", RULES)] = 404
    assert cleanup(kubeconfig) == 0
    assert "DeviceTaintRules: not served" in capsys.readouterr().out
    assert names.QUARANTINE_LABEL not in store.nodes["gpu-a"]["metadata"]["labels"]


def test_refused_writes_are_said_in_one_line_each_and_the_rest_is_still_done(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store.refuse[("DELETE", RULES)] = 403
    assert cleanup(kubeconfig) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"cannot delete DeviceTaintRule {OWN_RULE['metadata']['name']}: HTTP 403" in err
    assert err.strip().splitlines()[-1].startswith("migslice: error: cleanup incomplete: 1 ")
    assert names.QUARANTINE_LABEL not in store.nodes["gpu-a"]["metadata"]["labels"]
    del store.refuse[("DELETE", RULES)]
    store.refuse[("GET", "/api/v1/")] = 403
    assert cleanup(kubeconfig) == 1
    err = capsys.readouterr().err
    assert "cannot list Nodes: HTTP 403" in err and "cannot list Pods: HTTP 403" in err
    # each line said its status twice: "HTTP 403: cannot list Nodes: HTTP 403: GET ..."
    assert "migslice cleanup: HTTP 403: cannot" not in err, err
    assert "Traceback" not in err
    assert OWN_RULE["metadata"]["name"] not in store.rules


def test_an_unreachable_api_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert cleanup(path) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # It said "cannot list" three times, then "run `migslice cleanup` again with an account
    # that may do them", as though the server had refused an account.
    assert err.startswith("migslice: error: the API server does not answer (GET /version: "), err
    assert err.count("\n") == 1 and "account" not in err


def test_credentials_the_api_server_refuses_are_one_line_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with local_api_url(lambda request: (401, UNAUTHORIZED)) as url:
        assert cleanup(kubeconfig_file(tmp_path, url)) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "migslice: error: the API server refuses the credentials of the kubeconfig's user "
        "(HTTP 401: GET /version: Unauthorized)"
    ), err
    assert err.count("\n") == 1


def test_the_keys_it_removes_are_exactly_the_ones_migslice_writes_and_never_nvidias() -> None:
    assert NODE_LABELS == (names.QUARANTINE_LABEL,)
    assert set(NODE_ANNOTATIONS) == {
        names.QUARANTINE_ANNOTATION,
        names.CARVE_ANNOTATION,
        names.LAYOUT_ANNOTATION,
        names.CARVE_STATE_ANNOTATION,
    }
    assert not [k for k in (*NODE_LABELS, *NODE_ANNOTATIONS) if k.startswith("nvidia.com/")]
    only_foreign = node("n", FOREIGN_LABELS, FOREIGN_ANNOTATIONS)
    assert node_marks(only_foreign) is None


def test_a_finished_pod_is_not_stranded() -> None:
    done = pod("a", "b", schedulerName=names.SCHEDULER_NAME)
    done["status"] = {"phase": "Failed"}
    assert stranded_pod(done) is None


def test_the_documented_hand_deletion_takes_only_the_steer_rules() -> None:
    """docs say a rule lacking the steer's name or its label is an admin's and stays, as
    ``migslice cleanup`` keeps it (:func:`migslice.objects.device_taint_rules.is_steer_rule`);
    a command given to do it by hand that selects by the label alone deletes such a rule too."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    commands = [
        (path.name, line)
        for path in sorted(docs.glob("*.md"))
        for line in path.read_text().splitlines()
        if "kubectl" in line and "devicetaintrules" in line and " delete" in line
    ]
    assert commands
    for where, line in commands:
        assert f"/{names.STEER_RULE_PREFIX}" in line, (where, line)


def test_it_waits_for_the_extender_and_agent_to_stop_before_it_cleans(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The post-delete hook runs once Helm has asked for the release's objects to be deleted,
    not once they are gone (the Deployment's and DaemonSet's pods terminate after, up to their
    grace period). Measured before: it cleaned at once while they still ran, and the steer's
    rule and the agent's layout were written again behind it: exit 0, both left."""
    store.pods[("migslice-system", "extender-1")] = writer("extender", "extender-1", stamp(20))
    store.pods[("migslice-system", "agent-1")] = writer("agent", "agent-1")
    store.stop_writers_after = 3
    assert cleanup(kubeconfig, "--writers-timeout-s", "5") == 0
    out = capsys.readouterr().out
    assert "waiting for migslice's extender and agent to stop" in out
    assert OWN_RULE["metadata"]["name"] not in store.rules
    assert names.LAYOUT_ANNOTATION not in store.nodes["gpu-a"]["metadata"]["annotations"]
    assert store.writer_looks >= 3


def test_writers_that_do_not_stop_fail_it_before_any_change_naming_them(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store.pods[("migslice-system", "extender-1")] = writer("extender", "extender-1")
    assert cleanup(kubeconfig, "--writers-timeout-s", "0.3") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "migslice-system/extender-1 (extender)" in err
    assert "uninstall migslice" in err
    assert store.writes == []


def test_a_writer_past_its_deletion_time_on_a_node_that_does_not_answer_is_not_waited_for(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its kubelet was told to kill it; the pod object stays while its node does not answer."""
    store.pods[("migslice-system", "agent-lost")] = writer("agent", "agent-lost", stamp(-600))
    store.stop_writers_after = 10**6
    store.write_again = lambda: None  # type: ignore[method-assign]
    assert cleanup(kubeconfig, "--writers-timeout-s", "0.3") == 0
    out = capsys.readouterr().out
    assert "migslice-system/agent-lost (agent) is past its deletion time" in out
    assert OWN_RULE["metadata"]["name"] not in store.rules


def test_keys_written_again_after_a_pass_are_removed_by_the_next_and_said(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer it does not know of (an agent of an older release, labelled otherwise) writes
    the layout again once: a second pass removes it; one that keeps writing fails it."""
    first_writes: list[bool] = [True]

    def once() -> None:
        if ("PATCH", "/api/v1/nodes/gpu-a") in store.writes and first_writes:
            first_writes.clear()
            store.nodes["gpu-a"]["metadata"]["annotations"][names.LAYOUT_ANNOTATION] = "{}"

    store.write_again = once  # type: ignore[method-assign]
    assert cleanup(kubeconfig) == 0
    out = capsys.readouterr().out
    assert "written again since the last pass" in out
    assert names.LAYOUT_ANNOTATION not in store.nodes["gpu-a"]["metadata"]["annotations"]

    def always() -> None:
        store.nodes["gpu-a"]["metadata"]["annotations"][names.LAYOUT_ANNOTATION] = "{}"

    store.write_again = always  # type: ignore[method-assign]
    assert cleanup(kubeconfig) == 1
    err = capsys.readouterr().err
    assert "keep coming back" in err and "Node gpu-a" in err


def test_a_transient_api_error_is_tried_again_not_a_failure(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured before: one 503 on a Node's patch (an API server restarting, etcd slow) ended
    the run with exit 1, 'cleanup incomplete', the key left."""
    store.fail_once[("PATCH", "/api/v1/nodes/gpu-a")] = 503
    store.fail_once[("DELETE", RULES)] = 500
    assert cleanup(kubeconfig) == 0, capsys.readouterr().err
    assert names.LAYOUT_ANNOTATION not in store.nodes["gpu-a"]["metadata"]["annotations"]
    assert OWN_RULE["metadata"]["name"] not in store.rules


def test_nodes_are_paged_through_and_an_expired_continue_starts_the_list_again(
    store: Store, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured before: a list outliving its continue token (410 Gone, as kube-apiserver
    answers once etcd compacted past it) ended the run, 'cannot list Nodes: HTTP 410'."""
    store.page = 4  # as a cluster of thousands of nodes is listed 500 at a time
    for k in range(10):
        name = f"gpu-{k:04d}"
        store.nodes[name] = node(name, {}, {names.LAYOUT_ANNOTATION: "{}"})
    store.expire_continue = True
    assert cleanup(kubeconfig) == 0, capsys.readouterr().err
    assert not [
        n
        for n, raw in store.nodes.items()
        if names.LAYOUT_ANNOTATION in raw["metadata"]["annotations"]
    ]
    out = capsys.readouterr().out
    assert "migslice's keys from 11 Nodes" in out
