"""The extender service's wiring: the node index from a cluster file or the watch caches,
the repartition controller (leader-elected, in a cluster only), the app and the server."""

from __future__ import annotations

import atexit
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask

from extender.app import create_app
from extender.controller import RepartitionController
from extender.dra_warnings import INTERVAL_S as WARNINGS_INTERVAL_S
from extender.dra_warnings import DraWarnings
from extender.every import Every
from extender.mig_manager import MigManagerGuard
from extender.retries import INTERVAL_S as RETRY_INTERVAL_S
from extender.retries import Retries
from extender.settings import ExtenderSettings
from extender.state import (
    ExtenderState,
    RepartitionStats,
    ReserveStats,
    StrandGuard,
    new_index,
    state_from_objects,
)
from migslice import console, names
from migslice.inventory import ClusterIndex
from migslice.serving import load_cluster_file, serve_app

if TYPE_CHECKING:
    from migslice.kube.lease import LeaderElector

log = logging.getLogger(__name__)


def serve_extender(settings: ExtenderSettings) -> int:
    """Serve until a signal stops the server; the exit status."""
    console.setup_logging(settings.log_level, settings.log_format)
    return serve_app(
        settings.server,
        cluster_file=settings.cluster_file,
        standalone=lambda path: standalone_app(settings, path),
        in_cluster=lambda: in_cluster_app(settings),
    )


def standalone_app(settings: ExtenderSettings, path: Path) -> Flask:
    """The app over a cluster file."""
    objects = load_cluster_file(path)
    return create_app(settings, state_from_objects(objects, settings))


def in_cluster_app(settings: ExtenderSettings) -> Flask:
    """The app over watch caches; with ``--repartition``, this worker's controller thread
    (its Lease is released when the process exits); the loop that touches the pods the
    filter turned away once the reason ends (:mod:`extender.retries`)."""
    from extender.sources import TAINT_RULES, start_caches
    from extender.steer import SteerLoop
    from migslice.kube import KubernetesTransport
    from migslice.kube.device_taints import KubeSteerApi
    from migslice.kube.health import blindness
    from migslice.kube.nodes import KubeNodeStore
    from migslice.kube.pod_touch import touch_pod

    transport = KubernetesTransport.from_environment(settings.kubeconfig)
    guard = StrandGuard()
    reserve = ReserveStats()
    index = new_index(guard if settings.dra_steer else None)
    caches = start_caches(transport, settings, index)
    controller = None
    if settings.repartition.enabled:
        identity = f"{socket.gethostname()}-{os.getpid()}"
        controller = start_repartition(
            transport,
            index,
            settings,
            identity=identity,
            blindness=lambda: blindness(caches, max_blind_s=settings.max_blind_s),
        )
        atexit.register(controller.stop)

    stats = None if controller is None else controller.stats
    steer = clearing = None
    # asked before each write: a leader past its renew deadline writes no more at once
    may_write: Callable[[], bool] = (lambda: True) if controller is None else controller.is_leader
    lease = None
    if settings.dra_steer and any(cache.name == TAINT_RULES for cache in caches):
        if stats is None and settings.dra_steer_lease:
            lease = steer_lease(transport, settings)
            may_write = lease.is_leader
        steer = SteerLoop(
            index,
            KubeSteerApi(transport),
            may_write=may_write,
            blindness=lambda: blindness(caches, max_blind_s=settings.max_blind_s),
            max_rules=settings.dra_steer_max_rules,
            guard=guard,
            reserve=reserve,
        )
        reserve.enabled = settings.dra_large_reserve
        reserve.max_hold_s = settings.dra_large_reserve_max_hold_s
        steer.start()
    else:
        if settings.dra_large_reserve:
            log.warning(
                "--dra-large-reserve is off: it needs the DRA steer (DeviceTaintRules served "
                "and no --no-dra-steer)"
            )
        if any(cache.name == TAINT_RULES for cache in caches):
            # --no-dra-steer: the rules a steering extender left would keep their devices off
            # for ever (nothing else deletes them); this loop deletes them and writes none.
            clearing = SteerLoop(
                index,
                KubeSteerApi(transport),
                may_write=may_write,
                blindness=lambda: blindness(caches, max_blind_s=settings.max_blind_s),
                steer=False,
            )
            clearing.start()
    steered = None if steer is None else steer.stats
    retries = Retries(
        lambda pod, annotations: touch_pod(
            transport, pod.namespace, pod.name, annotations, uid=pod.uid
        ),
        lambda: not blindness(caches, max_blind_s=settings.max_blind_s),
    )
    retry_loop = Every("touching pods", RETRY_INTERVAL_S, retries.touch_due)
    retry_loop.start()
    state = ExtenderState(index, caches, lambda: None, stats, steered, retries)
    review = DraWarnings(
        KubeNodeStore(transport, component=names.EXTENDER_SERVICE), may_record=may_write
    )
    warnings = Every(
        "DRA node review", WARNINGS_INTERVAL_S, lambda: review.review(state.dra_problems())
    )
    warnings.start()

    def stop() -> None:
        retry_loop.stop()
        warnings.stop()
        if steer is not None:
            steer.stop()
        if clearing is not None:
            clearing.stop()
        if lease is not None:
            lease.stop()
        if controller is not None:
            controller.stop()
        for cache in caches:
            cache.stop()

    state.stop = stop
    return create_app(settings, state)


