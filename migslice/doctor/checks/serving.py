"""Judgements shared by the webhook's and the extender's checks: is the server answering, and
would its client trust the certificate it serves."""

from __future__ import annotations

import datetime

from migslice.doctor.facts import Pem, Probe, Settings
from migslice.doctor.findings import Finding, failed, ok
from migslice.doctor.tls import CertificateTextError, load_pem_chain, serving_problem


def judge_reachable(check: str, probe: Probe, deployment: str, settings: Settings) -> Finding:
    """``/healthz`` answered ``ok``; otherwise what happened and where to look."""
    if probe.healthy:
        return ok(check, f"GET /healthz {probe.target}: 200 {probe.answer.strip()[:60]}")
    namespace = settings.namespace
    return failed(
        check,
        f"GET /healthz {probe.target}: {probe.error}",
        f"kubectl -n {namespace} rollout status deploy/{deployment} && "
        f"kubectl -n {namespace} logs deploy/{deployment}",
    )


def trust_problem(served: Pem, ca: Pem, server_name: str, now: float) -> str:
    """Why a client trusting ``ca`` would refuse ``served`` as ``server_name``; "" if not."""
    if served.data is None:
        return f"the serving certificate is unknown ({served.problem})"
    if ca.data is None:
        return ca.problem
    try:
        chain = load_pem_chain(served.data, served.source)
        roots = load_pem_chain(ca.data, ca.source)
    except CertificateTextError as error:
        return str(error)
    when = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return serving_problem(chain, roots, server_name, when)


def service_dns_name(service: str, namespace: str) -> str:
    """The name a client checks a Service's certificate against (``<svc>.<ns>.svc``)."""
    return f"{service}.{namespace}.svc"


def url_host(url: str) -> tuple[str, int]:
    """Host and port of an ``https://host[:port][/path]`` URL (443 by default)."""
    scheme, _, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    default = 80 if scheme == "http" else 443
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]")
        port = port.removeprefix(":")
    elif authority.count(":") == 1:
        host, _, port = authority.partition(":")
    else:
        host, port = authority, ""
    return host, int(port) if port.isdigit() else default
