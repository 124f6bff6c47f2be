"""The extender service's wiring: the node index from a cluster file or the watch caches,
the repartition controller (leader-elected, in a cluster only), the app and the server."""

from __future__ import annotations

import atexit
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from flask import Flask

from extender.app import create_app
from extender.controller import start_repartition
from extender.settings import ExtenderSettings
from extender.state import ExtenderState, new_index, state_from_objects
from migslice import console
from migslice.objects import ClusterFileError, ClusterObjects, load_cluster_text
from migslice.serving import ServeError, serve
from migslice.serving.reload import ReloadingApp

log = logging.getLogger(__name__)


def serve_extender(settings: ExtenderSettings) -> int:
    """Serve until a signal stops the server; the exit status."""
    console.setup_logging(settings.log_level)
    try:
        settings.server.check()
    except ValueError as error:
        raise console.CommandError(str(error)) from None
    path = settings.cluster_file
    if path is not None:
        objects = _load(path)
        log.info(
            "serving cluster file=%s nodes=%d pods=%d", path, len(objects.nodes), len(objects.pods)
        )
        del objects
        # Rebuilt from the file whenever it changes (see migslice.serving.reload).
        factory: Callable[[], object] = lambda: ReloadingApp(  # noqa: E731
            path, lambda p: standalone_app(settings, p)
        )
    else:
        factory = lambda: in_cluster_app(settings)  # noqa: E731
    try:
        serve(factory, settings.server)
    except ServeError as error:
        raise console.CommandError(str(error)) from None
    return 0


def _load(path: Path) -> ClusterObjects:
    text = console.read_text_file(path, flag="--cluster-file")
    try:
        return load_cluster_text(text)
    except ClusterFileError as error:
        raise console.CommandError(f"--cluster-file {path}: {error}") from None


def standalone_app(settings: ExtenderSettings, path: Path) -> Flask:
    objects = _load(path)
    return create_app(settings, state_from_objects(objects, settings))


def in_cluster_app(settings: ExtenderSettings) -> Flask:
    """The app over watch caches; with ``--repartition``, this worker's controller thread
    (its Lease is released when the process exits)."""
    from extender.sources import start_caches
    from migslice.kube import KubernetesTransport
    from migslice.kube.health import blindness

    transport = KubernetesTransport.from_environment(settings.kubeconfig)
    index = new_index()
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

    def stop() -> None:
        if controller is not None:
            controller.stop()
        for cache in caches:
            cache.stop()

    stats = None if controller is None else controller.stats
    return create_app(settings, ExtenderState(index, caches, stop, stats))
