"""Fault injection for the e2e scenarios of ``test_faults_e2e.py``.

* :func:`kill_tree`: SIGKILL a server and every process under it (gunicorn's workers too): a
  crash, not a shutdown.
* :class:`Balancer`: a TCP balancer on 127.0.0.1 in front of webhook replicas (what a Service
  does): each connection goes to the next live backend, round robin; a backend that refuses
  is skipped. TLS passes through, so every replica serves the same certificate.
* :class:`SlowValidator`: a validating webhook that holds each pod CREATE for ``delay_s`` after
  migslice's mutating webhook has admitted it, so a fault can be injected between admission
  and storage (a create "held" in kube-apiserver).
* :func:`create_pod`: a client that retries what ``failurePolicy: Fail`` turns into an error
  (the webhook could not be called or answered 503), as a controller would, and tells
  admitted, denied and failed apart.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from migslice.serving.process import free_port


def descendants(pid: int) -> list[int]:
    """``pid``'s children, grandchildren, ... (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything it started."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


# -- the balancer ---------------------------------------------------------------------------------


@dataclass
class Balancer:
    """Round-robin TCP forwarding from ``port`` to ``backends`` (ports on 127.0.0.1)."""

    backends: list[int]
    port: int = field(default_factory=free_port)
    connections: int = 0
    _listener: socket.socket | None = None
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Balancer:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _backend(self) -> socket.socket | None:
        for _ in range(len(self.backends)):
            with self._lock:
                port = self.backends[self._next % len(self.backends)]
                self._next += 1
            with contextlib.suppress(OSError):
                return socket.create_connection(("127.0.0.1", port), timeout=2)
        return None

    def _serve(self, client: socket.socket) -> None:
        backend = self._backend()
        if backend is None:
            client.close()
            return
        self.connections += 1
        backend.settimeout(None)
        for source, sink in ((client, backend), (backend, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


# -- a validating webhook that holds creates -------------------------------------------------------


@contextlib.contextmanager
def _review_server(
    cert: Path, key: Path, answer: Callable[[dict[str, Any]], dict[str, Any]]
) -> Iterator[str]:
    """An HTTPS admission webhook on 127.0.0.1 that answers each AdmissionReview's request
    with ``answer(request)`` (the review's ``response``); yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length))["request"]
            body = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": answer(request),
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def slow_validator(cert: Path, key: Path, delay_s: float) -> contextlib.AbstractContextManager[str]:
    """An HTTPS validating webhook on 127.0.0.1 that allows every request after ``delay_s``;
    yields its URL."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(delay_s)
        return {"uid": request["uid"], "allowed": True}

    return _review_server(cert, key, answer)


def labeler(cert: Path, key: Path, label: str) -> contextlib.AbstractContextManager[str]:
    """An HTTPS mutating webhook on 127.0.0.1 that adds the label ``label`` ("true") to every
    pod it is sent, as a sidecar injector or policy engine does; yields its URL. Named to sort
    after ``migslice-webhook``, it makes kube-apiserver reinvoke migslice's webhook
    (reinvocationPolicy IfNeeded)."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        labels = (request["object"].get("metadata") or {}).get("labels")
        op = (
            {"op": "add", "path": f"/metadata/labels/{label.replace('/', '~1')}", "value": "true"}
            if isinstance(labels, dict)
            else {"op": "add", "path": "/metadata/labels", "value": {label: "true"}}
        )
        return {
            "uid": request["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps([op]).encode()).decode(),
        }

    return _review_server(cert, key, answer)


def mutating_configuration(name: str, url: str, ca: Path, namespace: str) -> dict[str, Any]:
    """A MutatingWebhookConfiguration for pod CREATE in ``namespace`` only."""
    configuration = validating_configuration(name, url, ca, namespace)
    configuration["kind"] = "MutatingWebhookConfiguration"
    return configuration


def validating_configuration(name: str, url: str, ca: Path, namespace: str) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration for pod CREATE in ``namespace`` only."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.e2e.migslice.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
                "clientConfig": {
                    "url": url,
                    "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            }
        ],
    }


# -- a client that retries what failurePolicy Fail turns into errors ----------------------------


@dataclass
class Outcome:
    """One create: ``admitted`` (the pod's name), ``denied`` (the message), or ``failed``
    (an error that is neither); ``retries``: calls the webhook could not answer."""

    admitted: str = ""
    denied: str = ""
    failed: str = ""
    retries: int = 0
    errors: list[str] = field(default_factory=list)


def is_webhook_unavailable(error: k8s.ApiException) -> bool:
    """What failurePolicy Fail makes of a webhook that did not answer (500 'failed calling
    webhook', or its 503 'cannot decide yet' after kube-apiserver's own retries)."""
    message = _message(error)
    return error.status == 500 and "failed calling webhook" in message


def create_pod(
    core_v1: k8s.CoreV1Api,
    namespace: str,
    body: dict[str, Any],
    *,
    attempts: int = 60,
    pause_s: float = 0.5,
) -> Outcome:
    outcome = Outcome()
    for _ in range(attempts):
        try:
            pod = core_v1.create_namespaced_pod(namespace, body)
        except k8s.ApiException as error:
            if is_webhook_unavailable(error):
                outcome.retries += 1
                outcome.errors.append(_message(error))
                time.sleep(pause_s)
                continue
            if error.status == 403 and "denied the request" in _message(error):
                outcome.denied = _message(error)  # a webhook said no
            else:
                outcome.failed = f"HTTP {error.status}: {_message(error)}"
            return outcome
        outcome.admitted = str(pod.metadata.name)
        return outcome
    outcome.failed = f"webhook unavailable {attempts} times: {outcome.errors[-1]}"
    return outcome


def _message(error: k8s.ApiException) -> str:
    try:
        return str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(error.body or error.reason)
