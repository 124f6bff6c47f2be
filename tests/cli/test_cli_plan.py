"""``migslice plan`` on a cluster file."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.builders import make_mig_config_map, make_node, make_pod, unschedulable
from migslice.cli import main
from migslice.mig import CATALOG, place
from migslice.names import RECORD_ANNOTATION
from migslice.objects import AgentGpu, AgentInstance, AgentReport, render_layout_annotation


def write_cluster(tmp_path: Path, *objects: dict) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _pod(name: str, profile: str, node: str | None = None, namespace: str = "default") -> dict:
    """A pod bound to ``node``, or waiting (unschedulable) without one."""
    pod = make_pod(name, namespace=namespace, profile=profile, node_name=node)
    return {"apiVersion": "v1", "kind": "Pod", **(pod if node else unschedulable(pod))}


ALL_1G = {"config": "all-1g.10gb", "config_state": "success"}
"""A node MIG Manager left in the stock all-1g config."""


def _node(name: str, **kwargs: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Node", **make_node(name, **kwargs)}


def agent_sees_gpu_0_start_0_busy() -> str:
    """The node agent's report of two A100s in all-1g.10gb, GPU 0's first instance busy (the
    held pod's: without it, which GPU holds the pod's instance is not known, and neither GPU
    may change)."""
    model = CATALOG.get("A100-80GB")
    gpus = tuple(
        AgentGpu(
            g,
            True,
            tuple(
                AgentInstance("1g.10gb", start, 1, g == 0 and start == 0)
                for start in range(7)
                if place(model, "1g.10gb", start)
            ),
        )
        for g in range(2)
    )
    return render_layout_annotation(AgentReport(product="NVIDIA-A100-SXM4-80GB", gpus=gpus))


def cluster(tmp_path: Path) -> Path:
    return write_cluster(
        tmp_path,
        make_mig_config_map(),
        _node(
            "gpu-a",
            **ALL_1G,
            gpu_count=2,
            mig={"1g.10gb": 14},
            layout_annotation=agent_sees_gpu_0_start_0_busy(),
        ),
        _pod("infer-1", "1g.10gb", "gpu-a"),
        _pod("train-1", "3g.40gb", namespace="research"),
        _pod("train-2", "7g.80gb", namespace="research"),
    )


def test_plan_reshapes_the_idle_gpu_for_the_largest_waiting_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--cluster-file", str(cluster(tmp_path)), "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    (change,) = answer["changes"]
    assert change["node"] == "gpu-a"
    assert change["serves"] == ["research/train-2"]
    assert change["configName"].startswith("migslice-gpu-a-")
    assert change["previousConfig"] == "all-1g.10gb"
    (gpu,) = change["gpus"]
    assert gpu["after"] == [{"profile": "7g.80gb", "start": 0, "size": 8}]
    assert answer["pending"] == [{"pod": "research/train-1", "reason": "no idle GPU can take it"}]


def test_plan_prints_the_config_and_the_label_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--cluster-file", str(cluster(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "serves: research/train-2" in out
    assert "kubectl label node gpu-a nvidia.com/mig.config=migslice-gpu-a-" in out
    assert "research/train-1: no idle GPU can take it" in out
    assert main(["plan", "--cluster-file", str(cluster(tmp_path)), "-o", "mig-parted"]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    (name,) = document["mig-configs"]
    entries = document["mig-configs"][name]
    assert [e["devices"] for e in entries] == [[0], [1]]
    assert [e["mig-devices"] for e in entries] == [{"1g.10gb": 7}, {"7g.80gb": 1}]


@pytest.mark.parametrize("mode", ["mig-manager", "carve"])
def test_a_node_without_a_gpu_is_no_node_left_alone(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every CPU node of the cluster was listed under "nodes left alone" as "GPU model
    unknown": hundreds of lines, each saying a GPU was there, on `kubectl get nodes,pods -o
    json` of a real cluster."""
    path = write_cluster(
        tmp_path,
        *yaml.safe_load_all(cluster(tmp_path).read_text()),
        _node("cpu-a", product=None, gpu_count=None, mig_capable=None, strategy=None),
    )
    argv = ["plan", "--cluster-file", str(path), "--mode-default", mode]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "cpu-a" not in out and "GPU model unknown" not in out
    assert main([*argv, "-o", "json"]) == 0
    assert "cpu-a" not in capsys.readouterr().out


