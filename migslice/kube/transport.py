"""HTTP access to the Kubernetes API for the informers, through the kubernetes client's config.

The kubernetes client supplies configuration (kubeconfig or in-cluster service account,
TLS, token refresh) and its urllib3 pool; requests are plain GETs (and, for the writers,
PATCH, PUT and POST) on API paths, so one informer serves any resource, custom ones
included, and the JSON stays raw (no model classes).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

from migslice import __version__
from migslice.console import kubeconfig_problem
from migslice.errors import MigsliceError

RawObject = dict[str, Any]
POOL_CONNECTIONS = 32
USER_AGENT = f"migslice/{__version__}"
"""Also the field manager kube-apiserver records for a write that names none."""
THROTTLED_TRIES = 10
"""Answers 429 Too Many Requests with a ``Retry-After`` (API Priority and Fairness rejected
the request unserved, any verb) are sent again after that many seconds, as client-go does
(its 10 tries), while the call's read budget allows the wait."""


class KubeError(MigsliceError):
    """Root of the errors of the Kubernetes API layer."""


class KubeconfigError(KubeError):
    """A kubeconfig file the kubernetes client cannot read; the message names the file."""


class ApiError(KubeError):
    """A non-2xx answer or a failed connection; ``status`` is the HTTP code (0 if none)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Transport(Protocol):
    """What an informer needs from the API server (a port; tests use a local HTTP server)."""

    def get_json(self, path: str, query: Mapping[str, str]) -> RawObject: ...

    def get_bytes(self, path: str, query: Mapping[str, str]) -> bytes: ...

    def stream_lines(
        self, path: str, query: Mapping[str, str], read_timeout_s: float
    ) -> Iterator[bytes]: ...


def decode_object(method: str, path: str, data: bytes) -> RawObject:
    """An answer's body as the JSON object it must be; else an ApiError that says so."""
    try:
        document = orjson.loads(data)
    except ValueError:
        raise ApiError(0, f"{method} {path}: answer is not JSON") from None
    if not isinstance(document, dict):
        raise ApiError(0, f"{method} {path}: answer is not a JSON object")
    return document


