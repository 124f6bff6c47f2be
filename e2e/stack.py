"""migslice's own servers in the e2e control plane: webhook and extender over TLS.

Both run as real processes through the ``migslice`` command line (gunicorn, TLS), in
in-cluster mode against the e2e kube-apiserver (``--kubeconfig``). kube-apiserver reaches the
webhook by URL (there is no Service routing without kube-proxy), so the webhook
configurations from ``manifests/`` are installed with ``clientConfig.url`` in place of
``clientConfig.service`` and the CA from ``migslice certs`` as ``caBundle``; everything else
in them (rules, failurePolicy, namespaceSelector, matchConditions) is applied as shipped.
"""

from __future__ import annotations

import base64
import copy
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import ControlPlane, free_port
from migslice.serving.certs import TlsBundle, write_tls_bundle

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "manifests"


def load_manifests(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@dataclass
class Server:
    """A ``migslice <command>`` server process; :meth:`start` again after :meth:`stop`."""

    command: str
    args: Sequence[str]
    bundle: TlsBundle
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> Server:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "migslice.cli",
                self.command,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--tls-cert",
                str(self.bundle.cert),
                "--tls-key",
                str(self.bundle.key),
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        log.close()
        context = ssl.create_default_context(cafile=str(self.bundle.ca_cert))
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"migslice {self.command} exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"migslice {self.command} not ready in {timeout_s}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def tls_bundle(control_plane: ControlPlane, service: str) -> TlsBundle:
    """Serving certificate for ``service`` in migslice-system, plus 127.0.0.1 as an IP SAN."""
    return write_tls_bundle(
        control_plane.workdir / f"{service}-tls", service, "migslice-system", (), ["127.0.0.1"]
    )


def webhook_configurations(bundle: TlsBundle, base_url: str) -> list[dict[str, Any]]:
    """The shipped webhook configurations, pointed at ``base_url`` with our CA."""
    ca = base64.b64encode(bundle.ca_cert.read_bytes()).decode()
    configured = []
    for name in ("mutatingwebhookconfiguration.yaml", "validatingwebhookconfiguration.yaml"):
        for document in load_manifests(MANIFESTS / "webhook" / name):
            document = copy.deepcopy(document)
            for hook in document["webhooks"]:
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
            configured.append(document)
    return configured


def scheduler_configuration(bundle: TlsBundle, base_url: str) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration, calling the extender at ``base_url``."""
    for document in load_manifests(MANIFESTS / "scheduler" / "scheduler-config.yaml"):
        if document.get("kind") != "ConfigMap":
            continue
        for text in document["data"].values():
            config = yaml.safe_load(text)
            if config.get("kind") == "KubeSchedulerConfiguration":
                break
        else:
            continue
        ca = base64.b64encode(bundle.ca_cert.read_bytes()).decode()
        for extender in config.get("extenders", []):
            extender["urlPrefix"] = base_url
            extender.setdefault("tlsConfig", {})["caData"] = ca
            extender["tlsConfig"].pop("insecure", None)
        return dict(config)
    raise LookupError("no KubeSchedulerConfiguration in manifests/scheduler/scheduler-config.yaml")
