"""HTTP access to the Kubernetes API for the informers, through the kubernetes client's config.

The kubernetes client supplies configuration (kubeconfig or in-cluster service account,
TLS, token refresh) and its urllib3 pool; requests are plain GETs on API paths, so one
informer serves any resource, custom ones included, and the JSON stays raw (no model classes).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes import client, config

RawObject = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer or a failed connection; ``status`` is the HTTP code (0 if none)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Transport(Protocol):
    """What an informer needs from the API server (a port; tests use a local HTTP server)."""

    def get_json(self, path: str, query: Mapping[str, str]) -> RawObject: ...

    def stream_lines(
        self, path: str, query: Mapping[str, str], read_timeout_s: float
    ) -> Iterator[bytes]: ...


class KubernetesTransport:
    """A :class:`Transport` over a kubernetes-client ``ApiClient``."""

    def __init__(self, api_client: client.ApiClient, connect_timeout_s: float = 10.0) -> None:
        self._api = api_client
        self._connect_timeout_s = connect_timeout_s

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> KubernetesTransport:
        """In-cluster service account if present, else ``kubeconfig`` (or the default one)."""
        configuration = client.Configuration()
        if kubeconfig is None:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        return cls(client.ApiClient(configuration))

    def _request(
        self, path: str, query: Mapping[str, str], read_timeout_s: float
    ) -> urllib3.BaseHTTPResponse:
        configuration = self._api.configuration
        headers = {"Accept": "application/json"}
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        url = configuration.host.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(dict(query))
        timeout = urllib3.Timeout(connect=self._connect_timeout_s, read=read_timeout_s)
        try:
            response: urllib3.BaseHTTPResponse = self._api.rest_client.pool_manager.request(
                "GET", url, headers=headers, timeout=timeout, preload_content=False, retries=False
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"GET {path}: {error}") from None
        if not 200 <= response.status < 300:
            body = response.read(4096).decode("utf-8", "replace")
            response.release_conn()
            raise ApiError(response.status, f"GET {path}: {_status_message(body)}")
        return response

    def get_json(self, path: str, query: Mapping[str, str]) -> RawObject:
        response = self._request(path, query, read_timeout_s=60.0)
        try:
            data = response.read()
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"GET {path}: {error}") from None
        finally:
            response.release_conn()
        try:
            document = json.loads(data)
        except ValueError:
            raise ApiError(0, f"GET {path}: answer is not JSON") from None
        if not isinstance(document, dict):
            raise ApiError(0, f"GET {path}: answer is not a JSON object")
        return document

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


def _status_message(body: str) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body[:200]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return body[:200]