class KubernetesTransport:
    """A :class:`Transport` over a kubernetes-client ``ApiClient``."""

    def __init__(
        self,
        api_client: client.ApiClient,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        self._api = api_client
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self.in_cluster = False
        """True when :meth:`from_environment` took the pod's service account."""

    @classmethod
    def from_environment(
        cls,
        kubeconfig: str | None = None,
        timeout_s: float | None = None,
        context: str | None = None,
    ) -> KubernetesTransport:
        """In-cluster service account if present, else ``kubeconfig`` (or the default one:
        ``$KUBECONFIG``, its files merged, else ``~/.kube/config``). ``context``: the
        kubeconfig context to use (then the kubeconfig, never the service account).
        ``timeout_s`` bounds connecting and each read (default 10 s and 60 s)."""
        configuration = client.Configuration()
        in_cluster = False
        _check_kubeconfig_files(kubeconfig)
        try:
            if context is not None:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
            elif kubeconfig is None:
                try:
                    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                    in_cluster = True
                except config.ConfigException:
                    config.load_kube_config(  # type: ignore[no-untyped-call]
                        context=kubectl_context(None, None), client_configuration=configuration
                    )
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, client_configuration=configuration
                )
        except config.ConfigException as error:
            raise KubeconfigError(_no_cluster(error, kubeconfig, context)) from None
        # Watches hold connections for minutes; requests of every server thread need theirs
        # (a full pool discards connections, and each new one costs a TLS handshake).
        configuration.connection_pool_maxsize = max(
            POOL_CONNECTIONS, configuration.connection_pool_maxsize or 0
        )
        if timeout_s is None:
            transport = cls(client.ApiClient(configuration))
        else:
            transport = cls(client.ApiClient(configuration), timeout_s, timeout_s)
        transport.in_cluster = in_cluster
        return transport

    def _request(
        self,
        path: str,
        query: Mapping[str, str],
        read_timeout_s: float,
        method: str = "GET",
        body: bytes | None = None,
        content_type: str = "",
    ) -> urllib3.BaseHTTPResponse:
        configuration = self._api.configuration
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        url = configuration.host.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(dict(query))
        # A call with a short budget (a ledger's 3 s) connects within it too, and a try after
        # a 429 has what is left of it.
        deadline = time.monotonic() + read_timeout_s
        for tried in range(1, THROTTLED_TRIES + 1):
            left_s = read_timeout_s if tried == 1 else max(0.001, deadline - time.monotonic())
            timeout = urllib3.Timeout(connect=min(self._connect_timeout_s, left_s), read=left_s)
            try:
                response: urllib3.BaseHTTPResponse = self._api.rest_client.pool_manager.request(
                    method,
                    url,
                    body=body,
                    headers=headers,
                    timeout=timeout,
                    preload_content=False,
                    retries=False,
                )
            except urllib3.exceptions.HTTPError as error:
                raise ApiError(0, f"{method} {path}: {error}") from None
            wait_s = _throttled_for(response)
            if wait_s is None or tried == THROTTLED_TRIES or time.monotonic() + wait_s > deadline:
                break
            response.drain_conn()
            response.release_conn()
            time.sleep(wait_s)
        if not 200 <= response.status < 300:
            text = response.read(4096).decode("utf-8", "replace")
            response.release_conn()
            raise ApiError(response.status, f"{method} {path}: {_status_message(text)}")
        return response

    def get_json(
        self, path: str, query: Mapping[str, str], *, timeout_s: float | None = None
    ) -> RawObject:
        read_timeout_s = self._read_timeout_s if timeout_s is None else timeout_s
        response = self._request(path, query, read_timeout_s=read_timeout_s)
        return self._read_json("GET", path, response)

    def get_bytes(self, path: str, query: Mapping[str, str]) -> bytes:
        """GET ``path``: the answer's body as sent (a list page, decoded by the caller)."""
        response = self._request(path, query, read_timeout_s=self._read_timeout_s)
        return self._read_body("GET", path, response)

    def get_text(self, path: str, limit_bytes: int = 65536) -> str:
        """GET ``path`` as text (a service proxy's ``/healthz``); at most ``limit_bytes``."""
        response = self._request(path, {}, read_timeout_s=self._read_timeout_s)
        try:
            data = response.read(limit_bytes)
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"GET {path}: {error}") from None
        finally:
            response.release_conn()
        return data.decode("utf-8", "replace")

    def patch_json(
        self,
        path: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        content_type: str = "application/merge-patch+json",
        *,
        timeout_s: float = 30.0,
        query: Mapping[str, str] | None = None,
    ) -> RawObject:
        """PATCH ``path`` with ``patch`` (a JSON merge patch by default; a list is a JSON
        Patch, ``application/json-patch+json``); the updated object. ``query``: parameters
        such as ``fieldManager``."""
        body = json.dumps(patch, separators=(",", ":")).encode()
        response = self._request(
            path,
            query or {},
            read_timeout_s=timeout_s,
            method="PATCH",
            body=body,
            content_type=content_type,
        )
        return self._read_json("PATCH", path, response)

    def put_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_s: float = 30.0,
        query: Mapping[str, str] | None = None,
    ) -> RawObject:
        """PUT ``body`` to ``path`` (replace; with ``metadata.resourceVersion`` the API server
        answers 409 Conflict when the object changed since it was read); the stored object."""
        data = json.dumps(body, separators=(",", ":")).encode()
        response = self._request(
            path,
            query or {},
            read_timeout_s=timeout_s,
            method="PUT",
            body=data,
            content_type="application/json",
        )
        return self._read_json("PUT", path, response)

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_s: float = 30.0,
        query: Mapping[str, str] | None = None,
    ) -> RawObject:
        """POST ``body`` to ``path`` (create); the created object."""
        data = json.dumps(body, separators=(",", ":")).encode()
        response = self._request(
            path,
            query or {},
            read_timeout_s=timeout_s,
            method="POST",
            body=data,
            content_type="application/json",
        )
        return self._read_json("POST", path, response)

    def delete_json(self, path: str) -> RawObject:
        """DELETE ``path`` (default grace period); the API server's answer."""
        response = self._request(path, {}, read_timeout_s=30.0, method="DELETE")
        return self._read_json("DELETE", path, response)

    @staticmethod
    def _read_json(method: str, path: str, response: urllib3.BaseHTTPResponse) -> RawObject:
        return decode_object(method, path, KubernetesTransport._read_body(method, path, response))

    @staticmethod
    def _read_body(method: str, path: str, response: urllib3.BaseHTTPResponse) -> bytes:
        try:
            return response.read()
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"{method} {path}: {error}") from None
        finally:
            response.release_conn()

    def stream_lines(
        self, path: str, query: Mapping[str, str], read_timeout_s: float
    ) -> Iterator[bytes]:
        response = self._request(path, query, read_timeout_s)
        pending = b""
        try:
            for chunk in response.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line for line in lines if line.strip())
            if pending.strip():
                yield pending
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"watch {path}: {error}") from None
        finally:
            response.release_conn()


