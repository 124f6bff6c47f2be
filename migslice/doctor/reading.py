"""What doctor reads, and how (the shell of the room): GETs through the API server with the
kubernetes client's configuration (kubeconfig, or the pod's service account in the cluster),
and HTTPS probes of the webhook and the extender.

A server is probed directly when doctor runs in the cluster (``https://<service>.<namespace>.
svc:<port>/healthz``, or the URL a configuration names), which also shows the certificate it
serves; from outside, through the API server's service proxy
(``/api/v1/namespaces/<ns>/services/https:<name>:<port>/proxy/healthz``), which shows whether
it answers but not its certificate. Every read is memoised, so checks that need the same
object share one GET, and bounded by the timeout the transport was made with.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Callable
from typing import TypeVar

from migslice.doctor.checks.serving import url_host
from migslice.doctor.facts import Probe
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject

T = TypeVar("T")

LIST_PAGE = "500"


class ClusterReader:
    """Reads for one doctor run; thread-safe (a check that timed out may still be reading)."""

    def __init__(self, transport: KubernetesTransport, *, direct: bool, timeout_s: float) -> None:
        self.transport = transport
        self.direct = direct
        self.timeout_s = timeout_s
        self._values: dict[str, object] = {}
        self._errors: dict[str, ApiError] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _memo(self, key: str, compute: Callable[[], T]) -> T:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._errors:
                raise self._errors[key]
            if key in self._values:
                value: T = self._values[key]  # type: ignore[assignment]
                return value
            try:
                value = compute()
            except ApiError as error:
                self._errors[key] = error
                raise
            self._values[key] = value
            return value

    # -- API objects -------------------------------------------------------------------------------

    def get(self, path: str) -> RawObject | None:
        """The object at ``path``; None when it does not exist (404)."""

        def read() -> RawObject | None:
            try:
                return self.transport.get_json(path, {})
            except ApiError as error:
                if error.status == 404:
                    return None
                raise

        return self._memo(f"GET {path}", read)

    def list(self, path: str) -> list[RawObject] | None:
        """Every item of the collection at ``path`` (all pages); None when the API server
        does not serve that resource (404)."""

        def read() -> list[RawObject] | None:
            found: list[RawObject] = []
            token = ""
            while True:
                query = {"limit": LIST_PAGE, **({"continue": token} if token else {})}
                try:
                    page = self.transport.get_json(path, query)
                except ApiError as error:
                    if error.status == 404:
                        return None
                    raise
                found.extend(i for i in page.get("items") or () if isinstance(i, dict))
                token = str((page.get("metadata") or {}).get("continue") or "")
                if not token:
                    return found

        return self._memo(f"LIST {path}", read)

    # -- servers -----------------------------------------------------------------------------------

    def probe_service(self, namespace: str, name: str, port: int) -> Probe:
        """``GET /healthz`` of a Service: by its DNS name in the cluster, else through the API
        server's service proxy."""
        if self.direct:
            host = f"{name}.{namespace}.svc"
            return self.probe_url(f"https://{host}:{port}")
        path = f"/api/v1/namespaces/{namespace}/services/https:{name}:{port}/proxy/healthz"

        def probe() -> Probe:
            target = f"through the API server's proxy to Service {namespace}/{name} port {port}"
            try:
                return Probe(target, answer=self.transport.get_text(path, 4096))
            except ApiError as error:
                return Probe(target, error=str(error))

        return self._memo(f"PROBE {path}", probe)

    def probe_url(self, base_url: str) -> Probe:
        """``GET <base_url>/healthz`` directly, keeping the certificate the server presents
        (not verified here: the checks verify it against the CA its client trusts)."""
        return self._memo(f"PROBE {base_url}", lambda: _probe_directly(base_url, self.timeout_s))


def _probe_directly(base_url: str, timeout_s: float) -> Probe:
    host, port = url_host(base_url)
    target = f"https://{host}:{port}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # judged later, against the client's own CA
    connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    try:
        connection.connect()
        sock = connection.sock
        der = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        body = response.read(4096).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as error:
        return Probe(target, error=f"no answer ({error})")
    finally:
        connection.close()
    pem = ssl.DER_cert_to_PEM_cert(der).encode() if der else None
    if response.status != 200:
        return Probe(target, answer=body, error=f"HTTP {response.status}", certificate_pem=pem)
    return Probe(target, answer=body, certificate_pem=pem)