class SteerLease:
    """The Lease that elects the replica writing the steer's rules when no repartition
    controller runs (``--dra-steer-lease``): tried at start, then every ``renew_s`` (a
    quarter of the lease, at most half its renew deadline), released on stop so that another
    replica need not wait it out. :meth:`is_leader` asks the elector each time: a leader whose
    renewals fail or hang stops writing at its renew deadline, not at its next try."""

    def __init__(self, elector: LeaderElector, renew_s: float) -> None:
        self._elector = elector
        self._stopped = False
        self._renew()
        self._loop = Every("DRA steer lease", renew_s, self._renew)
        self._loop.start()

    def _renew(self) -> None:
        try:
            self._elector.try_acquire_or_renew()
        except Exception as error:  # our own failure: a follower until the next try
            log.warning("DRA steer lease not renewed (%s); not writing rules", error)

    def is_leader(self) -> bool:
        return not self._stopped and self._elector.is_leader

    def stop(self) -> None:
        self._loop.stop()
        if not self._stopped:
            self._stopped = True
            self._elector.release()


def steer_lease(transport: Any, settings: ExtenderSettings) -> SteerLease:
    from migslice.kube import LeaderElector

    namespace, _, name = settings.dra_steer_lease.partition("/")
    duration_s = settings.repartition.lease_duration_s
    renew_deadline_s = settings.repartition.lease_renew_deadline_s
    identity = f"{socket.gethostname()}-{os.getpid()}"
    elector = LeaderElector(
        transport,
        namespace,
        name,
        identity,
        lease_duration_s=duration_s,
        renew_deadline_s=renew_deadline_s,
    )
    lease = SteerLease(elector, min(duration_s / 4, renew_deadline_s / 2))
    atexit.register(lease.stop)
    log.info("DRA steer lease=%s identity=%s leader=%s", settings.dra_steer_lease, identity,
             lease.is_leader())  # fmt: skip
    return lease


def start_repartition(
    transport: Any,
    index: ClusterIndex[Any],
    settings: ExtenderSettings,
    *,
    identity: str,
    blindness: Callable[[], list[str]] = list,
) -> RepartitionController:
    """Build the controller over the Kubernetes API and start its thread; it decides nothing
    while ``blindness`` names a problem (a cache not synced or not following the API)."""
    from migslice.kube import KubeRepartitionApi, LeaderElector
    from migslice.kube.gpu_operator import KubeClusterPolicyApi
    from migslice.kube.repartition import COMPONENT

    options = settings.repartition
    api = KubeRepartitionApi(
        transport, settings.mig_config_namespace or "default", settings.mig_config_name
    )
    elector = LeaderElector(
        transport,
        options.lease_namespace,
        options.lease_name,
        identity,
        lease_duration_s=options.lease_duration_s,
        renew_deadline_s=options.lease_renew_deadline_s,
    )
    stats = RepartitionStats(dry_run=options.dry_run)
    guard = MigManagerGuard(
        KubeClusterPolicyApi(transport, COMPONENT),
        settings.mig_config_map,
        stats=stats,
        dry_run=options.dry_run,
    )
    controller = RepartitionController(
        api, elector, index, settings, stats, guard=guard, blindness=blindness
    )
    controller.start()
    log.info(
        "repartition controller started identity=%s lease=%s dry_run=%s interval=%.0fs",
        identity,
        options.lease,
        options.dry_run,
        options.interval_s,
    )
    return controller