def _throttled_for(response: urllib3.BaseHTTPResponse) -> float | None:
    """The seconds a 429's ``Retry-After`` asks to wait (kube-apiserver sends whole seconds);
    None for any other answer, or a 429 without one (as client-go, it is not sent again)."""
    if response.status != 429:
        return None
    value = response.headers.get("Retry-After", "")
    if not value.strip().isdigit():
        return None
    return float(int(value))


def _status_message(body: str) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body[:200]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return body[:200]


def unanswered(error: ApiError) -> str:
    """One line for a ``GET /version`` that failed, which a command that reads the cluster asks
    first: an API server that does not answer, one that refuses the kubeconfig's credentials
    (401: kube-apiserver answers /version to any client it authenticates, and refuses every
    request of a token or certificate it does not know), or one that answers with an error."""
    if error.status == 401:
        return (
            f"the API server refuses the credentials of the kubeconfig's user ({error}): its "
            "token or client certificate is wrong or expired; renew them in the kubeconfig "
            "(`kubectl auth whoami` fails the same way until then)"
        )
    if error.status:
        return (
            f"the API server answers GET /version with an error ({error}); check "
            "`kubectl get --raw /readyz`"
        )
    return (
        f"the API server does not answer ({error}); check --kubeconfig and "
        "`kubectl get --raw /readyz`"
    )


def _no_cluster(error: Exception, kubeconfig: str | None, context: str | None) -> str:
    """Why there is no cluster to talk to, and what to do about it."""
    reason = " ".join(str(error).split())
    if context is not None:
        return (
            f"no access to a cluster: kubeconfig context {context!r}: {reason}; "
            "`kubectl config get-contexts` lists the contexts"
        )
    if kubeconfig is not None:
        return (
            f"no access to a cluster: kubeconfig {kubeconfig}: {reason}; "
            f"`kubectl --kubeconfig {kubeconfig} config view` shows what it holds"
        )
    named = os.environ.get("KUBECONFIG", "")
    paths = [os.path.expanduser(p) for p in named.split(os.pathsep) if p]
    if paths and not any(os.path.exists(p) for p in paths):
        return (
            f"no access to a cluster: not in a pod, and $KUBECONFIG names no file that exists "
            f"({', '.join(paths)}); point $KUBECONFIG at your kubeconfig, or pass --kubeconfig"
        )
    return (
        f"no access to a cluster: not in a pod, and no kubeconfig to use ({reason}); "
        "pass --kubeconfig, or set $KUBECONFIG"
    )


def kubectl_context(kubeconfig: str | None, context: str | None) -> str | None:
    """The kubeconfig context :meth:`KubernetesTransport.from_environment` connects with
    outside a pod, as kubectl picks it: ``context`` when given; with the default kubeconfig
    (``$KUBECONFIG``'s files), the current context of the first file that sets one; else None
    (the one file's current context). Whatever else is read from the kubeconfig (the context's
    namespace) must come from this same context."""
    if context is not None or kubeconfig is not None:
        return context
    return _first_current_context()


def _first_current_context() -> str | None:
    """kubectl's current context of ``$KUBECONFIG``'s files: the first file's that sets one
    (the Python client, merging the files, keeps the last one's, so with several files it
    read another cluster than kubectl does); None with one file, or where none sets one."""
    paths = [os.path.expanduser(p) for p in KUBE_CONFIG_DEFAULT_LOCATION.split(os.pathsep) if p]
    if len(paths) < 2:
        return None
    for path in paths:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # a file kubectl skips too, or one the loader will name
        current = loaded.get("current-context") if isinstance(loaded, dict) else None
        if isinstance(current, str) and current:
            return current
    return None


def _check_kubeconfig_files(kubeconfig: str | None) -> None:
    """KubeconfigError when the kubeconfig to be loaded (``kubeconfig``, else the client's
    default, ``$KUBECONFIG`` or ``~/.kube/config``) exists and is no kubeconfig: the client
    would fail with a type error that names neither the file nor what is wrong."""
    if kubeconfig is not None:
        paths = [kubeconfig]
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in a pod the service account is read first; a file only if that fails
    else:
        paths = [os.path.expanduser(p) for p in KUBE_CONFIG_DEFAULT_LOCATION.split(os.pathsep)]
    for path in paths:
        if path and (kubeconfig is not None or os.path.exists(path)):
            problem = kubeconfig_problem(Path(path))
            if problem:
                raise KubeconfigError(f"kubeconfig {path}: {problem}")
