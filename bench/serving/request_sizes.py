"""Benchmark (not a test): how large the largest legitimate request to each endpoint is.

The servers' body limits (``--max-body-mib``) are sized from these numbers:

* ExtenderArgs with ``NodeNames`` (``nodeCacheCapable: true``): 5,000 node names of the shape
  cloud providers give (``ip-10-0-12-34.us-west-2.compute.internal``) with a typical pod, a
  large real-shaped pod (many containers and variables, a workflow-engine annotation) and a
  pod at etcd's 1.5 MiB object limit (the most kube-scheduler can ever hold).
* ExtenderArgs with full ``Nodes`` (``nodeCacheCapable: false``): real-shaped GPU Nodes
  (GPU Feature Discovery labels, 50 images - the kubelet's default ``nodeStatusMaxImages`` -,
  managedFields, conditions) at the candidate counts kube-scheduler sends.
* AdmissionReview: measured from a real kube-apiserver (``e2e/.bin``, built by
  ``e2e/build.sh``): the largest pod CREATE body it accepts (3 MiB) in two shapes, one long
  value and many small fields (managedFields grow with the number of fields), recorded by a
  small HTTPS webhook as kube-apiserver sends it. ``--no-apiserver`` skips this part.

    .venv/bin/python -m bench.serving.request_sizes

Writes the section ``request_sizes`` of ``bench/serving/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import ssl
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from bench.latency.extender_latency import raw_node
from bench.serving.suite import SUITE
from harness.builders import make_pod

MIB = 1 << 20
APISERVER_BODY_LIMIT = 3 * MIB  # kube-apiserver's MaxRequestBodyBytes
ETCD_OBJECT_LIMIT = int(1.5 * MIB)  # etcd --max-request-bytes


def node_name(index: int) -> str:
    octets = f"{index // 65536 % 256}-{index // 256 % 256}-{index % 256}"
    return f"ip-10-{octets}.us-west-2.compute.internal"


def real_node(index: int) -> dict[str, Any]:
    """A GPU Node as the API serves it to kube-scheduler (Nodes keep their managedFields)."""
    return raw_node(index, heavy=True)


def scheduled_pod(containers: int = 1, env: int = 5, annotation_bytes: int = 0) -> dict[str, Any]:
    """A pending pod as kube-scheduler holds it (no managedFields): ``containers`` alike, each
    with ``env`` variables, and an annotation of ``annotation_bytes``."""
    pod = make_pod(
        "train-7f9c4",
        profile="2g.20gb",
        limits={"cpu": "8", "memory": "64Gi"},
        also_requests=True,
        labels={"app": "train", "team": "team-a"},
        annotations={"migslice.io/policy": "team-a@3"},
        image="123456789012.dkr.ecr.us-west-2.amazonaws.com/ml/train:v1.2.3",
        command=["python", "-m", "train", "--config", "/etc/train/config.yaml"],
        restart_policy=None,
        uid="0f0e3bd4-4b6c-4c58-9b43-6f1a3d3c2a10",
        resource_version="91234567",
        spec={
            "volumes": [{"name": "config", "configMap": {"name": "train-config"}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    )
    (main,) = pod["spec"]["containers"]
    main["env"] = [{"name": f"SETTING_{e:04d}", "value": f"value-{e}"} for e in range(env)]
    main["volumeMounts"] = [{"name": "config", "mountPath": "/etc/train"}]
    pod["spec"]["containers"] = [{**main, "name": f"c{c}"} for c in range(containers)]
    if annotation_bytes:
        pod["metadata"]["annotations"]["workflows.argoproj.io/template"] = "t" * annotation_bytes
    return pod


def pod_of_size(target: int) -> dict[str, Any]:
    pod = scheduled_pod()
    pod["metadata"]["annotations"]["filler"] = ""
    filler = target - size(pod)
    pod["metadata"]["annotations"]["filler"] = "x" * max(0, filler)
    return pod


def size(document: Any) -> int:
    return len(json.dumps(document, separators=(",", ":")))


def extender_sizes() -> list[dict[str, Any]]:
    names = [node_name(i) for i in range(5000)]
    pods = {
        "typical pod": scheduled_pod(),
        "large pod (12 containers x 60 env, 64 KiB annotation)": scheduled_pod(12, 60, 64 << 10),
        "pod at etcd's 1.5 MiB limit": pod_of_size(ETCD_OBJECT_LIMIT),
    }
    rows = []
    for label, pod in pods.items():
        body = size({"Pod": pod, "Nodes": None, "NodeNames": names})
        rows.append({"request": f"NodeNames x 5000, {label}", "bytes": body})
    node_bytes = size(real_node(1))
    for count in (100, 500, 781, 5000):
        items = [real_node(i) for i in range(count)]
        body = size(
            {"Pod": scheduled_pod(), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        )
        rows.append(
            {"request": f"Nodes x {count} (real-shaped, {node_bytes} B each)", "bytes": body}
        )
    return rows


# -- AdmissionReview from a real kube-apiserver ------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    sizes: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).sizes.append(len(body))
        uid = json.loads(body)["request"]["uid"]
        answer = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def created_pod(env: list[dict[str, str]]) -> dict[str, Any]:
    """A pod as a client POSTs it, its one container carrying ``env``."""
    pod = make_pod(
        None,
        generate_name="big-",
        namespace="default",
        stored=False,
        tenant=None,
        limits={},
        image="busybox",
        restart_policy=None,
        scheduler_name=None,
        with_type_meta=True,
    )
    pod["spec"]["containers"][0]["env"] = env
    return pod


def fill_to(target: int, many: bool) -> bytes:
    if not many:
        probe = created_pod([{"name": "BIG", "value": ""}])
        value = "x" * (target - len(json.dumps(probe).encode()))
        return json.dumps(created_pod([{"name": "BIG", "value": value}])).encode()
    entry = len(json.dumps({"name": "E000000", "value": "v"})) + 2
    count = (target - len(json.dumps(created_pod([])))) // entry
    env = [{"name": f"E{i:06d}", "value": "v"} for i in range(count)]
    return json.dumps(created_pod(env)).encode()


def admission_sizes(workdir: Path) -> list[dict[str, Any]]:
    from harness.controlplane import ControlPlane
    from migslice.serving.certs import write_tls_bundle

    bundle = write_tls_bundle(workdir / "recorder", "recorder", "default", (), ["127.0.0.1"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(bundle.cert, bundle.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    rows: list[dict[str, Any]] = []
    with ControlPlane(workdir / "cp") as plane:
        plane.apply(
            [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "recorder"},
                    "webhooks": [
                        {
                            "name": "recorder.bench.migslice.io",
                            "clientConfig": {
                                "url": f"https://127.0.0.1:{port}/mutate",
                                "caBundle": base64.b64encode(bundle.ca_cert.read_bytes()).decode(),
                            },
                            "rules": [
                                {
                                    "apiGroups": [""],
                                    "apiVersions": ["v1"],
                                    "operations": ["CREATE"],
                                    "resources": ["pods"],
                                }
                            ],
                            "admissionReviewVersions": ["v1"],
                            "sideEffects": "None",
                            "failurePolicy": "Fail",
                            "timeoutSeconds": 30,
                        }
                    ],
                }
            ]
        )
        api = plane.client_configuration()
        context = ssl.create_default_context(cafile=api.ssl_ca_cert)
        context.load_cert_chain(api.cert_file, api.key_file)
        url = f"{plane.server}/api/v1/namespaces/default/pods?dryRun=All"
        for many in (False, True):
            shape = "many small fields (env entries)" if many else "one long value"
            for target in (
                1 * MIB,
                2 * MIB,
                APISERVER_BODY_LIMIT - 1024,
                APISERVER_BODY_LIMIT + 1024,
            ):
                body = fill_to(target, many)
                request = urllib.request.Request(
                    url, data=body, method="POST", headers={"Content-Type": "application/json"}
                )
                before = len(_Recorder.sizes)
                try:
                    with urllib.request.urlopen(request, context=context, timeout=60) as reply:
                        status = reply.status
                except urllib.error.HTTPError as error:
                    status = error.code
                review = _Recorder.sizes[-1] if len(_Recorder.sizes) > before else None
                rows.append(
                    {
                        "request": f"pod CREATE, {shape}",
                        "pod_body_bytes": len(body),
                        "apiserver_status": status,
                        "review_bytes": review,
                    }
                )
                print(rows[-1], flush=True)
    server.shutdown()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-apiserver", action="store_true", help="skip the kube-apiserver part")
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/serving)")
    args = parser.parse_args()
    report: dict[str, Any] = {"extender_args": extender_sizes()}
    for row in report["extender_args"]:
        print(f"{row['bytes'] / MIB:8.2f} MiB  {row['request']}")
    if not args.no_apiserver:
        with tempfile.TemporaryDirectory() as tmp:
            report["admission_review"] = admission_sizes(Path(tmp))
    SUITE.write("request_sizes", report, args.out)
    return 0


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# The largest legitimate requests (`bench/serving/request_sizes.py`)",
        "",
        "| request | bytes | MiB |",
        "|---|---|---|",
    ]
    for row in report["extender_args"]:
        lines.append(
            f"| ExtenderArgs: {row['request']} | {row['bytes']} | {row['bytes'] / MIB:.2f} |"
        )
    for row in report.get("admission_review", []):
        shown = row["review_bytes"]
        cell = (
            f"{shown} | {shown / MIB:.2f}"
            if shown
            else f"(kube-apiserver answered {row['apiserver_status']}) | -"
        )
        lines.append(
            f"| AdmissionReview: {row['request']}, pod body {row['pod_body_bytes']} B | {cell} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
