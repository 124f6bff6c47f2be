"""The command lines of the control plane's processes: etcd, kube-apiserver, kube-scheduler.

All listen on 127.0.0.1. kube-apiserver runs without the admission plugin
``TaintNodesByCondition`` (nothing here would remove its taint) and without the endpoint
reconciler (it would publish a loopback address).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.pki import PKI, SERVICE_CLUSTER_IP_RANGE

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def etcd_argv(bin_dir: Path, data: Path, client: int, peer: int) -> list[str]:
    """etcd on ``client`` and ``peer`` ports, its data in ``data``, without fsync."""
    url = f"http://127.0.0.1:{client}"
    return [
        str(bin_dir / "etcd"),
        "--name=e2e",
        f"--data-dir={data}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",  # throwaway data: no fsync keeps etcd fast on slow disks
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]


def apiserver_argv(
    bin_dir: Path,
    workdir: Path,
    pki: PKI,
    *,
    etcd_url: str,
    port: int,
    verbosity: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-apiserver on ``port`` over etcd at ``etcd_url``, with ``pki``'s certificates."""
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
        f"--proxy-client-key-file={pki.front_proxy_client_key}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction,"
        "MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
        # TaintNodesByCondition taints every new Node node.kubernetes.io/not-ready:
        # NoSchedule; only the node-lifecycle controller (not run here) removes it.
        "--disable-admission-plugins=TaintNodesByCondition",
        "--allow-privileged=true",
        # The default (lease) reconciler would keep trying to publish 127.0.0.1 as the
        # `kubernetes` Service endpoint, which validation rejects (loopback).
        "--endpoint-reconciler-type=none",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        f"--v={verbosity}",
        *extra,
    ]


def scheduler_argv(
    bin_dir: Path,
    workdir: Path,
    name: str,
    *,
    config: Path,
    port: int,
    kubeconfig: Path,
    verbosity: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-scheduler ``name`` with ``config``, serving /readyz on ``port``."""
    return [
        str(bin_dir / "kube-scheduler"),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / (name + '-certs')}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--v={verbosity}",
        *extra,
    ]
