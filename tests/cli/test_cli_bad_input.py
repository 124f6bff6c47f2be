"""Bad input on the command line: one clear line, a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from migslice.cli import build_parser, main
from tests.status_cluster import representative_cluster

FLAG_ERRORS = [
    (["webhook", "--port", "70000"], "70000 is not a port"),
    (["webhook", "--workers", "0"], "out of range"),
    (["webhook", "--threads", "0"], "out of range"),
    (["webhook", "--quota-hold-s", "-1"], "out of range"),
    (["webhook", "--quota-hold-s", "nan"], "not a finite number"),
    (["webhook", "--ledger-namespace", "Migslice"], "not a DNS label"),
    (["webhook", "--status-interval-s", "inf"], "not a finite number"),
    (["webhook", "--gate-interval-s", "-1"], "out of range"),
    (["webhook", "--gate-batch", "0"], "out of range"),
    (["webhook", "--gate-lease", "no-namespace"], "is not NAMESPACE/NAME"),
    (["webhook", "--gate-lease-s", "0"], "out of range"),
    (["webhook", "--gate-renew-deadline-s", "0"], "out of range"),
    (["extender", "--repartition-renew-deadline-s", "-1"], "out of range"),
    (["extender", "--max-blind-s", "nan"], "not a finite number"),
    (["extender", "--repartition-max-nodes-in-flight", "0"], "out of range"),
    (["extender", "--mig-config-map", "no-namespace"], "is not NAMESPACE/NAME"),
    (["extender", "--repartition-carve-min-pending-s", "-1"], "out of range"),
    (["extender", "--repartition-carve-min-pending-s", "nan"], "not a finite number"),
    (["extender", "--dra-large-reserve-max-hold", "0"], "out of range; expected more than 0"),
    (["extender", "--dra-large-reserve-max-hold", "inf"], "not a finite number"),
    (["agent", "--node-name", "Bad_Node"], "is not a DNS name"),
    (["agent", "--node-name", "n1", "--interval-s", "0"], "out of range"),
    (["certs", "--service", "../../x y", "--namespace", "a", "--out", "o"], "not a DNS label"),
    (["certs", "--service", "s", "--namespace", "a", "--out", "o", "--days", "99999999"], "range"),
    (["certs", "--service", "s", "--namespace", "a", "--out", "o", "--ip", "x"], "not an IP"),
    (["simulate", "--nodes", "0"], "out of range"),
    (["plan", "--cluster-file", "f", "--max-nodes-in-flight", "0"], "out of range"),
    (["fit", "--gpu", "A100-80GB", "1g.10gb", "--gpu-index", "-1"], "-1 is not a GPU index"),
    (["fit", "--gpu", "A100-80GB", "1g.10gb", "--gpu-index", "64"], "(0 to 63"),
    (
        ["fit", "--gpu", "A100-80GB", "1g.10gb", "--gpu-index", "99999999999999999999"],
        "is not a GPU index",
    ),
    (["webhook", "--host", "a b"], "is neither an IP address nor a host name"),
    (["extender", "--host", "http://x"], "is neither an IP address nor a host name"),
    (["webhook", "--tls-cert", ""], "an empty path names no file"),
    (["extender", "--tls-key", "k\0ey"], "holds a NUL byte"),
    (["webhook", "--kubeconfig", "x" * 5000], "the limit is 4096"),
    (["webhook", "--cluster-file", ""], "an empty path names no file"),
    (["webhook", "--scheduler-name", "Bad Name"], "is not a DNS name"),
    (["webhook", "--max-requests-per-connection", "1000000000"], "out of range"),
    (["webhook", "--request-timeout-s", "1e308"], "expected at most 31622400"),
    (["extender", "--repartition-interval-s", "1e12"], "(a year, migslice.console.MAX_SECONDS)"),
    (["extender", "--repartition-max-nodes-in-flight", "99999999999"], "out of range"),
    (["extender", "--repartition-carve-max-nodes-in-flight", "0"], "out of range"),
    (["extender", "--repartition-scheduler-name", "UPPER"], "is not a DNS name"),
    (["extender", "--kubeconfig", ""], "an empty path names no file"),
    (["agent", "--node-name", "n1", "--heartbeat-s", "1e300"], "expected at most"),
    (["agent", "--node-name", "n1", "--device-plugin-namespace", "a.b"], "not a DNS label"),
    (["agent", "--node-name", "n1", "--device-plugin-selector", "app=a b"], "not a label"),
    (["agent", "--node-name", "n1", "--device-plugin-selector", ""], "it is empty"),
    (["agent", "--node-name", "n1", "--kubeconfig", ""], "an empty path names no file"),
    (["certs", "--service", "s", "--namespace", "a", "--out", ""], "an empty path names no file"),
    (["certs", "--service", "s", "--namespace", "a", "--out", "o", "--secret", "A"], "DNS name"),
    (
        ["certs", "--service", "s", "--namespace", "a", "--out", "o", "--client-secret", "A_"],
        "DNS name",
    ),
    (
        [
            "certs",
            "--service",
            "s",
            "--namespace",
            "a",
            "--out",
            "o",
            "--webhook-configuration",
            "_",
        ],
        "is not a DNS name",
    ),
    (["certs", "--service", "s", "--namespace", "a", "--out", "o", "--kubeconfig", ""], "empty"),
    (["plan", "--cluster-file", ""], "an empty path names no file"),
    (["plan", "--cluster-file", "f", "--scheduler-name", "x y"], "is not a DNS name"),
    (["plan", "--cluster-file", "f", "--max-nodes-in-flight", "100001"], "out of range"),
    (["plan", "--cluster-file", "f", "--cooldown-s", "1e40"], "expected at most"),
    (["demo", "--workdir", ""], "an empty path names no file"),
    (["demo", "--pause-s", "1e30"], "expected at most"),
    (["simulate", "--trace", "../../etc/passwd"], "is not a trace name"),
    (["simulate", "--data-dir", ""], "an empty path names no file"),
    (["simulate", "--seed", str(2**64)], "out of range"),
    (["doctor", "--timeout-s", "1e20"], "expected at most"),
    (["doctor", "--pending-bound-s", "inf"], "not a finite number"),
    (["doctor", "--kubeconfig", ""], "an empty path names no file"),
    # '' grouped the node without a product label as "(no label )" under a header that said
    # "by GPU product"; no Node can carry a label of either name
    (["status", "--pool-label", ""], "'' is not a label key"),
    (["status", "--pool-label", "bad key!"], "'bad key!' is not a label key"),
    # the pod as status lists it: said "is not a DNS name", and not what to type instead
    (["why", "team-a/train-2"], "give the name and the namespace apart: why train-2 -n team-a"),
]


@pytest.mark.parametrize(("argv", "text"), FLAG_ERRORS, ids=[" ".join(a) for a, _ in FLAG_ERRORS])
def test_a_bad_flag_is_refused_at_parse_time_in_one_line(
    argv: list[str],
    text: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a flag that slipped through writes nothing into the checkout
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert text in error, error


def test_a_webhook_over_a_cluster_file_with_two_workers_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each worker kept a quota ledger of its own: 8 of 50 were admitted against a quota of 4."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    code = main(["webhook", "--cluster-file", str(cluster), "--workers", "2"])
    assert code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert "--workers 2: each worker would keep a quota ledger of its own" in lines[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["extender", "--repartition", "--repartition-renew-deadline-s", "90"],
            "--repartition-renew-deadline-s 90 must be shorter than --repartition-lease-s 60",
        ),
        (
            ["webhook", "--gate-renew-deadline-s", "1"],
            "--gate-interval-s 2 must be shorter than --gate-renew-deadline-s 1",
        ),
    ],
    ids=["extender", "webhook"],
)
def test_a_renew_deadline_outside_round_and_lease_is_refused_in_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines


def bad_files(tmp: Path) -> list[tuple[str, Path, str]]:
    (tmp / "adir").mkdir()
    os.mkfifo(tmp / "fifo")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00bad")
    (tmp / "deep.yaml").write_text("[" * 5000 + "]" * 5000)
    (tmp / "broken.yaml").write_text("kind: Node\nmetadata: {name: [\n")
    (tmp / "control.yaml").write_text("kind: Node\nmetadata: {name: n\0}\n")
    (tmp / "scalar.yaml").write_text("42\n")
    (tmp / "noname.yaml").write_text("kind: Pod\nmetadata: {}\n")
    # Before, 360 bytes of nested aliases held plan for over a minute (and status 52 s, 4.7 GB)
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp / "aliases.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: laughs}\ndata:\n"
        + "".join(f"  {line}\n" for line in laughs)
    )
    return [
        ("missing", tmp / "missing.yaml", "No such file"),
        ("directory", tmp / "adir", "it is a directory"),
        ("fifo", tmp / "fifo", "not a regular file"),
        ("not-utf8", tmp / "binary.yaml", "not UTF-8"),
        ("nested-too-deep", tmp / "deep.yaml", "nests too deep"),
        ("not-yaml", tmp / "broken.yaml", "not valid YAML"),
        (
            "control-character",
            tmp / "control.yaml",
            "not valid YAML: unacceptable character #x0000",
        ),
        ("not-an-object", tmp / "scalar.yaml", "is not a Kubernetes object"),
        ("no-name", tmp / "noname.yaml", "has no metadata.name"),
        ("alias-bomb", tmp / "aliases.yaml", "YAML aliases expand it to 1,234,567,919 nodes"),
    ]


def test_every_bad_cluster_file_is_one_line_and_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, path, text in bad_files(tmp_path):
        for argv in (["plan"], ["status"], ["why", "p"]):
            assert main([*argv, "--cluster-file", str(path)]) == 1, (name, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("migslice: error: "), (name, err)
            assert text in err, (name, argv, err)


@pytest.mark.parametrize(
    ("layout", "text"),
    [
        ('[{"profile": "1g.10gb", "start": -1}]', "cannot start at memory slice -1"),
        ("[" * 3000 + "]" * 3000, "nests too deep"),
        ('{"profile": "1g.10gb"}', "must be a JSON list"),
        ('[{"profile": "9g.99gb", "start": 0}]', "9g.99gb"),
    ],
    ids=["negative-start", "deep", "not-a-list", "unknown-profile"],
)
def test_a_bad_layout_is_one_line(
    layout: str, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--gpu", "A100-80GB", "1g.10gb", "--layout", layout]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and text in err, err


def test_output_piped_into_a_reader_that_stops_early_ends_quietly() -> None:
    for _ in range(3):
        producer = subprocess.Popen(
            [sys.executable, "-m", "migslice.cli", "layouts", "--gpu", "H100-80GB"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert producer.stdout is not None
        producer.stdout.close()  # the reader is gone before the first line, as `| head -0`
        _, err = producer.communicate(timeout=60)
        assert b"Traceback" not in err, err.decode()
        assert producer.returncode in (0, 141), err.decode()


POD_SHAPES = [
    ("spec: oops", "spec must be an object"),
    ("spec: {containers: oops}", "spec.containers must be a non-empty list"),
    ("spec: {containers: [oops]}", "spec.containers[0] must be an object"),
    ("spec: {containers: [{name: a, resources: oops}]}", "spec.containers[0].resources must"),
    (
        "spec: {containers: [{name: a, resources: {limits: oops}}]}",
        "spec.containers[0].resources.limits must be a map",
    ),
    (
        "spec: {containers: [{name: a, resources: {limits: {nvidia.com/mig-1g.10gb: abc}}}]}",
        "spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]: 'abc' is not a",
    ),
    (
        "spec: {initContainers: [{name: i, resources: {requests: {cpu: [1]}}}], "
        "containers: [{name: a}]}",
        "spec.initContainers[0].resources.requests[cpu]: [1] is not a quantity",
    ),
    ("spec: {nodeName: 5, containers: [{name: a}]}", "spec.nodeName=5 must be a string"),
]


@pytest.mark.parametrize(
    ("spec", "text"),
    POD_SHAPES,
    ids=[
        "spec",
        "containers",
        "container",
        "resources",
        "limits",
        "gpu-quantity",
        "cpu-quantity",
        "node-name",
    ],
)
def test_a_cluster_file_pod_not_shaped_as_a_pod_is_refused_naming_the_pod_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, text: str
) -> None:
    """``spec: oops`` was accepted by plan and by the webhook over the file."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "kind: Node\nmetadata: {name: n}\n---\n"
        f"kind: Pod\nmetadata: {{name: p, namespace: team-a}}\n{spec}\n"
    )
    serving = ["--insecure-http", "--port", "0"]
    for argv in (["plan"], ["webhook", *serving], ["extender", *serving]):
        assert main([*argv, "--cluster-file", str(path)]) == 1, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "document 2 (Pod team-a/p): " in err and text in err, err


