"""``migslice extender --cluster-file`` over HTTPS on a real socket, as kube-scheduler calls it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from harness.builders import make_node, make_pod
from migslice.serving.certs import write_tls_bundle


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def extender_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    bundle = write_tls_bundle(
        tmp_path / "tls", "migslice-extender", "migslice-system", ip_addresses=["127.0.0.1"]
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump_all(
            [
                make_node(
                    "gpu-a",
                    gpu_count=1,
                    mig={"3g.40gb": 2},
                    config="all-3g.40gb",
                    with_type_meta=True,
                ),
                make_node(
                    "gpu-b",
                    gpu_count=1,
                    mig={"3g.40gb": 2},
                    config="all-3g.40gb",
                    with_type_meta=True,
                ),
                make_pod(
                    "bound",
                    profile="3g.40gb",
                    node_name="gpu-b",
                    phase="Running",
                    with_type_meta=True,
                ),
            ]
        )
    )
    port = free_port()
    command = [
        sys.executable, "-m", "migslice.cli", "extender", "--cluster-file", str(cluster),
        "--host", "127.0.0.1", "--port", str(port), "--threads", "2",
        "--tls-cert", str(bundle.cert), "--tls-key", str(bundle.key),
    ]  # fmt: skip
    log = tmp_path / "extender.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{url}/readyz", verify=bundle.ca_cert, timeout=1)
                break
            except requests.ConnectionError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "extender did not start"
                time.sleep(0.1)
        yield url, bundle.ca_cert
    finally:
        process.send_signal(signal.SIGINT)  # gunicorn: quick shutdown
        process.wait(10)


def test_the_extender_answers_kube_scheduler_over_tls_from_a_cluster_file(
    extender_url: tuple[str, Path],
) -> None:
    url, ca = extender_url
    pod = make_pod("train-0", profile="3g.40gb")
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]})
    headers = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
    assert requests.get(f"{url}/readyz", verify=ca, timeout=5).status_code == 200
    answer = requests.post(f"{url}/filter", data=body, headers=headers, verify=ca, timeout=5)
    assert answer.status_code == 200
    assert answer.json()["NodeNames"] == ["gpu-a", "gpu-b"]
    scores = requests.post(f"{url}/prioritize", data=body, headers=headers, verify=ca, timeout=5)
    by_host = {entry["Host"]: entry["Score"] for entry in scores.json()}
    assert by_host["gpu-b"] > by_host["gpu-a"]  # the bound pod's GPU is already in use
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{url}/healthz", timeout=5)  # a client that does not trust our CA
