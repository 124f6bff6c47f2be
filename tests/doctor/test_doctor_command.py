"""``migslice doctor`` as a command, against a real local HTTP server answering as the API
server does: the aligned table and its exit status, JSON, the per-check timeout, a read it
may not do, an API server that does not answer; and the direct probe of a real TLS server."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from migslice.cli import main
from migslice.doctor.command import CHECK_NAMES
from migslice.doctor.registry import CHECKS
from migslice.serving.certs import write_tls_bundle
from tests.doctor_cluster import ADMISSION, CORE, DoctorCluster
from tests.doctor_serve import answer_from, judge
from tests.local_api import UNAUTHORIZED, kubeconfig_file, local_api_url


@pytest.fixture
def cluster() -> Iterator[DoctorCluster]:
    made = DoctorCluster()
    yield made
    made.close()


def kubeconfig(folder: Path, url: str) -> Path:
    return kubeconfig_file(folder, url)


def doctor(cluster: DoctorCluster, tmp_path: Path, *args: str, **kw: Any) -> int:
    with local_api_url(answer_from(cluster, **kw)) as url:
        return main(["doctor", "--kubeconfig", str(kubeconfig(tmp_path, url)), *args])


def test_the_check_names_are_the_registrys_in_its_order() -> None:
    assert CHECK_NAMES == tuple(c.name for c in CHECKS)


def test_a_healthy_cluster_prints_one_aligned_ok_line_per_check(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.harden()
    assert doctor(cluster, tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0]
    assert header.split() == ["CHECK", "RESULT", "DETAIL"]
    body = lines[1 : 1 + len(CHECKS)]
    assert [line.split()[:2] for line in body] == [[name, "ok"] for name in CHECK_NAMES]
    result, detail = header.index("RESULT"), header.index("DETAIL")
    assert all(line[result : result + 3] == "ok " for line in body)
    assert all(line[detail - 1] == " " and line[detail] != " " for line in body)
    assert lines[-2:] == ["", "21 checks: 21 ok"]


def test_a_failed_check_exits_1_with_the_fix_on_its_line(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del cluster.objects[
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tenantpolicies.migslice.io"
    ]
    assert doctor(cluster, tmp_path) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("tenantpolicy-crd")]
    assert line.split()[1] == "failed"
    assert line.endswith(
        "CustomResourceDefinition tenantpolicies.migslice.io not found; fix: helm upgrade "
        "--install migslice charts/migslice -n migslice-system (or kubectl apply "
        "--server-side -k manifests)"
    )
    assert out.splitlines()[-1] == "21 checks: 18 ok, 2 warning, 1 failed"


def test_json_names_each_check_what_it_read_and_the_counts(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.objects["/apis/migslice.io/v1alpha1/tenantpolicies"] = []
    assert doctor(cluster, tmp_path, "-o", "json", "--check", "tenant-policies") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["namespace"] == "migslice-system"
    assert report["via"] == "api-proxy"
    (check,) = report["checks"]
    assert check["name"] == "tenant-policies"
    assert check["result"] == "warning"
    assert check["reads"] == "every TenantPolicy; every Namespace (for namespaceSelector)"
    assert report["summary"] == {"ok": 0, "warning": 1, "failed": 0}


def test_a_check_that_takes_too_long_fails_and_the_others_still_run(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = {"/api/v1/nodes": threading.Event()}
    args = ("-o", "json", "--timeout-s", "0.8", "--check", "gpu-products", "--check", "scheduler")
    assert doctor(cluster, tmp_path, *args, held=held) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["gpu-products"]["result"] == "failed"
    assert checks["gpu-products"]["detail"] == "no answer within 0.8s (--timeout-s)"
    assert checks["scheduler"]["result"] == "ok"


def test_a_read_doctor_may_not_do_fails_that_check_naming_what_it_reads(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forbidden = {"/api/v1/nodes": (403, 'nodes is forbidden: User "dev" cannot list resource')}
    args = ("-o", "json", "--check", "gpu-products")
    assert doctor(cluster, tmp_path, *args, errors=forbidden) == 1
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["detail"] == (
        'cannot read the cluster: HTTP 403: GET /api/v1/nodes: nodes is forbidden: User "dev" '
        "cannot list resource"
    )
    assert check["fix"].startswith("run doctor as a cluster admin, or grant get and list on")


def test_an_api_server_that_does_not_answer_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = kubeconfig(tmp_path, "http://127.0.0.1:1")
    assert main(["doctor", "--kubeconfig", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("migslice: error: the API server does not answer (GET /version: ")
    assert err.count("\n") == 1


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--kubeconfig", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err == (
        f"migslice: error: --kubeconfig {tmp_path / 'nope'}: no such file\n"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("foo: [\n", "it is not valid YAML"),
        ("users: [\x07]\n", "it is not valid YAML: unacceptable character #x0007"),
        ('"hello"\n', "it is a YAML string, not a mapping"),
        ("- a\n", "it is a YAML list, not a mapping"),
        ("users: 5\n", "users is a YAML number; it must be a list of named entries"),
        ("contexts: [oops]\n", "contexts[0] must be a mapping with a string name"),
        ("", "it is empty"),
    ],
    ids=[
        "not-yaml",
        "control-character",
        "a-string",
        "a-list",
        "users-not-a-list",
        "context-not-a-mapping",
        "empty",
    ],
)
def test_a_kubeconfig_that_is_no_kubeconfig_is_one_line_naming_the_file_and_the_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    """It said "no access to a cluster ('str' object does not support item assignment)"."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    for command in (["doctor"], ["agent", "--node-name", "n1"], ["webhook"], ["extender"]):
        assert main([*command, "--kubeconfig", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"migslice: error: --kubeconfig {path}: {problem}"), err
        assert err.count("\n") == 1, err


def test_a_default_kubeconfig_that_is_no_kubeconfig_is_named_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

    from migslice.kube.transport import KubeconfigError, KubernetesTransport

    if KUBE_CONFIG_DEFAULT_LOCATION != "~/.kube/config":
        pytest.skip("$KUBECONFIG was set when the kubernetes client was imported")
    path = tmp_path / ".kube" / "config"
    path.parent.mkdir()
    path.write_text('"hello"\n')
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeconfigError, match=f"kubeconfig {path}: it is a YAML string"):
        KubernetesTransport.from_environment()


