"""What a service serves, and serving it: an app over a cluster file (``--cluster-file``,
rebuilt whenever the file changes: :mod:`migslice.serving.reload`) or one over the cluster.

The webhook and the extender both start this way: :func:`serve_app` with their two public
factories (``standalone_app(settings, path)`` and ``in_cluster_app(settings)``), and each
standalone factory reads the file with :func:`load_cluster_file`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migslice import console
from migslice.objects import ClusterFileError, ClusterObjects, load_cluster_text
from migslice.policy import unknown_fields
from migslice.serving.reload import ReloadingApp, WsgiApp
from migslice.serving.server import ServerOptions, serve
from migslice.serving.worker import ServeError

log = logging.getLogger(__name__)


def load_cluster_file(path: Path) -> ClusterObjects:
    """The objects of a cluster file; CommandError, one line naming ``--cluster-file``."""
    text = console.read_text_file(path, flag="--cluster-file")
    try:
        objects = load_cluster_text(text)
    except ClusterFileError as error:
        raise console.CommandError(f"--cluster-file {path}: {error}") from None
    # No kube-apiserver dropped the fields its CRD does not declare: a typo would pass.
    for raw in objects.tenant_policies:
        unknown = unknown_fields(raw)
        if unknown:
            metadata = raw.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            listed = "; ".join(str(e) for e in unknown)
            raise console.CommandError(f"--cluster-file {path}: TenantPolicy {name}: {listed}")
    return objects


def check_cluster_file(path: Path) -> tuple[int, int]:
    """Read and check the file once before any worker starts, in a forked child: the master's
    heap, which every worker inherits, then never holds the parsed objects (measured at 5,000
    nodes and 20,000 pods: the webhook's worker at 264 MiB after the master had parsed the file,
    161 MiB without; ready after 79 s and 45 s). The file's node and pod counts, or its
    CommandError."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, answer one line, leave without running any cleanup
        os.close(read_end)
        try:
            objects = load_cluster_file(path)
            answer = f"ok {len(objects.nodes)} {len(objects.pods)}"
        except console.CommandError as error:
            answer = f"error {error}"
        except BaseException as error:  # the parent reports it as one line
            answer = f"error --cluster-file {path}: {error or type(error).__name__}"
        with os.fdopen(write_end, "wb") as out:
            out.write(answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answers:
        answer = answers.read().decode(errors="replace")
    os.waitpid(pid, 0)
    kind, _, rest = answer.partition(" ")
    if kind != "ok":
        raise console.CommandError(
            rest or f"--cluster-file {path}: the check ended without an answer"
        )
    nodes, pods = rest.split()
    return int(nodes), int(pods)


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
        nodes, pods = check_cluster_file(path)
        log.info("serving cluster file=%s nodes=%d pods=%d", path, nodes, pods)
        factory = lambda: ReloadingApp(path, standalone)  # noqa: E731
    try:
        serve(factory, options)
    except ServeError as error:
        raise console.CommandError(str(error)) from None
    return 0


RESTART_EXIT_CODE = 75
"""A worker's exit for gunicorn to start it again (EX_TEMPFAIL; not 3 or 4, on which the
master itself stops)."""


def restart_worker(reason: str) -> None:
    """End this worker at once for the server to start a fresh one, which builds itself
    from the cluster as it is now (what it learned at its start, ``reason``, was not so)."""
    log.error("restarting this worker: %s", reason)
    logging.shutdown()
    os._exit(RESTART_EXIT_CODE)
