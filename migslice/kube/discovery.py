"""Which ``resource.k8s.io/v1`` resources the API server serves, asked at a service's start
(the DRA caches, and the extender's DeviceTaintRule cache and steer, start only for what is
served). Only an answer decides: a 200 lists the resources, a 404 says DRA is not served.

An API server that cannot be reached, or that answers 5xx or 429, is asked again with backoff
for ``wait_s`` (a restart of kube-apiserver takes seconds); the service's worker must start
within its server's boot timeout, and its liveness probe must be answered, so it does not wait
longer. Then the caches start as if DRA were served (without DeviceTaintRules: which
resources are served is not known), and :func:`follow_discovery` keeps asking in the
background: once the API server answers otherwise than assumed (DRA not served, or
DeviceTaintRules served), the worker is started again to build what the answer calls for.
Before, a service started while the API server was away ran for good without the steer, or
with DRA caches that never list (503 for every GPU admission). Any other refusal (401, 403)
is an answer of its own: the DRA caches start, to retry and report."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from migslice.kube.informer import RELIST_BACKOFF, Backoff
from migslice.kube.transport import ApiError, KubeError, Transport
from migslice.names import DRA_API

log = logging.getLogger(__name__)

DISCOVERY_BACKOFF = Backoff(initial_s=0.5, max_s=5.0, jitter=RELIST_BACKOFF.jitter)
START_WAIT_S = 20.0
"""How long a service's start waits for an answer (under gunicorn's 30 s boot timeout)."""


@dataclass(frozen=True, slots=True)
class DraDiscovery:
    """``resources``: what ``resource.k8s.io/v1`` serves (None: not served); ``known``: False
    when the API server did not answer in time and DRA is assumed served, without knowing
    which resources."""

    resources: frozenset[str] | None
    known: bool = True

    @property
    def served(self) -> bool:
        return self.resources is not None


UNKNOWN = DraDiscovery(frozenset(), known=False)


def ask_once(transport: Transport) -> DraDiscovery | str:
    """The answer, or why there is none yet (unreachable, 5xx, 429)."""
    try:
        found = transport.get_json(DRA_API, {})
    except ApiError as error:
        if error.status == 404:
            return DraDiscovery(None)
        if error.status and error.status < 500 and error.status != 429:
            log.warning("%s discovery refused (%s); starting the DRA caches anyway", DRA_API, error)
            return DraDiscovery(frozenset())
        return str(error)
    except KubeError as error:
        return str(error)
    listed = found.get("resources") if isinstance(found, dict) else None
    names = (r.get("name") for r in listed or () if isinstance(r, dict))
    return DraDiscovery(frozenset(n for n in names if isinstance(n, str)))


def dra_resources(
    transport: Transport,
    *,
    wait_s: float = START_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    backoff: Backoff = DISCOVERY_BACKOFF,
) -> DraDiscovery:
    """The API server's answer, asked for ``wait_s`` at most; :data:`UNKNOWN` after that."""
    deadline = clock() + wait_s
    failures = 0
    while True:
        answer = ask_once(transport)
        if isinstance(answer, DraDiscovery):
            if answer.resources is None:
                log.info("%s not served; DRA objects are not read", DRA_API)
            return answer
        failures += 1
        delay = backoff.wait_s(failures, random.random())
        if clock() + delay > deadline:
            log.warning(
                "%s discovery failed for %.0fs (%s); starting the DRA caches without "
                "DeviceTaintRules, and asking on in the background",
                DRA_API,
                wait_s,
                answer,
            )
            return UNKNOWN
        log.warning("%s discovery failed (%s); asking again in %.1fs", DRA_API, answer, delay)
        sleep(delay)


def follow_discovery(
    transport: Transport,
    assumed: DraDiscovery,
    on_change: Callable[[DraDiscovery], None],
    *,
    wanted: Callable[[DraDiscovery], object] = lambda d: d,
    sleep: Callable[[float], None] = time.sleep,
    backoff: Backoff = DISCOVERY_BACKOFF,
) -> threading.Thread | None:
    """When ``assumed`` is not known: a daemon thread asking until the API server answers,
    then calling ``on_change`` with the answer if what the service builds from it
    (``wanted``) differs from what it built from ``assumed``; None when nothing is to follow."""
    if assumed.known:
        return None

    def run() -> None:
        failures = 0
        while True:
            answer = ask_once(transport)
            if isinstance(answer, DraDiscovery):
                if wanted(answer) != wanted(assumed):
                    on_change(answer)
                else:
                    log.info("%s answered as the service assumed; nothing to change", DRA_API)
                return
            failures += 1
            sleep(backoff.wait_s(failures, random.random()))

    thread = threading.Thread(target=run, name="dra-discovery", daemon=True)
    thread.start()
    return thread
