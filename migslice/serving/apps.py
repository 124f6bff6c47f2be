"""What a service serves, and serving it: an app over a cluster file (``--cluster-file``,
rebuilt whenever the file changes: :mod:`migslice.serving.reload`) or one over the cluster.

The webhook and the extender both start this way: :func:`serve_app` with their two public
factories (``standalone_app(settings, path)`` and ``in_cluster_app(settings)``), and each
standalone factory reads the file with :func:`load_cluster_file`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migslice import console
from migslice.objects import ClusterFileError, ClusterObjects, load_cluster_text
from migslice.serving.reload import ReloadingApp, WsgiApp
from migslice.serving.server import ServerOptions, serve
from migslice.serving.worker import ServeError

log = logging.getLogger(__name__)


def load_cluster_file(path: Path) -> ClusterObjects:
    """The objects of a cluster file; CommandError, one line naming ``--cluster-file``."""
    text = console.read_text_file(path, flag="--cluster-file")
    try:
        return load_cluster_text(text)
    except ClusterFileError as error:
        raise console.CommandError(f"--cluster-file {path}: {error}") from None


def serve_app(
    options: ServerOptions,
    *,
    cluster_file: Path | None,
    standalone: Callable[[Path], WsgiApp],
    in_cluster: Callable[[], Any],
) -> int:
    """Serve ``standalone(cluster_file)`` (rebuilt when the file changes), or ``in_cluster()``
    without a file, until a signal stops the server; the exit status. Bad options, a bad
    file (read once here, before any worker starts) and a server that cannot start are one
    CommandError line each."""
    try:
        options.check()
    except ValueError as error:
        raise console.CommandError(str(error)) from None
    factory: Callable[[], Any] = in_cluster
    if cluster_file is not None:
        path = cluster_file
        objects = load_cluster_file(path)
        log.info(
            "serving cluster file=%s nodes=%d pods=%d", path, len(objects.nodes), len(objects.pods)
        )
        del objects
        factory = lambda: ReloadingApp(path, standalone)  # noqa: E731
    try:
        serve(factory, options)
    except ServeError as error:
        raise console.CommandError(str(error)) from None
    return 0