def test_a_missing_cluster_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--cluster-file", str(tmp_path / "nope.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("migslice: error: cannot read --cluster-file")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("objects", "text"),
    [
        ((), "it holds no Kubernetes objects"),
        (({"apiVersion": "v1", "kind": "Pod", **make_pod("p")},), "it holds no Node"),
        (
            ({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}},),
            "its one Node lacks an NVIDIA GPU",
        ),
        (
            tuple(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"cpu-{i}"}}
                for i in range(3)
            ),
            "none of its 3 Nodes has an NVIDIA GPU",
        ),
    ],
    ids=["empty", "no-node", "one-cpu-node", "cpu-nodes"],
)
def test_a_cluster_file_without_a_gpu_node_says_so_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: tuple[dict, ...], text: str
) -> None:
    """An empty file answered 0 with "mig-parted ConfigMap missing or unreadable"."""
    path = write_cluster(tmp_path, *objects) if objects else tmp_path / "cluster.yaml"
    if not objects:
        path.write_text("")
    assert main(["plan", "--cluster-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"migslice: error: --cluster-file {path}: {text}"), err
    assert err.count("\n") == 1
    assert "ConfigMap missing" not in err


def test_a_gpu_cluster_without_the_mig_parted_config_map_still_says_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("gpu-a", mig={"1g.10gb": 7}, config="all-1g.10gb", config_state="success")
    path = write_cluster(tmp_path, {"apiVersion": "v1", "kind": "Node", **node})
    assert main(["plan", "--cluster-file", str(path)]) == 0
    assert "mig-parted ConfigMap missing or unreadable" in capsys.readouterr().out


def test_a_mig_parted_config_that_does_not_parse_is_named_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured before: plan said only "missing or unreadable", and status nothing at all."""
    config_map = make_mig_config_map()
    config_map["data"] = {"config.yaml": "version: v1\n: : [\n"}
    path = write_cluster(tmp_path, config_map, _node("gpu-a", **ALL_1G, mig={"1g.10gb": 7}))
    assert main(["plan", "--cluster-file", str(path)]) == 0
    said = capsys.readouterr().out
    assert "ConfigMap gpu-operator/migslice-mig-config: mig-parted config is not YAML" in said
    assert main(["status", "--cluster-file", str(path), "-o", "wide"]) == 0
    assert "record: mig-parted config is not YAML" in capsys.readouterr().out


def stranding_cluster(tmp_path: Path, twos: int) -> Path:
    """A node whose pods hold a 3g.40gb and ``twos`` 2g.20gb, an idle all-1g node, and a 3g
    pod waiting."""
    return write_cluster(
        tmp_path,
        make_mig_config_map(),
        _node("gpu-busy", gpu_count=1, mig={"3g.40gb": 1, "2g.20gb": 2}),
        _node("gpu-idle", **ALL_1G, gpu_count=1, mig={"1g.10gb": 7}),
        _pod("held-3g", "3g.40gb", "gpu-busy"),
        *[_pod(f"held-2g-{i}", "2g.20gb", "gpu-busy") for i in range(twos)],
        _pod("train-3", "3g.40gb"),
    )


def test_plan_says_whether_the_stranding_rule_is_on_and_follows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(stranding_cluster(tmp_path, twos=2))
    assert main(["plan", "--cluster-file", path]) == 0
    out = capsys.readouterr().out
    assert (
        "stranding rule on (1g/2g pods hold 4 compute slices; the 3g pods leave 4 memory slices"
        " beside them)" in out
    )
    assert (
        "full-compute rule on (the 3g pods leave 4 memory slices beside them; the 4g pods hold"
        " 0 memory slices): carve mode puts a 2g where a 3g and a second 2g still fit" in out
    )
    assert main(["plan", "--cluster-file", path, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["strandingRule"] == {
        "on": True,
        "fillComputeSlices": 4,
        "needMemorySlices": 4,
        "fullComputeRule": True,
        "wideMemorySlices": 0,
    }
    (change,) = answer["changes"]
    (gpu,) = change["gpus"]
    compute = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4}
    assert sum(compute[p["profile"]] for p in gpu["after"]) == 7  # not 3g.40gb + 3g.40gb
    # One 2g pod less: too few small pods to fill beside a second 3g
    assert main(["plan", "--cluster-file", str(stranding_cluster(tmp_path, twos=1))]) == 0
    assert "stranding rule off (1g/2g pods hold 2 compute slices" in capsys.readouterr().out


def _plan_a_waiting_2g_on_a_carve_node(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    finished_s_ago: float | None = None,
) -> dict[str, Any]:
    """``migslice plan -o json`` on carve-mode gpu-a (1g.10gb@0, 1g.10gb@1 idle, a 3g.40gb
    held) with a 2g.20gb pod unschedulable for 20 s; the record says gpu-a finished a carve
    ``finished_s_ago`` (none when None)."""
    from tests.carve_builders import carve_node_raw, gpu

    node = carve_node_raw(
        "gpu-a", [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")], busy=["0:3g.40gb@4"]
    )
    now = datetime.datetime.now(datetime.UTC)

    def ago(seconds: float) -> str:
        return (now - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    pod = unschedulable(make_pod("mid", profile="2g.20gb"), since=ago(20))
    annotations = None
    if finished_s_ago is not None:
        record = {"version": "v1", "finished": {"gpu-a": ago(finished_s_ago)}}
        annotations = {RECORD_ANNOTATION: json.dumps(record)}
    path = write_cluster(
        tmp_path,
        make_mig_config_map(annotations=annotations),
        {"apiVersion": "v1", "kind": "Node", **node},
        {"apiVersion": "v1", "kind": "Pod", **pod},
    )
    assert main(["plan", "--cluster-file", str(path), "-o", "json", *flags]) == 0
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


@pytest.mark.parametrize(
    ("flags", "carves"),
    [((), True), (("--carve-min-pending-s", "30"), False)],
    ids=["carve-default-10s", "carve-set-to-30s"],
)
def test_a_carve_node_judges_demand_by_carve_modes_own_min_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], carves: bool
) -> None:
    """A pod unschedulable for 20 s: past carve mode's 10 s (the controller's
    --repartition-carve-min-pending-s), short of the MIG Manager path's 30 s, so plan carves
    it a 2g.20gb, as the controller would, unless told carve mode waits 30 s too."""
    answer = _plan_a_waiting_2g_on_a_carve_node(tmp_path, capsys, flags)
    if carves:
        assert (answer["step"], answer["mode"]) == ("start", "carve")
        (change,) = answer["changes"]
        assert change["serves"] == ["team-a/mid"]
        assert change["gpus"][0]["create"] == [{"profile": "2g.20gb", "start": 2}]
    else:
        assert (answer["step"], answer["changes"]) == ("wait", [])
        (pending,) = answer["pending"]
        assert pending["pod"] == "team-a/mid" and pending["reason"].endswith("s < 30s")


@pytest.mark.parametrize(
    ("flags", "carves"),
    [((), True), (("--carve-cooldown-s", "600"), False)],
    ids=["carve-default-60s", "carve-set-to-600s"],
)
def test_a_carve_node_cools_down_for_carve_modes_own_cooldown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], carves: bool
) -> None:
    """gpu-a finished a carve 2 minutes ago: past carve mode's 60 s (the controller's
    --repartition-carve-cooldown-s), so plan carves the waiting pod a 2g.20gb, as the
    controller would, unless told carve mode cools down 600 s (plan had no such flag and
    always judged carve nodes by 60 s)."""
    answer = _plan_a_waiting_2g_on_a_carve_node(tmp_path, capsys, flags, finished_s_ago=120)
    if carves:
        assert (answer["step"], answer["mode"]) == ("start", "carve")
        (change,) = answer["changes"]
        assert change["serves"] == ["team-a/mid"]
    else:
        assert (answer["step"], answer["changes"]) == ("wait", [])


def test_plan_follows_the_controllers_round_past_a_quarantine_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The record quarantines a node that is gone: the controller's first step releases it,
    and in the same round it decides again and plans for the waiting pods. plan ran one
    decide() and said only "the controller would quarantine"."""
    record = {
        "version": "v1",
        "quarantine": {"gone": {"since": "2025-06-15T14:40:00Z", "config": "c", "detail": "x"}},
    }
    objects = [
        make_mig_config_map(annotations={RECORD_ANNOTATION: json.dumps(record)}),
        *[o for o in yaml.safe_load_all(cluster(tmp_path).read_text()) if o["kind"] != "ConfigMap"],
    ]
    path = write_cluster(tmp_path, *objects)
    assert main(["plan", "--cluster-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "first, the controller would quarantine: " in out
    assert "serves: research/train-2" in out
    assert main(["plan", "--cluster-file", str(path), "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [f["step"] for f in answer["first"]] == ["quarantine"]
    assert answer["step"] == "start" and answer["changes"][0]["node"] == "gpu-a"
