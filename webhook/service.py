"""The webhook service's wiring: its state from a cluster file or the watch caches, the
status writer, the app, and the server. Everything here runs inside the server's worker."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from flask import Flask

from migslice import console, names
from migslice.serving import load_cluster_file, serve_app
from webhook.app import EXTENSION, create_app
from webhook.gate import GateReconciler
from webhook.quota import Fence, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState
from webhook.templates import TemplateKeeper

if TYPE_CHECKING:
    from collections.abc import Callable

    from migslice.kube import KubernetesTransport

log = logging.getLogger(__name__)

SETTLE_INTERVAL_S = 5.0
TEMPLATE_INTERVAL_S = 10.0


def serve_webhook(settings: WebhookSettings) -> int:
    """Serve until a signal stops the server; the exit status."""
    console.setup_logging(settings.log_level, settings.log_format)
    return serve_app(
        settings.server,
        cluster_file=settings.cluster_file,
        standalone=lambda path: standalone_app(settings, path),
        in_cluster=lambda: in_cluster_app(settings),
    )


def standalone_app(settings: WebhookSettings, path: Path) -> Flask:
    """The app over a cluster file; the raw objects are dropped once the state is filled."""
    objects = load_cluster_file(path)
    state = ClusterState()
    state.load(objects)
    log.info(
        "Serving cluster file=%s nodes=%d pods=%d policies=%d invalid_policies=%d",
        path,
        len(objects.nodes),
        len(objects.pods),
        len(state.policies()),
        len(state.invalid_policies),
    )
    del objects
    gc.collect()
    return create_app(settings, state)


def in_cluster_app(settings: WebhookSettings) -> Flask:
    """The app over watch caches of the API server, with the quota ledgers as ConfigMaps (and
    their settler) and the TenantPolicy status writer."""
    from migslice.kube import KubernetesTransport
    from migslice.kube.claim_templates import ApiTemplates
    from migslice.kube.discovery import dra_resources, follow_discovery
    from migslice.kube.ledger import ConfigMapLedgers
    from migslice.kube.policies import admission_informers
    from migslice.kube.status import StatusWriter
    from migslice.serving.apps import restart_worker

    state = ClusterState()
    transport = KubernetesTransport.from_environment(settings.kubeconfig)
    discovery = dra_resources(transport)
    dra = discovery.served
    follow_discovery(
        transport,
        discovery,
        lambda answer: restart_worker(
            "resource.k8s.io/v1 answered at last: it is "
            + ("served" if answer.served else "not served")
            + "; the DRA caches were started assuming it was"
        ),
        wanted=lambda answer: answer.served,
    )
    quota = QuotaKeeper(
        state,
        ConfigMapLedgers(transport, settings.ledger_namespace, claims=dra),
        settings=settings.admission,
        hold_s=settings.quota_hold_s,
        max_blind_s=settings.max_blind_s,
    )
    quota.fence_listeners.append(fence_event_recorder(transport, state))
    settler = threading.Thread(
        target=quota.settle_every,
        args=(SETTLE_INTERVAL_S, threading.Event()),
        name="quota-settler",
        daemon=True,
    )
    settler.start()
    if settings.status_interval_s > 0:
        interval_s = settings.status_interval_s
        writer = StatusWriter(state, transport, interval_s, settle_s=min(1.0, interval_s))
        state.add_listener(writer.poke)
        writer.start()
        log.info("Writing TenantPolicy status on changes and every interval_s=%s", interval_s)
    templates = TemplateKeeper(state, ApiTemplates(transport))
    if dra:
        keeper = threading.Thread(
            target=templates.keep_every,
            args=(TEMPLATE_INTERVAL_S, threading.Event(), settings.max_blind_s),
            name="claim-templates",
            daemon=True,
        )
        keeper.start()
    informers = admission_informers(state, transport, dra=dra)
    state.follow(informers)
    for informer in informers:
        informer.start()
    log.info(
        "Watching TenantPolicies, Namespaces, Nodes and Pods%s; quota ledgers in namespace=%s; "
        "/readyz turns 200 once synced",
        ", ResourceClaims, DeviceClasses, ResourceClaimTemplates and ResourceSlices" if dra else "",
        settings.ledger_namespace,
    )
    app = create_app(settings, state, quota, templates)
    if settings.gate.is_on:
        gate = start_gate(transport, quota, settings)
        app.extensions[EXTENSION].metrics.follow_gate(gate.stats)
    return app


def start_gate(
    transport: KubernetesTransport, quota: QuotaKeeper, settings: WebhookSettings
) -> GateReconciler:
    """The gate reconciler over the API, started: one leader among the replicas (and their
    workers) admits the pods fail-open namespaces created behind the admission gate; its
    Lease is released when the process exits."""
    from migslice.kube import LeaderElector
    from migslice.kube.pod_gate import KubeGateApi

    options = settings.gate
    identity = f"{socket.gethostname()}-{os.getpid()}"
    elector = LeaderElector(
        transport,
        options.lease_namespace,
        options.lease_name,
        identity,
        lease_duration_s=options.lease_s,
        renew_deadline_s=options.lease_renew_deadline_s,
    )
    gate = GateReconciler(
        quota,
        KubeGateApi(transport),
        elector,
        options,
        exclude_namespaces=settings.exclude_namespaces,
    )
    gate.start()
    atexit.register(gate.stop)  # its Lease released: a successor need not wait it out
    log.info(
        "Admission gate reconciler started identity=%s lease=%s interval=%.0fs",
        identity,
        options.lease,
        options.interval_s,
    )
    return gate


def fence_event_recorder(
    transport: KubernetesTransport, state: ClusterState
) -> Callable[[Fence], None]:
    """A fence listener that records a Warning Event on the tenant's TenantPolicy: its ledger
    was lost or changed. The Event names the policy's uid, as ``kubectl describe tp`` selects
    Events by it (an Event without it is listed by field selectors, never by describe)."""
    from migslice.kube.events import record_event

    def record(fence: Fence) -> None:
        involved = {"apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "TenantPolicy",
                    "name": fence.tenant}  # fmt: skip
        uid = state.policy_uid(fence.tenant)
        if uid is not None:
            involved["uid"] = uid
        record_event(
            transport,
            involved,
            "QuotaLedgerRebuilt",
            message=fence.message,
            component="migslice-webhook",
            warning=True,
        )

    return record