# -- in the cluster: the server's own certificate, on the connection ---------------------------


@contextmanager
def tls_server(folder: Path) -> Iterator[tuple[int, str]]:
    """A real HTTPS server on 127.0.0.1 answering /healthz with a certificate of its own CA
    (for 127.0.0.1); its port and that CA as a caBundle."""
    bundle = write_tls_bundle(folder, "migslice-webhook", "migslice-system", [], ["127.0.0.1"], 30)

    class Healthz(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status":"ok"}'
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(bundle.cert, bundle.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1], base64.b64encode(Path(bundle.ca_cert).read_bytes()).decode()
    finally:
        server.shutdown()
        server.server_close()


def test_in_the_cluster_the_certificate_on_the_connection_is_judged(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    del cluster.objects[f"{CORE}/secrets/migslice-webhook-tls"]  # not read in the cluster
    with tls_server(tmp_path / "served") as (port, ca_bundle):
        for resource, path in (("mutating", "/mutate"), ("validating", "/validate")):
            configuration = cluster.objects[
                f"{ADMISSION}/{resource}webhookconfigurations/migslice-webhook"
            ]
            for hook in configuration["webhooks"]:
                client = hook["clientConfig"]
                del client["service"]
                client.update(url=f"https://127.0.0.1:{port}{path}", caBundle=ca_bundle)
        reachable = judge(cluster, "webhook-reachable", direct=True)
        trust = judge(cluster, "webhook-ca-bundle", direct=True)
    assert reachable.detail == f'GET /healthz https://127.0.0.1:{port}: 200 {{"status":"ok"}}'
    assert (trust.verdict, trust.detail) == (
        "ok",
        "the caBundle of MutatingWebhookConfiguration and ValidatingWebhookConfiguration "
        f"verifies the certificate of the server at https://127.0.0.1:{port}",
    )


def test_credentials_the_api_server_refuses_are_said_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An expired token was told "the API server does not answer (HTTP 401: ...)"."""
    with local_api_url(lambda request: (401, UNAUTHORIZED)) as url:
        assert main(["doctor", "--kubeconfig", str(kubeconfig(tmp_path, url))]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "migslice: error: the API server refuses the credentials of the kubeconfig's user "
        "(HTTP 401: GET /version: "
    ), err
    assert "does not answer" not in err and err.count("\n") == 1


def test_a_namespace_migslice_is_not_in_says_where_its_webhook_configuration_points(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed with Helm into its own namespace, doctor without -n (or with a wrong one)
    failed every check with "Deployment migslice-system/... not found; fix: helm upgrade
    --install migslice charts/migslice -n migslice-system": a second install, and nothing
    said that migslice is in another namespace."""
    assert doctor(cluster, tmp_path, "-n", "gpu-sharing") == 1
    captured = capsys.readouterr()
    assert "Deployment gpu-sharing/migslice-scheduler not found" in captured.out
    assert captured.err == (
        "migslice: note: no Deployment migslice-webhook in gpu-sharing, and "
        "MutatingWebhookConfiguration migslice-webhook calls Service "
        "migslice-system/migslice-webhook: if migslice is installed there, run "
        "`migslice doctor -n migslice-system`\n"
    )
    assert doctor(cluster, tmp_path) == 0  # in its namespace, no note
    assert capsys.readouterr().err == ""


def test_context_picks_the_kubeconfig_context_as_status_and_why_do(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The current context reaches no cluster; --context names the one that does (doctor had
    no --context, though status, why and cleanup take it)."""
    cluster.harden()
    with local_api_url(answer_from(cluster)) as url:
        path = kubeconfig(tmp_path, url)
        config = yaml.safe_load(path.read_text())
        config["clusters"].append({"name": "away", "cluster": {"server": "http://127.0.0.1:1"}})
        config["contexts"].append({"name": "away", "context": {"cluster": "away", "user": "u"}})
        config["current-context"] = "away"
        path.write_text(yaml.safe_dump(config))
        assert main(["doctor", "--kubeconfig", str(path), "--context", "c"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "21 checks: 21 ok"


def test_one_check_is_counted_as_one_check(
    cluster: DoctorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.harden()
    assert doctor(cluster, tmp_path, "--check", "tenant-policies") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 check: 1 ok"
