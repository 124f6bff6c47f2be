"""Only kube-apiserver holds quota: the webhook with client authentication on, on a control
plane of its own whose kube-apiserver presents a client certificate to it.

The certificates come from the command an admin runs, ``migslice certs --service
migslice-webhook ... --client kube-apiserver``; kube-apiserver starts with an
``--admission-control-config-file`` whose kubeconfig presents ``kube-apiserver.crt`` (its user
named by the webhook's ``host:port``, the key kube-apiserver looks a URL webhook up by), and the
webhook runs as the chart runs it with ``webhook.clientAuth.enabled``: ``--client-ca-file``
(its CA) and ``--client-name kube-apiserver``.

Real creates through kube-apiserver are admitted and charged as before. Forged AdmissionReviews
sent to the webhook's port directly, with no certificate, a certificate of another CA, or one of
the right CA with another name, are refused (403, or the handshake fails) and hold nothing: a
tenant one pod below its quota still gets its next pod right after ten of them.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import gpu_pod
from e2e.test_faults_admission_e2e import WEBHOOK_RBAC, admitted_in, ledger_charges, tenant
from e2e.test_install_e2e import fresh_workdir
from harness.api import ensure_namespace, register_gpu_node
from harness.builders import make_review
from harness.controlplane import ControlPlane
from harness.faults import create_pod
from harness.image import Image
from harness.paths import REPO
from harness.stack import BASE, NAMESPACE, Server, migslice_server, webhook_configurations
from migslice.serving.certs import TlsBundle, make_ca, make_client_cert, write_client_cert
from migslice.serving.process import free_port

pytestmark = pytest.mark.e2e

CLIENT = "kube-apiserver"


@pytest.fixture(scope="module")
def certs() -> TlsBundle:
    """The webhook's CA and serving certificate, and kube-apiserver's client certificate, as
    ``migslice certs --client kube-apiserver`` writes them."""
    out = fresh_workdir("webhook-client-auth") / "certs"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "migslice.cli", "certs"),
            *("--service", "migslice-webhook", "--namespace", NAMESPACE, "--out", str(out)),
            *("--ip", "127.0.0.1", "--client", CLIENT),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert f"--client-ca-file {out / 'ca.crt'} --client-name {CLIENT}" in done.stdout
    return TlsBundle(out / "ca.crt", out / "ca.key", out / "tls.crt", out / "tls.key")


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def plane(e2e_bin: Path, certs: TlsBundle, port: int) -> Iterator[ControlPlane]:
    client = (certs.ca_cert.with_name(f"{CLIENT}.crt"), certs.ca_cert.with_name(f"{CLIENT}.key"))
    with ControlPlane(
        certs.ca_cert.parent.parent,
        e2e_bin,
        webhook_client=client,
        webhook_client_users=[f"127.0.0.1:{port}"],
    ) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        ensure_namespace(k8s.CoreV1Api(control_plane.api_client()), NAMESPACE)
        register_gpu_node(control_plane.api_client(), "gpu-a100", {"nvidia.com/mig-1g.10gb": 7})
        yield control_plane


@pytest.fixture(scope="module")
def webhook(
    plane: ControlPlane, certs: TlsBundle, port: int, migslice_image: Image | None
) -> Iterator[Server]:
    server = migslice_server(
        plane,
        "webhook",
        ["--status-interval-s", "1"],
        rbac_manifest=WEBHOOK_RBAC,
        account="migslice-webhook",
        image=migslice_image,
        bundle=certs,
        client_names=[CLIENT],
    )
    server.port = port
    server.start()
    plane.apply(webhook_configurations(certs, server.url))
    yield server
    server.stop()


def forge(
    port: int, certs: TlsBundle, review: dict[str, object], client: tuple[Path, Path] | None
) -> str:
    """POST ``review`` to /mutate on the webhook's port, as an attacker in the cluster
    could: what came back (``403``, ``handshake refused``, or another status)."""
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    body = json.dumps(review).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(
                raw, server_hostname=f"migslice-webhook.{NAMESPACE}.svc"
            ) as tls:
                connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10)
                connection.sock = tls
                connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
                return str(connection.getresponse().status)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return "handshake refused"


def unauthenticated(server: Server) -> float:
    status, text = server.request("GET", "/metrics")
    assert status == 200
    found = re.search(
        r'^migslice_webhook_requests_total\{endpoint="mutate",outcome="unauthenticated"\} (\S+)$',
        str(text),
        re.M,
    )
    return float(found.group(1)) if found else 0.0


def test_kube_apiserver_alone_is_answered_and_forged_reviews_hold_no_quota(
    plane: ControlPlane, webhook: Server, certs: TlsBundle, port: int, tmp_path: Path
) -> None:
    core = k8s.CoreV1Api(plane.api_client())
    custom = k8s.CustomObjectsApi(plane.api_client())
    name = tenant(plane, core, custom, quota=3)
    # Real creates, through kube-apiserver (which presents its certificate): admitted, charged.
    for _ in range(2):
        outcome = create_pod(core, name, gpu_pod("small"))
        assert outcome.admitted, outcome
    assert len(ledger_charges(core, name)) == 2
    pod = core.list_namespaced_pod(name).items[0]
    assert pod.metadata.annotations["migslice.io/profile"] == "1g.10gb"
    # Ten forged reviews of the same tenant's pods, straight to the webhook's port.
    other_ca, other_key = make_ca("someone-else")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    cert, key = make_client_cert(other_ca, other_key, CLIENT)
    (foreign / "client.crt").write_bytes(cert)
    (foreign / "client.key").write_bytes(key)
    mallory = write_client_cert(certs, "mallory")
    callers: list[tuple[Path, Path] | None] = [
        *[None] * 4,
        *[(foreign / "client.crt", foreign / "client.key")] * 3,
        *[mallory] * 3,
    ]
    before = unauthenticated(webhook)
    answers = [
        forge(
            port,
            certs,
            make_review(gpu_pod("small"), uid=str(uuid.uuid4()), namespace=name),
            caller,
        )
        for caller in callers
    ]
    assert answers[:4] == ["403"] * 4, answers  # no certificate: the webhook says no
    assert answers[4:7] == ["handshake refused"] * 3, answers  # another CA: TLS says no
    assert answers[7:] == ["403"] * 3, answers  # the right CA, another name
    assert unauthenticated(webhook) - before == 7
    assert len(ledger_charges(core, name)) == 2  # nothing charged
    # The tenant, one pod below its quota, gets its next pod at once; then the quota holds.
    assert create_pod(core, name, gpu_pod("small"), attempts=1).admitted
    denied = create_pod(core, name, gpu_pod("small"), attempts=1)
    assert "spec.quota.instances" in denied.denied, denied
    assert admitted_in(core, name) == 3
