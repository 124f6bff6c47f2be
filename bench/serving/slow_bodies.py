"""What ``bench.serving.slow_clients`` sends and serves: honest filter bodies, the largest
legitimate AdmissionReview and ExtenderArgs just below each body limit, and the extender it
starts."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.latency import extender_latency
from bench.serving import request_sizes
from harness.builders import make_created_pod, make_review
from harness.paths import REPO
from migslice.serving.process import ServerProcess


def write_stream(path: Path, documents: Iterator[dict[str, Any]]) -> None:
    with path.open("w") as out:
        for document in documents:
            out.write("---\n")
            out.write(json.dumps(document))
            out.write("\n")


def start_extender(server: ServerProcess, nodes: int, pods_per_node: int) -> None:
    """``bench.latency.extender_latency --serve`` (one worker, 8 threads, TLS), ready on /readyz."""
    with server.log_path.open("ab") as log:
        server.process = subprocess.Popen(
            [
                sys.executable, "-m", "bench.latency.extender_latency", "--serve",
                "--port", str(server.port), "--tls-cert", str(server.bundle.cert),
                "--tls-key", str(server.bundle.key), "--nodes", str(nodes),
                "--pods-per-node", str(pods_per_node), "--threads", "8",
            ],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and server.process.poll() is None:
        try:
            if server.request("GET", "/readyz")[0] == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the extender did not start:\n{server.log_tail()}")


def filter_bodies(nodes: int, count: int) -> list[bytes]:
    rng = random.Random(7)
    bodies = []
    for n in range(count):
        pod = extender_latency.raw_pod(f"new-{n}", rng.choice(extender_latency.PROFILES), None)
        chosen = rng.sample(range(nodes), min(500, nodes))
        names = [extender_latency.node_name(i) for i in chosen]
        bodies.append(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode())
    return bodies


def largest_review(limit: int) -> bytes:
    """A pod CREATE review of many small fields, as kube-apiserver sends it, just below
    ``limit``: the env entries and the managedFields entry that names each of them."""

    def review(count: int) -> bytes:
        env = [{"name": f"E{i:06d}", "value": "v"} for i in range(count)]
        fields = {
            f'k:{{"name":"E{i:06d}"}}': {".": {}, "f:name": {}, "f:value": {}} for i in range(count)
        }
        pod = webhook_latency_pod(env, fields)
        return json.dumps(pod_review(pod)).encode()

    per_entry = len(review(1000)) - len(review(0))
    count = (limit - 64 * 1024 - len(review(0))) * 1000 // per_entry
    return review(count)


APISERVER_BODY_LIMIT = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes for a create
GPU = "nvidia.com/mig-1g.10gb"


def most_gpu_containers_review(limit: int = APISERVER_BODY_LIMIT - 128 * 1024) -> bytes:
    """A pod CREATE review of as many containers as a pod below ``limit`` holds (the pod is
    what kube-apiserver's body limit bounds), each asking ``nvidia.com/mig-1g.10gb: 1`` and
    nothing else: the most GPU containers a real create can bring to the webhook."""

    def pod_bytes(count: int) -> tuple[dict[str, Any], int]:
        pod = make_created_pod(namespace="tenant-0", generate_name="many-")
        pod["spec"]["containers"] = [
            {"name": f"c{i:05d}", "image": "x", "resources": {"limits": {GPU: "1"}}}
            for i in range(count)
        ]
        return pod, len(json.dumps(pod, separators=(",", ":")))

    per_container = pod_bytes(1001)[1] - pod_bytes(1)[1]
    count = (limit - pod_bytes(0)[1]) * 1000 // per_container
    pod, _ = pod_bytes(count)
    return json.dumps(pod_review(pod), separators=(",", ":")).encode()


def webhook_latency_pod(env: list[dict[str, str]], fields: dict[str, Any]) -> dict[str, Any]:
    """A pod CREATE as kube-apiserver reviews it, its container carrying ``env`` and its
    managedFields entry naming ``fields``."""
    pod = make_created_pod(
        namespace="tenant-0",
        generate_name="big-",
        annotations={"migslice.io/gpu-size": "small"},
    )
    pod["metadata"]["managedFields"][0]["fieldsV1"] = {
        "f:spec": {
            "f:containers": {
                'k:{"name":"main"}': {".": {}, "f:env": fields, "f:image": {}, "f:name": {}}
            }
        }
    }
    main = pod["spec"]["containers"][0]
    main.update({"image": "registry.example/train:1", "env": env})
    return pod


def pod_review(pod: dict[str, Any]) -> dict[str, Any]:
    return make_review(pod, uid="bench-largest", namespace="tenant-0", dry_run=True)


def largest_full_nodes(limit: int) -> bytes:
    """ExtenderArgs with as many real-shaped full Nodes as fit below ``limit``."""
    node_bytes = len(json.dumps(request_sizes.real_node(0), separators=(",", ":")))
    count = (limit - 64 * 1024) // (node_bytes + 1)
    pod = extender_latency.raw_pod("big", "1g.10gb", None)
    items = [request_sizes.real_node(i) for i in range(count)]
    document = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return json.dumps(document, separators=(",", ":")).encode()