DEEP_JSON = "[" * 3000 + "]" * 3000
"""Valid JSON, 6 KB, nested past Python's recursion limit: json.loads raises RecursionError."""


@pytest.mark.parametrize(
    ("kind", "name", "annotation"),
    [
        ("Node", "a100-0", "migslice.io/gpu-layout"),
        ("Node", "a100-0", "migslice.io/carve"),
        ("Node", "a100-0", "migslice.io/carve-state"),
        ("Node", "a100-2", "migslice.io/repartition-quarantine"),
        ("ConfigMap", "migslice-mig-config", "migslice.io/repartition"),
    ],
    ids=["gpu-layout", "carve", "carve-state", "quarantine-note", "repartition-record"],
)
def test_an_annotation_of_json_nested_too_deep_is_read_as_unreadable_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, name: str, annotation: str
) -> None:
    """Each ended status, why and plan with a RecursionError traceback."""
    objects = representative_cluster()
    (target,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    target["metadata"].setdefault("annotations", {})[annotation] = DEEP_JSON
    if annotation == "migslice.io/repartition-quarantine":  # read only for a labelled node
        target["metadata"]["labels"]["migslice.io/repartition-quarantine"] = "timeout"
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    for argv in (["status", "-o", "wide"], ["why", "-n", "team-a", "train-2"], ["plan"]):
        code = main([*argv, "--cluster-file", str(path)])
        err = capsys.readouterr().err
        if code == 1:  # plan refuses a record it cannot read
            assert err.count("\n") == 1 and "nests too deep to decode" in err, (argv, err)
        else:
            assert code == 0 and not err, (argv, err)
    if annotation in ("migslice.io/gpu-layout", "migslice.io/repartition"):
        main(["status", "-o", "wide", "--cluster-file", str(path)])
        assert f"{annotation} is not JSON: it nests too deep" in capsys.readouterr().out


@pytest.mark.parametrize(
    "config",
    ["version: v1\x07\nmig-configs: {}\n", "version: v1\nmig-configs: " + DEEP_JSON + "\n"],
    ids=["control-character", "nested-too-deep"],
)
def test_a_mig_parted_config_yaml_cannot_read_is_reported_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str
) -> None:
    """The ConfigMap's config.yaml ended status, why and plan with a traceback."""
    objects = representative_cluster()
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    config_map["data"] = {"config.yaml": config}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    for argv in (["status"], ["why", "-n", "team-a", "train-2"]):
        assert main([*argv, "--cluster-file", str(path)]) == 0, argv
        assert not capsys.readouterr().err
    assert main(["plan", "--cluster-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ConfigMap gpu-operator/migslice-mig-config: mig-parted config " in out
    assert "the controller would wait: mig-parted ConfigMap missing or unreadable" in out


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [("migslice", parser), *commands.choices.items()]


PARSERS = every_parser()


@pytest.mark.parametrize(("name", "parser"), PARSERS, ids=[name for name, _ in PARSERS])
def test_every_help_text_renders_without_argparse_escapes_showing(
    name: str, parser: argparse.ArgumentParser
) -> None:
    """``simulate --help`` printed "130%%": a description is printed as written, a help
    string through %-formatting, and the two were escaped alike."""
    text = parser.format_help()
    assert "%%" not in text, f"{name}: {text[text.index('%%') - 60 : text.index('%%') + 10]}"
    assert "%(" not in text, name


def test_several_kubeconfig_files_use_kubectls_current_context(tmp_path: Path) -> None:
    """kubectl takes the current context of the first file of $KUBECONFIG that sets one; the
    Python client merging the files kept the last one's: migslice read another cluster."""
    paths = []
    for port in (0, 1, 2):
        path = tmp_path / f"k{port}.kc"
        current = f"current-context: ctx{port}\n" if port else ""  # the first sets none
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c{port}, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
            f"users: [{{name: u{port}, user: {{token: t}}}}]\n"
            f"contexts: [{{name: ctx{port}, context: {{cluster: c{port}, user: u{port}}}}}]\n"
            + current
        )
        paths.append(str(path))
    environment = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    environment["KUBECONFIG"] = os.pathsep.join(paths)
    answer = subprocess.run(
        [sys.executable, "-m", "migslice.cli", "status"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert answer.returncode != 0
    assert "port=1)" in answer.stderr and "Traceback" not in answer.stderr, answer.stderr


def test_no_usable_kubeconfig_says_what_to_do_for_each_way_it_was_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services said only "ConfigException: Invalid kube-config file. No configuration
    found."; a context that is not there was told to pass --kubeconfig, though it had."""
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

    if KUBE_CONFIG_DEFAULT_LOCATION != "~/.kube/config":
        pytest.skip("$KUBECONFIG was set when the kubernetes client was imported")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    environment = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    for service in ("webhook", "extender"):
        answer = subprocess.run(
            [sys.executable, "-m", "migslice.cli", service, "--insecure-http"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
        err = answer.stderr
        assert answer.returncode == 1 and "Traceback" not in err, err
        assert "not in a pod, and no kubeconfig to use" in err and "set $KUBECONFIG" in err, err
    kubeconfig = tmp_path / "k.kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: ctx, context: {cluster: c, user: u}}]\n"
    )
    assert main(["status", "--kubeconfig", str(kubeconfig), "--context", "nope"]) == 1
    err = capsys.readouterr().err
    assert "kubeconfig context 'nope'" in err and "kubectl config get-contexts" in err, err
    assert main(["doctor", "--kubeconfig", str(kubeconfig)]) == 1  # no current-context
    err = capsys.readouterr().err
    assert f"kubectl --kubeconfig {kubeconfig} config view" in err and err.count("\n") == 1, err


def test_a_kubeconfig_env_that_names_no_file_is_named(tmp_path: Path) -> None:
    """KUBECONFIG=/nonexistent was told "no kubeconfig to use ...; set $KUBECONFIG", though it
    was set: the message named neither the variable's value nor that the file is missing."""
    missing = tmp_path / "nope.kubeconfig"
    environment = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    environment.update(KUBECONFIG=str(missing), HOME=str(tmp_path))
    answer = subprocess.run(
        [sys.executable, "-m", "migslice.cli", "status"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    err = answer.stderr
    assert answer.returncode == 1 and "Traceback" not in err, err
    assert f"$KUBECONFIG names no file that exists ({missing})" in err, err
    assert "point $KUBECONFIG at your kubeconfig, or pass --kubeconfig" in err, err
