"""``migslice cleanup`` (the chart's post-delete hook): which DeviceTaintRules, node keys and
pods it picks, what it changes and what it keeps, against a real HTTP server that stores
objects, selects by label and field and applies merge patches as kube-apiserver does."""

from __future__ import annotations

import copy
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

    def answer(self, request: Request) -> tuple[int, Any]:
        for (method, prefix), status in self.refuse.items():
            if request.method == method and request.path.startswith(prefix):
                return status, {"kind": "Status", "message": f"refused {request.path}"}
        with self.lock:
            if request.method != "GET":
                self.writes.append((request.method, request.path))
            if request.path == "/version":
                return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
            if request.path == RULES and request.method == "GET":
                return 200, listing(self.rules.values(), request.query)
            if request.path.startswith(RULES + "/") and request.method == "DELETE":
                name = request.path.rsplit("/", 1)[1]
                if self.rules.pop(name, None) is None:
                    return 404, {"kind": "Status", "message": "not found"}
                return 200, {"kind": "Status", "status": "Success"}
            if request.path == "/api/v1/nodes" and request.method == "GET":
                return 200, listing(self.nodes.values(), request.query)
            if request.path.startswith("/api/v1/nodes/") and request.method == "PATCH":
                name = request.path.rsplit("/", 1)[1]
                if name not in self.nodes:
                    return 404, {"kind": "Status", "message": "not found"}
                assert request.content_type == "application/merge-patch+json"
                self.nodes[name] = merge(self.nodes[name], request.body)
                return 200, self.nodes[name]
            if request.path == "/api/v1/pods" and request.method == "GET":
                assert request.query["fieldSelector"] == "spec.nodeName="
                unbound = [p for p in self.pods.values() if not p["spec"].get("nodeName")]
                return 200, listing(unbound, request.query)
        return 404, {"kind": "Status", "message": f"no {request.method} {request.path}"}


def listing(items: Any, query: dict[str, str]) -> dict[str, Any]:
    """One page of objects matching an equality label selector (``key=value,...``)."""
    wanted = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if p)
    found = [
        copy.deepcopy(i)
        for i in items
        if all((i["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
    ]
    return {"kind": "List", "metadata": {}, "items": found}


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
    return main(["cleanup", "--kubeconfig", str(kubeconfig), *extra])


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
